import ShoalCore

/// The replication protocol's messages, one per frame: a type byte, then fields. Fixed-size
/// fields are big-endian; on the data path (subscribe, announce, push, request, documents,
/// acknowledge) sequences, batch numbers, counts and blob lengths are LEB128 varints, since most
/// are small and these frames cross every hop. Strings are UTF-8 with a u16 length.
/// Every count and length is checked against the bytes that remain before anything is allocated,
/// so a hostile frame can neither crash the decoder nor make it allocate more than the frame.
public enum ReplicationMessage: Sendable, Equatable {
    /// What HELLO's version field says: the lowest protocol this gateway speaks. A peer that says
    /// a version outside `protocolVersion...highestProtocolVersion` is told so and the link is
    /// closed. Protocol-1 gateways accept only 1 here, so protocol 2 is offered by a capability
    /// bit (`Capability.protocol2`) and a link speaks it when both HELLOs set it.
    public static let protocolVersion: UInt16 = 1
    public static let highestProtocolVersion: UInt16 = 2
    /// No frame is larger: a 1 MiB body plus its metadata fits.
    public static let frameLimit = 2 << 20

    public struct CollectionOffer: Sendable, Equatable {
        public var name: String
        public var push: Bool
        public var pull: Bool
        public init(name: String, push: Bool, pull: Bool) {
            self.name = name
            self.push = push
            self.pull = pull
        }
    }

    public struct AnnouncedChange: Sendable, Equatable {
        public var sequence: UInt64
        public var id: String
        public var deleted: Bool
        public var version: [UInt8]
        public init(sequence: UInt64, id: String, deleted: Bool, version: [UInt8]) {
            self.sequence = sequence
            self.id = id
            self.deleted = deleted
            self.version = version
        }
    }

    public struct DocumentBody: Sendable, Equatable {
        public var id: String
        public var deleted: Bool
        public var version: [UInt8]
        public var body: [UInt8]
        /// In a `documents` frame to a peer that set `Capability.announcedVersions`: the version
        /// is the one this batch's announce gave for the id, and is not sent again (`version` is
        /// empty). The receiver fills it in from the announce.
        public var asAnnounced: Bool
        public init(id: String, deleted: Bool, version: [UInt8], body: [UInt8], asAnnounced: Bool = false) {
            self.id = id
            self.deleted = deleted
            self.version = version
            self.body = body
            self.asAnnounced = asAnnounced
        }
    }

    /// `storeEpoch` names the sender's store: it changes when the store was recreated (moved aside
    /// as corrupt) or may have lost commits (an unclean stop with durability normal), so its
    /// sequences restarted or went back. A checkpoint taken against another epoch is not used.
    /// Sent last and optional on the wire (0 when absent).
    case hello(version: UInt16, peer: PeerID, group: String, capabilities: UInt32, purgeHorizonMillis: UInt64,
               neighbours: [PeerID], collections: [CollectionOffer], storeEpoch: UInt64 = 0)
    /// The receiver asks the pusher for changes of a collection after `since` (its checkpoint).
    case subscribe(collection: String, since: UInt64)
    /// A batch of changes: ids, versions, flags; `upTo` is the pusher's sequence the batch covers.
    case announce(collection: String, batch: UInt64, upTo: UInt64, changes: [AnnouncedChange])
    /// The ids of an announced batch the receiver lacks (possibly none).
    case request(collection: String, batch: UInt64, ids: [String])
    /// Bodies for a request; `final` marks the last frame of the batch.
    case documents(collection: String, batch: UInt64, final: Bool, documents: [DocumentBody])
    /// The receiver applied the batch and moved its checkpoint to `upTo`.
    case acknowledge(collection: String, batch: UInt64, upTo: UInt64)
    /// Sent before closing a link, with why.
    case error(code: UInt16, message: String)
    /// Mesh gossip, flooded hop by hop: `origin`'s links now go to `neighbours`. A higher
    /// `sequence` from the same origin replaces a lower one.
    case topology(origin: PeerID, sequence: UInt64, neighbours: [PeerID])
    /// Live changes (small batches): an announce that carries the bodies of some of its documents
    /// (those up to a size). The receiver applies those it lacks at once and requests the rest.
    /// Saves two messages per hop. A body's version is its announced change's version, so it is
    /// sent empty.
    case push(collection: String, batch: UInt64, upTo: UInt64, changes: [AnnouncedChange], documents: [DocumentBody])
    /// Mesh gossip as `topology`, several entries a frame, to a peer that set
    /// `Capability.compactTopology`. An id goes in full the first time it is named on the link;
    /// after that by its first 8 bytes (see `PeerRef`). About a third of `topology`'s bytes.
    case topologyRefs([TopologyEntry])
    /// "Your pushes of this collection bring me bodies I already hold (another path brought them
    /// first): push without bodies." Only to a peer that set `Capability.prune`. A request on the
    /// link undoes it (the receiver needed what was pushed), and so does `graft`.
    case prune(collection: String)
    /// "Push this collection's bodies to me again": the pruned link joined the receiver's spanning
    /// tree, or the prune's lease ran out. Only to a peer that set `Capability.prune`.
    case graft(collection: String)
    /// Blobs (only to a peer whose HELLO set `Capability.blobs`). "Send me this blob's manifest."
    case blobManifestRequest(digest: BlobDigest)
    /// The manifest of a blob held complete here.
    case blobManifest(BlobManifest)
    /// "Send chunks `firstChunk ..< firstChunk + chunkCount` in pieces of at most `pieceBytes`."
    case blobFetch(digest: BlobDigest, firstChunk: UInt32, chunkCount: UInt32, pieceBytes: UInt32)
    /// Bytes `offset ..< offset + bytes.count` of one chunk. A chunk's pieces come in order.
    case blobPiece(digest: BlobDigest, chunk: UInt32, offset: UInt32, bytes: [UInt8])
    /// "I do not hold it complete; I will send `blobHaveNow` when I do (while this link lives)."
    case blobNotHere(digest: BlobDigest)
    /// "I hold it complete now": the answer to an earlier `blobNotHere`.
    case blobHaveNow(digest: BlobDigest)

    /// Bits of HELLO's `capabilities`. A peer that did not set a bit never receives its frames.
    public enum Capability {
        /// Speaks the blob messages.
        public static let blobs: UInt32 = 1
        /// Takes `documents` entries whose version is "as announced" (flag bit 2, no version
        /// field): a requested document unchanged since its announce costs its body, not its
        /// version twice.
        public static let announcedVersions: UInt32 = 2
        /// Takes `topologyRefs` frames (mesh gossip with ids by reference).
        public static let compactTopology: UInt32 = 4
        /// Speaks protocol 2: document versions carry field stamps (`DocumentVersion` format 2).
        /// A link where both sides set it speaks protocol 2; otherwise versions go as format 1
        /// (whole-document), which a protocol-1 gateway reads.
        public static let protocol2: UInt32 = 8
        /// Takes `prune` and `graft` frames.
        public static let prune: UInt32 = 16
    }

    /// A peer id in a `topologyRefs` frame: in full, or by its first 8 bytes (`PeerID.prefix64`)
    /// once sent in full on this link (`PeerRefTable` keeps both ends alike).
    public enum PeerRef: Sendable, Equatable {
        case full(PeerID)
        case short(UInt64)
    }

    /// One entry of a `topologyRefs` frame: `refs[0]` is the origin, the rest its neighbours.
    public struct TopologyEntry: Sendable, Equatable {
        public var sequence: UInt64
        public var refs: [PeerRef]
        public init(sequence: UInt64, refs: [PeerRef]) {
            self.sequence = sequence
            self.refs = refs
        }
    }
    /// Most entries one `topologyRefs` frame carries (each at most 2,154 bytes: the frame stays
    /// well under `frameLimit`).
    public static let maxTopologyEntries = 512
    /// The largest blob whose manifest fits one frame (32 bytes a chunk): just under 4 GiB.
    public static let maxManifestBlobBytes = Int64((frameLimit - 64) / 32) * Int64(BlobManifest.chunkSize)
    /// Most chunks one `blobFetch` may ask for.
    public static let maxFetchChunks: UInt32 = 1024

    enum Tag: UInt8 {
        case hello = 1, subscribe, announce, request, documents, acknowledge, error, topology, push, topologyRefs, prune, graft
        case blobManifestRequest = 16, blobManifest, blobFetch, blobPiece, blobNotHere, blobHaveNow
    }

    /// What a frame carries, from its first byte, for accounting: documents (documents and push
    /// frames), blob data (pieces), gossip (topology), or other control (hello, subscriptions,
    /// announcements, requests, acknowledgements, errors, blob manifests and fetches).
    public enum FrameClass: Sendable { case documents, blobData, gossip, control }

    public static func frameClass(ofFirstByte b: UInt8) -> FrameClass {
        switch Tag(rawValue: b) {
        case .documents, .push: .documents
        case .blobPiece: .blobData
        case .topology, .topologyRefs: .gossip
        default: .control
        }
    }

    public var kind: String {
        switch self {
        case .hello: "hello"
        case .subscribe: "subscribe"
        case .announce: "announce"
        case .request: "request"
        case .documents: "documents"
        case .acknowledge: "acknowledge"
        case .error: "error"
        case .topology: "topology"
        case .topologyRefs: "topology (by reference)"
        case .prune: "prune"
        case .graft: "graft"
        case .push: "push"
        case .blobManifestRequest: "blob manifest request"
        case .blobManifest: "blob manifest"
        case .blobFetch: "blob fetch"
        case .blobPiece: "blob piece"
        case .blobNotHere: "blob not here"
        case .blobHaveNow: "blob have now"
        }
    }
}

/// A frame that is not a valid message.
public enum WireError: Error, Sendable, Equatable, CustomStringConvertible {
    case truncated(needed: Int, remaining: Int)
    case unknownType(UInt8)
    case trailingBytes(Int)
    case badValue(String)
    case frame(FrameError)

    public var description: String {
        switch self {
        case .truncated(let n, let r): "message truncated (needed \(n) bytes, \(r) left)"
        case .unknownType(let t): "unknown message type \(t)"
        case .trailingBytes(let n): "\(n) unexpected bytes after the message"
        case .badValue(let why): "bad value: \(why)"
        case .frame(let e): e.description
        }
    }
}

extension ReplicationMessage {
    public func encoded() -> [UInt8] {
        var w = WireWriter()
        switch self {
        case .hello(let version, let peer, let group, let caps, let horizon, let neighbours, let collections, let epoch):
            w.u8(Tag.hello.rawValue); w.u16(version); w.peer(peer); w.string(group); w.u32(caps); w.u64(horizon)
            w.u16(UInt16(neighbours.count)); for n in neighbours { w.peer(n) }
            w.u16(UInt16(collections.count))
            for c in collections { w.string(c.name); w.u8((c.push ? 1 : 0) | (c.pull ? 2 : 0)) }
            if epoch != 0 { w.u64(epoch) }
        case .subscribe(let c, let since):
            w.u8(Tag.subscribe.rawValue); w.string(c); w.varint(since)
        case .announce(let c, let batch, let upTo, let changes):
            w.u8(Tag.announce.rawValue); w.string(c); w.varint(batch); w.varint(upTo); w.changes(changes)
        case .request(let c, let batch, let ids):
            w.u8(Tag.request.rawValue); w.string(c); w.varint(batch); w.varint(UInt64(ids.count)); for id in ids { w.string(id) }
        case .documents(let c, let batch, let final, let docs):
            // Room for every body at once: an array grown by doubling copies what it holds each time.
            w.bytes.reserveCapacity(64 + docs.reduce(0) { $0 + $1.id.utf8.count + $1.version.count + $1.body.count + 16 })
            w.u8(Tag.documents.rawValue); w.string(c); w.varint(batch); w.u8(final ? 1 : 0); w.varint(UInt64(docs.count))
            for d in docs {
                w.string(d.id)
                w.u8((d.deleted ? 1 : 0) | (d.asAnnounced ? 2 : 0))
                if !d.asAnnounced { w.varblob(d.version) }
                w.varblob(d.body)
            }
        case .acknowledge(let c, let batch, let upTo):
            w.u8(Tag.acknowledge.rawValue); w.string(c); w.varint(batch); w.varint(upTo)
        case .error(let code, let message):
            w.u8(Tag.error.rawValue); w.u16(code); w.string(String(message.utf8.prefix(1000)) ?? "")
        case .topology(let origin, let sequence, let neighbours):
            w.u8(Tag.topology.rawValue); w.peer(origin); w.u64(sequence)
            w.u16(UInt16(neighbours.count)); for n in neighbours { w.peer(n) }
        case .topologyRefs(let entries):
            // [u16 entries][entries × ([u64 sequence][u8 ids][ids × (0, 32 bytes | 1, 8 bytes)])]
            precondition((1...ReplicationMessage.maxTopologyEntries).contains(entries.count), "1 to maxTopologyEntries entries a topology frame")
            precondition(entries.allSatisfy { (1...65).contains($0.refs.count) }, "an origin and at most 64 neighbours a topology entry")
            w.u8(Tag.topologyRefs.rawValue); w.u16(UInt16(entries.count))
            for e in entries {
                w.u64(e.sequence); w.u8(UInt8(e.refs.count))
                for ref in e.refs {
                    switch ref {
                    case .full(let p): w.u8(0); w.peer(p)
                    case .short(let prefix): w.u8(1); w.u64(prefix)
                    }
                }
            }
        case .push(let c, let batch, let upTo, let changes, let docs):
            // A body names its change by position: id, flag and version are the change's.
            w.bytes.reserveCapacity(64 + changes.reduce(0) { $0 + $1.id.utf8.count + $1.version.count + 16 } + docs.reduce(0) { $0 + $1.body.count + 8 })
            w.u8(Tag.push.rawValue); w.string(c); w.varint(batch); w.varint(upTo); w.changes(changes)
            var position: [String: Int] = [:]
            for (i, x) in changes.enumerated() where position[x.id] == nil { position[x.id] = i }
            let sent = docs.compactMap { d in position[d.id].map { ($0, d.body) } }
            w.varint(UInt64(sent.count))
            for (i, body) in sent { w.varint(UInt64(i)); w.varblob(body) }
        case .prune(let c):
            w.u8(Tag.prune.rawValue); w.string(c)
        case .graft(let c):
            w.u8(Tag.graft.rawValue); w.string(c)
        case .blobManifestRequest(let d):
            w.u8(Tag.blobManifestRequest.rawValue); w.raw(d.bytes)
        case .blobManifest(let m):
            // The chunk count follows from the length: not sent.
            w.u8(Tag.blobManifest.rawValue); w.raw(m.digest.bytes); w.varint(UInt64(m.length))
            for c in m.chunkDigests { w.raw(c) }
        case .blobFetch(let d, let first, let count, let piece):
            w.u8(Tag.blobFetch.rawValue); w.raw(d.bytes); w.varint(UInt64(first)); w.varint(UInt64(count)); w.varint(UInt64(piece))
        case .blobPiece(let d, let chunk, let offset, let bytes):
            w.u8(Tag.blobPiece.rawValue); w.raw(d.bytes); w.varint(UInt64(chunk)); w.varint(UInt64(offset)); w.varblob(bytes)
        case .blobNotHere(let d):
            w.u8(Tag.blobNotHere.rawValue); w.raw(d.bytes)
        case .blobHaveNow(let d):
            w.u8(Tag.blobHaveNow.rawValue); w.raw(d.bytes)
        }
        return w.bytes
    }

    public init(decoding bytes: [UInt8]) throws(WireError) {
        var r = WireReader(bytes)
        let t = try r.u8()
        guard let tag = Tag(rawValue: t) else { throw .unknownType(t) }
        switch tag {
        case .hello:
            let version = try r.u16()
            let peer = PeerID(bytes: try r.raw(32))
            let group = try r.string()
            let caps = try r.u32()
            let horizon = try r.u64()
            let n = Int(try r.u16())
            guard n <= 64 else { throw .badValue("\(n) neighbours (at most 64)") }
            var neighbours: [PeerID] = []
            for _ in 0..<n { neighbours.append(PeerID(bytes: try r.raw(32))) }
            let cn = Int(try r.u16())
            try r.need(cn * 3)
            var collections: [CollectionOffer] = []
            for _ in 0..<cn {
                let name = try r.string()
                let flags = try r.u8()
                collections.append(CollectionOffer(name: name, push: flags & 1 != 0, pull: flags & 2 != 0))
            }
            let epoch = r.remaining >= 8 ? try r.u64() : 0
            self = .hello(version: version, peer: peer, group: group, capabilities: caps, purgeHorizonMillis: horizon,
                          neighbours: neighbours, collections: collections, storeEpoch: epoch)
        case .subscribe:
            self = .subscribe(collection: try r.string(), since: try r.varint())
        case .announce:
            let c = try r.string(), batch = try r.varint(), upTo = try r.varint()
            self = .announce(collection: c, batch: batch, upTo: upTo, changes: try ReplicationMessage.changes(&r))
        case .push:
            let c = try r.string(), batch = try r.varint(), upTo = try r.varint()
            let changes = try ReplicationMessage.changes(&r)
            let n = try r.count(minimumEntryBytes: 2)
            var docs: [DocumentBody] = []
            docs.reserveCapacity(n)
            // A body names the first change of its id (as the encoder writes it): one listing the
            // same id twice could otherwise pair a body with either change's flag, and the
            // message would not mean one thing (found by the fuzzer: it did not survive a
            // re-encoding).
            var first: [String: Int] = [:]
            for (k, x) in changes.enumerated() where first[x.id] == nil { first[x.id] = k }
            for _ in 0..<n {
                let i = try r.varint()
                guard i < UInt64(changes.count) else { throw .badValue("a pushed body refers to change \(i) of \(changes.count)") }
                let change = changes[Int(i)]
                guard first[change.id] == Int(i) else { throw .badValue("a pushed body refers to change \(i), a repeat of change \(first[change.id]!) for the same document") }
                // The version stays empty on the wire: the receiver takes the change's.
                docs.append(DocumentBody(id: change.id, deleted: change.deleted, version: [], body: try r.varblob()))
            }
            self = .push(collection: c, batch: batch, upTo: upTo, changes: changes, documents: docs)
        case .request:
            let c = try r.string(), batch = try r.varint()
            let n = try r.count(minimumEntryBytes: 2)
            var ids: [String] = []
            ids.reserveCapacity(n)
            for _ in 0..<n { ids.append(try r.string()) }
            self = .request(collection: c, batch: batch, ids: ids)
        case .documents:
            let c = try r.string(), batch = try r.varint(), final = try r.u8() != 0
            self = .documents(collection: c, batch: batch, final: final, documents: try ReplicationMessage.bodies(&r))
        case .acknowledge:
            self = .acknowledge(collection: try r.string(), batch: try r.varint(), upTo: try r.varint())
        case .error:
            self = .error(code: try r.u16(), message: try r.string())
        case .topology:
            let origin = PeerID(bytes: try r.raw(32))
            let sequence = try r.u64()
            let n = Int(try r.u16())
            guard n <= 64 else { throw .badValue("\(n) neighbours (at most 64)") }
            var neighbours: [PeerID] = []
            for _ in 0..<n { neighbours.append(PeerID(bytes: try r.raw(32))) }
            self = .topology(origin: origin, sequence: sequence, neighbours: neighbours)
        case .topologyRefs:
            let count = Int(try r.u16())
            guard (1...ReplicationMessage.maxTopologyEntries).contains(count) else {
                throw .badValue("\(count) entries in a topology frame (1 to \(ReplicationMessage.maxTopologyEntries))")
            }
            try r.need(count * 18)
            var entries: [TopologyEntry] = []
            entries.reserveCapacity(count)
            for _ in 0..<count {
                let sequence = try r.u64()
                let n = Int(try r.u8())
                guard (1...65).contains(n) else { throw .badValue("\(n) ids in a topology entry (an origin and at most 64 neighbours)") }
                try r.need(n * 9)
                var refs: [PeerRef] = []
                refs.reserveCapacity(n)
                for _ in 0..<n {
                    switch try r.u8() {
                    case 0: refs.append(.full(PeerID(bytes: try r.raw(32))))
                    case 1: refs.append(.short(try r.u64()))
                    case let k: throw .badValue("peer reference kind \(k) (0: in full, 1: by prefix)")
                    }
                }
                entries.append(TopologyEntry(sequence: sequence, refs: refs))
            }
            self = .topologyRefs(entries)
        case .prune:
            self = .prune(collection: try r.string())
        case .graft:
            self = .graft(collection: try r.string())
        case .blobManifestRequest:
            self = .blobManifestRequest(digest: try r.digest())
        case .blobManifest:
            let digest = try r.digest()
            let length = try r.varint()
            guard length <= UInt64(BlobReference.maxLength) else { throw .badValue("a blob of \(length) bytes (at most \(BlobReference.maxLength))") }
            let n = BlobManifest.chunkCount(length: Int64(length))
            try r.need(n * 32)
            var digests: [[UInt8]] = []
            digests.reserveCapacity(n)
            for _ in 0..<n { digests.append(try r.raw(32)) }
            do { self = .blobManifest(try BlobManifest(digest: digest, length: Int64(length), chunkDigests: digests)) } catch {
                throw .badValue("\(error)")
            }
        case .blobFetch:
            let digest = try r.digest()
            let first = try r.u32varint(), count = try r.u32varint(), piece = try r.u32varint()
            guard count >= 1, count <= ReplicationMessage.maxFetchChunks else { throw .badValue("a fetch of \(count) chunks (1 to \(ReplicationMessage.maxFetchChunks))") }
            guard piece >= 1, piece <= UInt32(BlobManifest.chunkSize) else { throw .badValue("a piece size of \(piece) bytes (1 to \(BlobManifest.chunkSize))") }
            self = .blobFetch(digest: digest, firstChunk: first, chunkCount: count, pieceBytes: piece)
        case .blobPiece:
            let digest = try r.digest()
            let chunk = try r.u32varint(), offset = try r.u32varint()
            guard offset < UInt32(BlobManifest.chunkSize) else { throw .badValue("a piece at offset \(offset) of a \(BlobManifest.chunkSize)-byte chunk") }
            let n = try r.varint()
            guard n >= 1, n <= UInt64(BlobManifest.chunkSize) - UInt64(offset) else { throw .badValue("a piece of \(n) bytes at offset \(offset) overruns its chunk") }
            self = .blobPiece(digest: digest, chunk: chunk, offset: offset, bytes: try r.raw(Int(n)))
        case .blobNotHere:
            self = .blobNotHere(digest: try r.digest())
        case .blobHaveNow:
            self = .blobHaveNow(digest: try r.digest())
        }
        guard r.remaining == 0 else { throw .trailingBytes(r.remaining) }
    }
}

extension ReplicationMessage {
    static func changes(_ r: inout WireReader) throws(WireError) -> [AnnouncedChange] {
        let n = try r.count(minimumEntryBytes: 5)  // smallest entry: seq 1 + id 2 + flag 1 + version 1
        var changes: [AnnouncedChange] = []
        changes.reserveCapacity(n)
        for _ in 0..<n {
            changes.append(AnnouncedChange(sequence: try r.varint(), id: try r.string(), deleted: try r.u8() != 0, version: try r.varblob()))
        }
        return changes
    }

    static func bodies(_ r: inout WireReader) throws(WireError) -> [DocumentBody] {
        let n = try r.count(minimumEntryBytes: 4)  // smallest entry: id 2 + flags 1 + body 1 (version as announced)
        var docs: [DocumentBody] = []
        docs.reserveCapacity(n)
        for _ in 0..<n {
            let id = try r.string()
            let flags = try r.u8()
            guard flags <= 3 else { throw .badValue("document flags \(flags)") }
            let asAnnounced = flags & 2 != 0
            let version = asAnnounced ? [] : try r.varblob()
            docs.append(DocumentBody(id: id, deleted: flags & 1 != 0, version: version, body: try r.varblob(), asAnnounced: asAnnounced))
        }
        return docs
    }

}

struct WireWriter {
    var bytes: [UInt8] = []
    mutating func u8(_ v: UInt8) { bytes.append(v) }
    mutating func u16(_ v: UInt16) { bytes.append(UInt8(v >> 8)); bytes.append(UInt8(v & 0xFF)) }
    mutating func u32(_ v: UInt32) { bytes.appendBigEndian(v) }
    mutating func u64(_ v: UInt64) { bytes.appendBigEndian(v) }
    mutating func raw(_ b: [UInt8]) { bytes.append(contentsOf: b) }
    mutating func peer(_ p: PeerID) { p.append(to: &bytes) }
    mutating func string(_ s: String) {
        let b = Array(s.utf8.prefix(Int(UInt16.max)))
        u16(UInt16(b.count)); bytes.append(contentsOf: b)
    }
    mutating func blob(_ b: [UInt8]) { u32(UInt32(b.count)); bytes.append(contentsOf: b) }
    /// LEB128: 7 bits a byte, low first, the high bit set on all but the last.
    mutating func varint(_ v: UInt64) {
        var x = v
        while x >= 0x80 {
            bytes.append(UInt8(x & 0x7F) | 0x80)
            x >>= 7
        }
        bytes.append(UInt8(x))
    }
    mutating func varblob(_ b: [UInt8]) { varint(UInt64(b.count)); bytes.append(contentsOf: b) }
    mutating func changes(_ changes: [ReplicationMessage.AnnouncedChange]) {
        bytes.reserveCapacity(bytes.count + 10 + changes.reduce(0) { $0 + $1.id.utf8.count + $1.version.count + 16 })  // (a push has room already)
        varint(UInt64(changes.count))
        for x in changes { varint(x.sequence); string(x.id); u8(x.deleted ? 1 : 0); varblob(x.version) }
    }
}

struct WireReader {
    let bytes: [UInt8]
    var index = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }
    var remaining: Int { bytes.count - index }

    func need(_ n: Int) throws(WireError) {
        guard n >= 0, n <= remaining else { throw .truncated(needed: n, remaining: remaining) }
    }
    mutating func u8() throws(WireError) -> UInt8 { try need(1); defer { index += 1 }; return bytes[index] }
    mutating func u16() throws(WireError) -> UInt16 {
        try need(2); defer { index += 2 }
        return UInt16(bytes[index]) << 8 | UInt16(bytes[index + 1])
    }
    mutating func u32() throws(WireError) -> UInt32 {
        try need(4); defer { index += 4 }
        var v: UInt32 = 0
        for k in 0..<4 { v = v << 8 | UInt32(bytes[index + k]) }
        return v
    }
    mutating func u64() throws(WireError) -> UInt64 {
        try need(8); defer { index += 8 }
        return bytes.readBigEndianUInt64(at: index)
    }
    mutating func raw(_ n: Int) throws(WireError) -> [UInt8] {
        try need(n); defer { index += n }
        return Array(bytes[index..<(index + n)])
    }
    mutating func string() throws(WireError) -> String {
        let n = Int(try u16())
        try need(n)
        let start = index
        // Straight from the frame's bytes: no array copied first.
        let text = bytes.withUnsafeBufferPointer { UTF8Text.string(UnsafeBufferPointer(rebasing: $0[start..<(start + n)])) }
        guard let text else { throw .badValue("a string is not valid UTF-8") }
        index += n
        return text
    }
    mutating func blob() throws(WireError) -> [UInt8] {
        let n = Int(try u32())
        return try raw(n)
    }
    /// A LEB128 varint of at most 10 bytes that fits 64 bits (overlong or overflowing: refused).
    mutating func varint() throws(WireError) -> UInt64 {
        var v: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let b = try u8()
            if shift == 63 && b > 1 { throw .badValue("a varint overflows 64 bits") }
            v |= UInt64(b & 0x7F) << shift
            if b & 0x80 == 0 { return v }
            shift += 7
            if shift > 63 { throw .badValue("a varint is longer than 10 bytes") }
        }
    }
    mutating func digest() throws(WireError) -> BlobDigest {
        guard let d = BlobDigest(bytes: try raw(32)) else { throw .badValue("a blob digest is not 32 bytes") }
        return d
    }
    mutating func u32varint() throws(WireError) -> UInt32 {
        let v = try varint()
        guard v <= UInt64(UInt32.max) else { throw .badValue("\(v) does not fit 32 bits") }
        return UInt32(v)
    }
    mutating func varblob() throws(WireError) -> [UInt8] {
        let n = try varint()
        guard n <= UInt64(remaining) else { throw .truncated(needed: Int(clamping: n), remaining: remaining) }
        return try raw(Int(n))
    }
    /// A list count, checked against the bytes left (each entry needs at least `minimumEntryBytes`)
    /// before anything is allocated.
    mutating func count(minimumEntryBytes: Int) throws(WireError) -> Int {
        let n = try varint()
        guard n <= UInt64(remaining / max(1, minimumEntryBytes)) else {
            throw .truncated(needed: Int(clamping: n) &* minimumEntryBytes, remaining: remaining)
        }
        return Int(n)
    }
}
