import Glibc
import ShoalCore
import ShoalStore
import ShoalThreads

/// `shoal bench live-query`: N documents of ~1 KB with an index on (site, pressure); a live query
/// `site = "east" and pressure > 2.5` newest first, limit 20, served by a thread of its own
/// (`LiveQueryState.next`, as the library and the control socket serve one). Each sample writes one
/// matching document and times write → the update that holds it, reaching the live query's
/// thread. Writes are spaced past the pacing's minimum interval, so a sample waits for the
/// coalescing window and the evaluation, not for an earlier evaluation's turn.
public enum LiveQueryBenchmark {
    public struct Figures: Sendable {
        public var pacing: LiveQueryPacing
        public var latenciesMillis: [Double] = []
        public var evaluations = 0
        public var median: Double { percentile(0.5) }
        public var p99: Double { percentile(0.99) }
        public func percentile(_ p: Double) -> Double {
            guard !latenciesMillis.isEmpty else { return .nan }
            let s = latenciesMillis.sorted()
            return s[min(s.count - 1, Int((Double(s.count - 1) * p).rounded()))]
        }
    }

    public struct Result: Sendable {
        public var documents: Int
        public var writeSeconds: Double
        public var evaluationMillis: Double
        public var runs: [Figures] = []
    }

    public static func run(directory: String, documents: Int, samples: Int, pacings: [LiveQueryPacing], logger: Logger) throws -> Result {
        let path = directory + "/live.db"
        let (store, collection, writeSeconds) = try QueryBenchmark.filledStore(path: path, documents: documents, logger: logger)
        defer {
            store.close()
            for s in ["", "-wal", "-shm"] { unlink(path + s) }
        }
        var result = Result(documents: documents, writeSeconds: writeSeconds, evaluationMillis: 0)
        try store.createIndex(on: collection, fields: [try FieldPath(parsing: "site"), try FieldPath(parsing: "pressure")])
        var q = try Query(QueryBenchmark.filter)
        q.order = [QueryOrderKey(.updatedAt, descending: true)]
        q.limit = 20
        let evalStart = ContinuousClock.now
        for _ in 0..<20 { _ = try store.query(q, in: collection) }
        result.evaluationMillis = (ContinuousClock.now - evalStart).secondsDouble * 1000 / 20

        for (n, pacing) in pacings.enumerated() {
            var f = Figures(pacing: pacing)
            let delivered = Locked<[String: ContinuousClock.Instant]>([:])
            let evaluations = Locked(0)
            let done = Locked(false)
            let finished = Locked(false)
            var state = try LiveQueryState(store: store, query: q, in: collection, pacing: pacing)
            _ = try state.poll(store)
            let started = DetachedThread.start(name: "bench-live-query") { [state] in
                var state = state
                while let u = try? state.next(store, isCancelled: { done.withLock { $0 } }) {
                    let now = ContinuousClock.now
                    delivered.withLock { d in for id in u.added + u.changed where d[id] == nil { d[id] = now } }
                    evaluations.withLock { $0 = u.evaluations }
                }
                finished.withLock { $0 = true }
            }
            guard started else { throw StoreError.closed }
            for k in 0..<samples {
                let id = "live-\(n)-\(k)"
                let t0 = ContinuousClock.now
                _ = try store.put(collection, id: try DocumentID(id), body: #"{"site":"east","pressure":4.5,"seq":\#(k)}"#)
                let deadline = t0 + .seconds(5)
                var at: ContinuousClock.Instant?
                while at == nil && ContinuousClock.now < deadline {
                    at = delivered.withLock { $0[id] }
                    if at == nil { usleep(100) }
                }
                if let at { f.latenciesMillis.append((at - t0).secondsDouble * 1000) }
                usleep(UInt32(max(pacing.minIntervalMillis, pacing.coalesceMillis) * 1000 + 20_000))
            }
            done.withLock { $0 = true }
            store.wake()
            while !finished.withLock({ $0 }) { usleep(1000) }
            f.evaluations = evaluations.withLock { $0 }
            result.runs.append(f)
        }
        return result
    }
}
