import CSQLite
import Glibc
import ShoalCore

/// What one online backup wrote.
public struct BackupReport: Sendable, Equatable {
    public let path: String
    public let bytes: Int64
    public let pages: Int32
    public let steps: Int
    public let seconds: Double
    /// The store's last sequence the backup holds (every change up to it, none after).
    public let lastSequence: Int64
    public var megabytesPerSecond: Double { seconds > 0 ? Double(bytes) / 1_000_000 / seconds : 0 }
}

extension DocumentStore {
    /// The meta key that says which group the store belongs to (written by the runtime at open;
    /// `StoreRestore` refuses a backup from another group).
    public static let groupKey = "group"

    /// Copies the store to `path` while it stays open for writes, through SQLite's online backup API.
    ///
    /// The design: the backup's source is the store's OWN connection, and each step copies at most
    /// `pagesPerStep` pages under the store's lock, which is released between steps so writers go on.
    /// A write through the same connection updates the pages already copied (SQLite does this for a
    /// backup whose source connection writes), so the backup never restarts and finishes under any
    /// steady write load; a backup through a second connection would restart after each write and
    /// might never finish. Steps only run between transactions (every write holds the lock for its
    /// whole transaction), so the file is the store as of the last step: a committed state.
    ///
    /// Written to `path.tmp` (mode 0600), fsynced, then renamed over `path`; the directory is
    /// fsynced too. A failure removes the temporary file and leaves `path` as it was.
    public func backup(to path: String, pagesPerStep: Int32 = 256) throws(StoreError) -> BackupReport {
        precondition(pagesPerStep > 0)
        let start = ContinuousClock.now
        let tmp = path + ".tmp"
        for suffix in ["", "-journal", "-wal", "-shm"] { unlink(tmp + suffix) }
        let fd = Glibc.open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Self.systemError("open(\(tmp))") }
        Glibc.close(fd)
        var done = false
        defer { if !done { for suffix in ["", "-journal"] { unlink(tmp + suffix) } } }
        let (pages, steps, last) = try copy(into: tmp, pagesPerStep: pagesPerStep)
        try Self.stampBackupTime(tmp)
        try Self.syncFile(tmp)
        guard rename(tmp, path) == 0 else { throw Self.systemError("rename(\(tmp), \(path))") }
        done = true
        Self.syncDirectory(of: path)
        var st = stat()
        let bytes = stat(path, &st) == 0 ? Int64(st.st_size) : 0
        return BackupReport(path: path, bytes: bytes, pages: pages, steps: steps,
                            seconds: (ContinuousClock.now - start).secondsDouble, lastSequence: last)
    }

    /// The backup's steps; returns the page count, the number of steps and the last sequence held.
    private func copy(into tmp: String, pagesPerStep: Int32) throws(StoreError) -> (Int32, Int, Int64) {
        let dest = try SQLiteConnection(path: tmp)
        defer { dest.close() }
        // The copy stays in rollback-journal mode while it is written; its header (copied from the
        // store) says WAL, so the restored file opens in WAL mode like the store.
        let backup: OpaquePointer = try locked { db throws(StoreError) in
            guard let b = sqlite3_backup_init(dest.handle, "main", db.handle, "main") else {
                let message = dest.handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed"
                throw .sqlite(call: "sqlite3_backup_init(\(tmp))", code: dest.handle.map { sqlite3_errcode($0) } ?? SQLITE_ERROR, message: message)
            }
            return b
        }
        var steps = 0, busy = 0
        var finished = false
        defer {
            // Always under the lock: the source connection's writers touch the backup object.
            if !finished { lock.withLock { _ = sqlite3_backup_finish(backup) } }
        }
        while true {
            // The last sequence is read in the same locked section as the step that completes the
            // copy: nothing can commit between them.
            let (rc, last) = try locked { _ throws(StoreError) in (sqlite3_backup_step(backup, pagesPerStep), lastSequenceValue) }
            steps += 1
            if rc == SQLITE_DONE {
                let pages = lock.withLock { sqlite3_backup_pagecount(backup) }
                finished = true
                let finish = lock.withLock { sqlite3_backup_finish(backup) }
                try dest.check(finish, "sqlite3_backup_finish(\(tmp))")
                return (pages, steps, last)
            }
            if rc == SQLITE_BUSY || rc == SQLITE_LOCKED {
                busy += 1
                guard busy < 500 else { throw .sqlite(call: "sqlite3_backup_step(\(tmp))", code: rc, message: "the store stayed busy for 5 s") }
                usleep(10_000)
                continue
            }
            guard rc == SQLITE_OK else {
                let message = dest.handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed"
                throw .sqlite(call: "sqlite3_backup_step(\(tmp))", code: rc, message: message)
            }
            // Let a waiting writer take the lock before the next step (the mutex is not fair).
            usleep(50)
        }
    }

    /// The meta key a backup carries: when it was taken (unix ms). `shoal restore` refuses a backup
    /// older than the mesh's tombstone retention: deletions the peers made since may be purged.
    public static let backupTakenKey = "backupTakenAtMillis"

    static func stampBackupTime(_ path: String) throws(StoreError) {
        let db = try SQLiteConnection(path: path)
        defer { db.close() }
        let s = try db.statement("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)")
        try s.bind(0, backupTakenKey)
        try s.bind(1, String(nowMillis()))
        try s.run()
    }

    static func systemError(_ call: String) -> StoreError {
        .sqlite(call: call, code: SQLITE_IOERR, message: String(cString: strerror(errno)))
    }

    static func syncFile(_ path: String) throws(StoreError) {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw systemError("open(\(path))") }
        defer { Glibc.close(fd) }
        guard fsync(fd) == 0 else { throw systemError("fsync(\(path))") }
    }

    /// Best effort: makes a rename in the directory durable.
    static func syncDirectory(of path: String) {
        let dir = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let fd = Glibc.open(dir.isEmpty ? "/" : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        Glibc.close(fd)
    }
}
