import ShoalCore
import ShoalStore

/// A field of a query: `.field("site")`, `.field("a.b.c")` (dots separate nested fields), or the
/// pseudo-fields `.id` and `.updatedAt` (the document's id and last local write, ms since 1970).
public struct QueryField: Sendable {
    let make: @Sendable () throws(QueryError) -> FieldPath

    /// A body field; dots separate nested fields (`"a.b"`). Any other character is allowed in a
    /// segment except a double quote, a backtick and control characters.
    public static func field(_ path: String) -> QueryField {
        QueryField { () throws(QueryError) in try FieldPath(segments: path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)) }
    }
    public static let id = QueryField { () throws(QueryError) in FieldPath.id }
    public static let updatedAt = QueryField { () throws(QueryError) in FieldPath.updatedAt }

    public static func == (f: QueryField, v: QueryValue) -> QueryFilter { QueryFilter.compare(f, .equal, v) }
    public static func != (f: QueryField, v: QueryValue) -> QueryFilter { QueryFilter.compare(f, .notEqual, v) }
    public static func < (f: QueryField, v: QueryValue) -> QueryFilter { QueryFilter.compare(f, .less, v) }
    public static func <= (f: QueryField, v: QueryValue) -> QueryFilter { QueryFilter.compare(f, .lessOrEqual, v) }
    public static func > (f: QueryField, v: QueryValue) -> QueryFilter { QueryFilter.compare(f, .greater, v) }
    public static func >= (f: QueryField, v: QueryValue) -> QueryFilter { QueryFilter.compare(f, .greaterOrEqual, v) }

    /// One of `values` (compared as `==` each).
    public func isIn(_ values: [QueryValue]) -> QueryFilter {
        let make = self.make
        return QueryFilter { () throws(QueryError) in .oneOf(try make(), values.map(\.literal)) }
    }
    /// The field is present (null included).
    public var exists: QueryFilter {
        let make = self.make
        return QueryFilter { () throws(QueryError) in .exists(try make()) }
    }
    /// The field is a string that begins with `prefix` (`.id.starts(with: "pump-")`).
    public func starts(with prefix: String) -> QueryFilter {
        let make = self.make
        return QueryFilter { () throws(QueryError) in .startsWith(try make(), prefix) }
    }
}

/// A value to compare a field with: a string, a number, a boolean or nil (JSON null). A string
/// never equals a number: `.field("n") == "1"` does not match `{"n": 1}`.
public struct QueryValue: Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByNilLiteral
{
    let literal: QueryLiteral
    public init(_ value: String) { literal = .string(value) }
    public init(_ value: Int) { literal = .number(String(value)) }
    public init(_ value: Double) { literal = value.isFinite ? .number(String(value)) : .null }
    public init(_ value: Bool) { literal = .bool(value) }
    public init(stringLiteral value: String) { self.init(value) }
    public init(integerLiteral value: Int) { self.init(value) }
    public init(floatLiteral value: Double) { self.init(value) }
    public init(booleanLiteral value: Bool) { self.init(value) }
    public init(nilLiteral: ()) { literal = .null }
}

/// A condition on documents, made from fields and values with `==`, `!=`, `<`, `<=`, `>`, `>=`,
/// `&&`, `||` and `!`, or parsed from text (`QueryFilter("site = \"east\"")`).
public struct QueryFilter: Sendable {
    let make: @Sendable () throws(QueryError) -> QueryPredicate

    init(_ make: @escaping @Sendable () throws(QueryError) -> QueryPredicate) { self.make = make }

    /// Fields where a filter is expected, so chains read `.id.starts(with: "pump-")` and
    /// `.field("site").isIn(["east", "west"])`.
    public static func field(_ path: String) -> QueryField { QueryField.field(path) }
    public static var id: QueryField { QueryField.id }
    public static var updatedAt: QueryField { QueryField.updatedAt }

    /// The text form (README "Queries and indexes"); an error is thrown when the query runs.
    public init(_ text: String) {
        make = { () throws(QueryError) in try QueryParser.parseFilter(text) ?? .always(true) }
    }

    static func compare(_ f: QueryField, _ op: QueryComparison, _ v: QueryValue) -> QueryFilter {
        QueryFilter { () throws(QueryError) in
            if v.literal == .null && op != .equal && op != .notEqual { throw QueryError(position: 0, message: "null compares only with == and !=") }
            return .compare(try f.make(), op, v.literal)
        }
    }

    public static func && (a: QueryFilter, b: QueryFilter) -> QueryFilter { QueryFilter { () throws(QueryError) in .and(try a.make(), try b.make()) } }
    public static func || (a: QueryFilter, b: QueryFilter) -> QueryFilter { QueryFilter { () throws(QueryError) in .or(try a.make(), try b.make()) } }
    public static prefix func ! (a: QueryFilter) -> QueryFilter { QueryFilter { () throws(QueryError) in .not(try a.make()) } }
}

/// A page of documents and the cursor that continues after it (nil: this was the last page).
public struct QueryPage: Sendable {
    public let documents: [Document]
    public let next: String?
}

/// One group of an aggregate query: its key per group-by field (the value as JSON text; absent
/// when the documents lack the field) and each aggregate's value (nil: no number to aggregate).
public struct QueryGroupRow: Sendable, Equatable {
    public let key: [String: String]
    public let values: [String: Double?]
    public init(key: [String: String], values: [String: Double?]) {
        self.key = key
        self.values = values
    }
}

/// A query of one collection, built step by step and run with `run()`, `page()`, `count()`,
/// `aggregate(_:groupBy:)` or `explain()`:
///
///     let latest = try db.query("sensors.readings")
///         .where(.field("site") == "east" && .field("pressure") > 2.5)
///         .order(by: "-updatedAt")
///         .limit(20)
///         .run()
public struct QueryBuilder: Sendable {
    let database: Database
    let collection: String
    var filter: QueryFilter?
    var order: String?
    var limitCount: Int?
    var offsetCount = 0
    var cursor: String?
    var fieldList: String?

    /// Only documents for which `filter` holds (several `where`s must all hold).
    public func `where`(_ filter: QueryFilter) -> QueryBuilder {
        var b = self
        b.filter = self.filter.map { $0 && filter } ?? filter
        return b
    }
    /// The text form: `.where("site = \"east\" and pressure > 2.5")`.
    public func `where`(_ text: String) -> QueryBuilder { `where`(QueryFilter(text)) }
    /// Fields to order by, `-` for descending: `"-updatedAt"`, `"site,-pressure"`. Ties go by id.
    public func order(by fields: String) -> QueryBuilder { var b = self; b.order = fields; return b }
    /// At most this many (default 100, at most 10,000).
    public func limit(_ n: Int) -> QueryBuilder { var b = self; b.limitCount = n; return b }
    public func offset(_ n: Int) -> QueryBuilder { var b = self; b.offsetCount = n; return b }
    /// Continue after a previous page (`QueryPage.next`).
    public func after(_ cursor: String?) -> QueryBuilder { var b = self; b.cursor = cursor; return b }
    /// Only these fields of each document: `"site,a.b"`.
    public func fields(_ list: String) -> QueryBuilder { var b = self; b.fieldList = list; return b }

    func query() throws(QueryError) -> Query {
        var q = Query(filter: try filter?.make(), limit: limitCount, offset: offsetCount, after: cursor)
        if let order { q.order = try QueryParser.parseOrder(order) }
        if let fieldList { q.fields = try QueryParser.parseFields(fieldList) }
        return q
    }

    func execute(_ change: (inout Query) throws(QueryError) -> Void = { _ throws(QueryError) in }) throws(ShoalError) -> QueryResult {
        let name = try Database.name(collection)
        do {
            var q = try query()
            try change(&q)
            return try database.store.query(q, in: name)
        } catch let e as QueryError {
            throw ShoalError("invalid query of \(collection): \(e)")
        } catch {
            throw ShoalError("cannot query \(collection): \(error)")
        }
    }

    /// The matching documents (one page: at most the limit).
    public func run() throws(ShoalError) -> [Document] { try page().documents }

    public func page() throws(ShoalError) -> QueryPage {
        let r = try execute()
        let full = try Database.name(collection).description
        return QueryPage(documents: r.rows.map { Document(collection: full, id: $0.id, json: $0.body) }, next: r.nextCursor)
    }

    /// How many documents match (counted by SQLite; none is read into Swift).
    public func count() throws(ShoalError) -> Int {
        let r = try execute { q throws(QueryError) in q.aggregates = [QueryAggregate(.count)]; q.order = [] }
        return Int(r.groups.first?.values.first?.int64Value ?? 0)
    }

    /// Aggregates (`"count,avg(pressure),max(a.b)"`) per group of `groupBy` fields.
    public func aggregate(_ aggregates: String, groupBy: String? = nil) throws(ShoalError) -> [QueryGroupRow] {
        var parsed: [QueryAggregate] = []
        var groups: [FieldPath] = []
        let r = try execute { q throws(QueryError) in
            parsed = try QueryParser.parseAggregates(aggregates)
            groups = try groupBy.map { t throws(QueryError) in try QueryParser.parseFields(t, max: QueryLimits.maxGroupBy) } ?? []
            q.aggregates = parsed
            q.groupBy = groups
            q.order = []
        }
        return r.groups.map { g in
            var key: [String: String] = [:]
            for (f, k) in zip(groups, g.keys) { if let k { key[f.description] = k.compactText } }
            var values: [String: Double?] = [:]
            for (a, v) in zip(parsed, g.values) { values[a.description] = v.doubleValue }
            return QueryGroupRow(key: key, values: values)
        }
    }

    /// SQLite's plan for this query (`EXPLAIN QUERY PLAN`) and the collection indexes it uses.
    public func explain() throws(ShoalError) -> (plan: [String], indexesUsed: [String]) {
        let name = try Database.name(collection)
        do {
            let p = try database.store.explain(try query(), in: name)
            return (p.steps, p.indexesUsed.filter { $0 != "id" })
        } catch { throw ShoalError("cannot explain a query of \(collection): \(error)") }
    }
}

extension Database {
    /// A query of the collection `scope.name` (or `name` in the default scope).
    public func query(_ collection: String) -> QueryBuilder {
        QueryBuilder(database: self, collection: collection)
    }
}

extension Collection {
    /// A query of this collection (see `QueryBuilder`).
    public func find() -> QueryBuilder { database.query(fullName) }

    /// Keeps an expression index over `fields` (`["site", "pressure"]`; nested as `"a.b"`), so
    /// queries on them need not read every document. False if it existed.
    @discardableResult
    public func createIndex(_ fields: [String]) throws(ShoalError) -> Bool {
        do { return try database.store.createIndex(on: name, fields: try Collection.paths(fields)) } catch {
            throw ShoalError("cannot create the index \(fields.joined(separator: ",")) on \(fullName): \(error)")
        }
    }

    @discardableResult
    public func dropIndex(_ fields: [String]) throws(ShoalError) -> Bool {
        do { return try database.store.dropIndex(on: name, fields: try Collection.paths(fields)) } catch {
            throw ShoalError("cannot drop the index \(fields.joined(separator: ",")) on \(fullName): \(error)")
        }
    }

    /// The collection's indexes, each as its fields.
    public func indexes() throws(ShoalError) -> [[String]] {
        do { return try database.store.indexes(name).map { $0.fields.map(\.description) } } catch {
            throw ShoalError("cannot list the indexes of \(fullName): \(error)")
        }
    }

    static func paths(_ fields: [String]) throws(QueryError) -> [FieldPath] {
        try fields.map { f throws(QueryError) in try FieldPath(parsing: f) }
    }
}
