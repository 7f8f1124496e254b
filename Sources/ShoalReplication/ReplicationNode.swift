import ShoalCore
import ShoalStore
import ShoalWire

/// One gateway's replicator for all its links: a sans-IO state machine. The driver reports links
/// opening and closing, frames arriving, local commits and the passing of time; the node answers
/// with frames to send, links to close and events.
///
/// Per link and collection, each side that pulls subscribes from its checkpoint; the pusher
/// announces changes (ids, versions, flags) in batches; the receiver requests only what it lacks —
/// unless another link already has that document in flight, younger than requestTimeoutMillis;
/// bodies come back in frames bounded by size and count and are applied one frame per store
/// transaction; once every announced document is held, the receiver moves its checkpoint (durably)
/// and acknowledges; the pusher then announces the next batch. A restart resumes from the
/// checkpoint, so nothing acknowledged is announced again and nothing is skipped.
///
/// What a reader gets wrong: the node is not thread-safe and calls the store synchronously —
/// drive it from one thread of your own.
public final class ReplicationNode {
    public let peer: PeerID
    public let group: String
    public let store: DocumentStore
    public let clock: NodeClock
    public let settings: ReplicationSettings
    public let writer: LocalWriter
    let policies: [String: CollectionPolicy]
    /// Where blobs are kept (nil: blobs off; HELLO does not offer them).
    public let blobs: BlobStorage?
    let blobState = BlobState()

    var links: [LinkID: Link] = [:]
    /// The latest time the driver reported (for requests made outside a timed call).
    var lastNow: UInt64 = 0
    /// Bodies that came in pushes for documents this gateway already held (each one a body sent
    /// twice: two paths brought it). Each first one on a link and collection sends `prune`.
    public internal(set) var heldPushedBodies = 0
    /// When the earliest document left for a pushing path (`awaitingPush`) is due to be asked for.
    var awaitingDue: UInt64?
    /// Documents requested from some link and not yet received: (collection, id) → (link, when).
    var inFlight: [DocKey: (link: LinkID, at: UInt64)] = [:]

    struct DocKey: Hashable {
        let collection: String
        let id: String
        /// The id alone: a node replicates a handful of collections, so hashing their names too
        /// only costs time (equality still compares both).
        func hash(into hasher: inout Hasher) { hasher.combine(id) }
    }

    final class Link {
        let id: LinkID
        var peer: PeerID?
        var nextBatch: UInt64 = 1
        var push: [String: PushStream] = [:]
        /// Announced batches not yet acknowledged, oldest first, per collection.
        var pull: [String: [InboundBatch]] = [:]
        /// The newest batch the peer announced per collection, and its upTo (both rise).
        var lastInbound: [String: (batch: UInt64, upTo: UInt64)] = [:]
        var skewReported = false
        /// Live batches completed (checkpoint written) whose acknowledgement waits for the next
        /// tick, per collection: the newest one, acknowledging all.
        var heldAcks: [String: (batch: UInt64, upTo: UInt64, count: Int)] = [:]
        /// The peer's purge horizon (from its HELLO): it may no longer hold tombstones older than this.
        var remotePurgeHorizon: UInt64 = 0
        /// Where our pull checkpoints from this peer are kept: its id and its store's epoch (from its
        /// HELLO), so a peer whose store was recreated, or lost commits, is read again from 0.
        var checkpointKey = ""
        /// This link carries our changes (it is on the mesh's spanning tree, or there is no mesh).
        /// Off the tree, push streams hold where they are and resume when the link joins it.
        var onTree = true
        /// Smaller batches for a slow link (Bluetooth LE): documents frames of at most this many
        /// bytes and announces of at most this many changes (nil: the settings').
        var frameBytes: Int?
        var maxCount: Int?
        /// The pull's progress (catch-up batches, all collections): for status and `shoal peers`.
        var progress = ProgressMeter()
        /// A low-throughput link (Bluetooth LE): small blob pieces and windows.
        var slow = false
        /// Both sides set `Capability.blobs` in their HELLO.
        var blobCapable = false
        /// The peer set `Capability.announcedVersions`: requested documents unchanged since their
        /// announce go without their version.
        var takesAnnouncedVersions = false
        /// The peer set `Capability.compactTopology`: gossip goes as `topologyRefs`, ids by
        /// reference (`sentRefs`); `heardRefs` resolves what the peer sends us so.
        var compactTopology = false
        /// Both HELLOs set `Capability.protocol2`: versions go with their field stamps. Otherwise
        /// as format 1 (`DocumentVersion.documentLevel`).
        var protocol2 = false
        /// The peer set `Capability.prune`: it takes `prune` frames.
        var takesPrune = false
        /// Collections whose bodies we asked this peer to stop pushing (`prune`), and when: until
        /// we next request from it, its bodies come again, the link joins our tree or
        /// pruneLeaseMillis pass (the last two send `graft`).
        var pruned: [String: UInt64] = [:]
        var sentRefs = PeerRefTable()
        var heardRefs = PeerRefTable()
        /// Gossip the mesh sent before the peer's HELLO told us its form: the newest per origin.
        var heldGossip: [PeerID: (sequence: UInt64, neighbours: [PeerID])] = [:]
        /// Blob chunks the peer asked for, not yet sent, oldest first.
        var serving: [(digest: BlobDigest, index: Int, pieceBytes: Int)] = []
        /// Blobs this peer waits for ("not here" sent, "have now" owed).
        var watching = 0
        var badBlobChunks = 0
        /// Blob pieces that came for a chunk not asked of this link (late ones, after a switch).
        var unaskedPieces = 0
        /// When a blob piece last came on this link.
        var blobProgressAt: UInt64 = 0
        init(id: LinkID) { self.id = id }
    }

    final class PushStream {
        /// The peer acknowledged everything up to here.
        var since: UInt64
        /// Announced up to here (acknowledged or not).
        var announcedUpTo: UInt64
        /// Batches announced and not yet acknowledged, oldest first (at most `batchWindow`).
        /// Batches announced and not yet acknowledged: each announced id, whether it was a
        /// tombstone and the version announced (a request answered with that same version says
        /// so instead of sending it again, to a peer that takes it).
        var inFlight: [(batch: UInt64, upTo: UInt64, announced: [String: (deleted: Bool, version: [UInt8])])] = []
        /// Local sequences of this collection whose change is exactly what this link's peer sent
        /// us (not announced back to it); pruned as the stream passes them.
        var echoes: Set<Int64> = []
        /// The peer pruned this stream: live changes go as pushes without bodies, until it requests
        /// something (it needed what we pushed), grafts, or this link joins our tree (again).
        var lazy = false

        init(since: UInt64) {
            self.since = since
            announcedUpTo = since
        }
    }

    final class InboundBatch {
        let batch: UInt64
        let upTo: UInt64
        /// Announced documents not yet held: id → announced change.
        var waiting: [String: ReplicationMessage.AnnouncedChange] = [:]
        var requested: Set<String> = []
        var deferred: Set<String> = []
        /// Announced on a link we pruned: left for other paths until the prune wait has passed since
        /// `announcedAt` (the node wakes for it), then deferred as any other (requested here unless
        /// in flight on another link).
        var awaitingPush: Set<String> = []
        var announcedAt: UInt64 = 0
        /// Came as a push (live changes): its acknowledgement may wait for the next tick.
        var live = false
        init(batch: UInt64, upTo: UInt64) {
            self.batch = batch
            self.upTo = upTo
        }
    }

    public init(peer: PeerID, group: String, store: DocumentStore, clock: NodeClock, collections: [CollectionPolicy],
                settings: ReplicationSettings = ReplicationSettings(), blobs: BlobStorage? = nil) {
        self.peer = peer
        self.blobs = blobs
        self.group = group
        self.store = store
        self.clock = clock
        self.settings = settings
        self.writer = LocalWriter(peer: peer, store: store, clock: clock)
        var p: [String: CollectionPolicy] = [:]
        for c in collections { p[c.name.description] = c }
        policies = p
    }

    /// Whether this link is on the mesh's spanning tree (the mesh manager says; without a mesh
    /// every link is). The tree reaches every node, so only tree links carry our changes — live
    /// ones with their bodies — and a body crosses each tree edge once. Off the tree, push streams
    /// hold where they are; when a link joins the tree its streams resume from there (a catch-up
    /// announce of what the peer most likely holds already: metadata, no bodies it has).
    public func setTreeLink(_ link: LinkID, _ onTree: Bool) -> [ReplicationAction] {
        guard let l = links[link], l.onTree != onTree else { return [] }
        l.onTree = onTree
        guard onTree else { return [] }
        // Joining our tree: the peer's prune was about the tree before (a second copy prunes us
        // anew). And a link we pruned that joins our tree is the path now: ask for its pushes again.
        for stream in l.push.values { stream.lazy = false }
        var actions = graft(on: [l]) { _ in true }
        for (name, stream) in l.push.sorted(by: { CollectionName.replicatesBefore($0.key, $1.key) }) {
            do { actions += try pump(l, name, stream) } catch { actions += fail(l, .store(error), now: lastNow) }
        }
        return actions
    }

    /// Sends `graft` for every collection we pruned on a link where `due` says so (given when it
    /// was pruned), and asks now for what those links announced that we left for other paths
    /// (unless in flight elsewhere).
    func graft(on some: [Link]? = nil, where due: (UInt64) -> Bool) -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        var moved = false
        for l in some ?? links.values.sorted(by: { $0.id < $1.id }) where !l.pruned.isEmpty {
            for (name, at) in l.pruned.sorted(by: { $0.key < $1.key }) where due(at) {
                actions.append(.send(l.id, ReplicationMessage.graft(collection: name).encoded()))
                l.pruned[name] = nil
                for batch in l.pull[name] ?? [] where !batch.awaitingPush.isEmpty {
                    batch.deferred.formUnion(batch.awaitingPush)
                    batch.awaitingPush = []
                    moved = true
                }
            }
        }
        if moved { actions += retryDeferred(now: lastNow, force: []) }
        return actions
    }

    /// When `wake(now:)` has work (documents announced on a pruned link, waited for long enough
    /// on another path), if before the next tick.
    public var wakeAt: UInt64? { awaitingDue }

    /// Asks for what pruned links announced and no other path brought in time (see
    /// `ReplicationSettings.pruneWaitMillis`). `tick` does it too.
    public func wake(now: UInt64) -> [ReplicationAction] {
        lastNow = max(lastNow, now)
        return retryDeferred(now: now, force: [])
    }

    /// Peers with a link that finished HELLO.
    public var connectedPeers: [PeerID] { links.values.compactMap(\.peer) }

    /// The links pulling a sync now (announced documents outstanding), with its progress at `now`,
    /// in link order. See `SyncProgress` for what "announced" covers.
    public func syncProgress(now: UInt64) -> [(link: LinkID, peer: PeerID, progress: SyncProgress)] {
        links.values.sorted { $0.id < $1.id }.compactMap { l in
            guard let peer = l.peer, let p = l.progress.progress(now: now) else { return nil }
            return (l.id, peer, p)
        }
    }

    // MARK: - Driver events

    /// A link is up. `slow`: a low-throughput link (Bluetooth LE), replicated in small batches
    /// (16 KB document frames, announces of 100 changes) so progress is steady and a drop costs
    /// little.
    public func linkOpened(_ link: LinkID, neighbours: [PeerID] = [], slow: Bool = false) -> [ReplicationAction] {
        let l = Link(id: link)
        l.slow = slow
        if slow {
            l.frameBytes = min(settings.batchSizeBytes, 16 * 1024)
            l.maxCount = min(settings.batchMaxCount, 100)
        }
        links[link] = l
        let offers = policies.values.sorted { $0.name < $1.name }.map {
            ReplicationMessage.CollectionOffer(name: $0.name.description, push: $0.push, pull: $0.pull)
        }
        let hello = ReplicationMessage.hello(version: ReplicationMessage.protocolVersion, peer: peer, group: group,
                                             capabilities: (blobs == nil ? 0 : ReplicationMessage.Capability.blobs) | ReplicationMessage.Capability.announcedVersions
                                                 | ReplicationMessage.Capability.compactTopology | ReplicationMessage.Capability.protocol2
                                                 | ReplicationMessage.Capability.prune,
                                             purgeHorizonMillis: UInt64(max(0, store.purgeHorizonMillis)), neighbours: neighbours, collections: offers,
                                             storeEpoch: store.epoch)
        return [.send(link, hello.encoded())]
    }

    public typealias GossipEntry = (origin: PeerID, sequence: UInt64, neighbours: [PeerID])

    /// Frames of mesh gossip for `link`, in the form its peer takes: `topologyRefs` (ids by
    /// reference, many entries a frame) if its HELLO said it takes them, one `topology` an entry
    /// if not. Before its HELLO: none, and the entries are held (the newest per origin) and sent
    /// once the HELLO is in.
    public func topologyFrames(_ link: LinkID, _ entries: [GossipEntry]) -> [[UInt8]] {
        guard let l = links[link], l.compactTopology || l.peer == nil else {
            return entries.map { ReplicationMessage.topology(origin: $0.origin, sequence: $0.sequence, neighbours: $0.neighbours).encoded() }
        }
        guard l.peer != nil else {
            for e in entries where (l.heldGossip[e.origin]?.sequence ?? 0) <= e.sequence { l.heldGossip[e.origin] = (e.sequence, e.neighbours) }
            return []
        }
        var frames: [[UInt8]] = []
        var rest = entries[...]
        while !rest.isEmpty {
            let chunk = rest.prefix(256)
            rest = rest.dropFirst(chunk.count)
            frames.append(l.sentRefs.message(Array(chunk)).encoded())
        }
        return frames
    }

    public func linkClosed(_ link: LinkID, now: UInt64) -> [ReplicationAction] {
        guard let l = links.removeValue(forKey: link) else { return [] }
        var actions: [ReplicationAction] = [.event(.linkClosed(link: link, peer: l.peer, error: nil))]
        actions += blobLinkGone(link, now: now)
        // Whatever this link was fetching, others may now fetch at once.
        let orphaned = inFlight.filter { $0.value.link == link }.map(\.key)
        for k in orphaned { inFlight.removeValue(forKey: k) }
        if !orphaned.isEmpty { actions += retryDeferred(now: now, force: Set(orphaned)) }
        return actions
    }

    /// A frame's payload arrived on `link`.
    public func frameReceived(_ link: LinkID, _ payload: [UInt8], now: UInt64) -> [ReplicationAction] {
        preparedFramesReceived(link, [ReplicationNode.prepare(payload, maxBodyBytes: store.options.maxBodyBytes)], now: now)
    }

    /// Several frames that arrived together on one link (see `preparedFramesReceived`).
    public func framesReceived(_ link: LinkID, _ payloads: [[UInt8]], now: UInt64) -> [ReplicationAction] {
        let limit = store.options.maxBodyBytes
        return preparedFramesReceived(link, payloads.map { ReplicationNode.prepare($0, maxBodyBytes: limit) }, now: now)
    }

    /// Decodes a frame and checks its documents (version, JSON body, size, digest) without touching
    /// the node: the driver calls it on the link's own thread, so the node's thread only resolves
    /// and writes. Thread-safe.
    public static func prepare(_ payload: [UInt8], maxBodyBytes: Int) -> PreparedFrame {
        let message: ReplicationMessage
        do { message = try ReplicationMessage(decoding: payload) } catch { return PreparedFrame(result: .failure(.wire(error)), checked: nil) }
        switch message {
        case .documents(_, _, _, let docs):
            return PreparedFrame(result: .success(message), checked: docs.map { CheckedDocument(checking: $0, maxBodyBytes: maxBodyBytes) })
        case .push(_, _, _, let changes, let docs):
            return PreparedFrame(result: .success(message), checked: pushedBodies(changes, docs).map { CheckedDocument(checking: $0, maxBodyBytes: maxBodyBytes) })
        default:
            return PreparedFrame(result: .success(message), checked: nil)
        }
    }

    /// A push's bodies with their versions filled in from the announced changes (sent empty).
    static func pushedBodies(_ changes: [ReplicationMessage.AnnouncedChange], _ docs: [ReplicationMessage.DocumentBody]) -> [ReplicationMessage.DocumentBody] {
        var versions: [String: [UInt8]] = [:]
        for c in changes { versions[c.id] = c.version }
        return docs.map { d in
            var d = d
            if d.version.isEmpty { d.version = versions[d.id] ?? [] }
            return d
        }
    }

    /// Frames that arrived together on one link, already prepared. Consecutive document frames of
    /// one batch are applied in a single store transaction (one commit, one fsync with durability
    /// full) instead of one each; everything else is handled frame by frame, in order.
    public func preparedFramesReceived(_ link: LinkID, _ frames: [PreparedFrame], now: UInt64) -> [ReplicationAction] {
        guard let l = links[link] else { return [] }
        lastNow = max(lastNow, now)
        var actions: [ReplicationAction] = []
        var pending: (collection: String, batch: UInt64, docs: [CheckedDocument])?
        func flush() throws -> [ReplicationAction] {
            guard let p = pending, let peerID = l.peer, links[link] != nil else { pending = nil; return [] }
            pending = nil
            return try receiveDocuments(l, peerID, p.collection, p.batch, p.docs, now: now)
        }
        do {
            for frame in frames {
                guard links[link] != nil else { break }
                let message = try frame.result.get()
                if case .documents(let c, let b, _, _) = message, let checked = frame.checked, l.peer != nil {
                    if let p = pending, p.collection == c, p.batch == b {
                        pending!.docs += checked
                        continue
                    }
                    actions += try flush()
                    pending = (c, b, checked)
                    continue
                }
                actions += try flush()
                if case .push(let c, let b, let upTo, let changes, _) = message, let checked = frame.checked, let peerID = l.peer {
                    actions += try receivePush(l, peerID, c, b, upTo, changes, checked, now: now)
                    continue
                }
                actions += try handle(message, on: l, now: now)
            }
            actions += try flush()
            // The blob chunks this batch verified, in one store call per blob.
            actions += try storeUnstoredChunks(now: now)
            // Blob pieces go after the documents, a bounded number of bytes per turn.
            return actions + serveBlobs()
        } catch let error as ReplicationError {
            return actions + storeUnstoredChunksAfterFailure(now: now) + fail(l, error, now: now)
        } catch let error as StoreError {
            return actions + storeUnstoredChunksAfterFailure(now: now) + fail(l, .store(error), now: now)
        } catch {
            return actions + storeUnstoredChunksAfterFailure(now: now) + fail(l, .protocolViolation("\(error)"), now: now)
        }
    }

    /// New local changes were committed (local writes, or documents applied from another link).
    public func localChangesCommitted() -> [ReplicationAction] {
        blobState.pollDue = true
        var actions: [ReplicationAction] = []
        for l in links.values.sorted(by: { $0.id < $1.id }) {
            for (name, stream) in l.push.sorted(by: { CollectionName.replicatesBefore($0.key, $1.key) }) where stream.inFlight.count < settings.batchWindow {
                do { actions += try pump(l, name, stream) } catch { actions += fail(l, .store(error), now: 0) }
            }
        }
        return actions
    }

    /// Time passed: requests deferred to another link whose timeout ran out go to their own link.
    public func tick(now: UInt64) -> [ReplicationAction] {
        lastNow = max(lastNow, now)
        // Prunes are leases (see pruneLeaseMillis).
        var actions = graft { now >= $0 + settings.pruneLeaseMillis }
        for l in links.values.sorted(by: { $0.id < $1.id }) where !l.heldAcks.isEmpty {
            for (name, held) in l.heldAcks.sorted(by: { $0.key < $1.key }) {
                actions.append(.send(l.id, ReplicationMessage.acknowledge(collection: name, batch: held.batch, upTo: held.upTo).encoded()))
            }
            l.heldAcks = [:]
        }
        return actions + retryDeferred(now: now, force: []) + blobTick(now: now)
    }

    // MARK: - Messages

    func handle(_ message: ReplicationMessage, on l: Link, now: UInt64) throws -> [ReplicationAction] {
        if case .error(let code, let text) = message {
            return fail(l, .remote(code: code, message: text), now: now, tellPeer: false)
        }
        guard let peerID = l.peer else {
            guard case .hello(let version, let remote, let remoteGroup, let capabilities, let remoteHorizon, _, let offers, let remoteEpoch) = message else {
                throw ReplicationError.protocolViolation("\(message.kind) before hello")
            }
            guard (ReplicationMessage.protocolVersion...ReplicationMessage.highestProtocolVersion).contains(version) else {
                throw ReplicationError.protocolVersion(version)
            }
            guard remoteGroup == group else { throw ReplicationError.wrongGroup(remoteGroup) }
            guard remote != peer else { throw ReplicationError.selfConnection }
            l.peer = remote
            l.remotePurgeHorizon = remoteHorizon
            l.blobCapable = blobs != nil && capabilities & ReplicationMessage.Capability.blobs != 0
            l.takesAnnouncedVersions = capabilities & ReplicationMessage.Capability.announcedVersions != 0
            l.compactTopology = capabilities & ReplicationMessage.Capability.compactTopology != 0
            l.protocol2 = capabilities & ReplicationMessage.Capability.protocol2 != 0
            l.takesPrune = capabilities & ReplicationMessage.Capability.prune != 0
            l.checkpointKey = remoteEpoch == 0 ? remote.description : "\(remote)@\(String(remoteEpoch, radix: 16))"
            // Gossip held for this HELLO, in the peer's form (origins in id order: every run alike).
            // Its sends go before `peerConnected`: the driver may flush newer gossip to this link
            // while it takes that event, and those frames name by reference ids these name in full.
            let held = l.heldGossip.sorted { $0.key < $1.key }.map { (origin: $0.key, sequence: $0.value.sequence, neighbours: $0.value.neighbours) }
            l.heldGossip = [:]
            var actions = topologyFrames(l.id, held).map { ReplicationAction.send(l.id, $0) }
            actions.append(.event(.peerConnected(link: l.id, peer: remote)))
            for offer in offers.sorted(by: { CollectionName.replicatesBefore($0.name, $1.name) }) {
                guard let policy = policies[offer.name], policy.pull, offer.push else { continue }
                let since = try store.checkpoint(peer: l.checkpointKey, collection: policy.name, direction: .pull)
                actions.append(.send(l.id, ReplicationMessage.subscribe(collection: offer.name, since: UInt64(max(0, since))).encoded()))
            }
            if l.blobCapable {
                // Fetches that found nobody may ask the new peer.
                blobState.pollDue = true
                for (_, f) in blobState.fetches.sorted(by: { $0.key < $1.key }) where f.link == nil { actions += askNext(f, now: now) }
            }
            return actions
        }
        switch message {
        case .hello:
            throw ReplicationError.protocolViolation("second hello")
        case .subscribe(let name, let since):
            guard policies[name]?.push == true else { throw ReplicationError.protocolViolation("subscribe to \(name), which we do not push") }
            guard l.push[name] == nil else { throw ReplicationError.protocolViolation("second subscribe to \(name)") }
            let stream = PushStream(since: since)
            l.push[name] = stream
            return try pump(l, name, stream)
        case .announce(let name, let batch, let upTo, let changes):
            return try receiveAnnounce(l, peerID, name, batch, upTo, changes, now: now)
        case .request(let name, let batch, let ids):
            return try serveRequest(l, peerID, name, batch, ids)
        case .documents(let name, let batch, _, let docs):
            let limit = store.options.maxBodyBytes
            return try receiveDocuments(l, peerID, name, batch, docs.map { CheckedDocument(checking: $0, maxBodyBytes: limit) }, now: now)
        case .acknowledge(let name, let batch, let upTo):
            // Cumulative: acknowledging a batch acknowledges every older one on this stream.
            guard let stream = l.push[name], let i = stream.inFlight.firstIndex(where: { $0.batch == batch }), stream.inFlight[i].upTo == upTo else {
                throw ReplicationError.protocolViolation("acknowledge of batch \(batch), which is not in flight")
            }
            let done = stream.inFlight[...i]
            stream.since = upTo
            stream.inFlight.removeFirst(i + 1)
            try store.setCheckpoint(peer: peerID.description, collection: policies[name]!.name, direction: .push, sequence: Int64(upTo))
            var actions: [ReplicationAction] = []
            let items = done.flatMap { f in f.announced.sorted { $0.key < $1.key }.map { ReplicationEvent.Item(collection: name, id: $0.key, deleted: $0.value.deleted, error: nil) } }
            if !items.isEmpty { actions.append(.event(.documents(link: l.id, peer: peerID, direction: .push, items: items))) }
            return actions + (try pump(l, name, stream))
        case .push(let name, let batch, let upTo, let changes, let docs):
            let limit = store.options.maxBodyBytes
            return try receivePush(l, peerID, name, batch, upTo, changes,
                                   ReplicationNode.pushedBodies(changes, docs).map { CheckedDocument(checking: $0, maxBodyBytes: limit) }, now: now)
        case .topology(let origin, let sequence, let neighbours):
            return [.event(.topology(link: l.id, peer: peerID, origin: origin, sequence: sequence, neighbours: neighbours))]
        case .topologyRefs(let entries):
            var actions: [ReplicationAction] = []
            for e in entries {
                guard let ids = l.heardRefs.resolve(e.refs) else {
                    throw ReplicationError.protocolViolation("a topology frame names a peer by a prefix never sent in full on this link")
                }
                actions.append(.event(.topology(link: l.id, peer: peerID, origin: ids[0], sequence: e.sequence, neighbours: Array(ids.dropFirst()))))
            }
            return actions
        case .prune(let name):
            guard let stream = l.push[name] else { throw ReplicationError.protocolViolation("prune of \(name), which we do not push to it") }
            stream.lazy = true
            return []
        case .graft(let name):
            guard let stream = l.push[name] else { throw ReplicationError.protocolViolation("graft of \(name), which we do not push to it") }
            stream.lazy = false
            return []
        case .error:
            return []
        case .blobManifestRequest, .blobManifest, .blobFetch, .blobPiece, .blobNotHere, .blobHaveNow:
            return try handleBlob(message, on: l, now: now)
        }
    }

    /// Closes a link for `error`: tells the peer why, forgets the link, lets others take over.
    func fail(_ l: Link, _ error: ReplicationError, now: UInt64, tellPeer: Bool = true) -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        if tellPeer { actions.append(.send(l.id, ReplicationMessage.error(code: error.code, message: error.description).encoded())) }
        actions.append(.close(l.id))
        actions.append(.event(.linkClosed(link: l.id, peer: l.peer, error: error)))
        links.removeValue(forKey: l.id)
        actions += blobLinkGone(l.id, now: now)
        let orphaned = inFlight.filter { $0.value.link == l.id }.map(\.key)
        for k in orphaned { inFlight.removeValue(forKey: k) }
        if !orphaned.isEmpty { actions += retryDeferred(now: now, force: Set(orphaned)) }
        return actions
    }
}
