import ShoalCore
import ShoalStore
@testable import ShoalRuntime
import Testing

/// `release publish` keeps a release's binary through `BlobStorage` only (the store is one once
/// blob storage is merged): a manifest, then verified chunks, and the whole reads back.
@Suite("Release blobs through BlobStorage")
struct ReleaseBlobTests {
    /// The smallest honest `BlobStorage`: chunks in memory, the whole checked on the last one.
    final class Blobs: BlobStorage {
        var manifests: [BlobDigest: BlobManifest] = [:]
        var chunks: [BlobDigest: [Int: [UInt8]]] = [:]
        var complete: Set<BlobDigest> = []
        func blobManifest(_ d: BlobDigest) throws(StoreError) -> BlobManifest? { manifests[d] }
        func blobIsComplete(_ d: BlobDigest) throws(StoreError) -> Bool { complete.contains(d) }
        func heldBlobChunks(_ d: BlobDigest) throws(StoreError) -> [Bool]? {
            manifests[d].map { m in (0..<m.chunkCount).map { chunks[d]?[$0] != nil } }
        }
        func readBlobChunk(_ d: BlobDigest, index: Int) throws(StoreError) -> [UInt8]? { chunks[d]?[index] }
        func beginBlob(_ m: BlobManifest) throws(StoreError) { if manifests[m.digest] == nil { manifests[m.digest] = m } }
        func storeBlobChunks(_ d: BlobDigest, _ new: [(index: Int, bytes: [UInt8])]) throws(StoreError) -> BlobChunkOutcome {
            for c in new { chunks[d, default: [:]][c.index] = c.bytes }
            guard let m = manifests[d], chunks[d]?.count == m.chunkCount else { return .stored }
            let whole = (0..<m.chunkCount).flatMap { chunks[d]?[$0] ?? [] }
            guard BlobDigest.of(whole) == d else { chunks[d] = nil; return .wholeMismatch }
            complete.insert(d)
            return .completed
        }
        func discardBlob(_ d: BlobDigest) throws(StoreError) { manifests[d] = nil; chunks[d] = nil; complete.remove(d) }
        func wantedBlobs(eagerCollections: Set<String>, limit: Int) throws(StoreError) -> [BlobReference] { [] }
        func demandBlob(_ r: BlobReference) throws(StoreError) {}
    }

    @Test("a binary of several chunks (and a partial last one) is kept whole and reads back the same", arguments: [1, 65_536, 200_000, 1_100_000])
    func putBlob(_ size: Int) throws {
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
        let blobs = Blobs()
        try ControlHandler.putBlob(bytes, into: blobs)
        let d = BlobDigest.of(bytes)
        #expect(try blobs.blobIsComplete(d))
        let m = try #require(try blobs.blobManifest(d))
        #expect((0..<m.chunkCount).flatMap { (try? blobs.readBlobChunk(d, index: $0)) ?? [] } == bytes)
        // Again: nothing is written twice.
        try ControlHandler.putBlob(bytes, into: blobs)
    }
}
