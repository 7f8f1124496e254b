import Glibc
import ShoalBench
import ShoalCore
import ShoalStore

extension CLI {
    /// `shoal bench live-query [--docs N] [--samples N] [--dir DIR]`.
    static func benchLiveQuery(_ a: Arguments) throws -> Int32 {
        let docs = try a.int("--docs", command: "bench", default: 100_000, range: 100...10_000_000)
        let samples = try a.int("--samples", command: "bench", default: 100, range: 5...10_000)
        var template = Array("\(a.values["--dir"] ?? "/tmp")/shoal-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw UsageError(command: "bench", message: "cannot create a directory under \(a.values["--dir"] ?? "/tmp")") }
        let dir = String(cString: made)
        defer { rmdir(dir) }
        out("live query benchmark: \(docs) documents, index (site, pressure), live '\(QueryBenchmark.filter)' --order -updatedAt --limit 20; \(samples) writes, each timed to its update, in \(dir)")
        let r = try LiveQueryBenchmark.run(directory: dir, documents: docs, samples: samples,
                                           pacings: [.standard, LiveQueryPacing(coalesceMillis: 0, minIntervalMillis: 0)],
                                           logger: Logger(sink: MemoryLogSink(), level: .none))
        out("  written in \(fmt2(r.writeSeconds)) s; one evaluation of the query \(fmt2(r.evaluationMillis)) ms")
        for f in r.runs {
            out("  pacing coalesce \(f.pacing.coalesceMillis) ms, min interval \(f.pacing.minIntervalMillis) ms: write -> update median \(fmt2(f.median)) ms, p99 \(fmt2(f.p99)) ms (\(f.latenciesMillis.count) of \(samples) delivered, \(f.evaluations) evaluations)")
        }
        return ExitCode.ok
    }
}
