import ShoalCore
@testable import ShoalStore
import ShoalTesting
import Testing

/// Documents of a collection as the reference evaluator sees them (with the store's updatedAt).
func referenceDocuments(_ store: DocumentStore, _ c: CollectionName) throws -> [QueryReference.Document] {
    try store.list(c, limit: 100_000).compactMap { d in
        guard let body = d.body else { return nil }
        return QueryReference.Document(id: d.id, updatedAtMillis: d.updatedAtMillis, body: try JSONValue.parse(body), text: body)
    }
}

@Suite("Queries")
struct QueryTests {
    func parseError(_ text: String) -> QueryError? {
        do { _ = try QueryParser.parseFilter(text); return nil } catch { return error }
    }

    @Test("malformed queries are refused with the character where the problem is")
    func errorsNamePositions() {
        #expect(parseError("site = ") == QueryError(position: 8, message: "expected a value (a \"string\", a number, true, false or null), found the end of the query"))
        #expect(parseError("site = east")?.position == 8)
        #expect(parseError("(site = \"a\"")?.position == 12)
        #expect(parseError("site = 'x'")?.position == 8)
        #expect(parseError("pressure > 2.5 and")?.position == 19)
        #expect(parseError("a ! 3")?.position == 3)
        #expect(parseError("a < null")?.position == 3)
        #expect(parseError("a in []")?.position == 7)
        #expect(parseError("`a\"b` = 1")?.position == 1)
        #expect(parseError("a = \"unterminated")?.position == 5)
        #expect(parseError("a = 07")?.position == 5)
        #expect(parseError(String(repeating: "(", count: 40) + "a = 1" + String(repeating: ")", count: 40))?.message.contains("deeper") == true)
        #expect(parseError(String(repeating: "a = 1 or ", count: 600) + "a = 1")?.message.contains("bytes") == true)
        #expect(parseError(Array(repeating: "a = 1", count: 200).joined(separator: " or "))?.message.contains("terms") == true)
        #expect(parseError("a = 1; DROP TABLE documents")?.position == 6)
    }

    @Test("the grammar: fields, operators, literals, precedence and pseudo-fields")
    func grammar() throws {
        let f = try FieldPath(segments: ["site"])
        #expect(try QueryParser.parseFilter("") == nil)
        #expect(try QueryParser.parseFilter("site = \"east\"") == .compare(f, .equal, .string("east")))
        #expect(try QueryParser.parseFilter("a.b.c >= -2.5e1") == .compare(try FieldPath(segments: ["a", "b", "c"]), .greaterOrEqual, .number("-2.5e1")))
        #expect(try QueryParser.parseFilter("`odd key`.x != null") == .compare(try FieldPath(segments: ["odd key", "x"]), .notEqual, .null))
        #expect(try QueryParser.parseFilter("id starts \"pump-\"") == .startsWith(.id, "pump-"))
        #expect(try QueryParser.parseFilter("`id` = 1") == .compare(try FieldPath(segments: ["id"]), .equal, .number("1")))
        #expect(try QueryParser.parseFilter("a = 1 or b = 2 and not c exists") ==
            .or(.compare(try FieldPath(segments: ["a"]), .equal, .number("1")),
                .and(.compare(try FieldPath(segments: ["b"]), .equal, .number("2")), .not(.exists(try FieldPath(segments: ["c"]))))))
        #expect(try QueryParser.parseFilter("site in [\"a\", 1, true, null]") == .oneOf(f, [.string("a"), .number("1"), .bool(true), .null]))
        #expect(try QueryParser.parseOrder("-updatedAt,site,+a.b") == [QueryOrderKey(.updatedAt, descending: true), QueryOrderKey(f), QueryOrderKey(try FieldPath(segments: ["a", "b"]))])
        #expect(try QueryParser.parseAggregates("count,avg(pressure)") == [QueryAggregate(.count), QueryAggregate(.avg, try FieldPath(segments: ["pressure"]))])
    }

    @Test("types compare as JSON: a string never equals a number, true never equals 1, missing fields fail every comparison")
    func typedComparisons() throws {
        try withStore { store, _ in
            try store.createCollection(readings)
            let bodies = ["s": #"{"v":"1"}"#, "n": #"{"v":1}"#, "r": #"{"v":1.0}"#, "t": #"{"v":true}"#, "z": #"{"v":null}"#, "m": #"{"w":1}"#, "o": #"{"v":{"x":1}}"#]
            for (k, b) in bodies { try store.put(readings, id: DocumentID(k), body: b) }
            func ids(_ text: String) throws -> [String] {
                try store.query(Query(filter: try QueryParser.parseFilter(text), order: [QueryOrderKey(.id)]), in: readings).rows.map(\.id)
            }
            #expect(try ids("v = 1") == ["n", "r"])
            #expect(try ids("v = \"1\"") == ["s"])
            #expect(try ids("v = true") == ["t"])
            #expect(try ids("v = null") == ["z"])
            #expect(try ids("v != 1") == ["m", "o", "s", "t", "z"])
            #expect(try ids("v exists") == ["n", "o", "r", "s", "t", "z"])
            #expect(try ids("v.x = 1") == ["o"])
            #expect(try ids("not (v > 0)") == ["m", "o", "s", "t", "z"])
            #expect(try ids("id starts \"r\" or id in [\"s\", 3]") == ["r", "s"])
        }
    }

    @Test("field names with quotes or SQL never reach SQL text: they are bound or refused")
    func injection() throws {
        try withStore { store, _ in
            try store.createCollection(readings)
            try store.put(readings, id: DocumentID("a"), body: #"{"x') OR 1=1 --":1,"ok":2}"#)
            let q = Query(filter: try QueryParser.parseFilter("`x') OR 1=1 --` = 1"))
            var compiler = QueryCompiler(collectionID: 9)
            let compiled = try compiler.compile(q)
            #expect(!compiled.sql.contains("OR 1=1"))
            #expect(try store.query(q, in: readings).rows.map(\.id) == ["a"])
            #expect(throws: QueryError.self) { try QueryParser.parseFilter("`a\"b` = 1") }
            #expect(throws: StoreError.self) { try store.createIndex(on: readings, fields: [try FieldPath(segments: ["x') OR 1=1 --"])]) }
        }
    }

    @Test("an equality + range query uses the collection's expression index (EXPLAIN QUERY PLAN), and not without it")
    func indexUse() throws {
        try withStore { store, _ in
            try store.createCollection(readings)
            _ = try store.write((0..<300).map { i in
                DocumentWrite(collection: readings, id: id("r\(i)"), body: #"{"site":"\#(["east", "west", "north"][i % 3])","pressure":\#(Double(i % 50) / 10)}"#)
            })
            let q = Query(filter: try QueryParser.parseFilter("site = \"east\" and pressure > 2.5"), order: try QueryParser.parseOrder("-updatedAt"), limit: 20)
            let before = try store.explain(q, in: readings)
            #expect(!before.indexesUsed.contains("site,pressure"), "\(before.steps)")
            let expected = try store.query(q, in: readings)
            #expect(try store.createIndex(on: readings, fields: [try FieldPath(parsing: "site"), try FieldPath(parsing: "pressure")]))
            #expect(try !store.createIndex(on: readings, fields: [try FieldPath(parsing: "site"), try FieldPath(parsing: "pressure")]))
            let after = try store.explain(q, in: readings)
            #expect(after.indexesUsed == ["site,pressure"], "\(after.steps)")
            #expect(!after.scansCollection)
            #expect(try store.query(q, in: readings) == expected)
            #expect(try store.indexes(readings).map(\.fieldList) == ["site,pressure"])
            #expect(try store.dropIndex(on: readings, fields: [try FieldPath(parsing: "site"), try FieldPath(parsing: "pressure")]))
            #expect(try store.indexes().isEmpty)
        }
    }

    @Test("random queries over random documents: the store returns what the reference evaluator does, in the same order", arguments: [1, 2, 3, 4] as [UInt64])
    func property(seed: UInt64) throws {
        var rng = SeededRandom(seed: seed)
        try withStore { store, _ in
            try store.createCollection(readings)
            for batch in 0..<6 {
                var writes: [DocumentWrite] = []
                for i in 0..<40 {
                    let body = RandomDocs.document(&rng)
                    writes.append(DocumentWrite(collection: readings, id: id(RandomDocs.id(&rng, batch * 40 + i)), body: body.compactText))
                }
                _ = try store.write(writes)
            }
            // Some deletes: tombstones are never results.
            for d in try store.list(readings, limit: 20) { try store.delete(readings, id: DocumentID(d.id)) }
            let docs = try referenceDocuments(store, readings)
            if seed == 1 { try store.createIndex(on: readings, fields: [try FieldPath(parsing: "site"), try FieldPath(parsing: "n")]) }
            var rowsCompared = 0, groupsCompared = 0
            for round in 0..<150 {
                var q = Query(filter: Bool.random(using: &rng) || round == 0 ? RandomDocs.predicate(&rng, depth: 0) : nil)
                // The text form parses back to the same query.
                if let f = q.filter { #expect(try QueryParser.parseFilter(f.description) == f, "\(f)") }
                if round % 3 == 0 {
                    q.aggregates = [QueryAggregate(.count), QueryAggregate(.min, RandomDocs.field(&rng)), QueryAggregate(.max, RandomDocs.field(&rng)),
                                    QueryAggregate(.sum, RandomDocs.field(&rng)), QueryAggregate(.avg, RandomDocs.field(&rng)), QueryAggregate(.count, RandomDocs.field(&rng))]
                    q.groupBy = (0..<Int.random(in: 0...2, using: &rng)).map { _ in RandomDocs.field(&rng) }
                    q.limit = Int.random(in: 1...50, using: &rng)
                    let got = try store.query(q, in: readings), want = try QueryReference.evaluate(q, over: docs)
                    #expect(RandomDocs.sameGroups(got.groups, want.groups), "\(q)\n\(got.groups)\n\(want.groups)")
                    groupsCompared += want.groups.count
                    continue
                }
                q.order = (0..<Int.random(in: 0...3, using: &rng)).map { _ in QueryOrderKey(RandomDocs.field(&rng), descending: Bool.random(using: &rng)) }
                q.limit = Int.random(in: 1...40, using: &rng)
                if round % 5 == 0 { q.offset = Int.random(in: 0...5, using: &rng) }
                if round % 7 == 0 { q.fields = [RandomDocs.field(&rng), RandomDocs.field(&rng)] }
                // Every page, through the after cursor, until the end.
                var pages = 0
                while pages < 20 {
                    let got = try store.query(q, in: readings), want = try QueryReference.evaluate(q, over: docs)
                    #expect(got.rows == want.rows, "\(q)")
                    rowsCompared += want.rows.count
                    #expect(got.nextCursor == want.nextCursor, "\(q)")
                    guard got.rows == want.rows, let next = got.nextCursor else { break }
                    q.after = next
                    q.offset = 0
                    pages += 1
                }
            }
            // The comparisons were not vacuous: many rows and groups matched.
            #expect(rowsCompared > 1000 && groupsCompared > 100, "\(rowsCompared) rows, \(groupsCompared) groups")
        }
    }

    @Test("a cursor from another query and out-of-range limits are refused")
    func refusals() throws {
        try withStore { store, _ in
            try store.createCollection(readings)
            #expect(throws: StoreError.self) { try store.query(Query(order: [QueryOrderKey(try FieldPath(parsing: "a"))], after: "5b315d"), in: readings) }
            #expect(throws: StoreError.self) { try store.query(Query(after: "zz"), in: readings) }
            #expect(throws: StoreError.self) { try store.query(Query(limit: 0), in: readings) }
            #expect(throws: StoreError.self) { try store.query(Query(limit: QueryLimits.maxLimit + 1), in: readings) }
            #expect(try store.query(Query(), in: readings).rows.isEmpty)
            // 128 terms in one chain compile flat and run; nesting SQLite could not parse is refused.
            let chain = Array(repeating: "a != 1", count: 64).joined(separator: " and ") + " or " + Array(repeating: "b = 2", count: 64).joined(separator: " or ")
            #expect(try store.query(Query(chain), in: readings).rows.isEmpty)
            // (A filter built in Swift, not parsed, can nest without the parser's bound.)
            let b = QueryPredicate.compare(try FieldPath(segments: ["b"]), .equal, .number("2"))
            var deep = QueryPredicate.compare(try FieldPath(segments: ["a"]), .equal, .number("1"))
            for i in 0..<40 { deep = i % 2 == 0 ? .or(b, deep) : .and(b, deep) }
            let wide = (0..<200).reduce(b) { p, _ in .and(p, b) }
            #expect(throws: StoreError.self) { try store.query(Query(filter: wide), in: readings) }
            let refused = #expect(throws: StoreError.self) { try store.query(Query(filter: deep), in: readings) }
            #expect("\(refused.map { "\($0)" } ?? "")".contains("nests too deeply"), "\(String(describing: refused))")
        }
    }
}

/// Random documents and queries over a small vocabulary, so that queries often match.
enum RandomDocs {
    static let fieldNames = ["site", "n", "a.b", "a", "tags", "flag", "id", "`id`", "updatedAt", "`odd key`", "missing"]
    static let strings = ["east", "west", "", "East", "é", "pump-1", "e", "ë", "pump"]
    static let numbers = ["0", "1", "2", "-3", "2.5", "-1.25", "3.0", "10", "1e2", "0.5"]

    static func id(_ rng: inout SeededRandom, _ i: Int) -> String {
        ["pump-", "valve-", "p", "é-"][Int.random(in: 0..<4, using: &rng)] + String(i)
    }

    static func scalar(_ rng: inout SeededRandom) -> JSONValue {
        switch Int.random(in: 0..<9, using: &rng) {
        case 0, 1, 2: .string(strings.randomElement(using: &rng)!)
        case 3, 4, 5: .number(numbers.randomElement(using: &rng)!)
        case 6: .bool(Bool.random(using: &rng))
        case 7: .null
        default: .array([.number("1")])
        }
    }

    static func document(_ rng: inout SeededRandom) -> JSONValue {
        var o: [String: JSONValue] = [:]
        for k in ["site", "n", "tags", "flag", "id", "odd key"] where Int.random(in: 0..<4, using: &rng) != 0 { o[k] = scalar(&rng) }
        switch Int.random(in: 0..<4, using: &rng) {
        case 0: o["a"] = .object(["b": scalar(&rng)])
        case 1: o["a"] = scalar(&rng)
        case 2: o["a"] = .object([:])
        default: break
        }
        return .object(o)
    }

    static func field(_ rng: inout SeededRandom) -> FieldPath {
        try! QueryParser.parseField(fieldNames.randomElement(using: &rng)!)
    }

    static func literal(_ rng: inout SeededRandom) -> QueryLiteral {
        switch Int.random(in: 0..<8, using: &rng) {
        case 0, 1, 2: .string(strings.randomElement(using: &rng)!)
        case 3, 4, 5: .number(numbers.randomElement(using: &rng)!)
        case 6: .bool(Bool.random(using: &rng))
        default: .null
        }
    }

    static func predicate(_ rng: inout SeededRandom, depth: Int) -> QueryPredicate {
        let leaf = depth >= 3 || Int.random(in: 0..<3, using: &rng) != 0
        if !leaf {
            switch Int.random(in: 0..<3, using: &rng) {
            case 0: return .and(predicate(&rng, depth: depth + 1), predicate(&rng, depth: depth + 1))
            case 1: return .or(predicate(&rng, depth: depth + 1), predicate(&rng, depth: depth + 1))
            default: return .not(predicate(&rng, depth: depth + 1))
            }
        }
        let f = field(&rng)
        switch Int.random(in: 0..<8, using: &rng) {
        case 0: return .exists(f)
        case 1: return .oneOf(f, (0..<Int.random(in: 1...4, using: &rng)).map { _ in literal(&rng) })
        case 2: return .startsWith(f, ["pump", "e", "", "é", "p"].randomElement(using: &rng)!)
        default:
            var lit = literal(&rng)
            let op = QueryComparison.allCases.randomElement(using: &rng)!
            if lit == .null && op != .equal && op != .notEqual { lit = .number("1") }
            return .compare(f, op, lit)
        }
    }

    static func sameValue(_ a: JSONValue?, _ b: JSONValue?) -> Bool {
        switch (a, b) {
        case (.number(let x)?, .number(let y)?):
            guard let dx = Double(x), let dy = Double(y) else { return false }
            return abs(dx - dy) <= 1e-9 * max(1, abs(dx), abs(dy))
        default: return a == b
        }
    }

    static func sameGroups(_ a: [QueryGroup], _ b: [QueryGroup]) -> Bool {
        guard a.count == b.count else { return false }
        for (x, y) in zip(a, b) {
            guard x.keys.count == y.keys.count, x.values.count == y.values.count else { return false }
            for (p, q) in zip(x.keys, y.keys) where !sameValue(p, q) { return false }
            for (p, q) in zip(x.values, y.values) where !sameValue(p, q) { return false }
        }
        return true
    }
}
