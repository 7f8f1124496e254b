import ShoalCore
import ShoalStore

/// A complete `BlobStorage` in memory, for tests and the simulator. Wanted blobs are found by
/// reading the documents of `documents` (when given) incrementally, change by change, and by
/// `demandBlob`.
///
/// What a reader gets wrong: nothing survives the process; a "crash" in the simulator keeps the
/// object (as a disk would).
public final class MemoryBlobStorage: BlobStorage {
    struct Entry {
        var manifest: BlobManifest
        var chunks: [[UInt8]?]
        var complete = false
    }

    var entries: [BlobDigest: Entry] = [:]
    /// Where referencing documents are read (a simulated node that restarts opens its store again).
    public var documents: DocumentStore?
    /// References seen in live documents, per collection: (collection, id) → references.
    var referenced: [String: [String: [BlobReference]]] = [:]
    var scannedUpTo: [String: Int64] = [:]
    /// Wanted in this order: (reference, since when).
    var demanded: [BlobReference] = []
    var wantOrder: [BlobDigest: Int] = [:]
    var nextOrder = 0

    public init(documents: DocumentStore? = nil) { self.documents = documents }

    /// Stores a whole blob at once (as a local write would), complete; returns its reference.
    @discardableResult
    public func put(_ content: [UInt8], contentType: String? = nil) -> BlobReference {
        let m = BlobManifest.of(content)
        var chunks: [[UInt8]?] = []
        var start = 0
        while start < content.count {
            let end = min(content.count, start + BlobManifest.chunkSize)
            chunks.append(Array(content[start..<end]))
            start = end
        }
        entries[m.digest] = Entry(manifest: m, chunks: chunks, complete: true)
        return BlobReference(digest: m.digest, length: m.length, contentType: contentType)
    }

    /// A complete blob's bytes; nil when not held complete.
    public func content(_ digest: BlobDigest) -> [UInt8]? {
        guard let e = entries[digest], e.complete else { return nil }
        return e.chunks.flatMap { $0 ?? [] }
    }

    /// Digests held complete.
    public var completeBlobs: Set<BlobDigest> { Set(entries.filter(\.value.complete).keys) }

    public func blobManifest(_ digest: BlobDigest) throws(StoreError) -> BlobManifest? { entries[digest]?.manifest }

    public func blobIsComplete(_ digest: BlobDigest) throws(StoreError) -> Bool { entries[digest]?.complete ?? false }

    public func heldBlobChunks(_ digest: BlobDigest) throws(StoreError) -> [Bool]? { entries[digest].map { $0.chunks.map { $0 != nil } } }

    public func readBlobChunk(_ digest: BlobDigest, index: Int) throws(StoreError) -> [UInt8]? {
        guard let e = entries[digest], e.chunks.indices.contains(index) else { return nil }
        return e.chunks[index]
    }

    public func beginBlob(_ manifest: BlobManifest) throws(StoreError) {
        if let e = entries[manifest.digest] {
            if e.manifest == manifest { return }
            if e.complete { throw .blob(.badManifest("\(manifest.digest) is held complete with another manifest")) }
        }
        entries[manifest.digest] = Entry(manifest: manifest, chunks: Array(repeating: nil, count: manifest.chunkCount))
    }

    public func storeBlobChunks(_ digest: BlobDigest, _ chunks: [(index: Int, bytes: [UInt8])]) throws(StoreError) -> BlobChunkOutcome {
        guard var e = entries[digest] else { throw .blob(.notFound(digest)) }
        if e.complete { return .completed }
        for c in chunks {
            guard e.chunks.indices.contains(c.index), c.bytes.count == e.manifest.chunkLength(c.index) else {
                throw .blob(.badManifest("chunk \(c.index) of \(digest) does not fit its manifest"))
            }
            e.chunks[c.index] = c.bytes
        }
        guard !e.chunks.contains(where: { $0 == nil }) else {
            entries[digest] = e
            return .stored
        }
        guard BlobDigest.of(e.chunks.flatMap { $0! }) == digest else {
            e.chunks = Array(repeating: nil, count: e.manifest.chunkCount)
            entries[digest] = e
            return .wholeMismatch
        }
        e.complete = true
        entries[digest] = e
        return .completed
    }

    public func discardBlob(_ digest: BlobDigest) throws(StoreError) { entries[digest] = nil }

    public func wantedBlobs(eagerCollections: Set<String>, limit: Int) throws(StoreError) -> [BlobReference] {
        if let documents {
            for name in eagerCollections.sorted() {
                guard let collection = try? CollectionName(parsing: name) else { continue }
                while true {
                    let since = scannedUpTo[name] ?? 0
                    let changes = try documents.changes(in: collection, since: since, limit: 1000)
                    guard let last = changes.last else { break }
                    for c in changes {
                        var refs: [BlobReference] = []
                        if !c.deleted, let id = try? DocumentID(c.id), let body = try documents.get(collection, id: id)?.body {
                            refs = BlobReference.references(inText: body)
                        }
                        referenced[name, default: [:]][c.id] = refs.isEmpty ? nil : refs
                        for r in refs where wantOrder[r.digest] == nil {
                            wantOrder[r.digest] = nextOrder
                            nextOrder += 1
                        }
                    }
                    scannedUpTo[name] = last.sequence
                }
            }
        }
        var seen: Set<BlobDigest> = []
        var all: [BlobReference] = demanded
        for name in eagerCollections.sorted() { for refs in (referenced[name] ?? [:]).values { all += refs } }
        all = all.filter { seen.insert($0.digest).inserted && entries[$0.digest]?.complete != true }
        all.sort { (wantOrder[$0.digest] ?? 0, $0.digest) < (wantOrder[$1.digest] ?? 0, $1.digest) }
        return Array(all.prefix(max(0, limit)))
    }

    public func demandBlob(_ reference: BlobReference) throws(StoreError) {
        guard !demanded.contains(where: { $0.digest == reference.digest }) else { return }
        demanded.append(reference)
        if wantOrder[reference.digest] == nil {
            wantOrder[reference.digest] = nextOrder
            nextOrder += 1
        }
    }
}
