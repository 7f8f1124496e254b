import ShoalCore

/// The query semantics in plain Swift, over documents in memory: what the compiled SQL must
/// return, row for row and in the same order. The tests' oracle (a seeded property test runs both
/// over random documents and queries); no gateway code path uses it.
public enum QueryReference {
    public struct Document: Sendable {
        public var id: String
        public var updatedAtMillis: Int64
        public var body: JSONValue
        public var text: String
        public init(id: String, updatedAtMillis: Int64, body: JSONValue, text: String) {
            self.id = id
            self.updatedAtMillis = updatedAtMillis
            self.body = body
            self.text = text
        }
    }

    public static func evaluate(_ q: Query, over documents: [Document]) throws(QueryError) -> QueryResult {
        let limit = try QueryCompiler.checkLimits(q)
        // The same refusal as the store's: a filter its SQL would nest too deeply for SQLite.
        var compiler = QueryCompiler(collectionID: 0)
        _ = try compiler.compile(q)
        let matching = documents.filter { d in q.filter.map { holds($0, d) } ?? true }
        if !q.aggregates.isEmpty { return aggregate(q, matching, limit: limit) }
        let keys = QueryCompiler.keyComponents(q.order)
        var rows = matching.map { d in (d, keys.map { keyValue($0, d) }) }
        rows.sort { a, b in compareKeys(a.1, b.1, keys) < 0 }
        if let after = q.after {
            let cursor = try QueryCursor.decode(after, count: keys.count)
            rows = rows.filter { compareKeys($0.1, cursor, keys) > 0 }
        }
        let page = Array(rows.dropFirst(q.offset).prefix(limit))
        var result = QueryResult()
        result.rows = page.map { d, _ in
            QueryRow(id: d.id, updatedAtMillis: d.updatedAtMillis,
                     body: q.fields.map { QueryProjection.project(d.body, $0, id: d.id, updatedAtMillis: d.updatedAtMillis).compactText } ?? d.text)
        }
        if page.count == limit, let last = page.last { result.nextCursor = QueryCursor.encode(last.1) }
        return result
    }

    static func compareKeys(_ a: [SQLValue], _ b: [SQLValue], _ keys: [QueryCompiler.KeyComponent]) -> Int {
        for i in keys.indices {
            let c = SQLValue.compare(a[i], b[i])
            if c != 0 { return keys[i].ascending ? c : -c }
        }
        return 0
    }

    static func keyValue(_ k: QueryCompiler.KeyComponent, _ d: Document) -> SQLValue {
        switch k.field.pseudo {
        case .id: return .text(d.id)
        case .updatedAt: return .int(d.updatedAtMillis)
        case nil:
            let (rank, value) = QueryRank.key(k.field.value(in: d.body))
            return k.part == .rank ? .int(rank) : value
        }
    }

    // MARK: predicates

    /// The field's value as a comparison sees it: pseudo-fields as SQL values, body fields as JSON.
    static func holds(_ p: QueryPredicate, _ d: Document) -> Bool {
        switch p {
        case .always(let b): return b
        case .and(let a, let b): return holds(a, d) && holds(b, d)
        case .or(let a, let b): return holds(a, d) || holds(b, d)
        case .not(let a): return !holds(a, d)
        case .exists(let f): return f.pseudo != nil || f.value(in: d.body) != nil
        case .compare(let f, let op, let lit):
            if op == .notEqual { return !holds(.compare(f, .equal, lit), d) }
            return compare(f, op, lit, d)
        case .oneOf(let f, let lits): return lits.contains { compare(f, .equal, $0, d) }
        case .startsWith(let f, let prefix):
            guard let s = stringValue(f, d) else { return false }
            return s.unicodeScalars.starts(with: prefix.unicodeScalars)
        }
    }

    static func stringValue(_ f: FieldPath, _ d: Document) -> String? {
        switch f.pseudo {
        case .id: return d.id
        case .updatedAt: return nil
        case nil: return f.value(in: d.body)?.stringValue
        }
    }

    /// Same JSON type class (string, number, boolean) and the SQL comparison holds; null only
    /// equals null.
    static func compare(_ f: FieldPath, _ op: QueryComparison, _ lit: QueryLiteral, _ d: Document) -> Bool {
        let field: JSONValue?
        switch f.pseudo {
        case .id: field = .string(d.id)
        case .updatedAt: field = .int(d.updatedAtMillis)
        case nil: field = f.value(in: d.body)
        }
        guard let field else { return false }
        let a: SQLValue
        switch (field, lit) {
        case (.null, .null): return op == .equal
        case (.string(let s), .string): a = .text(s)
        case (.number(let n), .number): a = SQLValue.number(n)
        case (.bool(let b), .bool): a = .int(b ? 1 : 0)
        default: return false
        }
        let c = SQLValue.compare(a, QueryCompiler.literalValue(lit))
        switch op {
        case .equal: return c == 0
        case .notEqual: return c != 0
        case .less: return c < 0
        case .lessOrEqual: return c <= 0
        case .greater: return c > 0
        case .greaterOrEqual: return c >= 0
        }
    }

    // MARK: aggregates

    static func groupKey(_ g: FieldPath, _ d: Document) -> [SQLValue] {
        switch g.pseudo {
        case .id: return [.text(d.id)]
        case .updatedAt: return [.int(d.updatedAtMillis)]
        case nil:
            let (rank, value) = QueryRank.key(g.value(in: d.body))
            return [.int(rank), value]
        }
    }

    static func aggregate(_ q: Query, _ docs: [Document], limit: Int) -> QueryResult {
        var groups: [([SQLValue], [Document])] = []
        if q.groupBy.isEmpty {
            groups = [([], docs)]
        } else {
            let keyed = docs.map { d in (q.groupBy.flatMap { groupKey($0, d) }, d) }
                .sorted { a, b in compareAll(a.0, b.0) < 0 }
            for (key, d) in keyed {
                if let last = groups.last, compareAll(last.0, key) == 0 { groups[groups.count - 1].1.append(d) } else { groups.append((key, [d])) }
            }
        }
        var result = QueryResult()
        result.isAggregate = true
        for (key, members) in groups.dropFirst(q.offset).prefix(limit) {
            result.groups.append(QueryGroup(keys: groupKeys(q.groupBy, key), values: q.aggregates.map { value($0, members) }))
        }
        return result
    }

    static func compareAll(_ a: [SQLValue], _ b: [SQLValue]) -> Int {
        for (x, y) in zip(a, b) {
            let c = SQLValue.compare(x, y)
            if c != 0 { return c }
        }
        return 0
    }

    /// Group key columns (rank, value per body field; the column for a pseudo-field) as JSON.
    static func groupKeys(_ fields: [FieldPath], _ columns: [SQLValue]) -> [JSONValue?] {
        var out: [JSONValue?] = []
        var i = 0
        for f in fields {
            if f.pseudo != nil { out.append(columns[i].json); i += 1; continue }
            guard case .int(let rank) = columns[i] else { out.append(nil); i += 2; continue }
            let v = columns[i + 1]
            switch rank {
            case QueryRank.missing: out.append(nil)
            case QueryRank.bool: if case .int(let b) = v { out.append(.bool(b != 0)) } else { out.append(.null) }
            case QueryRank.number, QueryRank.string: out.append(v.json)
            default: out.append(.null)
            }
            i += 2
        }
        return out
    }

    static func value(_ a: QueryAggregate, _ docs: [Document]) -> JSONValue {
        guard let f = a.field else { return .int(docs.count) }
        var numbers: [SQLValue] = []
        var present = 0
        for d in docs {
            switch f.pseudo {
            case .id: present += 1
            case .updatedAt: present += 1; numbers.append(.int(d.updatedAtMillis))
            case nil:
                guard let v = f.value(in: d.body) else { continue }
                present += 1
                if case .number(let n) = v { numbers.append(SQLValue.number(n)) }
            }
        }
        func double(_ v: SQLValue) -> Double {
            switch v { case .int(let i): Double(i); case .double(let d): d; default: 0 }
        }
        switch a.function {
        case .count: return .int(present)
        case .min: return numbers.min { SQLValue.compare($0, $1) < 0 }?.json ?? .null
        case .max: return numbers.max { SQLValue.compare($0, $1) < 0 }?.json ?? .null
        case .sum: return .double(numbers.reduce(0) { $0 + double($1) })
        case .avg: return numbers.isEmpty ? .null : .double(numbers.reduce(0) { $0 + double($1) } / Double(numbers.count))
        }
    }
}
