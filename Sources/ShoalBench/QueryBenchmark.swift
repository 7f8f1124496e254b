import Glibc
import ShoalCore
import ShoalStore

/// `shoal bench query`: N documents of ~1 KB in one collection; the query
/// `site = "east" and pressure > 2.5`, newest first (`-updatedAt`), limit 20, run through
/// `DocumentStore.query` and the same compiled SQL through the bare SQLite C API, alternately in
/// the same process on the same file: without an index, then with one over (site, pressure).
public enum QueryBenchmark {
    public struct Figures: Sendable {
        public var storeQPS: [Double] = []
        public var baselineQPS: [Double] = []
        public var storeMedian: Double { StoreBenchmark.median(storeQPS) }
        public var baselineMedian: Double { StoreBenchmark.median(baselineQPS) }
        public var ratio: Double { storeMedian / baselineMedian }
        public var plan: [String] = []
        public var rows = 0
    }

    public struct Result: Sendable {
        public var documents: Int
        public var bodyBytes: Int
        public var matching: Int
        public var writeSeconds: Double
        public var indexSeconds: Double
        public var unindexed = Figures()
        public var indexed = Figures()
    }

    public static let filter = #"site = "east" and pressure > 2.5"#
    static let sites = ["east", "west", "north", "south", "harbour", "mill", "depot", "pier", "quarry", "ridge"]

    /// A ~1 KB reading: one of ten sites, a pressure from 0 to 5 bar.
    public static func body(_ i: Int, bytes: Int = 1024) -> String {
        let pressure = Double((i &* 7919) % 500) / 100
        var text = "{\"site\":\"\(sites[i % sites.count])\",\"pressure\":\(pressure),\"sensor\":\"s-\(i % 97)\",\"seq\":\(i),\"note\":\""
        let pad = max(0, bytes - text.utf8.count - 2)
        text += String(repeating: "abcdefghij", count: pad / 10 + 1).prefix(pad)
        return text + "\"}"
    }

    /// A new store at `path` holding `documents` bodies of `body(_:)` in `sensors.readings`, written
    /// 1,000 to a transaction; and how long the writes took.
    static func filledStore(path: String, documents: Int, logger: Logger) throws -> (DocumentStore, CollectionName, Double) {
        let collection = try CollectionName(parsing: "sensors.readings")
        let store = try DocumentStore.open(StoreOptions(path: path, durability: .normal), logger: logger)
        do {
            try store.createCollection(collection)
            let start = ContinuousClock.now
            var i = 0
            while i < documents {
                let end = min(i + 1000, documents)
                _ = try store.write(try (i..<end).map { k in DocumentWrite(collection: collection, id: try DocumentID("r-\(k)"), body: body(k)) })
                i = end
            }
            return (store, collection, (ContinuousClock.now - start).secondsDouble)
        } catch {
            store.close()
            throw error
        }
    }

    public static func run(directory: String, documents: Int, rounds: Int, secondsPerRound: Double, logger: Logger) throws -> Result {
        precondition(documents > 0 && rounds > 0)
        let path = directory + "/query.db"
        let (store, collection, writeSeconds) = try filledStore(path: path, documents: documents, logger: logger)
        defer {
            store.close()
            for s in ["", "-wal", "-shm"] { unlink(path + s) }
        }
        var result = Result(documents: documents, bodyBytes: body(0).utf8.count, matching: 0,
                            writeSeconds: writeSeconds, indexSeconds: 0)
        var q = try Query(filter)
        q.order = [QueryOrderKey(.updatedAt, descending: true)]
        q.limit = 20
        var count = q
        count.aggregates = [QueryAggregate(.count)]
        count.order = []
        result.matching = Int(try store.query(count, in: collection).groups.first?.values.first?.int64Value ?? 0)
        result.unindexed = try measure(store, path: path, collection: collection, query: q, rounds: rounds, seconds: secondsPerRound)
        let indexStart = ContinuousClock.now
        try store.createIndex(on: collection, fields: [try FieldPath(parsing: "site"), try FieldPath(parsing: "pressure")])
        result.indexSeconds = (ContinuousClock.now - indexStart).secondsDouble
        result.indexed = try measure(store, path: path, collection: collection, query: q, rounds: rounds, seconds: secondsPerRound)
        return result
    }

    static func measure(_ store: DocumentStore, path: String, collection: CollectionName, query: Query, rounds: Int, seconds: Double) throws -> Figures {
        var f = Figures()
        f.plan = try store.explain(query, in: collection).steps
        for round in 0..<rounds {
            // Alternate which goes first, so neither always gets the warmer cache.
            if round % 2 == 0 {
                f.baselineQPS.append(try SQLiteBaseline.query(path: path, collection: collection, query: query, minSeconds: seconds).queriesPerSecond)
                f.storeQPS.append(try viaStore(store, collection, query, seconds, &f.rows))
            } else {
                f.storeQPS.append(try viaStore(store, collection, query, seconds, &f.rows))
                f.baselineQPS.append(try SQLiteBaseline.query(path: path, collection: collection, query: query, minSeconds: seconds).queriesPerSecond)
            }
        }
        return f
    }

    static func viaStore(_ store: DocumentStore, _ c: CollectionName, _ q: Query, _ seconds: Double, _ rows: inout Int) throws -> Double {
        let start = ContinuousClock.now
        var runs = 0
        repeat {
            rows = try store.query(q, in: c).rows.count
            runs += 1
        } while (ContinuousClock.now - start).secondsDouble < seconds || runs < 3
        return Double(runs) / (ContinuousClock.now - start).secondsDouble
    }
}
