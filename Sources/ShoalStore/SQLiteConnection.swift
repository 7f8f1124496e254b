import CSQLite

/// One SQLite connection and its prepared statements. The single choke point for SQLite calls:
/// every result code is checked, and an error names the call and carries SQLite's message.
/// Not thread-safe by itself; `DocumentStore` serializes all use under its lock.
final class SQLiteConnection {
    private(set) var handle: OpaquePointer?
    private var statements: [String: OpaquePointer] = [:]
    let path: String

    /// Process-wide settings, made once before the first connection initializes SQLite.
    private static let configured: Bool = { shoal_sqlite_disable_memstatus() == SQLITE_OK }()

    init(path: String, readOnly: Bool = false, vfs: String? = nil) throws(StoreError) {
        _ = SQLiteConnection.configured
        self.path = path
        var db: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, vfs)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            throw .sqlite(call: "sqlite3_open_v2(\(path))", code: rc, message: message)
        }
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, 5000)
        handle = db
    }

    deinit { close() }

    /// Prepared statements of queries (`DocumentStore.query`): their SQL is made from users'
    /// queries, so this cache is bounded (the one above holds only the store's own statements).
    let queryStatements = BoundedStatementCache(capacity: 64)

    func close() {
        queryStatements.finalizeAll()
        for (_, s) in statements { sqlite3_finalize(s) }
        statements.removeAll()
        for case let s? in hot { sqlite3_finalize(s) }
        hot = Array(repeating: nil, count: HotStatement.allCases.count)
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    func check(_ rc: Int32, _ call: @autoclosure () -> String) throws(StoreError) {
        guard rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed"
            throw .sqlite(call: call(), code: rc, message: message)
        }
    }

    /// Runs one or more statements that return no rows.
    func exec(_ sql: String) throws(StoreError) {
        guard let handle else { throw .closed }
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &err)
        if rc != SQLITE_OK {
            let message = err.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(err)
            throw .sqlite(call: "sqlite3_exec(\(sql.prefix(60)))", code: rc, message: message)
        }
    }

    /// A cached prepared statement, reset and with bindings cleared.
    func statement(_ sql: String) throws(StoreError) -> Statement {
        guard let handle else { throw .closed }
        if let s = statements[sql] {
            sqlite3_reset(s)
            sqlite3_clear_bindings(s)
            return Statement(raw: s, connection: self)
        }
        var s: OpaquePointer?
        try check(sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &s, nil), "sqlite3_prepare_v3(\(sql.prefix(60)))")
        guard let s else { throw .sqlite(call: "sqlite3_prepare_v3", code: SQLITE_MISUSE, message: "empty statement") }
        statements[sql] = s
        return Statement(raw: s, connection: self)
    }

    /// The statements run once per document: found by index, not by hashing their SQL text.
    private var hot: [OpaquePointer?] = Array(repeating: nil, count: HotStatement.allCases.count)

    func statement(_ which: HotStatement) throws(StoreError) -> Statement {
        if let s = hot[which.rawValue] {
            sqlite3_reset(s)
            sqlite3_clear_bindings(s)
            return Statement(raw: s, connection: self)
        }
        guard let handle else { throw .closed }
        var s: OpaquePointer?
        try check(sqlite3_prepare_v3(handle, which.sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &s, nil), "sqlite3_prepare_v3(\(which))")
        guard let s else { throw .sqlite(call: "sqlite3_prepare_v3", code: SQLITE_MISUSE, message: "empty statement") }
        hot[which.rawValue] = s
        return Statement(raw: s, connection: self)
    }

    /// Rows of a query as strings (for PRAGMAs and small reads).
    func strings(_ sql: String) throws(StoreError) -> [[String?]] {
        let s = try statement(sql)
        var rows: [[String?]] = []
        while try s.step() {
            rows.append((0..<s.columnCount).map { s.text($0) })
        }
        return rows
    }

    var changes: Int { handle.map { Int(sqlite3_changes($0)) } ?? 0 }

    /// Resets every statement that still holds a row. A statement stepped to a row and left there
    /// keeps its read transaction open until it is reset: in WAL mode that stops every checkpoint
    /// (the WAL grows without bound and the main file never receives a page) and makes another
    /// connection's write fail with SQLITE_BUSY_SNAPSHOT. `DocumentStore` calls this after every
    /// use of the connection, so no read outlives the call that made it.
    /// Returns how many were reset (a test checks the store leaves none).
    @discardableResult
    func releaseReads() -> Int {
        guard let handle else { return 0 }
        var reset = 0
        var next = sqlite3_next_stmt(handle, nil)
        while let s = next {
            if sqlite3_stmt_busy(s) != 0 {
                sqlite3_reset(s)
                reset += 1
            }
            next = sqlite3_next_stmt(handle, s)
        }
        return reset
    }
}

/// A borrowed prepared statement. Columns and parameters are 0-based here (SQLite binds 1-based).
struct Statement {
    let raw: OpaquePointer
    unowned let connection: SQLiteConnection

    func bind(_ i: Int32, _ value: Int64) throws(StoreError) {
        try connection.check(sqlite3_bind_int64(raw, i + 1, value), "sqlite3_bind_int64")
    }
    func bind(_ i: Int32, _ value: String) throws(StoreError) {
        // Its UTF-8 in place, with its length: passing the String itself makes a C-string copy
        // of every small one (ids, names) first. SQLite copies the bytes (transient).
        var text = value
        let rc = text.withUTF8 { p -> Int32 in
            // An empty string still needs a pointer: a NULL one would bind SQL NULL.
            guard let base = p.baseAddress, p.count > 0 else { return sqlite3_bind_text(raw, i + 1, "", 0, shoal_sqlite_transient()) }
            return sqlite3_bind_text(raw, i + 1, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self), Int32(p.count), shoal_sqlite_transient())
        }
        try connection.check(rc, "sqlite3_bind_text")
    }
    func bind(_ i: Int32, _ value: String?) throws(StoreError) {
        if let value { try bind(i, value) } else { try connection.check(sqlite3_bind_null(raw, i + 1), "sqlite3_bind_null") }
    }
    func bind(_ i: Int32, blob: [UInt8]) throws(StoreError) {
        let rc = blob.withUnsafeBytes { p in
            sqlite3_bind_blob(raw, i + 1, p.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(p.count), shoal_sqlite_transient())
        }
        try connection.check(rc, "sqlite3_bind_blob")
    }

    /// Steps once: true if a row is available, false when done.
    func step() throws(StoreError) -> Bool {
        let rc = sqlite3_step(raw)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        let message = String(cString: sqlite3_errmsg(connection.handle))
        sqlite3_reset(raw)
        throw .sqlite(call: "sqlite3_step(\(String(cString: sqlite3_sql(raw)).prefix(60)))", code: rc, message: message)
    }

    func run() throws(StoreError) { while try step() {} }

    var columnCount: Int32 { sqlite3_column_count(raw) }
    func int64(_ i: Int32) -> Int64 { sqlite3_column_int64(raw, i) }
    func isNull(_ i: Int32) -> Bool { sqlite3_column_type(raw, i) == SQLITE_NULL }
    func text(_ i: Int32) -> String? {
        guard let p = sqlite3_column_text(raw, i) else { return nil }
        return String(cString: p)
    }
    /// A BLOB column's bytes without copying them (valid only inside `body`).
    func withBlob<T>(_ i: Int32, _ body: (UnsafeRawBufferPointer) -> T) -> T {
        let n = Int(sqlite3_column_bytes(raw, i))
        return body(UnsafeRawBufferPointer(start: n > 0 ? sqlite3_column_blob(raw, i) : nil, count: n))
    }
    func blob(_ i: Int32) -> [UInt8] {
        let n = Int(sqlite3_column_bytes(raw, i))
        guard n > 0, let p = sqlite3_column_blob(raw, i) else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: n))
    }
}

/// The SQLite library this binary is linked against.
public enum SQLiteLibrary {
    public static var version: String { String(cString: sqlite3_libversion()) }
}

/// The per-document statements (see `SQLiteConnection.statement(_: HotStatement)`).
enum HotStatement: Int, CaseIterable {
    case upsert, insertIfAbsent, version, get

    var sql: String {
        switch self {
        case .upsert: DocumentStore.upsertSQL
        case .insertIfAbsent: """
            INSERT INTO documents(collection_id, doc_id, body, deleted, revision, version, sequence, updated_at, written_at, body_bytes)
            VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, ?9) ON CONFLICT(collection_id, doc_id) DO NOTHING
            """
        case .version: "SELECT version, deleted FROM documents WHERE collection_id = ? AND doc_id = ?"
        case .get: "SELECT body, revision, version, sequence, updated_at, deleted FROM documents WHERE collection_id = ? AND doc_id = ?"
        }
    }
}
