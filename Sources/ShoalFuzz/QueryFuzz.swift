import Glibc
import ShoalCore
import ShoalStore

/// The `query` target: lines of `FILTER`, then optionally `ORDER`, `AGGREGATES`, `GROUP BY`
/// (the CLI's forms). Whatever parses must print back to the same filter, and must run on a
/// small store with the same result as the Swift reference: any other SQLite error than a refusal
/// of the query is a bug in the compiler (SQL it made that SQLite would not take).
enum QueryFuzz {
    static let collection = try! CollectionName(parsing: "sensors.readings")

    /// One store for the whole run (a file under /tmp, removed at exit), with a few documents.
    nonisolated(unsafe) static let fixture: (DocumentStore, [QueryReference.Document])? = {
        var template = Array("/tmp/shoal-fuzz-query-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { return nil }
        let dir = String(cString: made)
        guard let store = try? DocumentStore.open(StoreOptions(path: dir + "/q.db", durability: .normal), logger: Logger(sink: MemoryLogSink(), level: .none)),
              (try? store.createCollection(collection)) != nil else { return nil }
        let bodies = [#"{"site":"east","pressure":2.75,"a":{"b":1}}"#, #"{"site":"west","pressure":3,"a":{"b":"1"}}"#, #"{"site":null,"pressure":true}"#,
                      #"{"a":[1,2],"odd key":"x","id":"pump-9"}"#, #"{}"#, #"{"site":"é","pressure":-1e2,"n":12345678901234567890}"#]
        for (i, b) in bodies.enumerated() { _ = try? store.put(collection, id: try! DocumentID("pump-\(i)"), body: b) }
        let docs = ((try? store.list(collection)) ?? []).compactMap { d -> QueryReference.Document? in
            guard let body = d.body, let v = try? JSONValue.parse(body) else { return nil }
            return QueryReference.Document(id: d.id, updatedAtMillis: d.updatedAtMillis, body: v, text: body)
        }
        atexit { _ = system("rm -rf /tmp/shoal-fuzz-query-*") }
        return (store, docs)
    }()

    static func run(_ bytes: [UInt8]) {
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
        let filter: QueryPredicate?
        do { filter = try QueryParser.parseFilter(lines[0]) } catch { return }
        // (Printed escapes can make the text longer than the limit it was parsed under.)
        if let f = filter, f.description.utf8.count <= QueryLimits.maxTextBytes, (try? QueryParser.parseFilter(f.description)) != f {
            fatalError("a parsed filter did not print back to itself: \(f)")
        }
        var q = Query(filter: filter)
        if lines.count > 1, !lines[1].isEmpty { guard let o = try? QueryParser.parseOrder(lines[1]) else { return }; q.order = o }
        if lines.count > 2, !lines[2].isEmpty {
            guard let a = try? QueryParser.parseAggregates(lines[2]) else { return }
            q.aggregates = a
            q.order = []
        }
        if lines.count > 3, !lines[3].isEmpty, !q.aggregates.isEmpty { guard let g = try? QueryParser.parseFields(lines[3], max: QueryLimits.maxGroupBy) else { return }; q.groupBy = g }
        guard let (store, docs) = fixture else { return }
        let want = try? QueryReference.evaluate(q, over: docs)
        do {
            let got = try store.query(q, in: collection)
            guard let want else { fatalError("the store ran a query the reference refused: \(q)") }
            if q.aggregates.isEmpty, got.rows != want.rows { fatalError("the store and the reference differ on \(q)") }
            if got.groups.count != want.groups.count { fatalError("the store and the reference group differently on \(q)") }
        } catch .invalidQuery {
            if want != nil { fatalError("the store refused a query the reference ran: \(q)") }
        } catch {
            fatalError("SQLite refused the compiled query (\(error)): \(q)")
        }
    }
}
