import CSQLite
import Glibc
import ShoalCore
@testable import ShoalStore
import ShoalTesting
import ShoalThreads
import Testing

@Suite("Store backup and restore")
struct BackupTests {
    static let pad = String(repeating: "x", count: 900)
    static let group = "test.backup"

    /// Batch k writes documents b<k>-0…4 and sets "counter" to k, all in one transaction.
    static func writeBatch(_ store: DocumentStore, _ k: Int) throws {
        var writes = (0..<5).map { i in
            DocumentWrite(collection: readings, id: id("b\(k)-\(i)"), body: #"{"batch":\#(k),"i":\#(i),"pad":"\#(pad)"}"#)
        }
        writes.append(DocumentWrite(collection: readings, id: id("counter"), body: #"{"batch":\#(k)}"#))
        _ = try store.write(writes)
    }

    static func counter(_ store: DocumentStore) throws -> Int {
        guard let body = try store.get(readings, id: id("counter"))?.body else { return -1 }
        return Int(body.split(separator: ":").last!.dropLast())!
    }

    @Test("a backup taken while another thread writes opens, passes integrity_check and holds a committed prefix: every batch up to its counter, none after")
    func backupUnderConcurrentWrites() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db"), durability: .normal), logger: quietLogger)
        defer { store.close() }
        _ = try store.createCollection(readings)
        for k in 0..<400 { try Self.writeBatch(store, k) }   // ~2.4 MB: hundreds of 8-page steps
        let stop = Locked(false)
        let written = Locked(400)
        let writerThread = BlockingThread(name: "writer"), backupThread = BlockingThread(name: "backup")
        defer { writerThread.shutdown(); backupThread.shutdown() }
        let writer = Task {
            try await writerThread.run {
                while !stop.withLock({ $0 }) {
                    let k = written.withLock { $0 }
                    try Self.writeBatch(store, k)
                    written.withLock { $0 = k + 1 }
                }
            }
        }
        // Let the writer get going, then back up with small steps so writes land between them.
        while written.withLock({ $0 }) < 420 { try await Task.sleep(for: .milliseconds(5)) }
        let before = store.lastSequence
        let writtenBefore = written.withLock { $0 }
        let report = try await backupThread.run { try store.backup(to: dir.file("backup.db"), pagesPerStep: 8) }
        let after = store.lastSequence
        let writtenDuring = written.withLock { $0 } - writtenBefore
        stop.withLock { $0 = true }
        try await writer.value
        #expect(report.steps > 10, "steps: \(report.steps)")
        #expect(writtenDuring > 0, "no batch was written while the backup ran: writers were stopped")
        #expect(report.lastSequence >= before && report.lastSequence <= after)
        var st = stat()
        #expect(stat(dir.file("backup.db"), &st) == 0 && st.st_mode & 0o777 == 0o600)
        #expect(access(dir.file("backup.db.tmp"), F_OK) != 0)

        let copy = try DocumentStore.open(StoreOptions(path: dir.file("backup.db")), logger: quietLogger)
        defer { copy.close() }
        #expect(try copy.integrityProblems(full: true).isEmpty)
        #expect(copy.lastSequence == report.lastSequence)
        let k = try Self.counter(copy)
        #expect(k >= writtenBefore - 1)
        // Batches 0…k whole, nothing of k+1 on: the state at one commit.
        for b in 0...k {
            for i in 0..<5 { #expect(try copy.get(readings, id: id("b\(b)-\(i)"))?.body?.contains(#""batch":\#(b),"i":\#(i)"#) == true) }
        }
        #expect(try copy.get(readings, id: id("b\(k + 1)-0")) == nil)
        #expect(try copy.count(readings) == Int64((k + 1) * 5 + 1))
    }

    /// A store of `group` with a few documents (one deleted), closed.
    static func makeBackup(in dir: TemporaryDirectory, group: String = BackupTests.group) throws -> String {
        let store = try DocumentStore.open(StoreOptions(path: dir.file("source.db")), logger: quietLogger)
        _ = try store.createCollection(readings)
        try store.setMetadata(DocumentStore.groupKey, group)
        _ = try store.put(readings, id: id("kept"), body: #"{"v":1}"#)
        _ = try store.put(readings, id: id("gone"), body: #"{"v":1}"#)
        _ = try store.delete(readings, id: id("gone"))
        let report = try store.backup(to: dir.file("backup-\(group).db"))
        store.close()
        return report.path
    }

    /// The current store of a "gateway": one document, so an untouched store is recognisable.
    static func makeCurrent(in dir: TemporaryDirectory) throws -> (path: String, epoch: UInt64) {
        let store = try DocumentStore.open(StoreOptions(path: dir.file("data/shoal.db")), logger: quietLogger)
        _ = try store.createCollection(readings)
        _ = try store.put(readings, id: id("current"), body: #"{"v":2}"#)
        let epoch = store.epoch
        store.close()
        return (dir.file("data/shoal.db"), epoch)
    }

    static func currentUntouched(_ path: String) throws -> Bool {
        let store = try DocumentStore.open(StoreOptions(path: path), logger: quietLogger)
        defer { store.close() }
        return try store.get(readings, id: id("current"))?.body == #"{"v":2}"#
    }

    @Test("a restore installs the backup, keeps the old store aside, and the next open takes a new store epoch")
    func restoreInstallsWithNewEpoch() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        mkdir(dir.file("data"), 0o755)
        let backup = try Self.makeBackup(in: dir)
        let source = try DocumentStore.open(StoreOptions(path: dir.file("source.db")), logger: quietLogger)
        let backupEpoch = source.epoch
        source.close()
        let (current, currentEpoch) = try Self.makeCurrent(in: dir)
        let report = try StoreRestore.restore(backup: backup, storePath: current, group: Self.group)
        #expect(report.documents == 2 && report.recordedGroup == Self.group)
        let aside = try #require(report.movedAsideTo)
        #expect(try Self.currentUntouched(aside))
        let restored = try DocumentStore.open(StoreOptions(path: current), logger: quietLogger)
        defer { restored.close() }
        #expect(restored.epoch != backupEpoch && restored.epoch != currentEpoch)
        #expect(try restored.get(readings, id: id("kept"))?.body == #"{"v":1}"#)
        #expect(try restored.get(readings, id: id("gone"))?.isDeleted == true)
        #expect(try restored.get(readings, id: id("current")) == nil)
        #expect(try restored.metadata(DocumentStore.groupKey) == Self.group)
    }

    @Test("a backup older than the mesh's tombstone retention is refused (deletions since may be purged everywhere); --force restores it")
    func oldBackupRefusedUnlessForced() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        mkdir(dir.file("data"), 0o755)
        let backup = try Self.makeBackup(in: dir)
        let (current, _) = try Self.makeCurrent(in: dir)
        // A retention of -1 s: the backup, taken a moment ago, is already older than it.
        var message = ""
        do { _ = try StoreRestore.restore(backup: backup, storePath: current, group: Self.group, maxAgeSeconds: -1) } catch { message = error.message }
        #expect(message.contains("tombstone retention") && message.contains("--force"), "\(message)")
        #expect(try Self.currentUntouched(current))
        let fresh = try StoreRestore.restore(backup: backup, storePath: current, group: Self.group, maxAgeSeconds: 3600)
        #expect(fresh.documents == 2)
        let forced = try StoreRestore.restore(backup: backup, storePath: current, group: Self.group, maxAgeSeconds: -1, force: true)
        #expect(forced.documents == 2)
    }

    /// Restores `backup` over a fresh current store; the refusal's message, and whether the current
    /// store is still there as it was (and nothing was left beside it).
    static func refused(_ makeBad: (TemporaryDirectory) throws -> String) throws -> (String, Bool) {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        mkdir(dir.file("data"), 0o755)
        let bad = try makeBad(dir)
        let (current, _) = try makeCurrent(in: dir)
        var message = ""
        do {
            _ = try StoreRestore.restore(backup: bad, storePath: current, group: Self.group)
        } catch {
            message = error.message
        }
        let left = try Glibc.opendir(dir.file("data")).map { d -> [String] in
            defer { closedir(d) }
            var names: [String] = []
            while let e = readdir(d) {
                let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
                if name != "." && name != ".." { names.append(name) }
            }
            return names
        } ?? []
        let clean = left.allSatisfy { $0.hasPrefix("shoal.db") && !$0.contains("restor") }
        return (message, try currentUntouched(current) && clean)
    }

    @Test("a truncated backup is refused with the reason and the current store is untouched")
    func truncatedRefused() throws {
        let (message, untouched) = try Self.refused { dir in
            let path = try Self.makeBackup(in: dir)
            var st = stat()
            stat(path, &st)
            truncate(path, st.st_size - 4096)
            return path
        }
        #expect(message.contains("truncated"), "\(message)")
        #expect(untouched)
    }

    @Test("a file that is not a database is refused")
    func notADatabaseRefused() throws {
        let (message, untouched) = try Self.refused { dir in
            let path = dir.file("notes.txt")
            let fd = open(path, O_WRONLY | O_CREAT, 0o600)
            let text = Array(String(repeating: "not a database\n", count: 500).utf8)
            _ = text.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
            return path
        }
        #expect(message.contains("not a SQLite database"), "\(message)")
        #expect(untouched)
    }

    @Test("a backup from another group is refused, naming both groups")
    func otherGroupRefused() throws {
        let (message, untouched) = try Self.refused { dir in try Self.makeBackup(in: dir, group: "someone.else") }
        #expect(message.contains("\"someone.else\"") && message.contains("\"\(Self.group)\""), "\(message)")
        #expect(untouched)
    }

    @Test("a backup with a newer schema than this shoal is refused")
    func newerSchemaRefused() throws {
        let (message, untouched) = try Self.refused { dir in
            let path = try Self.makeBackup(in: dir)
            let db = try SQLiteConnection(path: path)
            try db.exec("PRAGMA user_version=\(Schema.latestVersion + 1)")
            db.close()
            return path
        }
        #expect(message.contains("schema version \(Schema.latestVersion + 1), newer"), "\(message)")
        #expect(untouched)
    }

    @Test("a SQLite database that is not a Shoal store, and a damaged page, are refused")
    func foreignAndCorruptRefused() throws {
        let (foreign, untouched) = try Self.refused { dir in
            let path = dir.file("other.db")
            let db = try SQLiteConnection(path: path)
            try db.exec("CREATE TABLE t(x); INSERT INTO t VALUES (1); PRAGMA user_version=3")
            db.close()
            return path
        }
        #expect(foreign.contains("not a Shoal store"), "\(foreign)")
        #expect(untouched)
        let (corrupt, untouched2) = try Self.refused { dir in
            let path = try Self.makeBackup(in: dir)
            // Scribble over every page after the first (the header stays whole) and keep the length.
            var st = stat()
            stat(path, &st)
            let fd = open(path, O_WRONLY)
            let junk = [UInt8](repeating: 0xA5, count: Int(st.st_size) - 4096)
            _ = junk.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 4096) }
            close(fd)
            return path
        }
        #expect(corrupt.contains("integrity") || corrupt.contains("cannot be read"), "\(corrupt)")
        #expect(untouched2)
    }
}
