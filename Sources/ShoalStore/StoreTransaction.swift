import CSQLite
import ShoalCore

/// The store as seen from inside `DocumentStore.transaction`: reads see the transaction's own
/// writes; nothing is visible to others until the closure returns and the commit succeeds.
/// Valid only inside the closure.
public final class StoreTransaction {
    unowned let store: DocumentStore
    let db: SQLiteConnection
    /// The last sequence handed out, including this transaction's writes.
    public internal(set) var sequence: Int64
    let now: Int64

    init(store: DocumentStore, db: SQLiteConnection, sequence: Int64, now: Int64) {
        self.store = store
        self.db = db
        self.sequence = sequence
        self.now = now
    }

    public func get(_ collection: CollectionName, id: String) throws(StoreError) -> StoredDocument? {
        let s = try db.statement(.get)
        try s.bind(0, try store.collectionIDForTransaction(collection))
        try s.bind(1, id)
        guard try s.step() else { return nil }
        let doc = StoredDocument(collection: collection, id: id, body: s.int64(5) != 0 ? nil : s.text(0),
                                 revision: s.int64(1), version: s.blob(2), sequence: s.int64(3), updatedAtMillis: s.int64(4))
        try s.run()
        return doc
    }

    /// Only the version of a document (and whether it is a tombstone): cheaper than `get` when
    /// the body is not needed, as when comparing announced versions.
    public func version(_ collection: CollectionName, id: String) throws(StoreError) -> (version: [UInt8], deleted: Bool)? {
        let s = try db.statement(.version)
        try s.bind(0, try store.collectionIDForTransaction(collection))
        try s.bind(1, id)
        guard try s.step() else { return nil }
        let result = (s.blob(0), s.int64(1) != 0)
        try s.run()
        return result
    }

    /// Writes (or tombstones, with a nil body) a document at the next sequence.
    /// `bodyValidated`: the caller already ran `validateBody` on this body (skip doing it twice).
    @discardableResult
    public func write(_ w: DocumentWrite, bodyValidated: Bool = false) throws(StoreError) -> Change {
        guard let change = try writeRow(w, with: .upsert, bodyValidated: bodyValidated) else {
            throw .sqlite(call: "upsert document", code: SQLITE_ERROR, message: "no revision returned")
        }
        return change
    }

    /// Inserts a document that does not exist yet, in one statement; nil (and nothing written) if
    /// the collection already holds that id. The replicator's fast path for documents it lacks.
    public func insertIfAbsent(_ w: DocumentWrite, bodyValidated: Bool = false) throws(StoreError) -> Change? {
        try writeRow(w, with: .insertIfAbsent, bodyValidated: bodyValidated)
    }

    /// Runs a document-writing statement (upsert or insert-if-absent) at the next sequence; nil if
    /// it wrote nothing (the sequence is then not used).
    private func writeRow(_ w: DocumentWrite, with statement: HotStatement, bodyValidated: Bool) throws(StoreError) -> Change? {
        if let body = w.body, !bodyValidated { try store.validateBody(body) }
        let cid = try store.collectionIDForTransaction(w.collection)
        let s = try db.statement(statement)
        try s.bind(0, cid)
        try s.bind(1, w.id.rawValue)
        try s.bind(2, w.body)
        try s.bind(3, w.body == nil ? 1 : 0)
        try s.bind(4, blob: w.version)
        try s.bind(5, sequence + 1)
        try s.bind(6, now)
        try s.bind(7, DocumentStore.writtenAtMillis(w.version, otherwise: now))
        try s.bind(8, Int64(w.body?.utf8.count ?? 0))
        let revision: Int64
        if statement == .insertIfAbsent {
            // No RETURNING here: SQLite buffers RETURNING rows in a temporary b-tree it opens and
            // closes per statement (~10,000 instructions a document, callgrind). Whether the row
            // went in is the statement's change count; a new row's revision is 1.
            try s.run()
            guard db.changes > 0 else { return nil }
            revision = 1
        } else {
            guard try s.step() else { return nil }
            revision = s.int64(0)
            try s.run()
        }
        try updateBlobReferences(collectionID: cid, id: w.id.rawValue, body: w.body)
        sequence += 1
        return Change(sequence: sequence, collection: w.collection, id: w.id.rawValue, deleted: w.body == nil, revision: revision, version: w.version)
    }

    public func setCheckpoint(peer: String, collection: CollectionName, direction: CheckpointDirection, sequence: Int64) throws(StoreError) {
        let s = try db.statement("""
            INSERT INTO checkpoints(peer_id, collection_id, direction, sequence, updated_at) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(peer_id, collection_id, direction) DO UPDATE SET sequence = excluded.sequence, updated_at = excluded.updated_at
            """)
        try s.bind(0, peer)
        try s.bind(1, try store.collectionIDForTransaction(collection))
        try s.bind(2, direction.rawValue)
        try s.bind(3, sequence)
        try s.bind(4, now)
        try s.run()
    }

    /// Notes that the change `sequence` came in through `bridge` from `source` (a topic).
    public func recordSource(sequence: Int64, bridge: String, source: String) throws(StoreError) {
        let s = try db.statement("INSERT INTO change_sources(sequence, bridge, source) VALUES (?, ?, ?) ON CONFLICT(sequence) DO UPDATE SET bridge = excluded.bridge, source = excluded.source")
        try s.bind(0, sequence)
        try s.bind(1, bridge)
        try s.bind(2, source)
        try s.run()
    }

    /// What `hub` holds of a document, as the uplink last learned it (see `setHubHead`).
    public func hubHead(hub: String, collection: CollectionName, id: String) throws(StoreError) -> (sequence: UInt64, version: [UInt8])? {
        let s = try db.statement("SELECT hub_sequence, version FROM hub_heads WHERE hub = ? AND collection = ? AND doc_id = ?")
        try s.bind(0, hub)
        try s.bind(1, collection.description)
        try s.bind(2, id)
        let head = try s.step() ? (UInt64(clamping: s.int64(0)), s.blob(1)) : nil
        try s.run()
        return head
    }

    /// Notes that `hub`'s last message for the document is at `sequence` and carries `version`.
    public func setHubHead(hub: String, collection: CollectionName, id: String, sequence: UInt64, version: [UInt8]) throws(StoreError) {
        let s = try db.statement("""
            INSERT INTO hub_heads(hub, collection, doc_id, hub_sequence, version) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(hub, collection, doc_id) DO UPDATE SET hub_sequence = excluded.hub_sequence, version = excluded.version
            WHERE excluded.hub_sequence >= hub_heads.hub_sequence
            """)
        try s.bind(0, hub)
        try s.bind(1, collection.description)
        try s.bind(2, id)
        try s.bind(3, Int64(clamping: sequence))
        try s.bind(4, blob: version)
        try s.run()
    }

    /// Forgets what `hub` held of `collection` (its stream was made anew).
    public func forgetHubHeads(hub: String, collection: CollectionName) throws(StoreError) {
        let s = try db.statement("DELETE FROM hub_heads WHERE hub = ? AND collection = ?")
        try s.bind(0, hub)
        try s.bind(1, collection.description)
        try s.run()
    }

    public func setMetadata(_ key: String, _ value: String) throws(StoreError) {
        let s = try db.statement("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
        try s.bind(0, key)
        try s.bind(1, value)
        try s.run()
    }

    public func metadata(_ key: String) throws(StoreError) -> String? {
        let s = try db.statement("SELECT value FROM meta WHERE key = ?")
        try s.bind(0, key)
        let value = try s.step() ? s.text(0) : nil
        try s.run()
        return value
    }

    /// Appends resolved conflicts to the conflict log, then trims the log to its bounds (see
    /// `DocumentStore.conflictLogMaxEntries` and `conflictLogMaxBodyBytes`; age is the hourly
    /// retention's job). Call once per transaction with all of them: the trim runs once.
    public func logConflicts(_ records: [ConflictRecord]) throws(StoreError) {
        guard !records.isEmpty else { return }
        for c in records {
            let s = try db.statement("""
                INSERT INTO conflicts(collection_id, doc_id, local_version, remote_version, peer_id, resolver, outcome, at,
                                      body_bytes, local_body, remote_body)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)   // cached: each call hands it back reset
            try s.bind(0, try store.collectionIDForTransaction(c.collection))
            try s.bind(1, c.id)
            try s.bind(2, blob: c.localVersion)
            try s.bind(3, blob: c.remoteVersion)
            try s.bind(4, c.peer)
            try s.bind(5, c.resolver)
            try s.bind(6, c.outcome)
            try s.bind(7, c.atMillis)
            try s.bind(8, Int64((c.localBody?.utf8.count ?? 0) + (c.remoteBody?.utf8.count ?? 0)))
            try s.bind(9, c.localBody)
            try s.bind(10, c.remoteBody)
            try s.run()
        }
        try trimConflictLog()
    }

    public func logConflict(_ c: ConflictRecord) throws(StoreError) { try logConflicts([c]) }

    /// The newest `conflictLogMaxEntries` entries, and of those only as many of the newest as fit
    /// in `conflictLogMaxBodyBytes` of bodies (the newest one always stays).
    func trimConflictLog() throws(StoreError) {
        let byCount = try db.statement("DELETE FROM conflicts WHERE id <= (SELECT max(id) FROM conflicts) - ?")
        try byCount.bind(0, Int64(DocumentStore.conflictLogMaxEntries))
        try byCount.run()
        let total = try db.statement("SELECT coalesce(sum(body_bytes), 0) FROM conflicts")
        let bytes = try total.step() ? total.int64(0) : 0
        try total.run()
        guard bytes > DocumentStore.conflictLogMaxBodyBytes else { return }
        let byBytes = try db.statement("""
            DELETE FROM conflicts WHERE id IN (
                SELECT id FROM (SELECT id, sum(body_bytes) OVER (ORDER BY id DESC) AS newer FROM conflicts)
                WHERE newer > ?1 AND id < (SELECT max(id) FROM conflicts))
            """)
        try byBytes.bind(0, DocumentStore.conflictLogMaxBodyBytes)
        try byBytes.run()
    }
}
