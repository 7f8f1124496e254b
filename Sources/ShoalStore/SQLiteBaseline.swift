import CSQLite
import ShoalCore

/// The bare SQLite C API doing what `DocumentStore.write` does (the same statement, pragmas and
/// transaction size): the baseline of `shoal bench store`, kept here because this module is the
/// one importer of SQLite. The benchmark itself lives in ShoalBench.
public enum SQLiteBaseline {
    /// The same rows through the bare C API: prepare once, bind, step, reset; BEGIN/COMMIT per batch.
    public static func write(path: String, ids: [DocumentID], bodies: [String], batch: Int, durability: Durability) throws -> Double {
        // The same file setup as the store: pragmas, then the schema, on this connection.
        let db = try SQLiteConnection(path: path)
        defer { db.close() }
        try db.exec("PRAGMA journal_mode=WAL")
        try db.exec("PRAGMA synchronous=\(durability == .full ? "FULL" : "NORMAL")")
        try db.exec("PRAGMA foreign_keys=ON")
        for migration in Schema.migrations { try db.exec(migration.sql) }
        var stmt: OpaquePointer?
        try db.check(sqlite3_prepare_v3(db.handle, DocumentStore.upsertSQL, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil), "prepare")
        defer { sqlite3_finalize(stmt) }
        let start = ContinuousClock.now
        var i = 0
        var sequence: Int64 = 0
        while i < ids.count {
            let end = min(i + batch, ids.count)
            try db.exec("BEGIN IMMEDIATE")
            for j in i..<end {
                sequence += 1
                sqlite3_bind_int64(stmt, 1, 1)
                sqlite3_bind_text(stmt, 2, ids[j].rawValue, -1, shoal_sqlite_transient())
                sqlite3_bind_text(stmt, 3, bodies[j], -1, shoal_sqlite_transient())
                sqlite3_bind_int64(stmt, 4, 0)
                sqlite3_bind_blob(stmt, 5, UnsafeRawPointer(bitPattern: 1), 0, shoal_sqlite_transient())
                sqlite3_bind_int64(stmt, 6, sequence)
                sqlite3_bind_int64(stmt, 7, 0)
                sqlite3_bind_int64(stmt, 8, 0)  // written_at and body_bytes (schema 8), as the store binds them
                sqlite3_bind_int64(stmt, 9, Int64(bodies[j].utf8.count))
                var rc = sqlite3_step(stmt)
                while rc == SQLITE_ROW { rc = sqlite3_step(stmt) }
                try db.check(rc, "step")
                sqlite3_reset(stmt)
            }
            try db.exec("COMMIT")
            i = end
        }
        return Double(ids.count) / (ContinuousClock.now - start).secondsDouble
    }
}
