import CSQLite
import ShoalCore

/// Blobs in the store's SQLite file (so a backup holds them too): one `blobs` row per blob, its
/// verified chunks in `blob_chunks` (64 KiB rows), which live documents refer to which blob in
/// `blob_refs`, and what readers asked for in `blob_wants`.
///
/// What a reader gets wrong: references are not written by callers. Every document write the store
/// does (local, remote, purge, expiry) replaces that document's rows in `blob_refs` in the same
/// transaction, from the body's `{"@blob": …}` objects; a tombstone has none.
public enum BlobState: String, Sendable, Equatable {
    /// A local upload still being written (it has no digest yet).
    case writing
    /// Some chunks are held; the rest are on their way.
    case partial
    /// Every chunk is held and the whole matched its digest.
    case complete
}

/// A blob held here, as listed.
public struct BlobInfo: Sendable, Equatable {
    public let digest: BlobDigest
    public let length: Int64
    public let contentType: String?
    public let state: BlobState
    /// Bytes of the chunks held (the length when complete).
    public let heldBytes: Int64
    public let createdAtMillis: Int64
    public let usedAtMillis: Int64
    /// Live documents referring to it.
    public let referencedBy: Int64

    public var reference: BlobReference { BlobReference(digest: digest, length: length, contentType: contentType) }
}

/// The blobs held, in figures.
public struct BlobStats: Sendable, Equatable {
    /// Blobs complete or partial (uploads still being written are not counted).
    public var count: Int64 = 0
    /// Bytes of every chunk held.
    public var bytes: Int64 = 0
    /// Bytes of chunks of blobs not yet complete.
    public var partialBytes: Int64 = 0
    public init() {}
}

/// What blob garbage collection did since the process started.
public struct BlobGCCounts: Sendable, Equatable {
    public var passes: Int64 = 0
    public var dropped: Int64 = 0
    public var droppedBytes: Int64 = 0
    /// Passes that ended over the budget with only blobs that must stay (eager-referenced) left.
    public var overBudget: Int64 = 0
    public init() {}
}

/// A row of `blobs`.
struct BlobRow {
    let id: Int64
    let length: Int64
    let contentType: String?
    let manifest: [UInt8]
    let state: BlobState
    let heldBytes: Int64

    static let columns = "id, length, content_type, manifest, state, held_bytes"

    init(_ s: Statement) {
        id = s.int64(0)
        length = s.int64(1)
        contentType = s.text(2)
        manifest = s.blob(3)
        state = BlobState(rawValue: s.text(4) ?? "") ?? .partial
        heldBytes = s.int64(5)
    }

    func manifest(_ digest: BlobDigest) throws(StoreError) -> BlobManifest {
        guard manifest.count % 32 == 0 else { throw .blob(.badManifest("stored manifest of \(digest) is \(manifest.count) bytes, not a multiple of 32")) }
        let digests = stride(from: 0, to: manifest.count, by: 32).map { Array(manifest[$0..<($0 + 32)]) }
        do { return try BlobManifest(digest: digest, length: length, chunkDigests: digests) } catch { throw .blob(error) }
    }
}

extension BlobManifest {
    /// The chunk digests one after another, as stored.
    var storedBytes: [UInt8] { chunkDigests.flatMap { $0 } }
}

// MARK: - BlobStorage (what the replicator asks)

extension DocumentStore: BlobStorage {
    public func blobManifest(_ digest: BlobDigest) throws(StoreError) -> BlobManifest? {
        try locked { db throws(StoreError) in try Self.blobRow(db, digest)?.manifest(digest) }
    }

    public func blobIsComplete(_ digest: BlobDigest) throws(StoreError) -> Bool {
        try locked { db throws(StoreError) in try Self.blobRow(db, digest)?.state == .complete }
    }

    public func heldBlobChunks(_ digest: BlobDigest) throws(StoreError) -> [Bool]? {
        try locked { db throws(StoreError) in
            guard let row = try Self.blobRow(db, digest) else { return nil }
            var held = [Bool](repeating: false, count: BlobManifest.chunkCount(length: row.length))
            let s = try db.statement("SELECT idx FROM blob_chunks WHERE blob_id = ?")
            try s.bind(0, row.id)
            while try s.step() {
                let i = Int(s.int64(0))
                if held.indices.contains(i) { held[i] = true }
            }
            return held
        }
    }

    public func readBlobChunk(_ digest: BlobDigest, index: Int) throws(StoreError) -> [UInt8]? {
        try locked { db throws(StoreError) in
            let s = try db.statement("""
                SELECT c.data, b.id FROM blob_chunks c JOIN blobs b ON b.id = c.blob_id WHERE b.digest = ? AND c.idx = ?
                """)
            try s.bind(0, blob: digest.bytes)
            try s.bind(1, Int64(index))
            guard try s.step() else { return nil }
            let data = s.blob(0), id = s.int64(1)
            try s.run()
            // A read from the start counts as a use (the budget drops the least recently used).
            if index == 0 { try Self.touchBlob(db, id) }
            return data
        }
    }

    public func beginBlob(_ manifest: BlobManifest) throws(StoreError) {
        guard manifest.length <= options.maxBlobBytes else {
            throw .blob(.tooLarge("\(manifest.digest) is \(manifest.length) bytes, over this gateway's limit of \(options.maxBlobBytes)"))
        }
        try transaction { (tx) throws(StoreError) in
            let db = tx.db
            let encoded = manifest.storedBytes
            if let row = try Self.blobRow(db, manifest.digest) {
                if row.manifest == encoded, row.length == manifest.length { return }
                if row.state == .complete {
                    throw .blob(.badManifest("a different manifest for \(manifest.digest), which is held complete here"))
                }
                let d = try db.statement("DELETE FROM blob_chunks WHERE blob_id = ?")
                try d.bind(0, row.id)
                try d.run()
                let u = try db.statement("UPDATE blobs SET length = ?, manifest = ?, held_bytes = 0, state = 'partial' WHERE id = ?")
                try u.bind(0, manifest.length)
                try u.bind(1, blob: encoded)
                try u.bind(2, row.id)
                try u.run()
            } else {
                let s = try db.statement("""
                    INSERT INTO blobs(digest, length, content_type, manifest, state, held_bytes, created_at, used_at)
                    VALUES (?1, ?2, coalesce((SELECT content_type FROM blob_wants WHERE digest = ?1),
                                             (SELECT content_type FROM blob_refs WHERE digest = ?1 LIMIT 1)),
                            ?3, 'partial', 0, ?4, ?4)
                    """)
                try s.bind(0, blob: manifest.digest.bytes)
                try s.bind(1, manifest.length)
                try s.bind(2, blob: encoded)
                try s.bind(3, tx.now)
                try s.run()
            }
            if manifest.chunkCount == 0, let row = try Self.blobRow(db, manifest.digest) {
                _ = try completeIfWhole(db, row, manifest)
            }
        }
    }

    public func storeBlobChunks(_ digest: BlobDigest, _ chunks: [(index: Int, bytes: [UInt8])]) throws(StoreError) -> BlobChunkOutcome {
        try transaction { (tx) throws(StoreError) -> BlobChunkOutcome in
            let db = tx.db
            guard let row = try Self.blobRow(db, digest) else { throw .blob(.notFound(digest)) }
            guard row.state != .complete else { return .completed }
            let manifest = try row.manifest(digest)
            for c in chunks { try Self.checkChunk(manifest, index: c.index, bytes: c.bytes) }
            var added: Int64 = 0
            for c in chunks {
                let s = try db.statement("INSERT INTO blob_chunks(blob_id, idx, data) VALUES (?, ?, ?) ON CONFLICT(blob_id, idx) DO NOTHING")
                try s.bind(0, row.id)
                try s.bind(1, Int64(c.index))
                try s.bind(2, blob: c.bytes)
                try s.run()
                if db.changes > 0 { added += Int64(c.bytes.count) }
            }
            // A transfer in progress counts as a use: the GC's grace period runs from the last chunk.
            let u = try db.statement("UPDATE blobs SET held_bytes = held_bytes + ?, used_at = ? WHERE id = ?")
            try u.bind(0, added)
            try u.bind(1, tx.now)
            try u.bind(2, row.id)
            try u.run()
            return try completeIfWhole(db, row, manifest)
        }
    }

    public func discardBlob(_ digest: BlobDigest) throws(StoreError) {
        try locked { db throws(StoreError) in
            let s = try db.statement("DELETE FROM blobs WHERE digest = ?")
            try s.bind(0, blob: digest.bytes)
            try s.run()
        }
    }

    public func wantedBlobs(eagerCollections: Set<String>, limit: Int) throws(StoreError) -> [BlobReference] {
        try locked { db throws(StoreError) in
            let ids = eagerCollections.compactMap { (try? CollectionName(parsing: $0)).flatMap { collectionIDs[$0] } }
            let s = try db.statement("""
                SELECT w.digest, w.length, w.content_type, min(w.at) FROM (
                    SELECT digest, length, content_type, at FROM blob_refs WHERE collection_id IN (SELECT value FROM json_each(?1))
                    UNION ALL
                    SELECT digest, length, content_type, wanted_at FROM blob_wants
                ) w
                WHERE w.length <= ?3 AND NOT EXISTS (SELECT 1 FROM blobs b WHERE b.digest = w.digest AND b.state = 'complete')
                GROUP BY w.digest ORDER BY min(w.at), w.digest LIMIT ?2
                """)
            try s.bind(0, "[" + ids.map(String.init).joined(separator: ",") + "]")
            try s.bind(1, Int64(max(0, min(limit, 10_000))))
            try s.bind(2, options.maxBlobBytes)  // one this gateway refuses to keep is not asked for
            var out: [BlobReference] = []
            while try s.step() {
                guard let d = BlobDigest(bytes: s.blob(0)) else { continue }
                out.append(BlobReference(digest: d, length: s.int64(1), contentType: s.text(2)))
            }
            return out
        }
    }

    public func demandBlob(_ reference: BlobReference) throws(StoreError) {
        try locked { db throws(StoreError) in
            if let row = try Self.blobRow(db, reference.digest), row.state == .complete {
                try Self.touchBlob(db, row.id)
                return
            }
            let s = try db.statement("""
                INSERT INTO blob_wants(digest, length, content_type, wanted_at) VALUES (?, ?, ?, ?) ON CONFLICT(digest) DO NOTHING
                """)
            try s.bind(0, blob: reference.digest.bytes)
            try s.bind(1, reference.length)
            try s.bind(2, reference.contentType)
            try s.bind(3, DocumentStore.nowMillis())
            try s.run()
            // Bounded: past `maxWants` the oldest demands are forgotten (a reader asks again).
            let trim = try db.statement("""
                DELETE FROM blob_wants WHERE digest IN (SELECT digest FROM blob_wants ORDER BY wanted_at DESC, digest LIMIT -1 OFFSET ?)
                """)
            try trim.bind(0, Int64(DocumentStore.maxBlobWants))
            try trim.run()
        }
    }

    /// Demands kept at most (`demandBlob`); the oldest go first.
    public static let maxBlobWants = 10_000

    /// The reference a live document holds to `digest` (its length and content type), when one
    /// does: what a reader of a blob not held here can demand.
    public func referencedBlob(_ digest: BlobDigest) throws(StoreError) -> BlobReference? {
        try locked { db throws(StoreError) in
            let s = try db.statement("SELECT length, content_type FROM blob_refs WHERE digest = ? LIMIT 1")
            try s.bind(0, blob: digest.bytes)
            guard try s.step() else { return nil }
            let r = BlobReference(digest: digest, length: s.int64(0), contentType: s.text(1))
            try s.run()
            return r
        }
    }

    /// For a reader of a blob not held whole here: when a live document refers to it, demands it
    /// (the replicator fetches it) and says so; else nil.
    public func demandIfReferenced(_ digest: BlobDigest) throws(StoreError) -> BlobReference? {
        guard let r = try referencedBlob(digest) else { return nil }
        try demandBlob(r)
        return r
    }
}

// MARK: - Inside the store

extension DocumentStore {
    static func blobRow(_ db: SQLiteConnection, _ digest: BlobDigest) throws(StoreError) -> BlobRow? {
        let s = try db.statement("SELECT \(BlobRow.columns) FROM blobs WHERE digest = ?")
        try s.bind(0, blob: digest.bytes)
        guard try s.step() else { return nil }
        let row = BlobRow(s)
        try s.run()
        return row
    }

    static func touchBlob(_ db: SQLiteConnection, _ id: Int64) throws(StoreError) {
        let s = try db.statement("UPDATE blobs SET used_at = ? WHERE id = ?")
        try s.bind(0, DocumentStore.nowMillis())
        try s.bind(1, id)
        try s.run()
    }

    /// A chunk must be one of the manifest's and of its length. Its digest was checked by the
    /// caller (`BlobStorage.storeBlobChunks`: the replicator verifies each chunk as it assembles
    /// it), so the store does not hash it a second time: on a gateway's CPU that pass would cost
    /// as much as the whole transfer's TLS.
    static func checkChunk(_ manifest: BlobManifest, index: Int, bytes: [UInt8]) throws(StoreError) {
        guard index >= 0, index < manifest.chunkCount else {
            throw .blob(.badManifest("chunk \(index) of \(manifest.digest) is out of range (it has \(manifest.chunkCount) chunks)"))
        }
        guard bytes.count == manifest.chunkLength(index) else {
            throw .blob(.badManifest("chunk \(index) of \(manifest.digest) is \(bytes.count) bytes, \(manifest.chunkLength(index)) expected"))
        }
    }

    /// When every chunk is held, the blob is complete (and no longer wanted): each chunk was checked
    /// against the manifest as it came in, and the manifest's chain (see `BlobManifest`) ends at the
    /// blob's name, so the whole needs no second pass. A manifest whose last entry is not the name
    /// never gets this far (`BlobManifest.init` refuses it).
    func completeIfWhole(_ db: SQLiteConnection, _ row: BlobRow, _ manifest: BlobManifest) throws(StoreError) -> BlobChunkOutcome {
        let n = try db.statement("SELECT count(*) FROM blob_chunks WHERE blob_id = ?")
        try n.bind(0, row.id)
        _ = try n.step()
        let held = n.int64(0)
        try n.run()
        guard held >= Int64(manifest.chunkCount) else { return .stored }
        let u = try db.statement("UPDATE blobs SET state = 'complete', held_bytes = length WHERE id = ?")
        try u.bind(0, row.id)
        try u.run()
        let w = try db.statement("DELETE FROM blob_wants WHERE digest = ?")
        try w.bind(0, blob: manifest.digest.bytes)
        try w.run()
        return .completed
    }
}

extension DocumentStore {
    static func insertReference(_ db: SQLiteConnection, collectionID: Int64, id: String, _ r: BlobReference, at: Int64) throws(StoreError) {
        let s = try db.statement("""
            INSERT INTO blob_refs(collection_id, doc_id, digest, length, content_type, at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
            """)
        try s.bind(0, collectionID)
        try s.bind(1, id)
        try s.bind(2, blob: r.digest.bytes)
        try s.bind(3, r.length)
        try s.bind(4, r.contentType)
        try s.bind(5, at)
        try s.run()
    }

    /// A store upgraded to schema 9 may already hold documents whose bodies refer to blobs (written
    /// by hand, or replicated from a newer gateway): their references are recorded once.
    static func backfillBlobReferences(_ db: SQLiteConnection, logger: Logger) throws(StoreError) {
        let s = try db.statement("SELECT collection_id, doc_id, body FROM documents WHERE deleted = 0 AND instr(body, '\"@blob\"') > 0")
        var found: [(Int64, String, [BlobReference])] = []
        while try s.step() {
            let refs = BlobReference.references(inText: s.text(2) ?? "")
            if !refs.isEmpty { found.append((s.int64(0), s.text(1) ?? "", refs)) }
        }
        guard !found.isEmpty else { return }
        let now = DocumentStore.nowMillis()
        try db.exec("BEGIN IMMEDIATE")
        do {
            for (cid, id, refs) in found {
                for r in refs { try insertReference(db, collectionID: cid, id: id, r, at: now) }
            }
            try db.exec("COMMIT")
        } catch {
            try? db.exec("ROLLBACK")
            throw error
        }
        logger.info(.store, "recorded the blob references of \(found.count.counted("document")) already in the store")
    }
}

extension StoreTransaction {
    /// Replaces the blob references of one document with those its new body holds (none for a
    /// tombstone or a purge). Cheap when no body has ever held one and this one does not.
    func updateBlobReferences(collectionID: Int64, id: String, body: String?) throws(StoreError) {
        let refs = body.map { BlobReference.references(inText: $0) } ?? []
        if store.blobReferencesMayExist {
            let d = try db.statement("DELETE FROM blob_refs WHERE collection_id = ? AND doc_id = ?")
            try d.bind(0, collectionID)
            try d.bind(1, id)
            try d.run()
        }
        guard !refs.isEmpty else { return }
        store.blobReferencesMayExist = true
        for r in refs { try DocumentStore.insertReference(db, collectionID: collectionID, id: id, r, at: now) }
    }
}
