import ShoalCore
import ShoalStore
import ShoalWire

/// A link to one peer, as the driver names it (any integer unique while the link lives).
public typealias LinkID = Int

/// Limits from the mesh options (ObjectBox names).
public struct ReplicationSettings: Sendable {
    /// txLogBatchSizeKb: soft cap on the body bytes of one documents frame.
    public var batchSizeBytes = 100 * 1024
    /// txLogBatchMaxCount: most changes announced or documents sent in one batch.
    public var batchMaxCount = 1000
    /// requestTimeoutMillis: how long a document requested from one peer is not asked of another.
    public var requestTimeoutMillis: UInt64 = 5000
    /// Batches a pusher may announce before the first is acknowledged, so sending and applying overlap.
    public var batchWindow = 8
    /// Live changes (a batch of at most `eagerMaxCount`) carry the bodies of documents up to this
    /// size in the announce itself, so each hop costs one message instead of three; 0 turns it off.
    /// Catch-up (large batches) always goes announce → request → documents, so nothing held is
    /// sent twice in bulk.
    public var eagerBodyBytes = 4096
    public var eagerMaxCount = 64
    /// A document announced on a link whose pushes we pruned (another path brought its bodies
    /// first) is requested there only if no other link brought it within this long (the node
    /// wakes for it): the pushing path most likely has it on the way. Longer on a slow link
    /// (Bluetooth LE: a 1 KB body alone takes 25 ms a hop). Shorter waits send more bodies twice;
    /// longer ones delay a document whose only path is the pruned link (`shoal sim`, 10 and 250
    /// gateways: 100 ms cut bytes by 3 % more, but slowed convergence from 250 to 750 ms).
    public var pruneWaitMillis: UInt64 = 20
    public var pruneWaitSlowMillis: UInt64 = 200
    /// A prune lasts this long (checked at the tick), then the link is grafted (pushes again; a
    /// second copy prunes it anew), so a prune made while gateways disagreed on the spanning tree
    /// does not outlive the disagreement for long.
    public var pruneLeaseMillis: UInt64 = 250
    /// Blobs: a blob whose reference declares more bytes is not fetched (refused before begin).
    /// A manifest must fit one frame, so 1 GiB by default (16384 chunk digests).
    public var blobMaxBytes: Int64 = 1 << 30
    /// Piece sizes (bytes of one blob piece frame) for slow (Bluetooth LE) and fast links.
    public var blobPieceBytesSlow = 16 * 1024
    public var blobPieceBytesFast = 64 * 1024
    /// Chunks (64 KiB) requested of a link and not yet received, at most.
    public var blobWindowSlow = 2
    public var blobWindowFast = 8
    /// Blob bytes a link's serving side sends per turn (a frame batch received or a tick), after
    /// the documents: bounds how much a blob transfer delays document replication.
    public var blobServeBytesSlow = 32 * 1024
    public var blobServeBytesFast = 512 * 1024
    /// Verified chunks of one blob stored together at most (one transaction, so one fsync with
    /// durability full): those that came in one batch of frames, up to this many (1: each alone).
    public var blobChunksPerStore = 32
    /// Blobs fetched at once (more wanted ones wait for a slot).
    public var blobMaxFetches = 4
    /// Bad chunks (wrong digest) from one peer for one blob before we ask another peer; bad chunks
    /// on one link before it is closed.
    public var blobBadChunksPerBlob = 3
    public var blobBadChunksPerLink = 8
    /// How often the storage's wanted blobs are read again (also after local commits).
    public var blobPollMillis: UInt64 = 1000
    public init() {}
}

/// A document as filters and resolvers see it.
public struct ReplicatedDocument: Sendable {
    public let collection: CollectionName
    public let id: String
    /// The JSON text; nil for a tombstone.
    public let body: String?
    public let version: DocumentVersion
    public var isDeleted: Bool { body == nil }

    public init(collection: CollectionName, id: String, body: String?, version: DocumentVersion) {
        self.collection = collection
        self.id = id
        self.body = body
        self.version = version
    }
}

/// What a conflict resolver decides for two concurrent versions.
public enum Resolution: Sendable, Equatable {
    case keepLocal
    case takeRemote
    /// A merged body (a JSON object).
    case merged(String)
    case delete
}

/// Resolves concurrent versions of a document. The default is last-write-wins on the newest
/// version-vector entry (HLC timestamp, then peer id); a delete is a write like any other, so the
/// later of a delete and an edit wins. A custom resolver gets (peer id, local, remote). Whatever it
/// returns gets a version that dominates both sides (the pointwise maximum), so it propagates;
/// nodes that merge the same pair differently converge through the body-digest tie-break.
public struct ConflictResolver: Sendable {
    public let name: String
    public let resolve: @Sendable (PeerID, ReplicatedDocument, ReplicatedDocument) -> Resolution
    /// Joins versions field by field (`FieldMerge`): the applier keeps the per-field stamps of the
    /// result, which a whole-document resolver drops.
    public let joinsFields: Bool

    public init(name: String, joinsFields: Bool = false, resolve: @escaping @Sendable (PeerID, ReplicatedDocument, ReplicatedDocument) -> Resolution) {
        self.name = name
        self.joinsFields = joinsFields
        self.resolve = resolve
    }

    /// The default: concurrent edits of JSON objects joined field by field (the newer write of
    /// each field wins, fields only one side set survive; see `FieldMerge`); a delete against a
    /// concurrent edit, or a body that is not an object, by last-write-wins on the whole document.
    public static let fieldMerge = ConflictResolver(name: "fieldMerge", joinsFields: true) { peer, local, remote in
        guard let joined = FieldMerge.join((local.body, local.version), (remote.body, remote.version)) else {
            return lastWriteWins.resolve(peer, local, remote)
        }
        return .merged(joined.body)
    }

    public static let lastWriteWins = ConflictResolver(name: "lastWriteWins") { _, local, remote in
        guard let l = local.version.vector.current, let r = remote.version.vector.current else {
            return local.version.vector.current == nil ? .takeRemote : .keepLocal
        }
        return (r.timestamp, r.peer) > (l.timestamp, l.peer) ? .takeRemote : .keepLocal
    }
    public static let localWins = ConflictResolver(name: "localWins") { _, _, _ in .keepLocal }
    public static let remoteWins = ConflictResolver(name: "remoteWins") { _, _, _ in .takeRemote }

    public static func named(_ name: String) -> ConflictResolver? {
        [fieldMerge, lastWriteWins, localWins, remoteWins].first { $0.name == name }
    }
}

/// How one collection replicates, as the Couchbase seed's collection configuration.
public struct CollectionPolicy: Sendable {
    public var name: CollectionName
    /// Send this node's changes to peers.
    public var push = true
    /// Take peers' changes.
    public var pull = true
    /// Only these document ids replicate (nil: all).
    public var documentIDs: Set<String>?
    public var pushFilter: (@Sendable (PeerID, ReplicatedDocument) -> Bool)?
    public var pullFilter: (@Sendable (PeerID, ReplicatedDocument) -> Bool)?
    public var resolver = ConflictResolver.fieldMerge
    /// The collection's TTL (ms after a document's last write, by its version's HLC time): a
    /// document that arrives already past it is refused, as every gateway with the same TTL does.
    public var ttlMillis: Int64?
    /// Blobs its documents reference: fetched as soon as a document is here (`.eager`), or only
    /// when a reader demands one (`.onDemand`).
    public var blobs = BlobPolicy.eager

    public init(name: CollectionName) { self.name = name }
}

public enum BlobPolicy: String, Sendable { case eager, onDemand }

/// What happened to a blob this node fetched.
public enum BlobOutcome: Sendable, Equatable {
    /// Held complete and verified now; `bytes` is its length.
    case completed(bytes: Int64)
    /// Not fetched (too large, refused manifest, storage error): why.
    case failed(String)
}

/// Counters of the blob transfers, since the node started.
public struct BlobCounters: Sendable, Equatable {
    /// Piece bytes sent (serving) and verified chunk bytes received (fetching).
    public var bytesSent: Int64 = 0
    public var bytesReceived: Int64 = 0
    public var chunksSent = 0
    public var chunksVerified = 0
    /// Chunks that did not match the manifest (dropped), and pieces that came for a chunk already
    /// held or no longer asked of that link (ignored).
    public var badChunks = 0
    public var redundantPieces = 0
    public var completed = 0
    public var failed = 0
    /// Held manifests that gave way to a holder's that agreed with every entry a chunk proved.
    public var manifestsReplaced = 0
    /// Chunks that matched the manifest but came before the chunk after them was held (so their
    /// entry was not yet proven): dropped and asked for again.
    public var unprovenChunks = 0
    public init() {}
}

public enum ReplicationDirection: String, Sendable { case push, pull }

/// What the replicator reports, as the seed's listeners do.
public enum ReplicationEvent: Sendable {
    public struct Item: Sendable, Equatable {
        public let collection: String
        public let id: String
        public let deleted: Bool
        public let error: String?
    }
    /// HELLO accepted: the link replicates now.
    case peerConnected(link: LinkID, peer: PeerID)
    /// One batch of documents sent (push, acknowledged) or received (pull, applied).
    case documents(link: LinkID, peer: PeerID, direction: ReplicationDirection, items: [Item])
    /// A peer's clock runs ahead of ours by more than the bound; its timestamps do not move our clock.
    case clockSkew(link: LinkID, peer: PeerID, aheadMillis: UInt64)
    case conflict(link: LinkID, peer: PeerID, record: ConflictRecord)
    /// Mesh gossip arrived on a link (see `ReplicationMessage.topology`); the mesh manager takes it.
    case topology(link: LinkID, peer: PeerID, origin: PeerID, sequence: UInt64, neighbours: [PeerID])
    /// A blob fetch ended (`link`/`peer`: where the last piece or the refusal came from, if any).
    case blob(link: LinkID?, peer: PeerID?, digest: BlobDigest, outcome: BlobOutcome)
    /// The link was closed because of this error (nil: closed by the driver).
    case linkClosed(link: LinkID, peer: PeerID?, error: ReplicationError?)
}

/// Why a link was closed.
public enum ReplicationError: Error, Sendable, Equatable, CustomStringConvertible {
    case wire(WireError)
    case protocolVersion(UInt16)
    case wrongGroup(String)
    case selfConnection
    case protocolViolation(String)
    case store(StoreError)
    case remote(code: UInt16, message: String)

    public var description: String {
        switch self {
        case .wire(let e): "malformed frame: \(e)"
        case .protocolVersion(let v): "peer speaks replication protocol \(v), this gateway \(ReplicationMessage.protocolVersion) to \(ReplicationMessage.highestProtocolVersion)"
        case .wrongGroup(let g): "peer is in group \"\(g.prefix(64))\", not ours"
        case .selfConnection: "connected to itself"
        case .protocolViolation(let why): "protocol violation: \(why)"
        case .store(let e): "store: \(e)"
        case .remote(let code, let message): "peer closed the link (\(code)): \(message)"
        }
    }

    var code: UInt16 {
        switch self {
        case .wire: 1
        case .protocolVersion: 2
        case .wrongGroup: 3
        case .selfConnection: 4
        case .protocolViolation: 5
        case .store: 6
        case .remote: 7
        }
    }
}

/// What the driver must do.
public enum ReplicationAction: Sendable {
    /// Send this message (frame it; `ReplicationMessage.frameLimit` bounds it).
    case send(LinkID, [UInt8])
    /// Close the link (after sending what came before).
    case close(LinkID)
    case event(ReplicationEvent)
}

/// A received document checked on the link's thread: version decoded, id, body (JSON object within
/// the size limit, matching its version's digest). `problem` says why it cannot be applied.
public struct CheckedDocument: Sendable {
    public let raw: ReplicationMessage.DocumentBody
    public let version: DocumentVersion?
    public let id: DocumentID?
    public let body: String?
    /// Why it cannot be applied; nil when it can.
    public let problem: String?

    /// Checks `d`. An entry sent "as announced" has no version yet: its body is checked here, and
    /// `announced(_:)` completes it with the version its batch's announce gave.
    public init(checking d: ReplicationMessage.DocumentBody, maxBodyBytes: Int) {
        raw = d
        id = try? DocumentID(d.id)
        guard !d.version.isEmpty || d.asAnnounced else {
            version = nil; body = nil; problem = nil
            return
        }
        var v: DocumentVersion?
        if !d.asAnnounced {
            do { v = try DocumentVersion(decoding: d.version) } catch {
                version = nil; body = nil; problem = "bad version: \(error)"
                return
            }
        }
        version = v
        let text: String? = d.deleted ? nil : String(decoding: d.body, as: UTF8.self)
        body = text
        problem = CheckedDocument.bodyProblem(d, id: id, text: text, maxBodyBytes: maxBodyBytes)
            ?? v.flatMap { DocumentVersion.digest(of: text) == $0.bodyDigest ? nil : "body does not match its version's digest" }
    }

    private init(raw: ReplicationMessage.DocumentBody, version: DocumentVersion?, id: DocumentID?, body: String?, problem: String?) {
        self.raw = raw
        self.version = version
        self.id = id
        self.body = body
        self.problem = problem
    }

    /// An entry sent "as announced", given the version announced for it: decoded, and checked
    /// against the body (already checked by `init(checking:)`).
    public func announced(_ bytes: [UInt8]) -> CheckedDocument {
        var d = raw
        d.version = bytes
        d.asAnnounced = false
        guard !bytes.isEmpty else { return CheckedDocument(raw: d, version: nil, id: id, body: nil, problem: "sent as announced, but announced without a version") }
        let v: DocumentVersion
        do { v = try DocumentVersion(decoding: bytes) } catch {
            return CheckedDocument(raw: d, version: nil, id: id, body: nil, problem: "bad version: \(error)")
        }
        let digestProblem = DocumentVersion.digest(of: body) == v.bodyDigest ? nil : "body does not match its version's digest"
        return CheckedDocument(raw: d, version: v, id: id, body: body, problem: problem ?? digestProblem)
    }

    /// The id, size and JSON checks of a body (nil: none failed).
    static func bodyProblem(_ d: ReplicationMessage.DocumentBody, id: DocumentID?, text: String?, maxBodyBytes: Int) -> String? {
        if id == nil { return "bad document id" }
        guard let text else { return nil }
        if d.body.count > maxBodyBytes { return "body is \(d.body.count) bytes, over the limit of \(maxBodyBytes)" }
        do {
            guard try JSONValue.validate(text) else { return "invalid document: a document body is a JSON object" }
        } catch {
            return "invalid document: \(error)"
        }
        return nil
    }
}

/// A frame decoded, its documents checked, ready for the node (see `ReplicationNode.prepare`).
public struct PreparedFrame: Sendable {
    let result: Result<ReplicationMessage, ReplicationError>
    let checked: [CheckedDocument]?
}
