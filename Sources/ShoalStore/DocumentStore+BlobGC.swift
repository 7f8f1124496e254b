import ShoalCore

/// How the blob GC decides (see `DocumentStore.collectBlobGarbage`).
public struct BlobGCPolicy: Sendable, Equatable {
    /// Bytes of chunks the gateway may hold; nil: no budget (only garbage goes).
    public var budgetBytes: Int64?
    /// Collections whose blobs are fetched when a reader asks (`scope.name` or a bare name): their
    /// blobs can be fetched again, so the budget may drop them. Every other collection is eager.
    public var onDemandCollections: Set<String>
    /// A blob unreferenced for less than this stays (it was put just before its document).
    public var graceMillis: Int64

    public static let defaultGraceMillis: Int64 = 10 * 60 * 1000

    public init(budgetBytes: Int64? = nil, onDemandCollections: Set<String> = [], graceMillis: Int64 = BlobGCPolicy.defaultGraceMillis) {
        self.budgetBytes = budgetBytes
        self.onDemandCollections = onDemandCollections
        self.graceMillis = graceMillis
    }
}

/// What one GC pass did.
public struct BlobGCReport: Sendable, Equatable {
    public var dropped: Int64 = 0
    public var droppedBytes: Int64 = 0
    /// Still over the budget with only blobs that must stay (eager-referenced, wanted, or in
    /// their grace period): add storage or raise `storage.blobBudget`.
    public var overBudget = false
    /// What is held after the pass.
    public var stats = BlobStats()
    public init() {}
}

extension DocumentStore {
    /// One blob held here, in any state.
    public func blobInfo(_ digest: BlobDigest) throws(StoreError) -> BlobInfo? {
        try listBlobs(digest: digest, limit: 1).first
    }

    /// The blobs held (complete and partial), in digest order, at most `limit`.
    public func blobs(limit: Int = 10_000) throws(StoreError) -> [BlobInfo] {
        try listBlobs(digest: nil, limit: limit)
    }

    private func listBlobs(digest: BlobDigest?, limit: Int) throws(StoreError) -> [BlobInfo] {
        try locked { db throws(StoreError) in
            let s = try db.statement("""
                SELECT b.digest, b.length, b.content_type, b.state, b.held_bytes, b.created_at, b.used_at,
                       (SELECT count(*) FROM blob_refs r WHERE r.digest = b.digest)
                FROM blobs b WHERE b.digest IS NOT NULL AND (?1 IS NULL OR b.digest = ?1) ORDER BY b.digest LIMIT ?2
                """)
            if let digest { try s.bind(0, blob: digest.bytes) } else { try s.bind(0, nil as String?) }
            try s.bind(1, Int64(max(0, min(limit, 100_000))))
            var out: [BlobInfo] = []
            while try s.step() {
                guard let d = BlobDigest(bytes: s.blob(0)) else { continue }
                out.append(BlobInfo(digest: d, length: s.int64(1), contentType: s.text(2), state: BlobState(rawValue: s.text(3) ?? "") ?? .partial,
                                    heldBytes: s.int64(4), createdAtMillis: s.int64(5), usedAtMillis: s.int64(6), referencedBy: s.int64(7)))
            }
            return out
        }
    }

    /// As of the last commit, on the read-only connection (never waits for a write).
    public func blobStats() throws(StoreError) -> BlobStats {
        try reading { db throws(StoreError) in try Self.blobStats(db) }
    }

    static func blobStats(_ db: SQLiteConnection) throws(StoreError) -> BlobStats {
        let s = try db.statement("""
            SELECT coalesce(sum(state != 'writing'), 0), coalesce(sum(held_bytes), 0),
                   coalesce(sum(CASE WHEN state = 'complete' THEN 0 ELSE held_bytes END), 0) FROM blobs
            """)
        var stats = BlobStats()
        if try s.step() { (stats.count, stats.bytes, stats.partialBytes) = (s.int64(0), s.int64(1), s.int64(2)) }
        try s.run()
        return stats
    }

    /// One GC pass. First garbage goes: complete blobs no live document refers to, partial blobs
    /// nobody wants (no eager reference, no reader's demand) and abandoned uploads, each once
    /// unused for the grace period. Then, while over the budget, complete blobs referenced only
    /// from on-demand collections, least recently used first (a reader can fetch them again). A
    /// blob an eager collection refers to never goes: the report says `overBudget` instead.
    @discardableResult
    public func collectBlobGarbage(_ policy: BlobGCPolicy, nowMillis: Int64? = nil) throws(StoreError) -> BlobGCReport {
        let nowMillis = nowMillis ?? DocumentStore.nowMillis()
        let onDemand = try locked { _ throws(StoreError) -> String in
            let ids = policy.onDemandCollections.compactMap { (try? CollectionName(parsing: $0)).flatMap { collectionIDs[$0] } }
            return "[" + ids.map(String.init).joined(separator: ",") + "]"
        }
        var report = try transaction { (tx) throws(StoreError) -> BlobGCReport in
            let s = try tx.db.statement("""
                DELETE FROM blobs WHERE used_at < ?1 AND (
                    state = 'writing'
                    OR (state = 'complete' AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.digest = blobs.digest))
                    OR (state = 'partial' AND NOT EXISTS (SELECT 1 FROM blob_wants w WHERE w.digest = blobs.digest)
                        AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.digest = blobs.digest
                                        AND r.collection_id NOT IN (SELECT value FROM json_each(?2)))))
                RETURNING held_bytes
                """)
            try s.bind(0, nowMillis - policy.graceMillis)
            try s.bind(1, onDemand)
            var r = BlobGCReport()
            while try s.step() {
                r.dropped += 1
                r.droppedBytes += s.int64(0)
            }
            return r
        }
        if let budget = policy.budgetBytes {
            try dropOnDemandBlobs(over: budget, onDemand: onDemand, into: &report)
        }
        report.stats = try blobStats()
        if let budget = policy.budgetBytes, report.stats.bytes > budget { report.overBudget = true }
        let r = report
        blobCounts.withLock { c in
            c.passes += 1
            c.dropped += r.dropped
            c.droppedBytes += r.droppedBytes
            if r.overBudget { c.overBudget += 1 }
        }
        if r.dropped > 0 { logger.info(.store, "blob GC: dropped \(r.dropped.counted("blob")) (\(r.droppedBytes) bytes); \(r.stats.bytes) bytes held") }
        if r.overBudget {
            logger.warning(.store, "blobs hold \(r.stats.bytes) bytes, over storage.blobBudget (\(policy.budgetBytes ?? 0)); what is left is referenced by eager collections, wanted or in its grace period: raise the budget or make collections `blobs: onDemand`")
        }
        return r
    }

    /// Drops complete blobs referenced only from on-demand collections, least recently used first,
    /// until the chunks held fit `budget` (in batches, one transaction each).
    private func dropOnDemandBlobs(over budget: Int64, onDemand: String, into report: inout BlobGCReport) throws(StoreError) {
        for _ in 0..<1000 {
            let (n, bytes) = try transaction { (tx) throws(StoreError) -> (Int64, Int64) in
                var held = try Self.blobStats(tx.db).bytes
                guard held > budget else { return (0, 0) }
                let s = try tx.db.statement("""
                    SELECT id, held_bytes FROM blobs b WHERE state = 'complete'
                        AND EXISTS (SELECT 1 FROM blob_refs r WHERE r.digest = b.digest)
                        AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.digest = b.digest
                                        AND r.collection_id NOT IN (SELECT value FROM json_each(?1)))
                    ORDER BY used_at, id LIMIT 100
                    """)
                try s.bind(0, onDemand)
                var victims: [(Int64, Int64)] = []
                while try s.step(), held > budget {
                    victims.append((s.int64(0), s.int64(1)))
                    held -= s.int64(1)
                }
                try s.run()
                for (id, _) in victims {
                    let d = try tx.db.statement("DELETE FROM blobs WHERE id = ?")
                    try d.bind(0, id)
                    try d.run()
                }
                return (Int64(victims.count), victims.reduce(0) { $0 + $1.1 })
            }
            guard n > 0 else { return }
            report.dropped += n
            report.droppedBytes += bytes
        }
    }
}
