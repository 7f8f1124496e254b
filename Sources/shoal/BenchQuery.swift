import Glibc
import ShoalBench
import ShoalCore

extension CLI {
    /// `shoal bench query [--docs N] [--rounds N] [--seconds S] [--dir DIR]`.
    static func benchQuery(_ a: Arguments) throws -> Int32 {
        let docs = try a.int("--docs", command: "bench", default: 100_000, range: 100...10_000_000)
        let rounds = try a.int("--rounds", command: "bench", default: 3, range: 1...50)
        let seconds = Double(try a.int("--seconds", command: "bench", default: 2, range: 1...600))
        var template = Array("\(a.values["--dir"] ?? "/tmp")/shoal-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw UsageError(command: "bench", message: "cannot create a directory under \(a.values["--dir"] ?? "/tmp")") }
        let dir = String(cString: made)
        defer { rmdir(dir) }
        out("query benchmark: \(docs) documents, '\(QueryBenchmark.filter)' --order -updatedAt --limit 20, \(rounds) rounds of \(Int(seconds)) s each side, in \(dir)")
        let r = try QueryBenchmark.run(directory: dir, documents: docs, rounds: rounds, secondsPerRound: seconds, logger: Logger(sink: MemoryLogSink(), level: .none))
        out("  body size                 \(r.bodyBytes) bytes; written in \(fmt2(r.writeSeconds)) s; \(r.matching) documents match")
        for (title, f) in [("without an index", r.unindexed), ("index on (site, pressure)", r.indexed)] {
            out("  \(title)\(title.hasPrefix("index") ? " (built in \(fmt2(r.indexSeconds)) s)" : "")")
            for step in f.plan { out("    plan: \(step)") }
            out("    baseline (bare C API)   \(fmt2(f.baselineMedian)) queries/s   rounds: \(f.baselineQPS.map(fmt2).joined(separator: ", "))")
            out("    shoal store             \(fmt2(f.storeMedian)) queries/s   rounds: \(f.storeQPS.map(fmt2).joined(separator: ", "))   (\(f.rows) rows each)")
            out("    ratio store/baseline    \(fmt2(f.ratio))   (goal >= 0.80)")
        }
        return ExitCode.ok
    }
}
