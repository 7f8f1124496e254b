import CSQLite
import ShoalCore

/// What SQLite plans for a query (`EXPLAIN QUERY PLAN`), and which indexes it uses.
public struct QueryPlan: Sendable, Equatable {
    public var sql: String
    /// The plan's lines, indented by depth.
    public var steps: [String]
    /// Collection indexes the plan uses, by their fields (`site,pressure`); `id` for the built-in
    /// index on document ids.
    public var indexesUsed: [String]
    /// Whether SQLite reads every document of the collection.
    public var scansCollection: Bool
}

/// An expression index over a collection's live documents.
public struct CollectionIndex: Sendable, Equatable {
    public var collection: CollectionName
    public var fields: [FieldPath]
    /// The SQLite index name (`ix:<collection id>:<paths>`).
    public var name: String
    public var fieldList: String { fields.map(\.description).joined(separator: ",") }
}

extension DocumentStore {
    /// Runs a query over a collection's live documents (see `Query` for its semantics).
    public func query(_ q: Query, in collection: CollectionName) throws(StoreError) -> QueryResult {
        try locked { db throws(StoreError) in
            let compiled = try DocumentStore.compile(q, collectionID: try collectionID(collection))
            let s = try db.queryStatements.statement(compiled.sql, on: db)
            // Every `?` of the text has its value, in order: a mismatch is the compiler's bug (the
            // fuzz target treats this error as a crash); the gateway refuses the query and stays up.
            guard Int(sqlite3_bind_parameter_count(s.raw)) == compiled.bindings.count else {
                throw .sqlite(call: "query compiler", code: SQLITE_MISUSE,
                              message: "\(sqlite3_bind_parameter_count(s.raw)) parameters for \(compiled.bindings.count) values in \(compiled.sql.prefix(200))")
            }
            for (i, v) in compiled.bindings.enumerated() { try s.bind(Int32(i), v) }
            var result = QueryResult()
            if !q.aggregates.isEmpty {
                result.isAggregate = true
                while try s.step() {
                    let keys = (0..<compiled.keyColumns).map { s.value(Int32($0)) }
                    let values = q.aggregates.indices.map { s.value(Int32(compiled.keyColumns + $0)).json }
                    result.groups.append(QueryGroup(keys: QueryReference.groupKeys(q.groupBy, keys), values: values))
                }
                return result
            }
            result.rows.reserveCapacity(min(compiled.limit, 256))
            while try s.step() {
                let id = s.text(0) ?? ""
                let updated = s.int64(1)
                var body = s.text(2) ?? "{}"
                if let fields = q.fields {
                    let parsed = (try? JSONValue.parse(body)) ?? .object([:])
                    body = QueryProjection.project(parsed, fields, id: id, updatedAtMillis: updated).compactText
                }
                result.rows.append(QueryRow(id: id, updatedAtMillis: updated, body: body))
                if result.rows.count == compiled.limit {
                    result.nextCursor = QueryCursor.encode((0..<compiled.keyColumns).map { s.value(Int32(3 + $0)) })
                }
            }
            return result
        }
    }

    /// SQLite's plan for a query, without running it.
    public func explain(_ q: Query, in collection: CollectionName) throws(StoreError) -> QueryPlan {
        try locked { db throws(StoreError) in
            let compiled = try DocumentStore.compile(q, collectionID: try collectionID(collection))
            let s = try db.queryStatements.statement("EXPLAIN QUERY PLAN " + compiled.sql, on: db)
            for (i, v) in compiled.bindings.enumerated() { try s.bind(Int32(i), v) }
            var depth: [Int64: Int] = [0: 0]
            var steps: [String] = []
            var used: [String] = []
            var scans = false
            while try s.step() {
                let id = s.int64(0), parent = s.int64(1)
                let detail = s.text(3) ?? ""
                let level = (depth[parent] ?? 0) + 1
                depth[id] = level
                steps.append(String(repeating: "  ", count: level - 1) + detail)
                if let name = DocumentStore.indexName(in: detail) {
                    if let fields = DocumentStore.indexFields(name) { used.append(fields.map(\.description).joined(separator: ",")) }
                    else if name.hasPrefix("sqlite_autoindex_documents") { used.append("id") }
                    else { used.append(name) }
                }
                if detail.hasPrefix("SCAN documents") { scans = true }
            }
            return QueryPlan(sql: compiled.sql, steps: steps, indexesUsed: used, scansCollection: scans)
        }
    }

    static func compile(_ q: Query, collectionID: Int64) throws(StoreError) -> CompiledQuery {
        var compiler = QueryCompiler(collectionID: collectionID)
        do throws(QueryError) { return try compiler.compile(q) } catch { throw .invalidQuery(error) }
    }

    static func indexName(in detail: String) -> String? {
        let words = detail.split(separator: " ")
        guard let i = words.firstIndex(of: "INDEX"), i + 1 < words.count, i > 0, words[i - 1] == "USING" || words[i - 1] == "COVERING" else { return nil }
        return String(words[i + 1])
    }

    // MARK: indexes

    public static let maxIndexesPerCollection = 16

    static func indexName(collectionID: Int64, fields: [FieldPath]) -> String {
        "ix:\(collectionID):" + fields.map { f in f.pseudo.map { "@" + $0.rawValue } ?? f.jsonPath }.joined(separator: ",")
    }

    /// The fields of one of our index names (nil: not one of ours).
    static func indexFields(_ name: String) -> [FieldPath]? {
        let parts = name.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "ix", Int64(parts[1]) != nil else { return nil }
        var out: [FieldPath] = []
        for p in parts[2].split(separator: ",") {
            if p == "@id" { out.append(.id); continue }
            if p == "@updatedAt" { out.append(.updatedAt); continue }
            guard p.hasPrefix("$."), let f = try? FieldPath(segments: p.dropFirst(2).split(separator: ".").map(String.init)) else { return nil }
            out.append(f)
        }
        return out.isEmpty ? nil : out
    }

    static func checkIndexFields(_ fields: [FieldPath]) throws(StoreError) {
        guard !fields.isEmpty, fields.count <= 8 else { throw .invalidQuery(QueryError(position: 0, message: "an index has 1 to 8 fields")) }
        guard Set(fields).count == fields.count else { throw .invalidQuery(QueryError(position: 0, message: "an index names each field once")) }
        for f in fields where f.pseudo == nil && !f.isPlain {
            throw .invalidQuery(QueryError(position: 0, message: "an indexed field's segments are letters, digits and _ only (\(f) is not)"))
        }
    }

    /// Creates an expression index over `fields` of the collection's live documents (a partial
    /// index: `WHERE collection_id = <id> AND deleted = 0`, which every compiled query repeats).
    /// False if it existed. Every path in its SQL is made of checked segments only.
    @discardableResult
    public func createIndex(on collection: CollectionName, fields: [FieldPath]) throws(StoreError) -> Bool {
        try DocumentStore.checkIndexFields(fields)
        return try locked { db throws(StoreError) in
            let cid = try collectionID(collection)
            let name = DocumentStore.indexName(collectionID: cid, fields: fields)
            let existing = try DocumentStore.indexNames(db).filter { $0.hasPrefix("ix:\(cid):") }
            if existing.contains(name) { return false }
            guard existing.count < DocumentStore.maxIndexesPerCollection else {
                throw .invalidQuery(QueryError(position: 0, message: "\(collection) already has \(DocumentStore.maxIndexesPerCollection) indexes (drop one first)"))
            }
            let columns = fields.map { f in
                switch f.pseudo {
                case .id: "doc_id"
                case .updatedAt: "updated_at"
                case nil: "json_extract(body, '\(f.jsonPath)')"
                }
            }
            try db.exec("CREATE INDEX \"\(name)\" ON documents(\(columns.joined(separator: ", "))) WHERE collection_id = \(cid) AND deleted = 0")
            // Statistics, so the planner weighs this index against the collection's own: without
            // them it guesses that `collection_id = ?` alone finds 10 rows, and never picks an
            // index for a range. One pass over the table's indexes, as long as building one.
            try db.exec("ANALYZE documents")
            db.queryStatements.finalizeAll()
            return true
        }
    }

    /// Drops the index over exactly these fields; false if there was none.
    @discardableResult
    public func dropIndex(on collection: CollectionName, fields: [FieldPath]) throws(StoreError) -> Bool {
        try DocumentStore.checkIndexFields(fields)
        return try locked { db throws(StoreError) in
            let name = DocumentStore.indexName(collectionID: try collectionID(collection), fields: fields)
            guard try DocumentStore.indexNames(db).contains(name) else { return false }
            db.queryStatements.finalizeAll()  // a statement that uses it would have to be prepared again anyway
            try db.exec("DROP INDEX \"\(name)\"")
            return true
        }
    }

    /// The indexes of one collection, or of all (nil).
    public func indexes(_ collection: CollectionName? = nil) throws(StoreError) -> [CollectionIndex] {
        try locked { db throws(StoreError) in
            let names = Dictionary(collectionIDs.map { ($0.value, $0.key) }, uniquingKeysWith: { a, _ in a })
            var out: [CollectionIndex] = []
            for name in try DocumentStore.indexNames(db) {
                let parts = name.split(separator: ":")
                guard parts.count >= 3, let cid = Int64(parts[1]), let c = names[cid], let fields = DocumentStore.indexFields(name) else { continue }
                if let collection, collection != c { continue }
                out.append(CollectionIndex(collection: c, fields: fields, name: name))
            }
            return out.sorted { ($0.collection, $0.name) < ($1.collection, $1.name) }
        }
    }

    static func indexNames(_ db: SQLiteConnection) throws(StoreError) -> [String] {
        try db.strings("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'ix:%' ORDER BY name").compactMap { $0.first ?? nil }
    }
}

/// Prepared statements by SQL text, at most `capacity` (the least recently used is finalized).
final class BoundedStatementCache {
    private var statements: [String: (statement: OpaquePointer, used: UInt64)] = [:]
    private var clock: UInt64 = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    func statement(_ sql: String, on db: SQLiteConnection) throws(StoreError) -> Statement {
        clock += 1
        if let entry = statements[sql] {
            statements[sql] = (entry.statement, clock)
            sqlite3_reset(entry.statement)
            sqlite3_clear_bindings(entry.statement)
            return Statement(raw: entry.statement, connection: db)
        }
        guard let handle = db.handle else { throw .closed }
        if statements.count >= capacity, let oldest = statements.min(by: { $0.value.used < $1.value.used }) {
            sqlite3_finalize(oldest.value.statement)
            statements[oldest.key] = nil
        }
        var s: OpaquePointer?
        try db.check(sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &s, nil), "sqlite3_prepare_v3(query)")
        guard let s else { throw .sqlite(call: "sqlite3_prepare_v3", code: SQLITE_MISUSE, message: "empty statement") }
        statements[sql] = (s, clock)
        return Statement(raw: s, connection: db)
    }

    func finalizeAll() {
        for (_, e) in statements { sqlite3_finalize(e.statement) }
        statements.removeAll()
    }
}

extension Statement {
    func bind(_ i: Int32, _ v: SQLValue) throws(StoreError) {
        switch v {
        case .null: try connection.check(sqlite3_bind_null(raw, i + 1), "sqlite3_bind_null")
        case .int(let x): try bind(i, x)
        case .double(let d): try connection.check(sqlite3_bind_double(raw, i + 1, d), "sqlite3_bind_double")
        case .text(let s): try bind(i, s)
        }
    }

    func value(_ i: Int32) -> SQLValue {
        switch sqlite3_column_type(raw, i) {
        case SQLITE_INTEGER: .int(sqlite3_column_int64(raw, i))
        case SQLITE_FLOAT: .double(sqlite3_column_double(raw, i))
        case SQLITE_TEXT, SQLITE_BLOB: .text(text(i) ?? "")
        default: .null
        }
    }
}
