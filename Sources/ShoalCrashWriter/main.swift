// shoal-crash-writer --store PATH [--start N] [--count N] [--batch N] [--durability full|normal]
//
// A test tool of the crash campaign (Tests/ShoalCLITests/CrashTests.swift), not part of the product:
// it writes documents `w-<i>` with body {"i": i} and, after each commit returns, prints `ack <i>`
// for every document of the batch. The test SIGKILLs it at random moments and then checks that
// every acknowledged write is in the store and the file is sound.
import Glibc
import ShoalCore
import ShoalStore

func emit(_ fd: Int32, _ text: String) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if n < 0 { if errno == EINTR { continue }; exit(3) }
        offset += n
    }
}

func fail(_ message: String) -> Never {
    emit(2, "shoal-crash-writer: \(message)\n")
    exit(2)
}

func main() {
    var values: [String: String] = [:]
    var rest = Array(CommandLine.arguments.dropFirst())[...]
    while let key = rest.popFirst() {
        guard ["--store", "--start", "--count", "--batch", "--durability"].contains(key), let value = rest.popFirst() else {
            fail("usage: shoal-crash-writer --store PATH [--start N] [--count N] [--batch N] [--durability full|normal] (at \(key))")
        }
        values[key] = value
    }
    func number(_ key: String, _ fallback: Int, _ range: ClosedRange<Int>) -> Int {
        guard let text = values[key] else { return fallback }
        guard let n = Int(text), range.contains(n) else { fail("\(key) must be a number in \(range)") }
        return n
    }
    guard let path = values["--store"] else { fail("--store is required") }
    let start = number("--start", 0, 0...Int.max / 2)
    let count = number("--count", 1000, 1...10_000_000)
    let batch = number("--batch", 1, 1...10_000)
    guard let durability = Durability(rawValue: values["--durability"] ?? "full") else { fail("--durability is full or normal") }
    do {
        let store = try DocumentStore.open(StoreOptions(path: path, durability: durability), logger: Logger(sink: MemoryLogSink(), level: .none))
        var i = start
        while i < start + count {
            let end = min(i + batch, start + count)
            let writes = try (i..<end).map { DocumentWrite(collection: .default, id: try DocumentID("w-\($0)"), body: "{\"i\":\($0)}") }
            _ = try store.write(writes)
            var line = ""
            for j in i..<end { line += "ack \(j)\n" }
            emit(1, line)  // after the commit returned: every acknowledged write is durable
            i = end
        }
        store.close()
    } catch {
        fail("\(error)")
    }
}

main()
