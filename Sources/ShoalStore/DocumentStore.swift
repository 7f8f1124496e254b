import CSQLite
import Glibc
import ShoalCore
import ShoalThreads

/// The gateway's document store over one SQLite file in WAL mode.
///
/// Every method blocks and is serialized by one lock; call it from a `BlockingThread` or another
/// thread of your own, never from Swift's cooperative pool. What a reader gets wrong: `revision`
/// counts writes made through this store and is local; `sequence` orders the change feed and is
/// local too; only `version` (written by the replicator) means anything to other gateways.
public final class DocumentStore: @unchecked Sendable {  // a SQLite connection, every use under its lock
    public let options: StoreOptions
    public let openReport: OpenReport
    let lock = ConditionLock()  // internal: DocumentStore+Backup.swift steps a backup under it
    private var db: SQLiteConnection?
    var lastSequenceValue: Int64 = 0  // internal: read under the lock by DocumentStore+Backup.swift
    var collectionIDs: [CollectionName: Int64] = [:] { didSet { listCollections() } }  // (init calls it itself)
    /// `collectionIDs` as a list while there are few: comparing a handful of short names costs
    /// less than hashing one (every document write and replicated document looks its id up).
    private var collectionList: [(name: CollectionName, id: Int64)] = []
    /// What `lastSequence`, `collections()` and `stats()` read without the store's lock: copied
    /// under it at each change, so a commit held up by the disk (an SD card's fsync, or a stall
    /// of seconds) never holds up `shoal status`, the LED or the mesh's keepalives.
    let summary = Locked(Summary())
    struct Summary {
        var open = true
        var lastSequence: Int64 = 0
        var collections: [CollectionName] = []
        var collectionCount = 0
    }
    /// A read-only connection of its own for the status figures (`stats`, `blobStats`): in WAL
    /// mode it reads the last commit while a writer waits on the disk. Opened on first use.
    private let readLock = ConditionLock()
    private var reader: SQLiteConnection?
    private var readerClosed = false
    /// Group commit (see `transaction`): the bodies waiting, and whether a leader commits now.
    private let commitLock = ConditionLock()
    private var commitQueue: [CommitTicket] = []
    private var committing = false
    /// Transactions committed and how many bodies shared one (`transaction`'s group commit).
    public let commitCounts = Locked(CommitCounts())
    let logger: Logger  // internal: DocumentStore+Blobs.swift logs a blob it drops
    /// What expiration did since the process started (see DocumentStore+Expiry).
    public let expiryCounts = Locked(ExpiryCounts())
    /// What blob garbage collection did since the process started (see DocumentStore+Blobs).
    public let blobCounts = Locked(BlobGCCounts())
    /// False while no document refers to a blob: a write then skips clearing references (read
    /// under the lock; set when a reference is written, never cleared while open).
    var blobReferencesMayExist = false
    /// False while `purged_documents` is empty: a document arriving from a peer then needs no
    /// lookup there (same rules as above: under the lock; set by a purge, never cleared while open).
    var purgeRecordsMayExist = false

    /// Opens (or creates) the store. A file that is corrupt, or not a database, is moved aside to
    /// `<path>.corrupt-<unix time>` (with its -wal and -shm) and the store starts empty: the mesh
    /// refills it. It is never silently reused. A store from a newer shoal is refused.
    public static func open(_ options: StoreOptions, logger: Logger) throws(StoreError) -> DocumentStore {
        let store: DocumentStore
        do {
            store = try DocumentStore(options: options, logger: logger, report: nil)
        } catch let error where error.isCorruption {
            let moved = try moveAside(options.path, logger: logger, reason: error.description)
            let report = OpenReport(schemaVersionFound: 0, schemaVersion: Schema.latestVersion, movedAsideTo: moved, reason: error.description)
            store = try DocumentStore(options: options, logger: logger, report: report)
        }
        try store.beginEpoch()
        return store
    }

    /// Which life of this store's sequence numbers peers' checkpoints refer to (never 0). A new
    /// store gets a new epoch, and so does a store with durability normal that was not closed
    /// cleanly: its last commits may be gone, so sequences peers already saw may be reused.
    public private(set) var epoch: UInt64 = 0
    static let epochKey = "storeEpoch", openKey = "openUncleanly"

    private func beginEpoch() throws(StoreError) {
        let found = try metadata(Self.epochKey).flatMap { UInt64($0, radix: 16) }
        let unclean = try metadata(Self.openKey) == "1"
        var e = found ?? 0
        if e == 0 || (unclean && options.durability == .normal) {
            repeat { e = UInt64.random(in: 1...UInt64.max) } while e == found
            if found != nil {
                logger.warning(.store, "store \(options.path) was not closed cleanly with durability normal: its last commits may be lost, so peers will compare everything it holds again (new store epoch)")
            }
            try setMetadata(Self.epochKey, String(e, radix: 16))
        }
        epoch = e
        // Durable at once (synchronous FULL for this commit): if it were lost with a power cut, an
        // unclean stop would look clean.
        try locked { db throws(StoreError) in try db.exec("PRAGMA synchronous=FULL") }
        try setMetadata(Self.openKey, "1")
        if options.durability == .normal { try locked { db throws(StoreError) in try db.exec("PRAGMA synchronous=NORMAL") } }
    }

    private init(options: StoreOptions, logger: Logger, report: OpenReport?) throws(StoreError) {
        self.options = options
        self.logger = logger
        let db = try SQLiteConnection(path: options.path, vfs: options.vfs)
        // Reading the header is the first thing that notices a file that is not a database.
        try db.exec("PRAGMA journal_mode=WAL")
        let mode = try db.strings("PRAGMA journal_mode").first?.first ?? nil
        guard mode == "wal" else {
            throw .sqlite(call: "PRAGMA journal_mode=WAL", code: SQLITE_ERROR, message: "journal mode is \(mode ?? "unknown"), not wal")
        }
        try db.exec("PRAGMA synchronous=\(options.durability == .full ? "FULL" : "NORMAL")")
        try db.exec("PRAGMA foreign_keys=ON")
        let check = try db.strings("PRAGMA quick_check").compactMap { $0.first ?? nil }
        guard check == ["ok"] else {
            throw .sqlite(call: "PRAGMA quick_check", code: SQLITE_CORRUPT, message: check.prefix(3).joined(separator: "; "))
        }
        let found = Int(try db.strings("PRAGMA user_version").first?.first??.description ?? "0") ?? 0
        guard found <= Schema.latestVersion else {
            throw .schemaTooNew(found: found, supported: Schema.latestVersion, path: options.path)
        }
        for migration in Schema.migrations where migration.version > found {
            try db.exec("BEGIN IMMEDIATE")
            do {
                try db.exec(migration.sql)
                try db.exec("PRAGMA user_version=\(migration.version)")
                try db.exec("COMMIT")
            } catch {
                try? db.exec("ROLLBACK")
                throw error
            }
            logger.info(.store, "store \(options.path): migrated schema to version \(migration.version)")
        }
        self.db = db
        self.openReport = report ?? OpenReport(schemaVersionFound: found, schemaVersion: Schema.latestVersion, movedAsideTo: nil, reason: nil)
        let seq = try db.statement("SELECT COALESCE(MAX(sequence), 0) FROM documents")
        _ = try seq.step()
        lastSequenceValue = seq.int64(0)
        try seq.run()
        // A purge without tombstone may have removed the newest rows: never hand their sequences out again.
        let floor = try db.statement("SELECT value FROM meta WHERE key = ?")
        try floor.bind(0, DocumentStore.sequenceFloorKey)
        if try floor.step(), let text = floor.text(0), let value = Int64(text) { lastSequenceValue = max(lastSequenceValue, value) }
        try floor.run()
        if found < 8 { try DocumentStore.backfillWrittenAt(db) }
        if found < 9 { try DocumentStore.backfillBlobReferences(db, logger: logger) }
        blobReferencesMayExist = try db.strings("SELECT EXISTS(SELECT 1 FROM blob_refs)").first?.first == "1"
        purgeRecordsMayExist = try db.strings("SELECT EXISTS(SELECT 1 FROM purged_documents)").first?.first == "1"
        let cols = try db.statement("SELECT id, scope, name FROM collections")
        while try cols.step() {
            if let scope = cols.text(1), let name = cols.text(2), let c = try? CollectionName(stored: scope, name: name) {
                collectionIDs[c] = cols.int64(0)
            }
        }
        listCollections()  // didSet does not run in init
        publishSummary()
        logger.info(.store, "store \(options.path) open: schema \(Schema.latestVersion), \(collectionIDs.count.counted("collection")), last sequence \(lastSequenceValue), durability \(options.durability.rawValue)")
    }

    static func moveAside(_ path: String, logger: Logger, reason: String) throws(StoreError) -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let target = "\(path).corrupt-\(now.tv_sec)"
        for suffix in ["", "-wal", "-shm"] where access(path + suffix, F_OK) == 0 {
            if rename(path + suffix, target + suffix) != 0 {
                let why = String(cString: strerror(errno))
                throw .sqlite(call: "rename(\(path + suffix))", code: SQLITE_CANTOPEN, message: "cannot move the corrupt store aside: \(why)")
            }
        }
        logger.error(.store, "store \(path) is corrupt (\(reason)); moved it aside to \(target) and started an empty store; peers will refill it. Keep the moved file for analysis or delete it.")
        return target
    }

    public func close() {
        try? setMetadata(Self.openKey, "0")
        // The reader first: the last connection to close checkpoints the WAL, and a read-only
        // one cannot.
        readLock.withLock {
            reader?.close()
            reader = nil
            readerClosed = true
        }
        summary.withLock { $0.open = false }
        lock.withLock {
            db?.close()
            db = nil
            lock.broadcast()
        }
    }

    private func connection() throws(StoreError) -> SQLiteConnection {
        guard let db else { throw .closed }
        return db
    }

    /// Copies the sequence and the collections for readers that do not take the lock (call
    /// under the lock, after they changed).
    func publishSummary() {
        let users = collectionIDs.keys.filter { !$0.isSystem }.sorted()
        summary.withLock { s in
            s.lastSequence = lastSequenceValue
            s.collections = users
            s.collectionCount = collectionIDs.count
        }
    }

    /// Runs `body` on the read-only connection under its own lock (never the store's).
    func reading<T>(_ body: (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        try readLock.withLock { () throws(StoreError) -> T in
            if reader == nil {
                guard !readerClosed else { throw .closed }
                reader = try SQLiteConnection(path: options.path, readOnly: true, vfs: options.vfs)
            }
            let db = reader!
            defer { db.releaseReads() }
            return try body(db)
        }
    }

    /// Runs `body` under the lock, translating errors to StoreError.
    func locked<T>(_ body: (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        try lock.withLock { () throws(StoreError) -> T in
            let db = try connection()
            defer { db.releaseReads() }
            return try body(db)
        }
    }

    private func transaction<T>(_ db: SQLiteConnection, _ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        try db.statement("BEGIN IMMEDIATE").run()
        do {
            let result = try body()
            try db.statement("COMMIT").run()
            return result
        } catch {
            try? db.statement("ROLLBACK").run()
            throw error
        }
    }

    static func nowMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

// MARK: - Collections

extension DocumentStore {
    /// Creates the collection if it does not exist yet.
    @discardableResult
    public func createCollection(_ name: CollectionName) throws(StoreError) -> Bool {
        try locked { db throws(StoreError) in
            if collectionIDs[name] != nil { return false }
            let s = try db.statement("INSERT INTO collections(scope, name, created_at) VALUES (?, ?, ?) RETURNING id")
            try s.bind(0, name.scope)
            try s.bind(1, name.name)
            try s.bind(2, DocumentStore.nowMillis())
            guard try s.step() else { throw .sqlite(call: "INSERT collections", code: SQLITE_ERROR, message: "no id returned") }
            collectionIDs[name] = s.int64(0)
            try s.run()
            publishSummary()
            logger.info(.store, "created collection \(name)")
            return true
        }
    }

    /// The users' collections (Shoal's own, such as `_system._trust`, are not listed).
    public func collections() throws(StoreError) -> [CollectionName] {
        try summary.withLock { s throws(StoreError) in
            guard s.open else { throw .closed }
            return s.collections
        }
    }

    private func listCollections() {
        collectionList = collectionIDs.count <= 16 ? collectionIDs.map { ($0.key, $0.value) } : []
    }

    func collectionID(_ name: CollectionName) throws(StoreError) -> Int64 {
        if !collectionList.isEmpty {
            for c in collectionList where c.name == name { return c.id }
            throw .unknownCollection(name.description)
        }
        guard let id = collectionIDs[name] else { throw .unknownCollection(name.description) }
        return id
    }
}

// MARK: - Documents

extension DocumentStore {
    /// Checks a body: a JSON object of at most `maxBodyBytes`.
    public func validateBody(_ body: String) throws(StoreError) {
        let count = body.utf8.count
        guard count <= options.maxBodyBytes else {
            throw .invalidDocument("body is \(count) bytes, over the limit of \(options.maxBodyBytes)")
        }
        let isObject: Bool
        do { isObject = try JSONValue.validate(body) } catch { throw .invalidDocument(error.description) }
        guard isObject else { throw .invalidDocument("a document body is a JSON object") }
    }

    /// Writes one document (creating or replacing it). Returns its change.
    @discardableResult
    public func put(_ collection: CollectionName, id: DocumentID, body: String, version: [UInt8] = []) throws(StoreError) -> Change {
        try write([DocumentWrite(collection: collection, id: id, body: body, version: version)])[0]
    }

    /// Deletes a document, leaving a tombstone. Deleting a missing or deleted document is `notFound`.
    @discardableResult
    public func delete(_ collection: CollectionName, id: DocumentID, version: [UInt8] = []) throws(StoreError) -> Change {
        guard let existing = try get(collection, id: id), !existing.isDeleted else {
            throw .notFound(collection: collection.description, id: id.rawValue)
        }
        return try write([DocumentWrite(collection: collection, id: id, body: nil, version: version)])[0]
    }

    /// Applies writes in one transaction: all of them or none. Each gets the next sequence.
    public func write(_ writes: [DocumentWrite]) throws(StoreError) -> [Change] {
        try transaction { (tx) throws(StoreError) -> [Change] in
            var out: [Change] = []
            out.reserveCapacity(writes.count)
            for w in writes { out.append(try tx.write(w)) }
            return out
        }
    }

    /// Runs `body` in one SQLite transaction (BEGIN IMMEDIATE … COMMIT): everything it does is
    /// kept, or nothing is. The replicator resolves and applies a batch this way, so a local write
    /// can never slip in between reading a document's version and replacing it.
    ///
    /// Group commit: bodies that arrive from other threads while a commit is under way wait, and
    /// the next of them to find the store free (the leader) runs all of them, each in a savepoint
    /// of ONE transaction, and commits once: one fsync for many writers (the control socket, the
    /// HTTP API, the MQTT bridge, replication). Each caller returns only after the commit that holds
    /// its body, so what it was told is as durable as before. A body that throws undoes only its
    /// own savepoint and fails alone. If the store itself fails (the transaction is gone, or the
    /// commit fails), nothing of the group is kept: the bodies that already ran fail with that
    /// error (a body never runs twice: callers keep state from it), the ones not yet run run
    /// each in a transaction of its own. A body may run on the leader's thread while its caller
    /// waits (its caller is blocked meanwhile, as under the store's lock before).
    public func transaction<T>(_ body: (StoreTransaction) throws(StoreError) -> T) throws(StoreError) -> T {
        guard options.groupCommit else {
            return try locked { db throws(StoreError) in
                let tx = StoreTransaction(store: self, db: db, sequence: lastSequenceValue, now: DocumentStore.nowMillis())
                let result = try transaction(db) { () throws(StoreError) -> T in try body(tx) }
                published(tx.sequence)  // only once committed: a rolled-back write hands out no sequence
                return result
            }
        }
        var result: T?
        let error: StoreError? = withoutActuallyEscaping(body) { body in
            let ticket = CommitTicket { (tx) throws(StoreError) in result = try body(tx) }
            commitLock.withLock { commitQueue.append(ticket) }
            while true {
                // Wait until ours is done, or until no one commits: then lead the next group.
                let group = commitLock.withLock { () -> [CommitTicket]? in
                    while !ticket.done {
                        if !committing {
                            committing = true
                            let n = min(commitQueue.count, DocumentStore.groupMax)
                            defer { commitQueue.removeFirst(n) }
                            return Array(commitQueue.prefix(n))
                        }
                        commitLock.wait()
                    }
                    return nil
                }
                guard let group else { break }
                commitGroup(group)
                commitLock.withLock {
                    // The body goes before its caller returns: it must not outlive the call
                    // (withoutActuallyEscaping checks).
                    for t in group { t.body = nil; t.done = true }
                    committing = false
                    commitLock.broadcast()
                }
            }
            return commitLock.withLock { ticket.error }
        }
        if let error { throw error }
        guard let result else { preconditionFailure("a transaction left the commit queue without a result") }
        return result
    }

    /// Bodies in one group at most (the rest wait for the next commit).
    public static let groupMax = 256

    /// Bodies queued for the next commit and not yet taken by a leader (tests wait on it).
    public var commitsWaiting: Int { commitLock.withLock { commitQueue.count } }

    /// One body waiting for a commit. `done` and `error` only under `commitLock`, or by the leader
    /// while it runs the group.
    final class CommitTicket: @unchecked Sendable {
        var body: ((StoreTransaction) throws(StoreError) -> Void)?
        var error: StoreError?
        var done = false
        init(_ body: @escaping (StoreTransaction) throws(StoreError) -> Void) { self.body = body }

        func run(_ tx: StoreTransaction) throws(StoreError) {
            guard let body else { preconditionFailure("a transaction's body ran after its caller returned") }
            try body(tx)
        }
    }

    /// After a commit: the new last sequence, for readers with and without the lock (call under it).
    func published(_ sequence: Int64) {
        guard sequence != lastSequenceValue else { return }
        lastSequenceValue = sequence
        summary.withLock { $0.lastSequence = sequence }
        lock.broadcast()
    }

    /// The leader's part: the group in one transaction (savepoint per body), or each body alone
    /// when the store itself failed.
    private func commitGroup(_ group: [CommitTicket]) {
        lock.withLock {
            guard let db else {
                for t in group { t.error = .closed }
                return
            }
            defer { db.releaseReads() }
            func alone(_ t: CommitTicket) {
                let tx = StoreTransaction(store: self, db: db, sequence: lastSequenceValue, now: DocumentStore.nowMillis())
                do throws(StoreError) {
                    try transaction(db) { () throws(StoreError) in try t.run(tx) }
                    t.error = nil
                    published(tx.sequence)
                } catch {
                    t.error = error
                }
            }
            if group.count == 1 {
                alone(group[0])
                commitCounts.withLock { $0.transactions += 1 }
                return
            }
            let tx = StoreTransaction(store: self, db: db, sequence: lastSequenceValue, now: DocumentStore.nowMillis())
            var storeFailed: StoreError?  // the transaction is gone (a body broke it) or its commit failed
            var ran = 0  // bodies run so far, in order
            do throws(StoreError) {
                try db.statement("BEGIN IMMEDIATE").run()
            } catch {
                for t in group { t.error = error }
                return
            }
            for t in group {
                let sequence = tx.sequence
                ran += 1
                do throws(StoreError) {
                    try db.statement("SAVEPOINT shoal_group").run()
                    try t.run(tx)
                    try db.statement("RELEASE shoal_group").run()
                } catch {
                    t.error = error
                    tx.sequence = sequence
                    db.releaseReads()  // a statement the body left on a row would block the rollback
                    if sqlite3_get_autocommit(db.handle) != 0 { storeFailed = error; break }
                    do throws(StoreError) {
                        try db.statement("ROLLBACK TO shoal_group").run()
                        try db.statement("RELEASE shoal_group").run()
                    } catch {
                        storeFailed = error
                        break
                    }
                }
            }
            if storeFailed == nil {
                do throws(StoreError) {
                    try db.statement("COMMIT").run()
                    published(tx.sequence)
                    let n = group.count
                    commitCounts.withLock { c in
                        c.transactions += 1
                        c.grouped += n
                        c.largestGroup = max(c.largestGroup, n)
                    }
                    return
                } catch {
                    storeFailed = error
                }
            }
            // The store failed: nothing of the group is kept. The bodies that ran fail with the
            // store's error (a body that failed on its own keeps its own); the rest run alone.
            db.releaseReads()
            if sqlite3_get_autocommit(db.handle) == 0 { try? db.statement("ROLLBACK").run() }
            for t in group.prefix(ran) where t.error == nil { t.error = storeFailed }
            for t in group.dropFirst(ran) {
                alone(t)
                commitCounts.withLock { $0.transactions += 1 }
            }
        }
    }

    func collectionIDForTransaction(_ name: CollectionName) throws(StoreError) -> Int64 { try collectionID(name) }

    /// `count`'s statements (public so a test can ask SQLite for their plans: indexes only).
    public static let countTombstonesSQL = "SELECT count(*) FROM documents WHERE collection_id = ?1 AND deleted = 1"
    public static let countLiveSQL = """
        SELECT (SELECT count(*) FROM documents WHERE collection_id = ?1)
             - (SELECT count(*) FROM documents WHERE collection_id = ?1 AND deleted = 1)
        """

    /// The statement every document write uses. `shoal bench store` runs this same text through
    /// the bare C API as its baseline, so the ratio measures only Shoal's own overhead.
    public static let upsertSQL = """
        INSERT INTO documents(collection_id, doc_id, body, deleted, revision, version, sequence, updated_at, written_at, body_bytes)
        VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, ?9)
        ON CONFLICT(collection_id, doc_id) DO UPDATE SET
            body = excluded.body, deleted = excluded.deleted, revision = documents.revision + 1,
            version = excluded.version, sequence = excluded.sequence, updated_at = excluded.updated_at,
            written_at = excluded.written_at, body_bytes = excluded.body_bytes,
            expires_at = CASE WHEN excluded.deleted = 1 THEN NULL ELSE documents.expires_at END
        RETURNING revision
        """

    /// The document, or its tombstone, or nil if it never existed.
    public func get(_ collection: CollectionName, id: DocumentID) throws(StoreError) -> StoredDocument? {
        try locked { db throws(StoreError) in
            let s = try db.statement(.get)
            try s.bind(0, try collectionID(collection))
            try s.bind(1, id.rawValue)
            guard try s.step() else { return nil }
            let doc = StoredDocument(collection: collection, id: id.rawValue, body: s.int64(5) != 0 ? nil : s.text(0),
                                     revision: s.int64(1), version: s.blob(2), sequence: s.int64(3), updatedAtMillis: s.int64(4))
            try s.run()
            return doc
        }
    }

    /// How many live documents (or, with `deleted`, tombstones) a collection holds, counted in
    /// SQLite from indexes alone: all the collection's rows less its tombstones (the literal
    /// `deleted = 1` lets SQLite use the partial index of tombstones).
    public func count(_ collection: CollectionName, deleted: Bool = false) throws(StoreError) -> Int64 {
        try locked { db throws(StoreError) in
            let s = try db.statement(deleted ? DocumentStore.countTombstonesSQL : DocumentStore.countLiveSQL)
            try s.bind(0, try collectionID(collection))
            _ = try s.step()
            let n = s.int64(0)
            try s.run()
            return n
        }
    }

    /// Documents of a collection in id order, after `after`, at most `limit`.
    public func list(_ collection: CollectionName, after: String? = nil, limit: Int = 100, includeDeleted: Bool = false) throws(StoreError) -> [StoredDocument] {
        try locked { db throws(StoreError) in
            let s = try db.statement("""
                SELECT doc_id, body, revision, version, sequence, updated_at, deleted FROM documents
                WHERE collection_id = ?1 AND doc_id > ?2 AND (?3 OR deleted = 0) ORDER BY doc_id LIMIT ?4
                """)
            try s.bind(0, try collectionID(collection))
            try s.bind(1, after ?? "")
            try s.bind(2, includeDeleted ? 1 : 0)
            try s.bind(3, Int64(max(0, min(limit, 100_000))))
            var out: [StoredDocument] = []
            while try s.step() {
                out.append(StoredDocument(collection: collection, id: s.text(0) ?? "", body: s.int64(6) != 0 ? nil : s.text(1),
                                          revision: s.int64(2), version: s.blob(3), sequence: s.int64(4), updatedAtMillis: s.int64(5)))
            }
            return out
        }
    }
}

// MARK: - Change feed

extension DocumentStore {
    /// The last sequence committed (read without the store's lock: see `summary`).
    public var lastSequence: Int64 { summary.withLock { $0.lastSequence } }

    /// The latest change of every document changed after `since`, in sequence order.
    public func changes(since: Int64, limit: Int = 1000) throws(StoreError) -> [Change] {
        try locked { db throws(StoreError) in
            let s = try db.statement("""
                SELECT d.sequence, c.scope, c.name, d.doc_id, d.deleted, d.revision, d.version
                FROM documents d JOIN collections c ON c.id = d.collection_id
                WHERE d.sequence > ? ORDER BY d.sequence LIMIT ?
                """)
            try s.bind(0, since)
            try s.bind(1, Int64(max(0, min(limit, 100_000))))
            var out: [Change] = []
            while try s.step() {
                guard let scope = s.text(1), let name = s.text(2), let c = try? CollectionName(stored: scope, name: name) else { continue }
                out.append(Change(sequence: s.int64(0), collection: c, id: s.text(3) ?? "", deleted: s.int64(4) != 0,
                                  revision: s.int64(5), version: s.blob(6)))
            }
            return out
        }
    }

    /// The change feed of one collection (the replicator announces per collection).
    public func changes(in collection: CollectionName, since: Int64, limit: Int = 1000) throws(StoreError) -> [Change] {
        try locked { db throws(StoreError) in
            let s = try db.statement("""
                SELECT sequence, doc_id, deleted, revision, version FROM documents
                WHERE collection_id = ? AND sequence > ? ORDER BY sequence LIMIT ?
                """)
            try s.bind(0, try collectionID(collection))
            try s.bind(1, since)
            try s.bind(2, Int64(max(0, min(limit, 100_000))))
            var out: [Change] = []
            while try s.step() {
                out.append(Change(sequence: s.int64(0), collection: collection, id: s.text(1) ?? "", deleted: s.int64(2) != 0,
                                  revision: s.int64(3), version: s.blob(4)))
            }
            return out
        }
    }

    /// How many changes of `collection` come after `since`, and the wall time (ms) of the oldest
    /// of them (0 when none): a bridge's lag behind the change feed.
    public func changeBacklog(in collection: CollectionName, since: Int64) throws(StoreError) -> (count: Int64, oldestMillis: Int64) {
        try locked { db throws(StoreError) in
            let s = try db.statement("SELECT count(*), min(updated_at) FROM documents WHERE collection_id = ? AND sequence > ?")
            try s.bind(0, try collectionID(collection))
            try s.bind(1, since)
            let out = try s.step() ? (s.int64(0), s.int64(1)) : (0, 0)
            try s.run()
            return out
        }
    }

    /// The conflict log's bounds: at most this many entries (the newest)…
    public static let conflictLogMaxEntries = 10_000
    /// …whose bodies add up to at most this many bytes (older entries go first); and none older
    /// than the board's txLogMaxAgeSeconds (`purgeTombstones`, hourly).
    public static let conflictLogMaxBodyBytes: Int64 = 64 << 20

    /// The newest conflicts first; `before` (an entry's `number`) pages back through older ones.
    public func conflicts(limit: Int = 100, before: Int64? = nil) throws(StoreError) -> [ConflictRecord] {
        try locked { db throws(StoreError) in
            let s = try db.statement("""
                SELECT c.scope, c.name, x.doc_id, x.local_version, x.remote_version, x.peer_id, x.resolver, x.outcome, x.at,
                       x.local_body, x.remote_body, x.id
                FROM conflicts x JOIN collections c ON c.id = x.collection_id WHERE x.id < ?2 ORDER BY x.id DESC LIMIT ?1
                """)
            try s.bind(0, Int64(max(0, min(limit, 100_000))))
            try s.bind(1, before ?? Int64.max)
            var out: [ConflictRecord] = []
            while try s.step() {
                guard let scope = s.text(0), let name = s.text(1), let c = try? CollectionName(stored: scope, name: name) else { continue }
                var r = ConflictRecord(collection: c, id: s.text(2) ?? "", localVersion: s.blob(3), remoteVersion: s.blob(4),
                                       peer: s.text(5) ?? "", resolver: s.text(6) ?? "", outcome: s.text(7) ?? "", atMillis: s.int64(8),
                                       localBody: s.text(9), remoteBody: s.text(10))
                r.number = s.int64(11)
                out.append(r)
            }
            return out
        }
    }

    /// Wakes every `waitForChange` now (a feed with a new subscriber, or stopping).
    public func wake() { lock.withLock { lock.broadcast() } }

    /// Blocks until the last sequence passes `after`, the store closes, `wake()` is called, or
    /// the timeout passes. Returns the last sequence. For the control socket's `changes --follow`
    /// threads and the HTTP feed.
    public func waitForChange(after: Int64, timeoutMillis: Int) -> Int64 {
        lock.withLock {
            if lastSequenceValue <= after && db != nil { lock.wait(timeoutMillis: timeoutMillis) }
            return lastSequenceValue
        }
    }
}

// MARK: - Checkpoints, metadata, health

extension DocumentStore {
    public func checkpoint(peer: String, collection: CollectionName, direction: CheckpointDirection) throws(StoreError) -> Int64 {
        try locked { db throws(StoreError) in
            let s = try db.statement("SELECT sequence FROM checkpoints WHERE peer_id = ? AND collection_id = ? AND direction = ?")
            try s.bind(0, peer)
            try s.bind(1, try collectionID(collection))
            try s.bind(2, direction.rawValue)
            let value = try s.step() ? s.int64(0) : 0
            try s.run()
            return value
        }
    }

    public func setCheckpoint(peer: String, collection: CollectionName, direction: CheckpointDirection, sequence: Int64) throws(StoreError) {
        try locked { db throws(StoreError) in
            let s = try db.statement("""
                INSERT INTO checkpoints(peer_id, collection_id, direction, sequence, updated_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT(peer_id, collection_id, direction) DO UPDATE SET sequence = excluded.sequence, updated_at = excluded.updated_at
                """)
            try s.bind(0, peer)
            try s.bind(1, try collectionID(collection))
            try s.bind(2, direction.rawValue)
            try s.bind(3, sequence)
            try s.bind(4, DocumentStore.nowMillis())
            try s.run()
        }
    }

    public func metadata(_ key: String) throws(StoreError) -> String? {
        try locked { db throws(StoreError) in
            let s = try db.statement("SELECT value FROM meta WHERE key = ?")
            try s.bind(0, key)
            let value = try s.step() ? s.text(0) : nil
            try s.run()
            return value
        }
    }

    public func setMetadata(_ key: String, _ value: String) throws(StoreError) {
        try locked { db throws(StoreError) in
            let s = try db.statement("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
            try s.bind(0, key)
            try s.bind(1, value)
            try s.run()
        }
    }

    /// Where the changes in `sequences` came from through `bridge` (see
    /// `StoreTransaction.recordSource`): sequence → source, for those that did.
    public func sources(bridge: String, in sequences: ClosedRange<Int64>) throws(StoreError) -> [Int64: String] {
        try locked { db throws(StoreError) in
            let s = try db.statement("SELECT sequence, source FROM change_sources WHERE bridge = ? AND sequence BETWEEN ? AND ?")
            try s.bind(0, bridge)
            try s.bind(1, sequences.lowerBound)
            try s.bind(2, sequences.upperBound)
            var out: [Int64: String] = [:]
            while try s.step() { out[s.int64(0)] = s.text(1) ?? "" }
            try s.run()
            return out
        }
    }

    /// Forgets `bridge`'s sources up to `sequence` (its outbound checkpoints are past them).
    public func forgetSources(bridge: String, through sequence: Int64) throws(StoreError) {
        try locked { db throws(StoreError) in
            let s = try db.statement("DELETE FROM change_sources WHERE bridge = ? AND sequence <= ?")
            try s.bind(0, bridge)
            try s.bind(1, sequence)
            try s.run()
        }
    }

    /// `PRAGMA quick_check` (or the full `integrity_check`): empty when the file is sound.
    public func integrityProblems(full: Bool = false) throws(StoreError) -> [String] {
        try locked { db throws(StoreError) in
            let rows = try db.strings(full ? "PRAGMA integrity_check" : "PRAGMA quick_check").compactMap { $0.first ?? nil }
            return rows == ["ok"] ? [] : rows
        }
    }

    /// Counts as of the last commit, read on the read-only connection: never waits for a write.
    public func stats() throws(StoreError) -> StoreStats {
        let (count, sequence) = summary.withLock { ($0.collectionCount, $0.lastSequence) }
        return try reading { db throws(StoreError) in
            // Counted from indexes, never the table (whose rows hold the bodies): all rows from the
            // sequence index, tombstones from their partial index. A sum over the table read every
            // body on each status request: 59 ms against 5.8 ms at 100,000 × 1 KB here.
            let s = try db.statement("SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM documents WHERE deleted = 1)")
            _ = try s.step()
            let rows = s.int64(0), tombstones = s.int64(1)
            let stats = StoreStats(documents: rows - tombstones, tombstones: tombstones, collections: Int64(count), lastSequence: sequence)
            try s.run()
            return stats
        }
    }

    /// The metadata key of the purge horizon: tombstones last changed before it may be gone.
    public static let purgeHorizonKey = "purgeHorizonMillis"

    /// Removes tombstones last changed before `cutoffMillis` (wall time) and conflict-log entries
    /// older than it, and raises the purge horizon to the cutoff (or to the newest purged delete's
    /// HLC time, if later) — in one transaction. Replication
    /// uses the horizon so that a peer that was away longer cannot bring a purged delete back.
    /// Returns the ids removed, per collection.
    @discardableResult
    public func purgeTombstones(olderThan cutoffMillis: Int64) throws(StoreError) -> [(CollectionName, String)] {
        try transaction { (tx) throws(StoreError) -> [(CollectionName, String)] in
            let s = try tx.db.statement("""
                SELECT c.scope, c.name, d.doc_id, d.version FROM documents d JOIN collections c ON c.id = d.collection_id
                WHERE d.deleted = 1 AND d.updated_at < ?
                """)
            try s.bind(0, cutoffMillis)
            var removed: [(CollectionName, String)] = []
            // The horizon must cover the purged deletes' own timestamps, not only the wall-clock
            // cutoff: an HLC can run a little ahead of the wall clock (logical ticks, peers within
            // the drift bound), and every version a purged delete beat is at or below its timestamp.
            var newest: Int64 = 0
            while try s.step() {
                if let scope = s.text(0), let name = s.text(1), let c = try? CollectionName(stored: scope, name: name) {
                    removed.append((c, s.text(2) ?? ""))
                }
                if let v = try? DocumentVersion(decoding: s.blob(3)), let current = v.vector.current {
                    newest = max(newest, Int64(current.timestamp.physicalMillis))
                }
            }
            let d = try tx.db.statement("DELETE FROM documents WHERE deleted = 1 AND updated_at < ?")
            try d.bind(0, cutoffMillis)
            try d.run()
            let x = try tx.db.statement("DELETE FROM conflicts WHERE at < ?")
            try x.bind(0, cutoffMillis)
            try x.run()
            let old = Int64(try tx.metadata(DocumentStore.purgeHorizonKey) ?? "0") ?? 0
            try tx.setMetadata(DocumentStore.purgeHorizonKey, String(max(old, cutoffMillis, newest)))
            return removed
        }
    }

    /// The current purge horizon (0: nothing ever purged).
    public var purgeHorizonMillis: Int64 {
        (try? metadata(DocumentStore.purgeHorizonKey)).flatMap { $0.flatMap { Int64($0) } } ?? 0
    }

    /// A cheap round trip through SQLite, for the store service's heartbeat.
    public func ping() throws(StoreError) {
        try locked { db throws(StoreError) in
            let s = try db.statement("SELECT 1")
            try s.run()
        }
    }
}

extension DocumentStore {
    /// Looks at a store file without changing anything (read-only; nothing is moved aside or
    /// migrated): `PRAGMA integrity_check`, the schema version and the number of live documents.
    /// For `shoal doctor`.
    /// The live documents of one collection, read from a store file without opening it for
    /// writing (`shoal doctor` reads the trust entries of a stopped gateway so). Empty if the
    /// collection does not exist.
    public static func readLiveDocuments(path: String, collection: CollectionName) throws(StoreError) -> [(id: String, body: String)] {
        let db = try SQLiteConnection(path: path, readOnly: true)
        defer { db.close() }
        let s = try db.statement("""
            SELECT d.doc_id, d.body FROM documents d JOIN collections c ON c.id = d.collection_id
            WHERE c.scope = ? AND c.name = ? AND d.deleted = 0 ORDER BY d.doc_id
            """)
        try s.bind(0, collection.scope)
        try s.bind(1, collection.name)
        var out: [(id: String, body: String)] = []
        while try s.step() {
            if let id = s.text(0), let body = s.text(1) { out.append((id, body)) }
        }
        return out
    }

    public static func inspect(path: String) -> (sound: Bool, detail: String) {
        do {
            let db = try SQLiteConnection(path: path, readOnly: true)
            defer { db.close() }
            let problems = try db.strings("PRAGMA integrity_check").compactMap { $0.first ?? nil }.filter { $0 != "ok" }
            let version = try db.strings("PRAGMA user_version").first?.first.flatMap { $0 } ?? "?"
            let documents = (try? db.strings("SELECT count(*) FROM documents WHERE deleted = 0").first?.first.flatMap { $0 }) ?? "?"
            if !problems.isEmpty { return (false, "integrity_check: \(problems.prefix(3).joined(separator: "; "))") }
            return (true, "integrity ok, schema \(version), \(documents) documents")
        } catch {
            return (false, "\(error)")
        }
    }
}
