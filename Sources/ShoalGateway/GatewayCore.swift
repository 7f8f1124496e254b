import ShoalCore
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalWire

/// One gateway's brain, with no threads, sockets or clocks inside: the mesh manager, the
/// replicator and the glue between them, behind one `handle(input, now) -> [action]`. The runtime
/// (real links), the library and the simulator (virtual time, a seeded medium) all drive this same
/// type; they differ only in how they carry out actions and where inputs come from.
///
/// The glue it owns, so no driver writes it again:
/// - a link the driver reports opened goes to the mesh first; if the mesh keeps it, replication
///   starts on it (HELLO before any gossip); if not, the core asks for it to be closed;
/// - gossip received by the replicator goes to the mesh; a link whose HELLOs are done tells the
///   mesh it replicates (a Wi-Fi handover then closes the Bluetooth LE link);
/// - documents moving mark the link busy until `busyQuietMillis` pass quietly;
/// - only links on the mesh's spanning tree carry our changes (refreshed when a link opens or
///   closes, when a linked peer's own gossip arrives, and at every replication tick for the rest);
/// - a link closed by either part is closed in both at once; the driver tears down its I/O and
///   may report `.linkClosed` later, which is then a no-op;
/// - slow links (Bluetooth LE) get our gossip again when quiet and are closed when silent, since
///   L2CAP has no keepalive and a controller may never report a vanished peer.
///
/// What a reader gets wrong: the store is a synchronous dependency (the replicator reads and
/// writes it inside `handle`), so drive a core from one thread, or one actor, of your own.
public final class GatewayCore {
    public let mesh: MeshManager
    public let node: ReplicationNode
    public let settings: Settings

    /// Timing of the glue, in milliseconds.
    public struct Settings: Sendable, Equatable {
        /// How often the replicator's timers run (deferred requests, held acknowledgements).
        public var replicationTickMillis: UInt64 = 250
        /// A link that moved documents is busy until this long passes without any.
        public var busyQuietMillis: UInt64 = 1_000
        /// A quiet slow link gets our gossip again after this long.
        public var keepaliveMillis: UInt64 = 10_000
        /// A slow link that heard nothing for this long is closed.
        public var silenceMillis: UInt64 = 30_000
        public init() {}
    }

    /// What happened, as the driver saw it.
    public enum Input: Sendable {
        case start
        case stop
        /// Time passed (call at `nextWake`, or whenever convenient).
        case tick
        /// `retryNetworks()`: advertise and discover now, forgetting backoffs.
        case retryNetworks
        case transport(MeshTransport, up: Bool)
        case advertisingStarted(MeshTransport)
        case advertisingFailed(MeshTransport, reason: String)
        case discovered(PeerID, MeshTransport, load: Int?)
        case lost(PeerID, MeshTransport)
        /// An authenticated link is up: dialled by us (`outgoing`) or accepted.
        case linkOpened(LinkID, peer: PeerID, MeshTransport, outgoing: Bool)
        case dialFailed(PeerID, MeshTransport, reason: String)
        /// The peer answered and its authenticator refused us (a dial or a probe): heard, and a
        /// failed attempt.
        case refused(PeerID, MeshTransport, reason: String)
        /// Frames that arrived together on one link, in order (see `ReplicationNode.prepare`).
        case frames(LinkID, [PreparedFrame])
        /// The link's I/O ended (the peer closed it, it broke, or we closed it).
        case linkClosed(LinkID)
        /// Local changes were committed to the store (writes from outside the core).
        case localChangesCommitted
        /// Something the gateway cannot run without failed for good.
        case fatal(String)
        /// The fleet's trust now revokes these peers: every link to them closes at once, and a link
        /// to one that opens later (a handshake that raced the revocation) is closed as it opens.
        case peersRevoked(Set<PeerID>)
        /// A reader wants this blob (see `ReplicationNode.demandBlob`); nothing when blobs are off.
        case demandBlob(BlobReference)
    }

    /// What the driver must carry out, in order.
    public enum Action: Sendable {
        /// Send this message on the link (frame it; `ReplicationMessage.frameLimit` bounds it).
        case send(LinkID, [UInt8])
        /// Close the link's I/O (after what was sent before). The core has forgotten it already.
        case close(LinkID, reason: String)
        case connect(PeerID, MeshTransport)
        case startAdvertising(MeshTransport)
        case stopAdvertising(MeshTransport)
        case startScanning(MeshTransport)
        case stopScanning(MeshTransport)
        case mesh(MeshEvent)
        case replication(ReplicationEvent)
        /// Something the driver should log as a warning (the core has no logger).
        case warning(LogDomain, String)
    }

    /// Links the core holds (the mesh kept them), with what the glue tracks per link.
    struct LinkState {
        let transport: MeshTransport
        let peer: PeerID
        /// Documents moved lately (busy until `busyQuietMillis` after this).
        var busySince: UInt64?
        /// Slow links only: when a frame last came, and when we last sent our gossip.
        var heardAt: UInt64?
        var keptAliveAt: UInt64?
        var slow: Bool { transport == .bluetooth }
    }

    var links: [LinkID: LinkState] = [:]
    var lastReplicationTick: UInt64 = 0
    /// Peers the fleet revoked (`Input.peersRevoked`): never linked again.
    public private(set) var revoked: Set<PeerID> = []

    public init(mesh: MeshManager, node: ReplicationNode, settings: Settings = Settings()) {
        precondition(mesh.me == node.peer, "the mesh manager and the replicator must be one gateway's")
        self.mesh = mesh
        self.node = node
        self.settings = settings
    }

    /// Builds both parts for one gateway: every driver (runtime, library, simulator) assembles its
    /// core here, so they run the same parts with the same options.
    public convenience init(peer: PeerID, group: String, store: DocumentStore, clock: NodeClock,
                            collections: [CollectionPolicy], replication: ReplicationSettings, mesh: MeshSettings,
                            sequenceBase: UInt64, fallbackSeed: UInt64, settings: Settings = Settings(), blobs: BlobStorage? = nil) {
        let node = ReplicationNode(peer: peer, group: group, store: store, clock: clock, collections: collections, settings: replication, blobs: blobs)
        let manager = MeshManager(me: peer, settings: mesh, sequenceBase: sequenceBase, fallbackSeed: fallbackSeed)
        self.init(mesh: manager, node: node, settings: settings)
    }

    public var peer: PeerID { node.peer }

    /// When to call `handle(.tick, now:)` next.
    public var nextWake: UInt64? {
        let replication = min(lastReplicationTick + settings.replicationTickMillis, node.wakeAt ?? .max)
        return mesh.nextWake.map { min($0, replication) } ?? (mesh.state == .stopped || mesh.state == .dead ? nil : replication)
    }

    /// Whether the core holds this link (the mesh kept it and nobody closed it since).
    public func keeps(_ link: LinkID) -> Bool { links[link] != nil }

    /// The links the core holds, in order.
    public var linkIDs: [LinkID] { links.keys.sorted() }

    public func transport(of link: LinkID) -> MeshTransport? { links[link]?.transport }

    /// Decodes and checks a frame for `.frames` (thread-safe: a driver may call it off its core's
    /// thread, as the runtime does on each link's thread).
    public func prepare(_ payload: [UInt8]) -> PreparedFrame {
        ReplicationNode.prepare(payload, maxBodyBytes: node.store.options.maxBodyBytes)
    }

    // MARK: - Handling

    public func handle(_ input: Input, now: UInt64) -> [Action] {
        var run = Run(now: now)
        switch input {
        case .start: run.mesh(mesh.handle(.start, now: now), self)
        case .stop: stop(&run)
        case .tick: tick(&run)
        case .retryNetworks: run.mesh(mesh.handle(.retryNetworks, now: now), self)
        case .transport(let t, let up): run.mesh(mesh.handle(.transport(t, up: up), now: now), self)
        case .advertisingStarted(let t): run.mesh(mesh.handle(.advertisingStarted(t), now: now), self)
        case .advertisingFailed(let t, let why): run.mesh(mesh.handle(.advertisingFailed(t, reason: why), now: now), self)
        case .discovered(let p, let t, let load): run.mesh(mesh.handle(.discovered(p, t, load: load), now: now), self)
        case .lost(let p, let t): run.mesh(mesh.handle(.lost(p, t), now: now), self)
        case .linkOpened(let id, let p, let t, let outgoing): opened(id, p, t, outgoing: outgoing, &run)
        case .dialFailed(let p, let t, let why): run.mesh(mesh.handle(.outgoingFailed(p, t, reason: why), now: now), self)
        case .refused(let p, let t, let why): run.mesh(mesh.handle(.refused(p, t, reason: why), now: now), self)
        case .frames(let id, let frames): received(id, frames, &run)
        case .linkClosed(let id): forget(id, &run)
        case .localChangesCommitted: run.replication(node.localChangesCommitted(), self)
        case .fatal(let why): run.mesh(mesh.handle(.fatal(why), now: now), self)
        case .peersRevoked(let peers): revoke(peers, &run)
        case .demandBlob(let reference): run.replication(node.demandBlob(reference, now: now), self)
        }
        if run.treeMayMove { refreshTree(&run) }
        return run.out
    }

    func revoke(_ peers: Set<PeerID>, _ run: inout Run) {
        revoked.formUnion(peers)
        for id in linkIDs {
            guard let l = links[id], peers.contains(l.peer) else { continue }
            run.out.append(.warning(.tls, "peer \(l.peer) is revoked: closing its link \(id) (\(l.transport.rawValue))"))
            close(id, reason: "the peer is revoked", &run)
        }
    }

    func opened(_ id: LinkID, _ peer: PeerID, _ t: MeshTransport, outgoing: Bool, _ run: inout Run) {
        if revoked.contains(peer) {
            run.out.append(.close(id, reason: "the peer is revoked"))
            return
        }
        let decided = mesh.handle(outgoing ? .outgoingOpened(id, peer, t) : .incoming(id, peer, t), now: run.now)
        precondition(mesh.linkedPeerCount <= mesh.settings.maxConnectionCount, "linked to more peers than maxConnectionCount")
        if mesh.keeps(id) {
            links[id] = LinkState(transport: t, peer: peer, heardAt: t == .bluetooth ? run.now : nil, keptAliveAt: t == .bluetooth ? run.now : nil)
            // HELLO goes first; the mesh's gossip for this link after it.
            run.replication(node.linkOpened(id, neighbours: mesh.neighbours, slow: t == .bluetooth), self)
            run.treeMayMove = true
        } else if !decided.contains(where: { if case .close(id, _) = $0 { return true }; return false }) {
            run.out.append(.close(id, reason: "the mesh did not keep it"))
        }
        run.mesh(decided, self)
    }

    func received(_ id: LinkID, _ frames: [PreparedFrame], _ run: inout Run) {
        guard links[id] != nil else { return }
        if links[id]?.heardAt != nil { links[id]?.heardAt = run.now }
        run.replication(node.preparedFramesReceived(id, frames, now: run.now), self)
    }

    /// A link is gone (closed by its I/O, or by one of the parts): both parts forget it.
    func forget(_ id: LinkID, _ run: inout Run) {
        if links.removeValue(forKey: id) != nil { run.treeMayMove = true }
        run.replication(node.linkClosed(id, now: run.now), self)
        run.mesh(mesh.handle(.closed(id), now: run.now), self)
    }

    func tick(_ run: inout Run) {
        if let w = mesh.nextWake, run.now >= w { run.mesh(mesh.handle(.tick, now: run.now), self) }
        guard run.now >= lastReplicationTick + settings.replicationTickMillis else {
            if let w = node.wakeAt, run.now >= w { run.replication(node.wake(now: run.now), self) }
            return
        }
        lastReplicationTick = run.now
        run.replication(node.tick(now: run.now), self)
        quietLinks(&run)
        keepSlowLinksAlive(&run)
        refreshTree(&run)
    }

    func stop(_ run: inout Run) {
        run.mesh(mesh.handle(.stop, now: run.now), self)
        for id in linkIDs { run.out.append(.close(id, reason: "the gateway stopped")); forget(id, &run) }
    }

    /// Links that moved no documents for `busyQuietMillis` are idle again.
    func quietLinks(_ run: inout Run) {
        for id in linkIDs {
            guard let since = links[id]?.busySince, run.now - since >= settings.busyQuietMillis else { continue }
            links[id]?.busySince = nil
            run.mesh(mesh.handle(.activity(id, busy: false), now: run.now), self)
        }
    }

    func keepSlowLinksAlive(_ run: inout Run) {
        for id in linkIDs {
            guard let l = links[id], let heard = l.heardAt else { continue }
            if run.now - heard >= settings.silenceMillis {
                run.out.append(.warning(.replication, "link \(id) (\(l.transport.rawValue)): nothing heard for \(settings.silenceMillis / 1000) s; closing it"))
                close(id, reason: "nothing heard for \(settings.silenceMillis / 1000) s", &run)
            } else if run.now - (l.keptAliveAt ?? 0) >= settings.keepaliveMillis {
                links[id]?.keptAliveAt = run.now
                let own = mesh.ownAnnouncement
                for frame in node.topologyFrames(id, [(node.peer, own.sequence, own.neighbours)]) { run.out.append(.send(id, frame)) }
            }
        }
    }

    /// Changes travel along the mesh's spanning tree only (live ones with their bodies).
    func refreshTree(_ run: inout Run) {
        for id in linkIDs { run.replication(node.setTreeLink(id, mesh.isTreeLink(id)), self) }
    }

    /// Closes a link in both parts now and asks the driver to close its I/O.
    func close(_ id: LinkID, reason: String, _ run: inout Run) {
        guard links[id] != nil else { return }
        run.out.append(.close(id, reason: reason))
        forget(id, &run)
    }

    // MARK: - Carrying the parts' actions across

    /// One `handle` call's output, and the glue between the two parts' actions.
    struct Run {
        let now: UInt64
        var out: [Action] = []
        /// A link opened or closed, or a linked peer's own gossip arrived, during this run: the
        /// spanning-tree flags are refreshed at once. (Left to the next replication tick, a first
        /// link waited up to 250 ms for the tree its peer's gossip made before it pushed anything:
        /// a pull from a freshly booted gateway ran 25 % slower.) Gossip about farther links moves
        /// the tree too; that is caught up at the next replication tick (refreshing on every flood
        /// made `shoal sim --nodes 50` 50 % slower).
        var treeMayMove = false

        mutating func mesh(_ actions: [MeshAction], _ core: GatewayCore) {
            // Gossip in a row for one link goes in as few frames as its peer takes.
            var gossip: [LinkID: [ReplicationNode.GossipEntry]] = [:]
            var gossipLinks: [LinkID] = []
            func sendGossip(_ out: inout [Action]) {
                for id in gossipLinks { for frame in core.node.topologyFrames(id, gossip[id]!) { out.append(.send(id, frame)) } }
                gossip = [:]
                gossipLinks = []
            }
            for a in actions {
                if case .sendTopology(let id, let origin, let sequence, let neighbours) = a {
                    if gossip[id] == nil { gossipLinks.append(id) }
                    gossip[id, default: []].append((origin, sequence, neighbours))
                    continue
                }
                sendGossip(&out)
                switch a {
                case .startAdvertising(let t): out.append(.startAdvertising(t))
                case .stopAdvertising(let t): out.append(.stopAdvertising(t))
                case .startScanning(let t): out.append(.startScanning(t))
                case .stopScanning(let t): out.append(.stopScanning(t))
                case .connect(let p, let t): out.append(.connect(p, t))
                case .close(let id, let reason):
                    // The mesh forgot it already; replication forgets it now.
                    out.append(.close(id, reason: reason))
                    if core.links.removeValue(forKey: id) != nil {
                        treeMayMove = true
                        replication(core.node.linkClosed(id, now: now), core)
                    }
                case .sendTopology: break
                case .event(let e): out.append(.mesh(e))
                }
            }
            sendGossip(&out)
        }

        mutating func replication(_ actions: [ReplicationAction], _ core: GatewayCore) {
            // Gossip entries in a row from one link (a frame's) reach the mesh as one input.
            var gossip: (link: LinkID, entries: [ReplicationNode.GossipEntry])?
            func deliverGossip(_ run: inout Run) {
                guard let g = gossip else { return }
                gossip = nil
                run.mesh(core.mesh.handle(.topologies(from: g.link, g.entries), now: run.now), core)
            }
            for a in actions {
                if case .event(.topology(let link, _, let origin, let sequence, let neighbours)) = a {
                    if let g = gossip, g.link != link { deliverGossip(&self) }
                    if gossip == nil { gossip = (link, []) }
                    gossip!.entries.append((origin, sequence, neighbours))
                    // A linked peer's own announcement is what puts our link to it on the tree (an
                    // edge counts once both ends list it); the rest of a flood waits for the tick.
                    if core.mesh.isLinked(to: origin) { treeMayMove = true }
                    continue
                }
                deliverGossip(&self)
                switch a {
                case .send(let id, let payload): out.append(.send(id, payload))
                case .close(let id):
                    // The replicator forgot it already (it failed the link); the mesh forgets it now.
                    out.append(.close(id, reason: "replication closed it"))
                    if core.links.removeValue(forKey: id) != nil {
                        treeMayMove = true
                        mesh(core.mesh.handle(.closed(id), now: now), core)
                    }
                case .event(.topology): break
                case .event(let e):
                    if case .peerConnected(let link, _) = e { mesh(core.mesh.handle(.replicating(link), now: now), core) }
                    var moved: LinkID?
                    if case .documents(let link, _, _, _) = e { moved = link }
                    if case .blob(let link?, _, _, .completed) = e { moved = link }
                    if let link = moved, core.links[link] != nil {
                        // Documents moving: the link is busy until a quiet `busyQuietMillis`.
                        if core.links[link]?.busySince == nil { mesh(core.mesh.handle(.activity(link, busy: true), now: now), core) }
                        core.links[link]?.busySince = now
                    }
                    out.append(.replication(e))
                }
            }
            deliverGossip(&self)
        }
    }
}
