import Glibc
import ShoalCore
import ShoalStore

/// `shoal bench store`: batched writes of ~1 KB JSON documents through `DocumentStore`, against the
/// same statement (`DocumentStore.upsertSQL`), the same pragmas and the same transaction size run
/// through the bare SQLite C API. Both run in the same process, alternately, on fresh files; the
/// ratio (store ÷ baseline) is what counts, not the absolute figures on a shared machine.
public enum StoreBenchmark {
    public struct Result: Sendable {
        public var documents: Int
        public var batch: Int
        public var durability: Durability
        public var storeDocsPerSecond: [Double]
        public var baselineDocsPerSecond: [Double]
        public var bodyBytes: Int

        public var storeMedian: Double { StoreBenchmark.median(storeDocsPerSecond) }
        public var baselineMedian: Double { StoreBenchmark.median(baselineDocsPerSecond) }
        public var ratio: Double { storeMedian / baselineMedian }
    }

    public static func median(_ xs: [Double]) -> Double {
        let s = xs.sorted()
        return s.isEmpty ? 0 : s[s.count / 2]
    }

    /// A JSON body of about `bytes` bytes, different per index.
    public static func body(_ i: Int, bytes: Int = 1024) -> String {
        var text = "{\"sensor\":\"s-\(i % 97)\",\"seq\":\(i),\"temperature\":\(Double(i % 400) / 10.0),\"ok\":true,\"note\":\""
        let pad = max(0, bytes - text.utf8.count - 2)
        text += String(repeating: "abcdefghij", count: pad / 10 + 1).prefix(pad)
        text += "\"}"
        return text
    }

    public static func run(directory: String, documents: Int, batch: Int, durability: Durability, rounds: Int, logger: Logger) throws -> Result {
        precondition(documents > 0 && batch > 0 && rounds > 0)
        let bodies = (0..<documents).map { body($0) }
        let ids = try (0..<documents).map { i throws -> DocumentID in try DocumentID("doc-\(i)") }
        var result = Result(documents: documents, batch: batch, durability: durability, storeDocsPerSecond: [], baselineDocsPerSecond: [], bodyBytes: bodies[0].utf8.count)
        for round in 0..<rounds {
            let basePath = "\(directory)/baseline-\(round).db"
            let storePath = "\(directory)/store-\(round).db"
            // Alternate which goes first, so neither always gets the warmer cache.
            if round % 2 == 0 {
                result.baselineDocsPerSecond.append(try SQLiteBaseline.write(path: basePath, ids: ids, bodies: bodies, batch: batch, durability: durability))
                result.storeDocsPerSecond.append(try viaStore(path: storePath, ids: ids, bodies: bodies, batch: batch, durability: durability, logger: logger))
            } else {
                result.storeDocsPerSecond.append(try viaStore(path: storePath, ids: ids, bodies: bodies, batch: batch, durability: durability, logger: logger))
                result.baselineDocsPerSecond.append(try SQLiteBaseline.write(path: basePath, ids: ids, bodies: bodies, batch: batch, durability: durability))
            }
            for p in [basePath, storePath] { for s in ["", "-wal", "-shm"] { unlink(p + s) } }
        }
        return result
    }

    static func viaStore(path: String, ids: [DocumentID], bodies: [String], batch: Int, durability: Durability, logger: Logger) throws -> Double {
        let store = try DocumentStore.open(StoreOptions(path: path, durability: durability), logger: logger)
        defer { store.close() }
        let start = ContinuousClock.now
        var i = 0
        while i < ids.count {
            let end = min(i + batch, ids.count)
            let writes = (i..<end).map { DocumentWrite(collection: .default, id: ids[$0], body: bodies[$0]) }
            _ = try store.write(writes)
            i = end
        }
        return Double(ids.count) / (ContinuousClock.now - start).secondsDouble
    }
}
