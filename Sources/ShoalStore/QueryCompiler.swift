import ShoalCore

/// A value as SQLite holds it: what the compiler binds and what sort keys are made of.
enum SQLValue: Sendable, Equatable {
    case null, int(Int64), double(Double), text(String)

    /// SQLite's order (BINARY collation): NULL < numbers (integers and reals compared exactly) < text.
    static func compare(_ a: SQLValue, _ b: SQLValue) -> Int {
        func cls(_ v: SQLValue) -> Int {
            switch v { case .null: 0; case .int, .double: 1; case .text: 2 }
        }
        let ca = cls(a), cb = cls(b)
        if ca != cb { return ca < cb ? -1 : 1 }
        switch (a, b) {
        case (.int(let x), .int(let y)): return x < y ? -1 : (x > y ? 1 : 0)
        case (.double(let x), .double(let y)): return x < y ? -1 : (x > y ? 1 : 0)
        case (.int(let x), .double(let y)): return intDouble(x, y)
        case (.double(let x), .int(let y)): return -intDouble(y, x)
        case (.text(let x), .text(let y)):
            if x.utf8.elementsEqual(y.utf8) { return 0 }
            return x.utf8.lexicographicallyPrecedes(y.utf8) ? -1 : 1
        default: return 0
        }
    }

    /// An integer against a double, exactly (no rounding of the integer to a double).
    static func intDouble(_ i: Int64, _ d: Double) -> Int {
        if d < -9223372036854775808.0 { return 1 }
        if d >= 9223372036854775808.0 { return -1 }
        let t = Int64(d)
        if i < t { return -1 }
        if i > t { return 1 }
        let frac = d - Double(t)
        return frac > 0 ? -1 : (frac < 0 ? 1 : 0)
    }

    /// A JSON number's text as json_extract gives it: an integer if it fits in Int64, else a double.
    static func number(_ text: String) -> SQLValue {
        if let i = Int64(text) { return .int(i) }
        return .double(Double(text) ?? 0)
    }

    var json: JSONValue {
        switch self {
        case .null: .null
        case .int(let i): .int(i)
        case .double(let d): .double(d)
        case .text(let s): .string(s)
        }
    }
}

/// The sort rank of a JSON field (the first part of every order and group key on a body field):
/// missing < null < booleans < numbers < strings < arrays and objects.
enum QueryRank {
    static let missing: Int64 = 0, null: Int64 = 1, bool: Int64 = 2, number: Int64 = 3, string: Int64 = 4, container: Int64 = 5

    /// A field's (rank, value) key, as the compiled SQL computes it.
    static func key(_ v: JSONValue?) -> (Int64, SQLValue) {
        guard let v else { return (missing, .null) }
        switch v {
        case .null: return (null, .null)
        case .bool(let b): return (bool, .int(b ? 1 : 0))
        case .number(let n): return (number, SQLValue.number(n))
        case .string(let s): return (string, .text(s))
        case .array, .object: return (container, .null)
        }
    }
}

/// A compiled query: SQL text whose every user value is a bound parameter. Field paths made of
/// [A-Za-z0-9_] segments are written into the text as JSON path literals (so an expression index
/// over the same path matches); any other path is bound too. The collection id is the store's own
/// integer and is written literally, as are `deleted = 0`: partial indexes need both in the text.
struct CompiledQuery {
    var sql: String
    var bindings: [SQLValue]
    /// How many sort-key columns follow doc_id, updated_at and body (documents only).
    var keyColumns: Int
    /// Per key column: ascending?
    var keyAscending: [Bool]
    var limit: Int
}

struct QueryCompiler {
    let collectionID: Int64
    private(set) var bindings: [SQLValue] = []

    init(collectionID: Int64) { self.collectionID = collectionID }

    mutating func bind(_ v: SQLValue) -> String {
        bindings.append(v)
        return "?"
    }

    /// `json_extract(body, '$.a.b')` or, for other paths, with the path bound.
    mutating func path(_ f: FieldPath) -> String {
        f.isPlain ? "'\(f.jsonPath)'" : bind(.text(f.jsonPath))
    }

    static func checkLimits(_ q: Query) throws(QueryError) -> Int {
        let limit = q.limit ?? QueryLimits.defaultLimit
        guard limit >= 1 && limit <= QueryLimits.maxLimit else {
            throw QueryError(position: 0, message: "limit is 1 to \(QueryLimits.maxLimit), not \(limit)")
        }
        guard q.offset >= 0 && q.offset <= QueryLimits.maxOffset else {
            throw QueryError(position: 0, message: "offset is 0 to \(QueryLimits.maxOffset) (page with the after cursor instead), not \(q.offset)")
        }
        // A filter built in Swift has not been through the parser's bound.
        if let f = q.filter, QueryCompiler.terms(f) > QueryLimits.maxTerms {
            throw QueryError(position: 0, message: "the query has more than \(QueryLimits.maxTerms) terms")
        }
        guard q.order.count <= QueryLimits.maxOrderKeys else { throw QueryError(position: 0, message: "at most \(QueryLimits.maxOrderKeys) order keys") }
        guard (q.fields?.count ?? 0) <= QueryLimits.maxFields else { throw QueryError(position: 0, message: "at most \(QueryLimits.maxFields) fields") }
        guard q.aggregates.count <= QueryLimits.maxAggregates else { throw QueryError(position: 0, message: "at most \(QueryLimits.maxAggregates) aggregates") }
        guard q.groupBy.count <= QueryLimits.maxGroupBy else { throw QueryError(position: 0, message: "at most \(QueryLimits.maxGroupBy) group-by fields") }
        if q.aggregates.isEmpty {
            guard q.groupBy.isEmpty else { throw QueryError(position: 0, message: "group by needs aggregates (count, min, max, sum, avg)") }
        } else {
            guard q.after == nil else { throw QueryError(position: 0, message: "an aggregate query pages with offset, not an after cursor") }
            guard q.fields == nil else { throw QueryError(position: 0, message: "an aggregate query returns its groups; fields are for documents") }
            guard q.order.isEmpty else { throw QueryError(position: 0, message: "an aggregate query is ordered by its group-by fields") }
        }
        return limit
    }

    mutating func compile(_ q: Query) throws(QueryError) -> CompiledQuery {
        let limit = try QueryCompiler.checkLimits(q)
        if !q.aggregates.isEmpty { return try compileAggregate(q, limit: limit) }
        let keys = QueryCompiler.keyComponents(q.order)
        var select = "SELECT doc_id, updated_at, body"
        for k in keys { select += ", " + keyExpression(k.field, k.part) }
        var sql = select + " FROM documents WHERE collection_id = \(collectionID) AND deleted = 0"
        if let f = q.filter { sql += " AND " + predicate(f) }
        if let after = q.after {
            let values = try QueryCursor.decode(after, count: keys.count)
            sql += " AND (" + keyset(keys, values) + ")"
        }
        // By the select list's key columns (4, 5, …): the expressions are not written twice.
        sql += " ORDER BY " + keys.indices.map { i in "\(i + 4)" + (keys[i].ascending ? " ASC" : " DESC") }.joined(separator: ", ")
        sql += " LIMIT \(bind(.int(Int64(limit)))) OFFSET \(bind(.int(Int64(q.offset))))"
        try QueryCompiler.checkNesting(sql)
        return CompiledQuery(sql: sql, bindings: bindings, keyColumns: keys.count, keyAscending: keys.map(\.ascending), limit: limit)
    }

    enum KeyPart { case rank, value, column }
    struct KeyComponent { var field: FieldPath; var part: KeyPart; var ascending: Bool }

    /// The scalar sort keys of an order: (rank, value) per body field, the column for a
    /// pseudo-field, then the document id ascending (unless the order already ends in it), so the
    /// order is total.
    static func keyComponents(_ order: [QueryOrderKey]) -> [KeyComponent] {
        var out: [KeyComponent] = []
        for k in order {
            if k.field.pseudo != nil {
                out.append(KeyComponent(field: k.field, part: .column, ascending: !k.descending))
                if k.field.pseudo == .id { return out }
            } else {
                out.append(KeyComponent(field: k.field, part: .rank, ascending: !k.descending))
                out.append(KeyComponent(field: k.field, part: .value, ascending: !k.descending))
            }
        }
        out.append(KeyComponent(field: .id, part: .column, ascending: true))
        return out
    }

    mutating func keyExpression(_ f: FieldPath, _ part: KeyPart) -> String {
        switch f.pseudo {
        case .id: return "doc_id"
        case .updatedAt: return "updated_at"
        case nil: break
        }
        switch part {
        case .rank:
            return "CASE json_type(body, \(path(f))) WHEN 'null' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 2 WHEN 'integer' THEN 3 WHEN 'real' THEN 3 WHEN 'text' THEN 4 WHEN 'array' THEN 5 WHEN 'object' THEN 5 ELSE 0 END"
        case .value, .column:
            let p1 = path(f)
            let p2 = path(f)
            return "iif(json_type(body, \(p1)) IN ('array', 'object'), NULL, json_extract(body, \(p2)))"
        }
    }

    /// Rows strictly after the cursor's key values, in the order's directions.
    mutating func keyset(_ keys: [KeyComponent], _ values: [SQLValue]) -> String {
        var disjuncts: [String] = []
        for k in keys.indices {
            var terms: [String] = []
            for j in 0..<k { terms.append("\(keyExpression(keys[j].field, keys[j].part)) IS \(bind(values[j]))") }
            terms.append("\(keyExpression(keys[k].field, keys[k].part)) \(keys[k].ascending ? ">" : "<") \(bind(values[k]))")
            disjuncts.append("(" + terms.joined(separator: " AND ") + ")")
        }
        return disjuncts.joined(separator: " OR ")
    }

    // MARK: predicates (each evaluates to 0 or 1, never NULL, so not and != negate exactly)

    mutating func predicate(_ p: QueryPredicate) -> String {
        switch p {
        case .always(let b): return b ? "1" : "0"
        // A chain of one operator is one flat list: SQLite's parser overflows its stack on
        // parentheses nested about 30 deep, and `a and b and …` must not nest at all.
        case .and: return "(" + QueryCompiler.chain(p, and: true).map { predicate($0) }.joined(separator: " AND ") + ")"
        case .or: return "(" + QueryCompiler.chain(p, and: false).map { predicate($0) }.joined(separator: " OR ") + ")"
        case .not(let a): return "NOT \(predicate(a))"
        case .exists(let f): return f.pseudo != nil ? "1" : "(json_type(body, \(path(f))) IS NOT NULL)"
        case .compare(let f, let op, let lit): return compare(f, op, lit)
        case .oneOf(let f, let lits): return oneOf(f, lits)
        case .startsWith(let f, let prefix): return startsWith(f, prefix)
        }
    }

    /// Comparisons (an `in` list counts each value), as the parser counts them.
    static func terms(_ p: QueryPredicate) -> Int {
        var n = 0
        var stack = [p]
        while let next = stack.popLast() {
            switch next {
            case .and(let a, let b), .or(let a, let b): stack.append(a); stack.append(b)
            case .not(let a): stack.append(a)
            case .oneOf(_, let values): n += values.count
            case .always: break
            default: n += 1
            }
        }
        return n
    }

    /// The operands of a chain of `and`s (or `or`s), in order, however it is nested.
    static func chain(_ p: QueryPredicate, and: Bool) -> [QueryPredicate] {
        var out: [QueryPredicate] = []
        var stack = [p]
        while let next = stack.popLast() {
            switch (next, and) {
            case (.and(let a, let b), true), (.or(let a, let b), false):
                stack.append(b)
                stack.append(a)
            default:
                out.append(next)
            }
        }
        return out
    }

    /// SQLite's parser takes about 28 levels of parentheses; the compiled text stays below this.
    static let maxSQLNesting = 24

    static func nesting(_ sql: String) -> Int {
        var depth = 0, deepest = 0
        for b in sql.utf8 {
            if b == 0x28 { depth += 1; deepest = max(deepest, depth) } else if b == 0x29 { depth -= 1 }
        }
        return deepest
    }

    static func literalValue(_ lit: QueryLiteral) -> SQLValue {
        switch lit {
        case .string(let s): .text(s)
        case .number(let n): SQLValue.number(n)
        case .bool(let b): .int(b ? 1 : 0)
        case .null: .null
        }
    }

    mutating func typeGuard(_ f: FieldPath, _ lit: QueryLiteral) -> String {
        switch lit {
        case .string: "json_type(body, \(path(f))) IS 'text'"
        case .number: "(json_type(body, \(path(f))) IS 'integer' OR json_type(body, \(path(f))) IS 'real')"
        case .bool: "(json_type(body, \(path(f))) IS 'true' OR json_type(body, \(path(f))) IS 'false')"
        case .null: "json_type(body, \(path(f))) IS 'null'"
        }
    }

    mutating func compare(_ f: FieldPath, _ op: QueryComparison, _ lit: QueryLiteral) -> String {
        let negate = op == .notEqual
        let sqlOp = op == .notEqual ? "=" : op.rawValue
        let positive: String
        switch f.pseudo {
        case .id:
            guard case .string = lit else { return negate ? "1" : "0" }
            positive = "doc_id \(sqlOp) \(bind(QueryCompiler.literalValue(lit)))"
        case .updatedAt:
            guard case .number = lit else { return negate ? "1" : "0" }
            positive = "updated_at \(sqlOp) \(bind(QueryCompiler.literalValue(lit)))"
        case nil:
            if lit == .null {
                positive = typeGuard(f, lit)
            } else {
                let g = typeGuard(f, lit)
                positive = "(\(g) AND json_extract(body, \(path(f))) \(sqlOp) \(bind(QueryCompiler.literalValue(lit))))"
            }
        }
        return negate ? "NOT (\(positive))" : positive
    }

    mutating func oneOf(_ f: FieldPath, _ lits: [QueryLiteral]) -> String {
        func list(_ values: [QueryLiteral], _ c: inout QueryCompiler) -> String {
            "(" + values.map { c.bind(QueryCompiler.literalValue($0)) }.joined(separator: ", ") + ")"
        }
        let strings = lits.filter { if case .string = $0 { return true }; return false }
        let numbers = lits.filter { if case .number = $0 { return true }; return false }
        let bools = lits.filter { if case .bool = $0 { return true }; return false }
        switch f.pseudo {
        case .id: return strings.isEmpty ? "0" : "doc_id IN \(list(strings, &self))"
        case .updatedAt: return numbers.isEmpty ? "0" : "updated_at IN \(list(numbers, &self))"
        case nil: break
        }
        var parts: [String] = []
        for group in [strings, numbers, bools] where !group.isEmpty {
            let g = typeGuard(f, group[0])
            parts.append("(\(g) AND json_extract(body, \(path(f))) IN \(list(group, &self)))")
        }
        if lits.contains(.null) { parts.append(typeGuard(f, .null)) }
        return parts.isEmpty ? "0" : "(" + parts.joined(separator: " OR ") + ")"
    }

    /// The first string after every string that starts with `prefix` (nil: none is; only possible
    /// when the prefix is all U+10FFFF). UTF-8's byte order is code-point order, so
    /// `prefix <= s < upper` holds exactly for the strings that start with it.
    static func upperBound(_ prefix: String) -> String? {
        var scalars = Array(prefix.unicodeScalars)
        while let last = scalars.popLast() {
            var next = last.value + 1
            if next == 0xD800 { next = 0xE000 }
            if let u = Unicode.Scalar(next) {
                scalars.append(u)
                var v = String.UnicodeScalarView()
                v.append(contentsOf: scalars)
                return String(v)
            }
        }
        return nil
    }

    mutating func startsWith(_ f: FieldPath, _ prefix: String) -> String {
        let upper = QueryCompiler.upperBound(prefix)
        switch f.pseudo {
        case .id:
            if let upper { return "(doc_id >= \(bind(.text(prefix))) AND doc_id < \(bind(.text(upper))))" }
            return "doc_id >= \(bind(.text(prefix)))"
        case .updatedAt: return "0"
        case nil:
            var s = "(json_type(body, \(path(f))) IS 'text' AND json_extract(body, \(path(f))) >= \(bind(.text(prefix)))"
            if let upper { s += " AND json_extract(body, \(path(f))) < \(bind(.text(upper)))" }
            return s + ")"
        }
    }

    // MARK: aggregates

    mutating func aggregateExpression(_ a: QueryAggregate) -> String {
        guard let f = a.field else { return "count(*)" }
        let number: String
        switch f.pseudo {
        case .id: number = "NULL"
        case .updatedAt: number = "updated_at"
        case nil:
            if a.function == .count {
                number = "json_type(body, \(path(f)))"
            } else {
                let p1 = path(f)
                number = "iif(json_type(body, \(p1)) IN ('integer', 'real'), json_extract(body, \(path(f))), NULL)"
            }
        }
        switch a.function {
        case .count: return f.pseudo != nil ? "count(*)" : "count(\(number))"
        case .min: return "min(\(number))"
        case .max: return "max(\(number))"
        case .sum: return "total(\(number))"
        case .avg: return "avg(\(number))"
        }
    }

    static func checkNesting(_ sql: String) throws(QueryError) {
        let n = nesting(sql)
        guard n <= maxSQLNesting else {
            throw QueryError(position: 0, message: "the query nests too deeply (\(n) levels of SQL, at most \(maxSQLNesting)): use fewer nested parentheses, or write a not (x = 1 and y = 2) as x != 1 or y != 2")
        }
    }

    mutating func compileAggregate(_ q: Query, limit: Int) throws(QueryError) -> CompiledQuery {
        var groupColumns: [String] = []
        for g in q.groupBy {
            if g.pseudo != nil { groupColumns.append(keyExpression(g, .column)) } else {
                groupColumns.append(keyExpression(g, .rank))
                groupColumns.append(keyExpression(g, .value))
            }
        }
        let aggregates = q.aggregates.map { aggregateExpression($0) }
        var sql = "SELECT " + (groupColumns + aggregates).joined(separator: ", ")
        sql += " FROM documents WHERE collection_id = \(collectionID) AND deleted = 0"
        if let f = q.filter { sql += " AND " + predicate(f) }
        if !q.groupBy.isEmpty {
            // Group and order by the select list's own columns (by number), so the key expressions
            // are not repeated with their bindings.
            let numbers = (1...groupColumns.count).map(String.init).joined(separator: ", ")
            sql += " GROUP BY \(numbers) ORDER BY \(numbers)"
        }
        sql += " LIMIT \(bind(.int(Int64(limit)))) OFFSET \(bind(.int(Int64(q.offset))))"
        try QueryCompiler.checkNesting(sql)
        return CompiledQuery(sql: sql, bindings: bindings, keyColumns: groupColumns.count, keyAscending: [], limit: limit)
    }
}

/// The `after` cursor: the last row's sort key values (and id), as hex of a JSON array, opaque to
/// users. A cursor that does not decode, or does not fit the query's order, is refused.
enum QueryCursor {
    static func encode(_ values: [SQLValue]) -> String {
        let array = JSONValue.array(values.map { v in
            switch v {
            case .null: .null
            case .int(let i): .number(String(i))
            case .double(let d): .number(d.isFinite ? "\(d)" : "0.0")
            case .text(let s): .string(s)
            }
        })
        return array.compactText.utf8.map { b in
            let digits = Array("0123456789abcdef")
            return String([digits[Int(b >> 4)], digits[Int(b & 15)]])
        }.joined()
    }

    static func decode(_ text: String, count: Int) throws(QueryError) -> [SQLValue] {
        let bad = QueryError(position: 0, message: "the after cursor is not one this query gave (it came from another query or was cut)")
        let hex = Array(text.utf8)
        guard hex.count % 2 == 0, hex.count <= 2 * (QueryLimits.maxTextBytes * 4) else { throw bad }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hex.count / 2)
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: c - 0x30
            case 0x61...0x66: c - 0x61 + 10
            default: nil
            }
        }
        var i = 0
        while i < hex.count {
            guard let hi = nibble(hex[i]), let lo = nibble(hex[i + 1]) else { throw bad }
            bytes.append(hi << 4 | lo)
            i += 2
        }
        guard let value = try? JSONValue.parse(bytes: bytes), case .array(let items) = value, items.count == count else { throw bad }
        var out: [SQLValue] = []
        for item in items {
            switch item {
            case .null: out.append(.null)
            case .number(let n): out.append(SQLValue.number(n))
            case .string(let s): out.append(.text(s))
            default: throw bad
            }
        }
        // The last value is always the document id.
        guard case .text = out.last else { throw bad }
        return out
    }
}

/// Projection of a body to some fields (nested fields keep their nesting).
enum QueryProjection {
    static func project(_ body: JSONValue, _ fields: [FieldPath], id: String, updatedAtMillis: Int64) -> JSONValue {
        var out: JSONValue = .object([:])
        for f in fields {
            let value: JSONValue?
            switch f.pseudo {
            case .id: value = .string(id)
            case .updatedAt: value = .int(updatedAtMillis)
            case nil: value = f.value(in: body)
            }
            if let value { insert(&out, f.segments[...], value) }
        }
        return out
    }

    static func insert(_ into: inout JSONValue, _ path: ArraySlice<String>, _ value: JSONValue) {
        guard let head = path.first, case .object(var members) = into else { return }
        if path.count == 1 {
            members[head] = value
        } else {
            var child = members[head] ?? .object([:])
            if !child.isObject { child = .object([:]) }
            insert(&child, path.dropFirst(), value)
            members[head] = child
        }
        into = .object(members)
    }
}
