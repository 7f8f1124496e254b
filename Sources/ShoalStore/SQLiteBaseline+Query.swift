import CSQLite
import ShoalCore

extension SQLiteBaseline {
    /// The statement `DocumentStore.query` runs for `query`, prepared once on a connection of its
    /// own and run `iterations` times through the bare C API (bind, step every row, read the
    /// id, time and body columns, reset): the baseline of `shoal bench query`.
    public static func query(path: String, collection: CollectionName, query: Query, minSeconds: Double) throws -> (queriesPerSecond: Double, rows: Int) {
        let db = try SQLiteConnection(path: path)
        defer { db.close() }
        let c = try db.statement("SELECT id FROM collections WHERE scope = ? AND name = ?")
        try c.bind(0, collection.scope)
        try c.bind(1, collection.name)
        guard try c.step() else { throw StoreError.unknownCollection(collection.description) }
        let cid = c.int64(0)
        try c.run()
        var compiler = QueryCompiler(collectionID: cid)
        let compiled = try compiler.compile(query)
        var stmt: OpaquePointer?
        try db.check(sqlite3_prepare_v3(db.handle, compiled.sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil), "prepare")
        defer { sqlite3_finalize(stmt) }
        let start = ContinuousClock.now
        var runs = 0, rows = 0, bytes = 0
        repeat {
            for (i, v) in compiled.bindings.enumerated() {
                let p = Int32(i + 1)
                switch v {
                case .null: sqlite3_bind_null(stmt, p)
                case .int(let x): sqlite3_bind_int64(stmt, p, x)
                case .double(let d): sqlite3_bind_double(stmt, p, d)
                case .text(let s): sqlite3_bind_text(stmt, p, s, -1, shoal_sqlite_transient())
                }
            }
            rows = 0
            var rc = sqlite3_step(stmt)
            while rc == SQLITE_ROW {
                _ = sqlite3_column_text(stmt, 0)
                _ = sqlite3_column_int64(stmt, 1)
                _ = sqlite3_column_text(stmt, 2)
                bytes &+= Int(sqlite3_column_bytes(stmt, 2))
                rows += 1
                rc = sqlite3_step(stmt)
            }
            try db.check(rc, "step")
            sqlite3_reset(stmt)
            runs += 1
        } while (ContinuousClock.now - start).secondsDouble < minSeconds || runs < 3
        return (Double(runs) / (ContinuousClock.now - start).secondsDouble, rows)
    }
}
