import Glibc
import ShoalCore
import ShoalStore

extension CLI {
    static func bench(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "bench", valueOptions: ["--docs", "--batch", "--rounds", "--durability", "--dir"])
        if helpIfAsked(a, "bench") { return ExitCode.ok }
        try a.expectPositionals(1...1, command: "bench", usage: "bench store")
        guard a.positionals[0] == "store" else { throw UsageError(command: "bench", message: "unknown benchmark \"\(a.positionals[0])\" (store)") }
        let docs = try a.int("--docs", command: "bench", default: 20_000, range: 1...10_000_000)
        let batch = try a.int("--batch", command: "bench", default: 100, range: 1...100_000)
        let rounds = try a.int("--rounds", command: "bench", default: 3, range: 1...50)
        let durabilityText = a.values["--durability"] ?? "full"
        guard let durability = Durability(rawValue: durabilityText) else { throw UsageError(command: "bench", message: "--durability is full or normal") }
        var template = Array("\(a.values["--dir"] ?? "/tmp")/shoal-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw UsageError(command: "bench", message: "cannot create a directory under \(a.values["--dir"] ?? "/tmp")") }
        let dir = String(cString: made)
        defer { rmdir(dir) }
        out("store benchmark: \(docs) documents, batches of \(batch), durability \(durability.rawValue), \(rounds) rounds, in \(dir)")
        let r = try StoreBenchmark.run(directory: dir, documents: docs, batch: batch, durability: durability, rounds: rounds,
                                       logger: Logger(sink: MemoryLogSink(), level: .none))
        out("  body size                 \(r.bodyBytes) bytes")
        out("  baseline (bare C API)     \(fmt(r.baselineMedian)) docs/s   rounds: \(r.baselineDocsPerSecond.map(fmt).joined(separator: ", "))")
        out("  shoal store               \(fmt(r.storeMedian)) docs/s   rounds: \(r.storeDocsPerSecond.map(fmt).joined(separator: ", "))")
        out("  ratio store/baseline      \(fmt2(r.ratio))   (goal >= 0.70)")
        return ExitCode.ok
    }

    static func fmt(_ x: Double) -> String { String(Int(x.rounded())) }
    static func fmt2(_ x: Double) -> String {
        let v = Int((x * 100).rounded())
        return "\(v / 100).\(v % 100 < 10 ? "0" : "")\(v % 100)"
    }
}
