import Glibc
import ShoalCore
import ShoalStore

/// `shoal _crash-writer --store PATH --start N --count N [--batch N]`: an internal helper for the
/// crash test. It writes documents `w-<i>` with body {"i": i} and, after each commit returns,
/// prints `ack <i>` for every document of the batch. The test SIGKILLs it at random moments and
/// then checks that every acknowledged write is in the store and the file is sound.
enum CrashWriter {
    static func main(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "_crash-writer", valueOptions: ["--store", "--start", "--count", "--batch", "--durability"])
        guard let path = a.values["--store"] else { throw UsageError(command: "_crash-writer", message: "--store is required") }
        let start = try a.int("--start", command: "_crash-writer", default: 0, range: 0...Int.max / 2)
        let count = try a.int("--count", command: "_crash-writer", default: 1000, range: 1...10_000_000)
        let batch = try a.int("--batch", command: "_crash-writer", default: 1, range: 1...10_000)
        let durability = Durability(rawValue: a.values["--durability"] ?? "full") ?? .full
        let store = try DocumentStore.open(StoreOptions(path: path, durability: durability), logger: Logger(sink: MemoryLogSink(), level: .none))
        var i = start
        while i < start + count {
            let end = min(i + batch, start + count)
            let writes = try (i..<end).map { DocumentWrite(collection: .default, id: try DocumentID("w-\($0)"), body: "{\"i\":\($0)}") }
            _ = try store.write(writes)
            var line = ""
            for j in i..<end { line += "ack \(j)\n" }
            out(line, newline: false)
            i = end
        }
        store.close()
        return ExitCode.ok
    }
}
