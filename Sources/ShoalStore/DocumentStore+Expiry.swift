import ShoalCore

/// Expiration: documents purged locally — the row removed, no tombstone, no change-feed entry,
/// nothing a peer could take as a delete. What a reader gets wrong: a purge is not a delete. The
/// other gateways keep their copies; only the rules below keep a purged document from coming back
/// here by replication:
///
/// - **TTL** (per collection, from the site file): a document expires `ttl` after its last write's
///   HLC time (`written_at`, from its version), which travels with it, so every gateway with the
///   same TTL computes the same instant. A document received already expired by that rule is
///   refused (`RemoteApply`, the pull's announce).
/// - **Local expiry** (`setExpiration`): this gateway only. **Budgets** (`maxDocuments`,
///   `maxBytes`): the oldest by `written_at` go first (ties by id). Both are local decisions, so the
///   purged version is kept in `purged_documents` (not replicated): a peer that later sends that
///   version, or an older one (a resync after a new store epoch), is refused; a newer write is taken.
extension DocumentStore {
    /// The metadata key of the lowest sequence the next write may not reuse (a purge may remove
    /// the rows that held the highest sequences).
    public static let sequenceFloorKey = "sequenceFloor"
    /// Purge records older than this go (30 days)…
    public static let purgeRecordsMaxAgeMillis: Int64 = 30 * 24 * 3600 * 1000
    /// …and past this many, the oldest.
    public static let purgeRecordsMaxCount: Int64 = 100_000
    /// At most this many documents per transaction (the store's lock is not held for long).
    public static let purgeBatchMax = 500

    /// The physical HLC time of a version's newest write (ms), or `otherwise` for a document
    /// without one (written before versions existed, or by a test's bare store).
    static func writtenAtMillis(_ version: [UInt8], otherwise: Int64) -> Int64 {
        guard let newest = DocumentVersion.newestTimestamp(encoded: version) else { return otherwise }
        return Int64(clamping: newest.physicalMillis)
    }

    /// Migration 8 set `written_at` to the local write time; the version's own time is the rule.
    static func backfillWrittenAt(_ db: SQLiteConnection) throws(StoreError) {
        let s = try db.statement("SELECT rowid, version, updated_at FROM documents WHERE length(version) > 0")
        var rows: [(Int64, Int64)] = []
        while try s.step() { rows.append((s.int64(0), writtenAtMillis(s.blob(1), otherwise: s.int64(2)))) }
        guard !rows.isEmpty else { return }
        try db.exec("BEGIN IMMEDIATE")
        do {
            for (rowid, at) in rows {
                let u = try db.statement("UPDATE documents SET written_at = ? WHERE rowid = ?")
                try u.bind(0, at)
                try u.bind(1, rowid)
                try u.run()
            }
            try db.exec("COMMIT")
        } catch {
            try? db.exec("ROLLBACK")
            throw error
        }
    }

    /// Sets (or with nil clears) a live document's local expiry, in wall-clock ms. False if the
    /// collection holds no live document with that id. Not replicated, not a change.
    @discardableResult
    public func setExpiration(_ collection: CollectionName, id: DocumentID, atMillis: Int64?) throws(StoreError) -> Bool {
        try transaction { (tx) throws(StoreError) -> Bool in
            let s = try tx.db.statement("UPDATE documents SET expires_at = ? WHERE collection_id = ? AND doc_id = ? AND deleted = 0")
            if let atMillis { try s.bind(0, atMillis) } else { try s.bind(0, Optional<String>.none) }
            try s.bind(1, try collectionIDForTransaction(collection))
            try s.bind(2, id.rawValue)
            try s.run()
            return tx.db.changes > 0
        }
    }

    /// A live document's local expiry (wall ms); nil if it has none (or does not exist).
    public func expiration(_ collection: CollectionName, id: DocumentID) throws(StoreError) -> Int64? {
        try transaction { (tx) throws(StoreError) -> Int64? in
            let s = try tx.db.statement("SELECT expires_at IS NOT NULL, expires_at FROM documents WHERE collection_id = ? AND doc_id = ? AND deleted = 0")
            try s.bind(0, try collectionIDForTransaction(collection))
            try s.bind(1, id.rawValue)
            let value = try s.step() && s.int64(0) != 0 ? s.int64(1) : nil
            try s.run()
            return value
        }
    }

    /// One pass of expiration at `nowMillis`: local expiries that passed, each rule's TTL, then
    /// each rule's budgets. Bounded per transaction; loops until nothing is left. Trims the purge
    /// records. Counts into `expiryCounts`.
    @discardableResult
    public func purgeExpired(_ rules: [ExpiryRule], nowMillis: Int64) throws(StoreError) -> ExpiryCounts {
        var done = ExpiryCounts()
        while true {
            let n = try purgeBatch(.expired, nowMillis: nowMillis) { (tx) throws(StoreError) in
                let s = try tx.db.statement("""
                    SELECT rowid, collection_id, doc_id, version, body_bytes FROM documents
                    WHERE expires_at <= ? AND deleted = 0 ORDER BY expires_at LIMIT ?
                    """)
                try s.bind(0, nowMillis)
                try s.bind(1, Int64(DocumentStore.purgeBatchMax))
                return try Self.victims(s)
            }
            done.expired += n
            if n < Int64(DocumentStore.purgeBatchMax) { break }
        }
        for rule in rules {
            guard let cid = try? collectionIDForTransactionLocked(rule.collection) else { continue }
            if let ttl = rule.ttlMillis {
                while true {
                    let n = try purgeBatch(.ttl, nowMillis: nowMillis) { (tx) throws(StoreError) in
                        let s = try tx.db.statement("""
                            SELECT rowid, collection_id, doc_id, version, body_bytes FROM documents
                            WHERE collection_id = ? AND deleted = 0 AND written_at <= ? ORDER BY written_at LIMIT ?
                            """)
                        try s.bind(0, cid)
                        try s.bind(1, nowMillis - ttl)
                        try s.bind(2, Int64(DocumentStore.purgeBatchMax))
                        return try Self.victims(s)
                    }
                    done.ttl += n
                    if n < Int64(DocumentStore.purgeBatchMax) { break }
                }
            }
            if rule.maxDocuments != nil || rule.maxBytes != nil {
                while true {
                    let n = try purgeBatch(.budget, nowMillis: nowMillis) { (tx) throws(StoreError) in
                        try Self.overBudget(tx, cid, rule)
                    }
                    done.budget += n
                    if n == 0 { break }
                }
            }
        }
        try trimPurgeRecords(nowMillis: nowMillis)
        return done
    }

    struct Victim { let rowid: Int64, collectionID: Int64, id: String, version: [UInt8], bytes: Int64 }

    static func victims(_ s: Statement) throws(StoreError) -> [Victim] {
        var out: [Victim] = []
        while try s.step() { out.append(Victim(rowid: s.int64(0), collectionID: s.int64(1), id: s.text(2) ?? "", version: s.blob(3), bytes: s.int64(4))) }
        return out
    }

    /// The oldest live documents of a collection past its budgets (at most `purgeBatchMax`).
    static func overBudget(_ tx: StoreTransaction, _ cid: Int64, _ rule: ExpiryRule) throws(StoreError) -> [Victim] {
        let t = try tx.db.statement("SELECT count(*), coalesce(sum(body_bytes), 0) FROM documents WHERE collection_id = ? AND deleted = 0")
        try t.bind(0, cid)
        _ = try t.step()
        let (count, bytes) = (t.int64(0), t.int64(1))
        try t.run()
        let extraCount = max(0, count - (rule.maxDocuments ?? Int64.max))
        let extraBytes = max(0, bytes - (rule.maxBytes ?? Int64.max))
        guard extraCount > 0 || extraBytes > 0 else { return [] }
        let s = try tx.db.statement("""
            SELECT rowid, collection_id, doc_id, version, body_bytes FROM documents
            WHERE collection_id = ? AND deleted = 0 ORDER BY written_at, doc_id LIMIT ?
            """)
        try s.bind(0, cid)
        try s.bind(1, Int64(DocumentStore.purgeBatchMax))
        var out: [Victim] = []
        var freedBytes: Int64 = 0
        for v in try victims(s) {
            guard Int64(out.count) < extraCount || freedBytes < extraBytes else { break }
            out.append(v)
            freedBytes += v.bytes
        }
        return out
    }

    /// Removes what `select` picks, in one transaction, keeping a purge record for local
    /// decisions, and raises the sequence floor. Returns how many went.
    private func purgeBatch(_ reason: PurgeReason, nowMillis: Int64,
                            _ select: (StoreTransaction) throws(StoreError) -> [Victim]) throws(StoreError) -> Int64 {
        let removed = try transaction { (tx) throws(StoreError) -> Int64 in
            let victims = try select(tx)
            guard !victims.isEmpty else { return 0 }
            for v in victims {
                let d = try tx.db.statement("DELETE FROM documents WHERE rowid = ?")
                try d.bind(0, v.rowid)
                try d.run()
                try tx.updateBlobReferences(collectionID: v.collectionID, id: v.id, body: nil)
                guard reason != .ttl else { continue }  // the TTL rule refuses it again by itself
                tx.store.purgeRecordsMayExist = true
                let r = try tx.db.statement("""
                    INSERT INTO purged_documents(collection_id, doc_id, version, reason, purged_at) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(collection_id, doc_id) DO UPDATE SET version = excluded.version, reason = excluded.reason,
                        purged_at = excluded.purged_at
                    """)
                try r.bind(0, v.collectionID)
                try r.bind(1, v.id)
                try r.bind(2, blob: v.version)
                try r.bind(3, reason.rawValue)
                try r.bind(4, nowMillis)
                try r.run()
            }
            try tx.setMetadata(DocumentStore.sequenceFloorKey, String(tx.sequence))
            return Int64(victims.count)
        }
        if removed > 0 {
            expiryCounts.withLock { c in
                switch reason {
                case .expired: c.expired += removed
                case .ttl: c.ttl += removed
                case .budget: c.budget += removed
                }
            }
        }
        return removed
    }

    func trimPurgeRecords(nowMillis: Int64) throws(StoreError) {
        try transaction { (tx) throws(StoreError) in
            let a = try tx.db.statement("DELETE FROM purged_documents WHERE purged_at < ?")
            try a.bind(0, nowMillis - DocumentStore.purgeRecordsMaxAgeMillis)
            try a.run()
            let c = try tx.db.statement("SELECT count(*) FROM purged_documents")
            _ = try c.step()
            let over = c.int64(0) - DocumentStore.purgeRecordsMaxCount
            try c.run()
            guard over > 0 else { return }
            let d = try tx.db.statement("""
                DELETE FROM purged_documents WHERE (collection_id, doc_id) IN
                    (SELECT collection_id, doc_id FROM purged_documents ORDER BY purged_at LIMIT ?)
                """)
            try d.bind(0, over)
            try d.run()
        }
    }

    /// How many purge records are kept (for tests and `status`).
    public func purgeRecordCount() throws(StoreError) -> Int64 {
        try transaction { (tx) throws(StoreError) -> Int64 in
            let c = try tx.db.statement("SELECT count(*) FROM purged_documents")
            _ = try c.step()
            let n = c.int64(0)
            try c.run()
            return n
        }
    }

    /// Counts documents refused on receive because they were expired by the rules here.
    public func noteRefusedExpired(_ n: Int) {
        guard n > 0 else { return }
        expiryCounts.withLock { $0.refused += Int64(n) }
    }

    func collectionIDForTransactionLocked(_ name: CollectionName) throws(StoreError) -> Int64 {
        try transaction { (_) throws(StoreError) -> Int64 in try collectionIDForTransaction(name) }
    }
}

extension StoreTransaction {
    /// The version this gateway purged of a document by its own decision (local expiry, budget),
    /// if it still keeps the record.
    public func purgedVersion(_ collection: CollectionName, id: String) throws(StoreError) -> [UInt8]? {
        guard store.purgeRecordsMayExist else { return nil }
        let s = try db.statement("SELECT version FROM purged_documents WHERE collection_id = ? AND doc_id = ?")
        try s.bind(0, try store.collectionIDForTransaction(collection))
        try s.bind(1, id)
        let v = try s.step() ? s.blob(0) : nil
        try s.run()
        return v
    }

    /// Whether this store may hold records of purged versions (false: `expiryRefusal` does not
    /// use `holdsLocal`, so the caller may skip looking it up).
    public var purgeRecordsMayExist: Bool { store.purgeRecordsMayExist }

    /// Whether a document arriving with `version` must be refused here: expired by the
    /// collection's TTL (`ttlMillis` after its last write's HLC time, at `nowMillis`), or a version
    /// this gateway purged itself (or an older one). Nil: take it; else why not.
    public func expiryRefusal(_ collection: CollectionName, id: String, version: [UInt8], ttlMillis: Int64?,
                              nowMillis: Int64, holdsLocal: Bool) throws(StoreError) -> String? {
        if let ttlMillis, DocumentStore.writtenAtMillis(version, otherwise: Int64.max) <= nowMillis - ttlMillis {
            return "refused: expired by the collection's ttl"
        }
        guard !holdsLocal, let purged = try purgedVersion(collection, id: id) else { return nil }
        guard let p = try? DocumentVersion(decoding: purged), let v = try? DocumentVersion(decoding: version) else { return nil }
        switch v.vector.compare(p.vector) {
        case .dominated, .equal: return "refused: this gateway purged this version (expiry or budget)"
        case .dominates, .concurrent: return nil
        }
    }
}

/// Why a document went without a tombstone.
public enum PurgeReason: String, Sendable {
    /// Its local expiry (`setExpiration`) passed.
    case expired
    /// Its collection's TTL passed since its last write.
    case ttl
    /// Its collection was over a budget and it was among the oldest.
    case budget
}

/// A collection's expiration rules (the site file's `ttl`, `maxDocuments`, `maxBytes`).
public struct ExpiryRule: Sendable, Equatable {
    public var collection: CollectionName
    public var ttlMillis: Int64?
    public var maxDocuments: Int64?
    public var maxBytes: Int64?

    public init(collection: CollectionName, ttlMillis: Int64? = nil, maxDocuments: Int64? = nil, maxBytes: Int64? = nil) {
        self.collection = collection
        self.ttlMillis = ttlMillis
        self.maxDocuments = maxDocuments
        self.maxBytes = maxBytes
    }

    public var isEmpty: Bool { ttlMillis == nil && maxDocuments == nil && maxBytes == nil }
}

/// Documents purged (by reason) and refused on receive (expired by the rules here).
public struct ExpiryCounts: Sendable, Equatable {
    public var expired: Int64 = 0
    public var ttl: Int64 = 0
    public var budget: Int64 = 0
    public var refused: Int64 = 0
    public init() {}
}
