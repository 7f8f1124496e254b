import ShoalCore
import ShoalStore
import ShoalThreads

/// A blob kept in the database: binary content named by its SHA-256. Put `json` (the reference
/// object, `{"@blob": "sha256-…", "length": N, "contentType": "…"}`) in a document field; the
/// document then holds the blob (it replicates with it, and the blob GC keeps it).
public struct Blob: Sendable, Equatable {
    /// `sha256-` and 64 hex digits.
    public let digest: String
    public let length: Int64
    public let contentType: String?
    /// The reference object's JSON text, to put in a document.
    public var json: String { reference.json.compactText }

    let reference: BlobReference

    init(_ r: BlobReference) {
        reference = r
        digest = r.digest.description
        length = r.length
        contentType = r.contentType
    }
}

/// A blob written in pieces (`Database.blobUpload`): `append` as the bytes come, then `finish`.
/// Dropped if it passes the size limit, on `cancel`, or (abandoned) by the blob GC.
public final class BlobUpload {
    let writer: BlobWriter

    init(_ writer: BlobWriter) { self.writer = writer }

    public func append(_ bytes: [UInt8]) throws(ShoalError) {
        do { try writer.append(bytes) } catch { throw ShoalError("cannot write the blob: \(error)") }
    }

    public func finish() throws(ShoalError) -> Blob {
        do { return Blob(try writer.finish()) } catch { throw ShoalError("cannot finish the blob: \(error)") }
    }

    public func cancel() { writer.cancel() }
}

extension Database {
    /// Keeps `bytes` as a blob; put the returned `json` in a document to refer to it.
    public func putBlob(_ bytes: [UInt8], contentType: String? = nil) throws(ShoalError) -> Blob {
        do { return Blob(try store.putBlob(bytes: bytes, contentType: contentType)) } catch {
            throw ShoalError("cannot keep a blob of \(bytes.count) bytes: \(error)")
        }
    }

    /// Starts a blob written in pieces (a file, a camera stream) without holding it all in memory.
    public func blobUpload(contentType: String? = nil) throws(ShoalError) -> BlobUpload {
        do { return BlobUpload(try store.blobWriter(contentType: contentType)) } catch { throw ShoalError("cannot start a blob: \(error)") }
    }

    /// The blob named `digest`, when it is held here whole; nil when it is not.
    public func blob(_ digest: String) throws(ShoalError) -> Blob? {
        let d = try Database.digest(digest)
        do {
            guard let info = try store.blobInfo(d), info.state == .complete else { return nil }
            return Blob(info.reference)
        } catch { throw ShoalError("cannot look up blob \(digest): \(error)") }
    }

    /// A held blob's bytes, 64 KiB chunk by chunk, in order; each chunk is read on a thread of
    /// the sequence's own when asked for (nothing is read ahead). Iterating throws when the blob
    /// is not held whole here, or is dropped while being read.
    ///
    ///     for try await chunk in db.blobChunks(digest) { file.write(chunk) }
    public func blobChunks(_ digest: String) -> BlobChunks { BlobChunks(store: store, digest: digest) }

    /// A whole held blob in memory (at most `DocumentStore.maxRangeBytes`; use `blobChunks` for larger).
    public func readBlob(_ digest: String) throws(ShoalError) -> [UInt8] {
        let d = try Database.digest(digest)
        do {
            guard let info = try store.blobInfo(d), info.state == .complete else { throw StoreError.blob(.notFound(d)) }
            return try store.readBlob(d, offset: 0, length: Int(min(info.length, Int64(DocumentStore.maxRangeBytes))))
        } catch { throw ShoalError("cannot read blob \(digest): \(error)") }
    }

    static func digest(_ text: String) throws(ShoalError) -> BlobDigest {
        guard let d = BlobDigest(text) else { throw ShoalError("\"\(text)\" is not a blob digest (sha256- and 64 hex digits)") }
        return d
    }
}

/// A blob's chunks as an `AsyncSequence` (see `Database.blobChunks`).
public struct BlobChunks: AsyncSequence, Sendable {
    public typealias Element = [UInt8]
    let store: DocumentStore
    let digest: String

    public func makeAsyncIterator() -> Iterator { Iterator(ReadState(store: store, digest: digest)) }

    public struct Iterator: AsyncIteratorProtocol {
        let state: ReadState
        init(_ state: ReadState) { self.state = state }

        public mutating func next() async throws -> [UInt8]? {
            let state = self.state
            return try await state.thread.run { () throws -> [UInt8]? in try state.next() }
        }
    }
}

/// One iteration's reader and thread. The reader is used only on that thread, one job at a time.
final class ReadState: @unchecked Sendable {
    let thread = BlockingThread(name: "shoal-blob-read", maxQueued: 1)
    let store: DocumentStore
    let digest: String
    var reader: BlobReader?
    var done = false

    init(store: DocumentStore, digest: String) {
        self.store = store
        self.digest = digest
    }

    func next() throws -> [UInt8]? {
        guard !done else { return nil }
        do {
            if reader == nil { reader = try store.blobReader(try Database.digest(digest)) }
            guard let chunk = try reader?.nextChunk() else {
                done = true
                return nil
            }
            return chunk
        } catch let e as ShoalError {
            done = true
            throw e
        } catch {
            done = true
            throw ShoalError("cannot read blob \(digest): \(error)")
        }
    }

    deinit { thread.shutdown() }
}
