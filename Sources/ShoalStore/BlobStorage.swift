import ShoalCore

/// Where a gateway keeps blobs, as the replicator sees it: manifests, verified chunks, and which
/// blobs it wants. `DocumentStore` is the gateway's (in its SQLite file, so a backup holds the
/// blobs too); tests and the simulator may use another.
///
/// What a reader gets wrong: chunks given to `storeBlobChunks` were already checked against the
/// manifest by the caller; the storage checks the whole blob against its digest when its last
/// chunk comes in, and only then does the blob count as held.
public protocol BlobStorage: AnyObject {
    /// The manifest of a blob held here, complete or partial; nil when nothing of it is here.
    func blobManifest(_ digest: BlobDigest) throws(StoreError) -> BlobManifest?
    /// Every chunk held and the whole verified.
    func blobIsComplete(_ digest: BlobDigest) throws(StoreError) -> Bool
    /// For each chunk of the manifest, whether a verified copy is held; nil when no manifest is.
    func heldBlobChunks(_ digest: BlobDigest) throws(StoreError) -> [Bool]?
    /// A verified chunk's bytes; nil when it is not held.
    func readBlobChunk(_ digest: BlobDigest, index: Int) throws(StoreError) -> [UInt8]?
    /// Starts keeping a blob that is on its way. Nothing happens when the same manifest is held; a
    /// different manifest replaces a partial one (its chunks dropped) and is refused for a complete
    /// blob.
    func beginBlob(_ manifest: BlobManifest) throws(StoreError)
    /// Keeps verified chunks of a begun blob, in one transaction. When the last missing one comes
    /// in, the whole is checked against the blob's digest: `.completed`, or `.wholeMismatch` with
    /// every chunk dropped (the manifest lied).
    func storeBlobChunks(_ digest: BlobDigest, _ chunks: [(index: Int, bytes: [UInt8])]) throws(StoreError) -> BlobChunkOutcome
    /// Drops a blob and its chunks (complete or not).
    func discardBlob(_ digest: BlobDigest) throws(StoreError)
    /// Blobs to fetch, at most `limit`, oldest want first: referenced by a live document of one of
    /// `eagerCollections`, or asked for by a reader (`demandBlob`), and not complete (nor larger
    /// than the storage accepts).
    func wantedBlobs(eagerCollections: Set<String>, limit: Int) throws(StoreError) -> [BlobReference]
    /// A reader wants this blob (an on-demand collection): it is fetched like an eager one.
    func demandBlob(_ reference: BlobReference) throws(StoreError)
}

public enum BlobChunkOutcome: Sendable, Equatable {
    /// Kept; chunks are still missing.
    case stored
    /// The blob is complete and verified.
    case completed
    /// Every chunk came in but the whole does not match the digest: all were dropped.
    case wholeMismatch
}
