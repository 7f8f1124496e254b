import ShoalCore

/// One gateway's mesh manager: a sans-IO state machine. The driver (the runtime with real radios,
/// or the simulator with virtual time) reports what happened — peers heard, connections opened and
/// closed, gossip received, time passing — and carries out the actions it returns: advertise, scan,
/// connect, close, send gossip, report events. `nextWake` says when to call back with `.tick`.
///
/// How links are chosen, so that the mesh stays one connected graph with few links:
/// - Gossip: each node floods its own list of links (origin, sequence, neighbours). From the newest
///   list of every origin a node computes its component: the peers it can reach through links.
/// - A node with no links connects to any peer it hears (the least loaded first). A node with links
///   connects only to peers outside its component — that joins two parts of the mesh — and only if
///   it is its component's dialler (the lowest peer id among members with a free slot), so two
///   parts are joined by one link, not by every pair that hears each other. A node with a single
///   link adds a second one inside its component to a peer with room, so one lost link does not cut
///   it off.
/// - At most `maxConnectionCount` links (in + out, attempts included); `connectDelayMillis` between
///   attempts; `backoffMillis` before dialling a peer that failed again.
/// - One link per pair: if both sides dialled, both keep the link dialled by the lower peer id.
/// - A full node accepts a newcomer that has no links — or any peer outside its component, so two
///   full parts can still join — by evicting one of its own links whose peer stays reachable
///   without it (the mesh stays connected), at most once per `evictionBackoffMillis`; otherwise it
///   refuses.
///
/// What a reader gets wrong: the manager never touches replication. Links it keeps carry
/// replication; the driver opens the replicator on a link once the manager has not closed it.
public final class MeshManager {
    public let me: PeerID
    public let settings: MeshSettings
    public internal(set) var state = MeshState.created
    public internal(set) var counters = MeshCounters()
    /// When to call `handle(.tick, now:)` next (nil: nothing is scheduled).
    public internal(set) var nextWake: UInt64?

    struct Connection {
        let id: ConnectionID
        let peer: PeerID
        let transport: MeshTransport
        let outgoing: Bool
        var busy = false
        /// Replication runs on it (the driver said so).
        var replicating = false
    }

    struct PeerRecord {
        var heardOn: Set<MeshTransport> = []
        var load: Int?
        var failedAt: UInt64?
        /// The transport the failure at `failedAt` was on (its backoff does not hold up the other).
        var failedOn: MeshTransport?
        var failures = 0
        /// Wi-Fi failures in a row (transport switching), and the last one's time.
        var wifiFailures = 0
        var wifiFailedAt: UInt64?
        var lastActivity = PeerActivity.offline
        /// Why the last attempt failed, until a link to it opens.
        var lastError: String?
        /// When we last began hearing it over Bluetooth LE, or last lost a BLE link to it (what
        /// `bluetoothYieldMillis` counts from).
        var bluetoothYieldFrom: UInt64?
    }

    struct Advertising {
        var active = false
        var failures = 0
        /// When to (re)try; nil while active or while the transport is down.
        var at: UInt64?
    }

    var rng: SeededRandom
    var connections: [ConnectionID: Connection] = [:]
    /// Dials in flight, until they open, fail or time out (30 s). A dial keeps its peer's slot
    /// while the peer's own link to us is up and after it closes, so the link it brings never
    /// finds the slots gone (see `slotsTaken`).
    var pending: [PeerID: (transport: MeshTransport, at: UInt64)] = [:]
    var peers: [PeerID: PeerRecord] = [:]
    var usable: Set<MeshTransport>
    var advertising: [MeshTransport: Advertising] = [:]
    /// The last status each transport was reported with (events say changes only).
    var reportedTransport: [MeshTransport: (active: Bool, error: String?)] = [:]
    var scanning = false
    var phaseEnds: UInt64?
    var nextPhase: UInt64?
    var lastDial: UInt64?
    var lastEviction: UInt64?
    /// Outside peers we may dial to join their part of the mesh once this time comes (members that
    /// are not their component's dialler wait a random while, so gossip can show a join happened).
    var joinAt: [PeerID: UInt64] = [:]
    /// Gossip: origin → (sequence, its links). Our own entry is kept here too.
    var graph: [PeerID: (sequence: UInt64, neighbours: [PeerID])] = [:]
    var sequence: UInt64
    /// Per link, the origins whose newest gossip it is owed, sent at `gossipFlushAt`.
    var gossipOwed: [ConnectionID: Set<PeerID>] = [:]
    var gossipFlushAt: UInt64?
    /// Per link, the last origin a capped flush sent it (the next flush goes on from there).
    var gossipCursor: [ConnectionID: PeerID] = [:]
    /// `absorb` sweeps unreachable origins out of `graph` once it grows past this (and a floor).
    var graphSweepMark = 0
    /// `component()` without a cut, until links or gossip change.
    var componentCache: Set<PeerID>? { didSet { if componentCache == nil { treeCache = nil }; diallerCache = nil } }
    var treeCache: Set<PeerID>?
    /// For `isDialler`: the lowest member but us with a free slot per gossip (.some(nil): none),
    /// until the component changes or a node's link count crosses maxConnectionCount.
    var diallerCache: PeerID??

    /// `sequenceBase` makes our gossip newer than anything sent before a restart: pass the wall
    /// clock in milliseconds (the simulator passes its virtual time). `fallbackSeed` is used when
    /// `randomSeed` is 0 (the seed's "seed from the current time").
    public init(me: PeerID, settings: MeshSettings, sequenceBase: UInt64, fallbackSeed: UInt64) {
        self.me = me
        self.settings = settings
        rng = SeededRandom(seed: settings.randomSeed != 0 ? settings.randomSeed : fallbackSeed)
        usable = settings.transports
        sequence = sequenceBase << 16
    }

    // MARK: - Reading

    /// Peers we hold a link to.
    public var neighbours: [PeerID] { Set(connections.values.map(\.peer)).sorted() }

    /// Whether a link (any transport) is open to `peer` (cheap: no set, no sort).
    public func isLinked(to peer: PeerID) -> Bool { connections.values.contains { $0.peer == peer } }
    /// Our last gossip of our own links (sequence, neighbours): a driver may send it again on a
    /// quiet link as a keepalive (receivers ignore a sequence they have).
    public var ownAnnouncement: (sequence: UInt64, neighbours: [PeerID]) { graph[me] ?? (sequence, neighbours) }
    public var connectionCount: Int { connections.count }
    /// Peers we hold a link to: what maxConnectionCount limits (a handover holds two links to one).
    public var linkedPeerCount: Int { Set(connections.values.map(\.peer)).count }
    public var isScanning: Bool { scanning }
    public func isAdvertising(_ t: MeshTransport) -> Bool { advertising[t]?.active == true }
    /// Whether the driver should run replication on this connection (false once closed or refused).
    public func keeps(_ id: ConnectionID) -> Bool { connections[id] != nil }

    /// Our connections, by id.
    public var connectionIDs: [ConnectionID] { connections.keys.sorted() }

    /// Whether this connection lies on the mesh's spanning tree. Every node computes the same tree
    /// from the same gossip (a minimum spanning tree over links both ends report, weighted by a
    /// hash of the pair), so live changes pushed along it reach each node once; the other links
    /// only announce them.
    public func isTreeLink(_ id: ConnectionID) -> Bool {
        guard let c = connections[id], primary(c.peer)?.id == id else { return false }
        return treeNeighbours().contains(c.peer)
    }

    /// The connection replication uses with `peer`: during a handover, the Bluetooth LE link until
    /// the Wi-Fi link replicates; otherwise the only one (the oldest, should there be two).
    func primary(_ peer: PeerID) -> Connection? {
        let all = connections.values.filter { $0.peer == peer }.sorted { $0.id < $1.id }
        if let wifi = all.first(where: { $0.transport == .wifi && $0.replicating }) { return wifi }
        return all.first { $0.transport == .bluetooth } ?? all.first
    }

    func treeNeighbours() -> Set<PeerID> {
        if let t = treeCache, componentCache != nil { return t }
        let members = component()
        var edges: [(w: UInt64, a: PeerID, b: PeerID)] = []
        for a in members {
            let listA = a == me ? neighbours : (graph[a]?.neighbours ?? [])
            for b in listA where a < b && members.contains(b) {
                let listB = b == me ? neighbours : (graph[b]?.neighbours ?? [])
                guard listB.contains(a) else { continue }  // both ends must say so
                var x = (a.prefix64 ^ b.prefix64) &* 0x9E37_79B9_7F4A_7C15
                x ^= x >> 29
                edges.append((x, a, b))
            }
        }
        edges.sort { ($0.w, $0.a, $0.b) < ($1.w, $1.a, $1.b) }
        var parent: [PeerID: PeerID] = [:]
        func root(_ p: PeerID) -> PeerID {
            var r = p
            while let q = parent[r], q != r { r = q }
            return r
        }
        var mine = Set<PeerID>()
        for e in edges {
            let ra = root(e.a), rb = root(e.b)
            guard ra != rb else { continue }
            parent[ra] = rb
            if e.a == me { mine.insert(e.b) } else if e.b == me { mine.insert(e.a) }
        }
        treeCache = mine
        return mine
    }

    /// Every peer reachable through links, from gossip (ourselves excluded).
    public var reachable: Set<PeerID> { var c = component(); c.remove(me); return c }

    /// The links of the mesh as far as gossip tells, each once (a < b).
    public var knownLinks: [(PeerID, PeerID)] {
        var edges = Set<[PeerID]>()
        let members = component()
        for (origin, entry) in graph where members.contains(origin) {
            for n in entry.neighbours { edges.insert(origin < n ? [origin, n] : [n, origin]) }
        }
        return edges.map { ($0[0], $0[1]) }.sorted { ($0.0, $0.1) < ($1.0, $1.1) }
    }

    public func info(_ peer: PeerID) -> PeerInfo? {
        let record = peers[peer]
        let conn = primary(peer)
        guard record != nil || conn != nil || graph[peer] != nil else { return nil }
        return PeerInfo(peer: peer, online: conn != nil || !(record?.heardOn.isEmpty ?? true),
                        discoveredOn: (record?.heardOn ?? []).sorted(), connectedOn: conn?.transport, outgoing: conn?.outgoing,
                        neighbours: graph[peer]?.neighbours ?? [], activity: conn == nil ? .offline : (conn!.busy ? .busy : .idle),
                        lastError: conn == nil ? record?.lastError : nil)
    }

    /// Every peer heard, linked or known from gossip.
    public var knownPeers: [PeerID] {
        var all = Set(peers.keys)
        for c in connections.values { all.insert(c.peer) }
        for p in component() where p != me { all.insert(p) }
        return all.sorted()
    }

    // MARK: - Driving

    public func handle(_ input: MeshInput, now: UInt64) -> [MeshAction] {
        var out: [MeshAction] = []
        let next: Next
        switch input {
        case .start: next = startMesh(now: now, &out)
        case .stop: next = stopMesh(now: now, &out)
        case .fatal(let reason): next = die(reason, now: now, &out)
        case .tick: next = .finish
        case .retryNetworks: next = retry(now: now, &out)
        case .transport(let t, let up): next = transportChanged(t, up: up, now: now, &out)
        case .advertisingStarted(let t): next = advertisingStarted(t, now: now, &out)
        case .advertisingFailed(let t, let reason): next = advertisingFailed(t, reason: reason, now: now, &out)
        case .discovered(let peer, let t, let load): next = heard(peer, t, load: load, now: now, &out)
        case .lost(let peer, let t): next = lost(peer, t, &out)
        case .incoming(let id, let peer, let t): next = incoming(id, peer, t, now: now, &out)
        case .outgoingOpened(let id, let peer, let t): next = outgoingOpened(id, peer, t, now: now, &out)
        case .outgoingFailed(let peer, let t, let reason): next = outgoingFailed(peer, t, reason: reason, now: now, &out)
        case .refused(let peer, let t, let reason):
            guard heard(peer, t, load: nil, now: now, &out) == .finish else { next = .skip; break }
            next = outgoingFailed(peer, t, reason: reason, now: now, &out)
        case .closed(let id): next = closed(id, now: now, &out)
        case .replicating(let id): next = replicating(id, now: now, &out)
        case .topology(let from, let origin, let seq, let neighbours): next = gossip(from: from, origin: origin, sequence: seq, neighbours: neighbours, now: now, &out)
        case .topologies(let from, let entries): next = gossip(from: from, entries, now: now, &out)
        case .activity(let id, let busy): next = activity(id, busy: busy, &out)
        }
        return next == .finish ? finish(out, now: now) : out
    }

    var isRunning: Bool { state == .discovering || state == .fullyConnected }

    func setState(_ s: MeshState, _ out: inout [MeshAction]) {
        guard s != state else { return }
        state = s
        out.append(.event(.state(s)))
    }

    func shutDown(now: UInt64, _ out: inout [MeshAction]) {
        for t in MeshTransport.allCases where advertising[t]?.active == true { out.append(.stopAdvertising(t)) }
        if scanning { for t in usable.sorted() { out.append(.stopScanning(t)) } }
        scanning = false
        advertising = [:]
        reportedTransport = [:]   // a restarted mesh reports each transport afresh
        phaseEnds = nil
        nextPhase = nil
        for c in connections.values.sorted(by: { $0.id < $1.id }) {
            out.append(.close(c.id, reason: "the mesh stopped"))
            out.append(.event(.peerReplicator(c.peer, c.transport, outgoing: c.outgoing, activity: .stopped, error: nil)))
        }
        connections = [:]
        gossipOwed = [:]
        gossipFlushAt = nil
        gossipCursor = [:]
        componentCache = nil
        pending = [:]
        nextWake = nil
    }

    /// Timers, then connection planning, then the state; also computes `nextWake`.
    func finish(_ actionsSoFar: [MeshAction], now: UInt64) -> [MeshAction] {
        var out = actionsSoFar
        guard isRunning else { nextWake = nil; return out }
        // Advertising (re)tries that are due.
        for t in settings.transports.sorted() where usable.contains(t) {
            if let at = advertising[t]?.at, at <= now {
                advertising[t]!.at = nil
                out.append(.startAdvertising(t))
            }
        }
        // Discovery phases.
        if scanning, let end = phaseEnds, end <= now {
            scanning = false
            phaseEnds = nil
            for t in usable.sorted() { out.append(.stopScanning(t)) }
            nextPhase = now + pauseWithJitter()
        }
        if !scanning, let at = nextPhase, at <= now { startPhase(initial: false, now: now, &out) }
        // Dialling that has been waiting for a timeout gives up.
        for (peer, p) in pending where now >= p.at + 30_000 {
            pending[peer] = nil
            counters.failedConnectionAttempts += 1
        }
        if let at = gossipFlushAt, at <= now { flushGossip(now: now, &out) }
        plan(now: now, &out)
        counters.connectedPeers = linkedPeerCount
        counters.discoveredPeers = peers.values.filter { !$0.heardOn.isEmpty }.count
        setState(isFullyConnected ? .fullyConnected : .discovering, &out)
        // When anything could change next.
        var wake: [UInt64] = []
        for a in advertising.values { if let at = a.at { wake.append(at) } }
        if let e = phaseEnds { wake.append(e) }
        if !scanning, let n = nextPhase { wake.append(n) }
        for p in pending.values { wake.append(p.at + 30_000) }
        if let w = nextDialWake(now: now) { wake.append(w) }
        if let g = gossipFlushAt { wake.append(g) }
        nextWake = wake.filter { $0 > now }.min() ?? wake.min().map { max($0, now + 1) }
        return out
    }

    var isFullyConnected: Bool {
        if linkedPeerCount >= settings.maxConnectionCount { return true }
        guard !connections.isEmpty else { return false }
        let members = component()
        return peers.allSatisfy { $0.value.heardOn.isEmpty || members.contains($0.key) }
    }

    func startPhase(initial: Bool, now: UInt64, _ out: inout [MeshAction]) {
        let length = initial ? settings.initialDiscoveryMillis : settings.discoveryMillis
        scanning = true
        nextPhase = nil
        phaseEnds = length == 0 ? nil : now + length
        for t in usable.sorted() { out.append(.startScanning(t)) }
    }

    /// discoveryPauseSeconds with a uniform jitter in [-jitter, +jitter].
    func pauseWithJitter() -> UInt64 {
        let j = settings.discoveryPauseJitterMillis
        guard j > 0 else { return settings.discoveryPauseMillis }
        let offset = Int64(UInt64.random(in: 0...(2 * j), using: &rng)) - Int64(j)
        return UInt64(max(0, Int64(settings.discoveryPauseMillis) + offset))
    }

    func advertisingBackoff(failures: Int) -> UInt64 {
        let shift = UInt64(min(failures - 1, 30))
        let base = settings.advertisingRetryMillis
        let raw = base > (UInt64.max >> shift) ? UInt64.max : base << shift
        return min(raw, settings.advertisingRetryMaxMillis)
    }

}
