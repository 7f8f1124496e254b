import ShoalCore

/// A local upload: bytes appended in pieces of any size, kept as 64 KiB chunks as they fill (one
/// transaction per `append`), hashed on the way; `finish` names the blob and returns its reference.
///
/// What a reader gets wrong: until `finish` the upload has no digest and nothing can refer to it;
/// an upload abandoned (or cut by a crash) is dropped by the blob GC after its grace period.
/// Not thread-safe: one writer per upload.
public final class BlobWriter {
    let store: DocumentStore
    /// The upload's row, made with its first chunks (nil before: a blob under 64 KiB is written in
    /// one transaction by `finish`).
    var uploadID: Int64?
    public let contentType: String?
    /// The manifest, built as chunks fill (one SHA-256 pass over the upload).
    var builder = BlobManifest.Builder()
    var chunks = 0
    var pending: [UInt8] = []
    public private(set) var length: Int64 = 0
    var done = false

    init(store: DocumentStore, contentType: String?) {
        self.store = store
        self.contentType = contentType
        pending.reserveCapacity(BlobManifest.chunkSize)
    }

    /// Adds bytes. Over the store's `maxBlobBytes` the upload is dropped and `tooLarge` thrown.
    public func append(_ bytes: [UInt8]) throws(StoreError) {
        guard !done else { throw .blob(.io("this upload is already finished or cancelled")) }
        guard length + Int64(bytes.count) <= store.options.maxBlobBytes else {
            cancel()
            throw .blob(.tooLarge("the upload passed \(store.options.maxBlobBytes) bytes, this gateway's limit (storage.maxBlobBytes); nothing was kept"))
        }
        length += Int64(bytes.count)
        var full: [(index: Int, bytes: [UInt8])] = []
        var at = 0
        while at < bytes.count {
            let take = min(BlobManifest.chunkSize - pending.count, bytes.count - at)
            pending.append(contentsOf: bytes[at..<(at + take)])
            at += take
            if pending.count == BlobManifest.chunkSize {
                full.append((chunks, pending))
                builder.add(pending)
                chunks += 1
                pending.removeAll(keepingCapacity: true)
            }
        }
        guard !full.isEmpty else { return }
        do { uploadID = try store.storeUploadChunks(uploadID, contentType: contentType, full) } catch {
            cancel()
            throw error
        }
    }

    /// Keeps the last chunk and names the blob. When a complete blob with that digest is already
    /// here the upload is dropped and the reference returned all the same.
    public func finish() throws(StoreError) -> BlobReference {
        guard !done else { throw .blob(.io("this upload is already finished or cancelled")) }
        done = true
        var last: [(index: Int, bytes: [UInt8])] = []
        if !pending.isEmpty {
            last.append((chunks, pending))
            builder.add(pending)
        }
        let manifest = builder.finish()
        do {
            return try store.finishUpload(uploadID, last: last, manifest: manifest, contentType: contentType)
        } catch {
            if let uploadID { try? store.dropUpload(uploadID) }
            throw error
        }
    }

    /// Drops what was written.
    public func cancel() {
        guard !done else { return }
        done = true
        if let uploadID { try? store.dropUpload(uploadID) }
    }
}

/// Reads a complete blob chunk by chunk, in order.
public final class BlobReader {
    let store: DocumentStore
    public let reference: BlobReference
    public let chunkCount: Int
    var next = 0

    init(store: DocumentStore, reference: BlobReference) {
        self.store = store
        self.reference = reference
        chunkCount = BlobManifest.chunkCount(length: reference.length)
    }

    /// The next chunk; nil after the last. Throws when a chunk is missing (the blob was dropped
    /// since the reader opened).
    public func nextChunk() throws(StoreError) -> [UInt8]? {
        guard next < chunkCount else { return nil }
        guard let bytes = try store.readBlobChunk(reference.digest, index: next) else {
            throw .blob(.notFound(reference.digest))
        }
        next += 1
        return bytes
    }
}

extension DocumentStore {
    /// Starts a local upload (see `BlobWriter`).
    public func blobWriter(contentType: String? = nil) throws(StoreError) -> BlobWriter {
        if let contentType, contentType.utf8.count > BlobReference.maxContentTypeBytes {
            throw .blob(.badReference("a content type is at most \(BlobReference.maxContentTypeBytes) bytes"))
        }
        return BlobWriter(store: self, contentType: contentType)
    }

    /// Keeps `bytes` as a blob and returns the reference to put in a document.
    public func putBlob(bytes: [UInt8], contentType: String? = nil) throws(StoreError) -> BlobReference {
        let w = try blobWriter(contentType: contentType)
        try w.append(bytes)
        return try w.finish()
    }

    /// A reader of a complete blob held here; `notFound` when it is not (or only in part).
    public func blobReader(_ digest: BlobDigest) throws(StoreError) -> BlobReader {
        guard let info = try blobInfo(digest), info.state == .complete else { throw .blob(.notFound(digest)) }
        return BlobReader(store: self, reference: info.reference)
    }

    /// At most `maxRangeBytes` of a complete blob from `offset` (fewer at its end).
    public static let maxRangeBytes = 16 << 20
    public func readBlob(_ digest: BlobDigest, offset: Int64, length: Int) throws(StoreError) -> [UInt8] {
        guard let info = try blobInfo(digest), info.state == .complete else { throw .blob(.notFound(digest)) }
        guard offset >= 0, offset <= info.length else {
            throw .blob(.badReference("offset \(offset) is outside \(digest) (\(info.length) bytes)"))
        }
        guard length >= 0, length <= DocumentStore.maxRangeBytes else {
            throw .blob(.tooLarge("a read is at most \(DocumentStore.maxRangeBytes) bytes; \(length) asked"))
        }
        let end = min(info.length, offset + Int64(length))
        var out: [UInt8] = []
        out.reserveCapacity(Int(end - offset))
        var at = offset
        let size = Int64(BlobManifest.chunkSize)
        while at < end {
            let index = Int(at / size)
            guard let chunk = try readBlobChunk(digest, index: index) else { throw .blob(.notFound(digest)) }
            let from = Int(at - Int64(index) * size)
            let to = Int(min(Int64(chunk.count), end - Int64(index) * size))
            guard from < to else { break }
            out.append(contentsOf: chunk[from..<to])
            at += Int64(to - from)
        }
        return out
    }

    /// Keeps chunks of an upload in one transaction, making its row first when `id` is nil;
    /// returns the row's id.
    func storeUploadChunks(_ id: Int64?, contentType: String?, _ chunks: [(index: Int, bytes: [UInt8])]) throws(StoreError) -> Int64 {
        try transaction { (tx) throws(StoreError) -> Int64 in try Self.storeUploadChunks(tx, id, contentType: contentType, chunks) }
    }

    static func storeUploadChunks(_ tx: StoreTransaction, _ id: Int64?, contentType: String?, _ chunks: [(index: Int, bytes: [UInt8])]) throws(StoreError) -> Int64 {
        let uploadID: Int64
        if let id {
            uploadID = id
        } else {
            let s = try tx.db.statement("""
                INSERT INTO blobs(digest, length, content_type, state, created_at, used_at) VALUES (NULL, 0, ?1, 'writing', ?2, ?2) RETURNING id
                """)
            try s.bind(0, contentType)
            try s.bind(1, tx.now)
            guard try s.step() else { throw .sqlite(call: "INSERT blobs", code: 1, message: "no id returned") }
            uploadID = s.int64(0)
            try s.run()
        }
        var added: Int64 = 0
        for c in chunks {
            let s = try tx.db.statement("INSERT INTO blob_chunks(blob_id, idx, data) VALUES (?, ?, ?)")
            try s.bind(0, uploadID)
            try s.bind(1, Int64(c.index))
            try s.bind(2, blob: c.bytes)
            try s.run()
            added += Int64(c.bytes.count)
        }
        let u = try tx.db.statement("UPDATE blobs SET held_bytes = held_bytes + ?1, length = length + ?1, used_at = ?3 WHERE id = ?2 AND state = 'writing'")
        try u.bind(0, added)
        try u.bind(1, uploadID)
        try u.bind(2, tx.now)
        try u.run()
        guard tx.db.changes == 1 else { throw .blob(.io("upload \(uploadID) is gone (dropped by the blob GC after its grace period?)")) }
        return uploadID
    }

    /// The last chunk and the naming, in one transaction (so a blob under 64 KiB costs one commit).
    func finishUpload(_ id: Int64?, last: [(index: Int, bytes: [UInt8])], manifest: BlobManifest, contentType: String?) throws(StoreError) -> BlobReference {
        try transaction { (tx) throws(StoreError) -> BlobReference in
            let db = tx.db
            let id = try Self.storeUploadChunks(tx, id, contentType: contentType, last)
            if let existing = try Self.blobRow(db, manifest.digest) {
                if existing.state == .complete {
                    let d = try db.statement("DELETE FROM blobs WHERE id = ?")
                    try d.bind(0, id)
                    try d.run()
                    try Self.touchBlob(db, existing.id)
                    return BlobReference(digest: manifest.digest, length: manifest.length, contentType: contentType ?? existing.contentType)
                }
                let d = try db.statement("DELETE FROM blobs WHERE id = ?")
                try d.bind(0, existing.id)
                try d.run()
            }
            let u = try db.statement("""
                UPDATE blobs SET digest = ?, length = ?, manifest = ?, state = 'complete', used_at = ? WHERE id = ? AND state = 'writing'
                """)
            try u.bind(0, blob: manifest.digest.bytes)
            try u.bind(1, manifest.length)
            try u.bind(2, blob: manifest.storedBytes)
            try u.bind(3, tx.now)
            try u.bind(4, id)
            try u.run()
            guard db.changes == 1 else { throw .blob(.io("upload \(id) is gone (dropped by the blob GC after its grace period?)")) }
            let w = try db.statement("DELETE FROM blob_wants WHERE digest = ?")
            try w.bind(0, blob: manifest.digest.bytes)
            try w.run()
            return BlobReference(digest: manifest.digest, length: manifest.length, contentType: contentType)
        }
    }

    func dropUpload(_ id: Int64) throws(StoreError) {
        try locked { db throws(StoreError) in
            let s = try db.statement("DELETE FROM blobs WHERE id = ? AND state = 'writing'")
            try s.bind(0, id)
            try s.run()
        }
    }
}
