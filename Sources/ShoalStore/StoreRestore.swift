import CSQLite
import Glibc
import ShoalCore

/// Why a backup was not restored. The current store is untouched whenever this is thrown.
public struct RestoreRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// Installs a backup (`DocumentStore.backup`) as the store of a STOPPED gateway; the caller holds
/// the data directory's lock. What a reader would get wrong: the restored store must not keep the
/// backup's store epoch. Its sequences restart below what peers already pulled from this gateway,
/// so under the old epoch peers would skip the writes made after the restore; a new epoch (made at
/// the next open, as for a new store) tells them to compare everything again. Deletes stay deleted:
/// the backup's tombstones and the peers' tombstones (which win over the older live versions the
/// backup holds) come back through replication.
public enum StoreRestore {
    public struct Report: Sendable {
        public let backup: String
        public let storePath: String
        /// Where the store that was there went (nil when there was none).
        public let movedAsideTo: String?
        public let schemaVersion: Int
        public let documents: Int64
        public let lastSequence: Int64
        /// The group the backup recorded; nil for a store from a shoal that did not record it.
        public let recordedGroup: String?
    }

    static let requiredTables: Set<String> = ["meta", "collections", "documents", "checkpoints"]

    /// Checks `backup` (a SQLite file that is whole, passes integrity_check, is a Shoal store of a
    /// schema this shoal knows, of `group`), then moves the current store aside and installs it.
    /// `maxAgeSeconds`: the mesh's tombstone retention; a backup taken longer ago than that is
    /// refused unless `force` (a deletion the peers made since may be purged everywhere, and the
    /// backup's copy would come back). A backup that carries no time is aged by its last write.
    public static func restore(backup: String, storePath: String, group: String,
                               maxAgeSeconds: Int64? = nil, force: Bool = false) throws(RestoreRefusal) -> Report {
        try checkHeader(backup)
        let staging = storePath + ".restoring"
        for suffix in ["", "-journal", "-wal", "-shm"] { unlink(staging + suffix) }
        var installed = false
        defer { if !installed { for suffix in ["", "-journal", "-wal", "-shm"] { unlink(staging + suffix) } } }
        try copyFile(backup, to: staging)
        let (version, documents, last, recorded) = try check(staging, backup: backup, group: group)
        if let maxAgeSeconds, !force, let taken = try takenAtMillis(staging, backup: backup) {
            let age = (DocumentStore.nowMillis() - taken) / 1000
            if age > maxAgeSeconds {
                throw refusal("backup \(backup) is \(age / 3600) h \(age % 3600 / 60) min old, older than the mesh's tombstone retention (txLogMaxAgeSeconds \(maxAgeSeconds)): documents deleted since may have no tombstone left anywhere and would come back; restore a newer backup, or pass --force to restore it anyway; nothing was changed")
            }
        }
        // The store epoch is dropped (the next open makes a new one) and the group recorded.
        try prepare(staging, group: group)
        let moved = try moveCurrentAside(storePath)
        guard rename(staging, storePath) == 0 else {
            throw refusal("cannot install \(staging) as \(storePath): \(String(cString: strerror(errno)))\(moved.map { "; the store that was there is at \($0)" } ?? "")")
        }
        installed = true
        DocumentStore.syncDirectory(of: storePath)
        return Report(backup: backup, storePath: storePath, movedAsideTo: moved, schemaVersion: version,
                      documents: documents, lastSequence: last, recordedGroup: recorded)
    }

    static func refusal(_ message: String) -> RestoreRefusal { RestoreRefusal(message: message) }

    /// When the backup was taken (its stamp), else its newest write; nil for an empty store.
    static func takenAtMillis(_ staging: String, backup: String) throws(RestoreRefusal) -> Int64? {
        do {
            let db = try SQLiteConnection(path: staging)
            defer { db.close() }
            let s = try db.statement("SELECT value FROM meta WHERE key = ?")
            try s.bind(0, DocumentStore.backupTakenKey)
            let stamp = try s.step() ? s.text(0).flatMap { Int64($0) } : nil
            try s.run()
            if let stamp { return stamp }
            let newest = try db.strings("SELECT MAX(updated_at) FROM documents").first?.first ?? nil
            return newest.flatMap { Int64($0) }
        } catch {
            throw refusal("backup \(backup) cannot be read as a store: \(error); nothing was changed")
        }
    }

    /// The first 100 bytes: SQLite's magic, and a file as long as its header says (a truncated
    /// copy is named as such, before SQLite reads a page of it).
    static func checkHeader(_ path: String) throws(RestoreRefusal) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw refusal("cannot open backup \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { throw refusal("backup \(path) is not a regular file") }
        var header = [UInt8](repeating: 0, count: 100)
        let n = header.withUnsafeMutableBytes { read(fd, $0.baseAddress, 100) }
        guard n == 100, Array(header[0..<16]) == Array("SQLite format 3\0".utf8) else {
            throw refusal("backup \(path) is not a SQLite database (\(st.st_size) bytes, no SQLite header); nothing was changed")
        }
        let rawPageSize = Int(header[16]) << 8 | Int(header[17])
        let pageSize = rawPageSize == 1 ? 65536 : rawPageSize
        func be32(_ at: Int) -> Int { header[at..<at + 4].reduce(0) { $0 << 8 | Int($1) } }
        let pageCount = be32(28)
        // The in-header size is valid only when the change counter matches "version valid for".
        if pageCount > 0 && be32(24) == be32(92) && Int(st.st_size) < pageCount * pageSize {
            throw refusal("backup \(path) is truncated: its header says \(pageCount * pageSize) bytes (\(pageCount) pages of \(pageSize)), the file has \(st.st_size); nothing was changed")
        }
    }

    static func copyFile(_ from: String, to: String) throws(RestoreRefusal) {
        let src = open(from, O_RDONLY | O_CLOEXEC)
        guard src >= 0 else { throw refusal("cannot open backup \(from): \(String(cString: strerror(errno)))") }
        defer { close(src) }
        let dst = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard dst >= 0 else { throw refusal("cannot create \(to): \(String(cString: strerror(errno)))") }
        defer { close(dst) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(src, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw refusal("cannot read backup \(from): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            var done = 0
            while done < n {
                let w = buffer.withUnsafeBytes { write(dst, $0.baseAddress! + done, n - done) }
                if w < 0 && errno == EINTR { continue }
                guard w > 0 else { throw refusal("cannot write \(to): \(String(cString: strerror(errno)))") }
                done += w
            }
        }
        guard fsync(dst) == 0 else { throw refusal("cannot fsync \(to): \(String(cString: strerror(errno)))") }
    }

    /// Integrity, schema version, that it is a Shoal store, and the group.
    static func check(_ staging: String, backup: String, group: String) throws(RestoreRefusal) -> (Int, Int64, Int64, String?) {
        do {
            let db = try SQLiteConnection(path: staging)
            defer { db.close() }
            let integrity = try db.strings("PRAGMA integrity_check(20)").compactMap { $0.first ?? nil }
            guard integrity == ["ok"] else {
                throw refusal("backup \(backup) fails SQLite's integrity check: \(integrity.prefix(3).joined(separator: "; ")); nothing was changed")
            }
            let version = Int(try db.strings("PRAGMA user_version").first?.first??.description ?? "0") ?? 0
            guard version <= Schema.latestVersion else {
                throw refusal("backup \(backup) has schema version \(version), newer than this shoal supports (\(Schema.latestVersion)); restore it with a newer shoal; nothing was changed")
            }
            let tables = Set(try db.strings("SELECT name FROM sqlite_master WHERE type = 'table'").compactMap { $0.first ?? nil })
            let missing = requiredTables.subtracting(tables)
            guard version >= 1, missing.isEmpty else {
                throw refusal("backup \(backup) is a SQLite database but not a Shoal store (no \(missing.sorted().joined(separator: ", ")) table\(missing.count == 1 ? "" : "s")); nothing was changed")
            }
            let s = try db.statement("SELECT value FROM meta WHERE key = ?")
            try s.bind(0, DocumentStore.groupKey)
            let recorded = try s.step() ? s.text(0) : nil
            try s.run()
            if let recorded, recorded != group {
                throw refusal("backup \(backup) is from group \"\(recorded)\", this gateway is in group \"\(group)\"; a store holds one group's documents and trust, so it is refused; nothing was changed")
            }
            let counts = try db.strings("SELECT COUNT(*), COALESCE(MAX(sequence), 0) FROM documents")
            let documents = Int64(counts.first?[0] ?? "0") ?? 0
            let last = Int64(counts.first?[1] ?? "0") ?? 0
            return (version, documents, last, recorded)
        } catch let e as RestoreRefusal {
            throw e
        } catch {
            throw refusal("backup \(backup) cannot be read as a store: \(error); nothing was changed")
        }
    }

    /// Drops the backup's store epoch (and its "open" mark) and records the group.
    static func prepare(_ staging: String, group: String) throws(RestoreRefusal) {
        do {
            let db = try SQLiteConnection(path: staging)
            defer { db.close() }
            try db.exec("BEGIN IMMEDIATE")
            let drop = try db.statement("DELETE FROM meta WHERE key IN (?, ?)")
            try drop.bind(0, DocumentStore.epochKey)
            try drop.bind(1, DocumentStore.openKey)
            try drop.run()
            let set = try db.statement("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
            try set.bind(0, DocumentStore.groupKey)
            try set.bind(1, group)
            try set.run()
            try db.exec("COMMIT")
            try db.exec("PRAGMA wal_checkpoint(TRUNCATE)")
        } catch {
            throw refusal("cannot prepare the restored copy \(staging): \(error); nothing was changed")
        }
    }

    /// Renames the store (and its -wal and -shm) to `<store>.before-restore-<unix time>`.
    static func moveCurrentAside(_ storePath: String) throws(RestoreRefusal) -> String? {
        guard access(storePath, F_OK) == 0 else { return nil }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var target = "\(storePath).before-restore-\(now.tv_sec)"
        var n = 1
        while access(target, F_OK) == 0 { target = "\(storePath).before-restore-\(now.tv_sec)-\(n)"; n += 1 }
        for suffix in ["", "-wal", "-shm"] where access(storePath + suffix, F_OK) == 0 {
            guard rename(storePath + suffix, target + suffix) == 0 else {
                throw refusal("cannot move the current store \(storePath + suffix) aside: \(String(cString: strerror(errno)))")
            }
        }
        return target
    }
}
