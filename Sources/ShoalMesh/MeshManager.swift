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
    public private(set) var state = MeshState.created
    public private(set) var counters = MeshCounters()
    /// When to call `handle(.tick, now:)` next (nil: nothing is scheduled).
    public private(set) var nextWake: UInt64?

    struct Connection {
        let id: ConnectionID
        let peer: PeerID
        let transport: MeshTransport
        let outgoing: Bool
        var busy = false
    }

    struct PeerRecord {
        var heardOn: Set<MeshTransport> = []
        var load: Int?
        var failedAt: UInt64?
        var failures = 0
        var lastActivity = PeerActivity.offline
    }

    struct Advertising {
        var active = false
        var failures = 0
        /// When to (re)try; nil while active or while the transport is down.
        var at: UInt64?
    }

    var rng: SeededRandom
    var connections: [ConnectionID: Connection] = [:]
    var pending: [PeerID: (transport: MeshTransport, at: UInt64)] = [:]
    var peers: [PeerID: PeerRecord] = [:]
    var usable: Set<MeshTransport>
    var advertising: [MeshTransport: Advertising] = [:]
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
    /// `component()` without a cut, until links or gossip change.
    var componentCache: Set<PeerID>? { didSet { if componentCache == nil { treeCache = nil } } }
    var treeCache: Set<PeerID>?

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
    public var connectionCount: Int { connections.count }
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
        guard let c = connections[id] else { return false }
        return treeNeighbours().contains(c.peer)
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
        let conn = connections.values.filter { $0.peer == peer }.min { $0.id < $1.id }
        guard record != nil || conn != nil || graph[peer] != nil else { return nil }
        return PeerInfo(peer: peer, online: conn != nil || !(record?.heardOn.isEmpty ?? true),
                        discoveredOn: (record?.heardOn ?? []).sorted(), connectedOn: conn?.transport, outgoing: conn?.outgoing,
                        neighbours: graph[peer]?.neighbours ?? [], activity: conn == nil ? .offline : (conn!.busy ? .busy : .idle))
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
        switch input {
        case .start:
            guard state == .created || state == .stopped else { return [] }
            setState(.discovering, &out)
            for t in settings.transports.sorted() where usable.contains(t) {
                advertising[t] = Advertising(at: now + settings.advertisingDelayMillis)
            }
            startPhase(initial: true, now: now, &out)
        case .stop:
            guard isRunning else { return [] }
            shutDown(now: now, &out)
            setState(.stopped, &out)
            return finish(out, now: now)
        case .fatal(let reason):
            guard state != .dead else { return [] }
            if isRunning { shutDown(now: now, &out) }
            for t in settings.transports.sorted() { out.append(.event(.transportStatus(t, active: false, error: reason))) }
            setState(.dead, &out)
            nextWake = nil
            return out
        case .tick:
            break
        case .retryNetworks:
            guard isRunning else { return [] }
            for t in settings.transports.sorted() where usable.contains(t) && advertising[t]?.active != true {
                advertising[t] = Advertising(at: now)
            }
            for k in peers.keys { peers[k]!.failedAt = nil; peers[k]!.failures = 0 }
            if !scanning { startPhase(initial: false, now: now, &out) }
        case .transport(let t, let up):
            guard settings.transports.contains(t) else { return [] }
            if up {
                guard !usable.contains(t) else { return [] }
                usable.insert(t)
                if isRunning {
                    advertising[t] = Advertising(at: now)
                    if scanning { out.append(.startScanning(t)) }
                }
            } else {
                guard usable.remove(t) != nil else { return [] }
                if advertising[t]?.active == true { out.append(.stopAdvertising(t)) }
                advertising[t] = nil
                if scanning { out.append(.stopScanning(t)) }
                out.append(.event(.transportStatus(t, active: false, error: "\(t.rawValue) is down")))
                for k in peers.keys where peers[k]!.heardOn.contains(t) {
                    peers[k]!.heardOn.remove(t)
                    out.append(.event(.peerDiscovery(k, t, online: false)))
                }
                for c in connections.values.sorted(by: { $0.id < $1.id }) where c.transport == t {
                    out.append(.close(c.id, reason: "\(t.rawValue) went down"))
                    dropConnection(c.id, now: now, &out)
                }
                pending = pending.filter { $0.value.transport != t }
            }
        case .advertisingStarted(let t):
            guard isRunning, usable.contains(t) else { return [] }
            advertising[t] = Advertising(active: true, failures: 0, at: nil)
            out.append(.event(.transportStatus(t, active: true, error: nil)))
        case .advertisingFailed(let t, let reason):
            guard isRunning, usable.contains(t) else { return [] }
            let failures = (advertising[t]?.failures ?? 0) + 1
            advertising[t] = Advertising(active: false, failures: failures, at: now + advertisingBackoff(failures: failures))
            out.append(.event(.transportStatus(t, active: false, error: reason)))
        case .discovered(let peer, let t, let load):
            guard isRunning, peer != me, usable.contains(t) else { return [] }
            var r = peers[peer] ?? PeerRecord()
            if let load { r.load = load }
            if r.heardOn.insert(t).inserted {
                out.append(.event(.peerDiscovery(peer, t, online: true)))
                // Heard again after being lost: fresh evidence it is there, dial without waiting.
                r.failedAt = nil
            }
            peers[peer] = r
        case .lost(let peer, let t):
            guard peers[peer]?.heardOn.remove(t) != nil else { return [] }
            out.append(.event(.peerDiscovery(peer, t, online: false)))
        case .incoming(let id, let peer, let t):
            guard isRunning, peer != me else { return [.close(id, reason: isRunning ? "a connection to ourselves" : "the mesh is not running")] }
            admit(id, peer, t, now: now, &out)
        case .outgoingOpened(let id, let peer, let t):
            pending[peer] = nil
            guard isRunning else { return [.close(id, reason: "the mesh is not running")] }
            var r = peers[peer] ?? PeerRecord()
            r.failures = 0
            r.failedAt = nil
            peers[peer] = r
            open(Connection(id: id, peer: peer, transport: t, outgoing: true), now: now, &out)
        case .outgoingFailed(let peer, let t, let reason):
            pending[peer] = nil
            counters.failedConnectionAttempts += 1
            var r = peers[peer] ?? PeerRecord()
            r.failures += 1
            r.failedAt = now
            peers[peer] = r
            out.append(.event(.peerReplicator(peer, t, outgoing: true, activity: .offline, error: reason)))
        case .closed(let id):
            dropConnection(id, now: now, &out)
        case .topology(let from, let origin, let seq, let neighbours):
            guard connections[from] != nil else { return [] }
            absorb(origin: origin, sequence: seq, neighbours: neighbours, from: from, &out)
        case .activity(let id, let busy):
            guard var c = connections[id], c.busy != busy else { return [] }
            c.busy = busy
            connections[id] = c
            out.append(.event(.peerReplicator(c.peer, c.transport, outgoing: c.outgoing, activity: busy ? .busy : .idle, error: nil)))
        }
        return finish(out, now: now)
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
        phaseEnds = nil
        nextPhase = nil
        for c in connections.values.sorted(by: { $0.id < $1.id }) {
            out.append(.close(c.id, reason: "the mesh stopped"))
            out.append(.event(.peerReplicator(c.peer, c.transport, outgoing: c.outgoing, activity: .stopped, error: nil)))
        }
        connections = [:]
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
        plan(now: now, &out)
        counters.connectedPeers = Set(connections.values.map(\.peer)).count
        counters.discoveredPeers = peers.values.filter { !$0.heardOn.isEmpty }.count
        setState(isFullyConnected ? .fullyConnected : .discovering, &out)
        // When anything could change next.
        var wake: [UInt64] = []
        for a in advertising.values { if let at = a.at { wake.append(at) } }
        if let e = phaseEnds { wake.append(e) }
        if !scanning, let n = nextPhase { wake.append(n) }
        for p in pending.values { wake.append(p.at + 30_000) }
        if let w = nextDialWake(now: now) { wake.append(w) }
        nextWake = wake.filter { $0 > now }.min() ?? wake.min().map { max($0, now + 1) }
        return out
    }

    var isFullyConnected: Bool {
        if connections.count >= settings.maxConnectionCount { return true }
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

    // MARK: - Connections

    func open(_ c: Connection, now: UInt64, _ out: inout [MeshAction]) {
        // One link per pair: keep the one dialled by the lower peer id (both sides decide alike).
        if let other = connections.values.first(where: { $0.peer == c.peer }) {
            let dialler: (Connection) -> PeerID = { $0.outgoing ? self.me : $0.peer }
            let preferred = min(me, c.peer)
            let keepNew = dialler(c) == preferred && dialler(other) != preferred || (dialler(c) == dialler(other) && c.id > other.id)
            if !keepNew {
                out.append(.close(c.id, reason: "a link to this peer exists"))
                return
            }
            out.append(.close(other.id, reason: "a link to this peer exists"))
            connections[other.id] = nil
            componentCache = nil
        }
        connections[c.id] = c
        componentCache = nil
        out.append(.event(.peerReplicator(c.peer, c.transport, outgoing: c.outgoing, activity: .idle, error: nil)))
        // Tell the new neighbour everything we know, then everyone about our new list.
        for (origin, entry) in graph.sorted(by: { $0.key < $1.key }) where origin != me {
            out.append(.sendTopology(c.id, origin: origin, sequence: entry.sequence, neighbours: entry.neighbours))
        }
        announceOwnLinks(&out)
    }

    func admit(_ id: ConnectionID, _ peer: PeerID, _ t: MeshTransport, now: UInt64, _ out: inout [MeshAction]) {
        // Being dialled is not being heard: we may have no way to dial this peer back.
        let r = peers[peer] ?? PeerRecord()
        let linked = connections.values.contains { $0.peer == peer }
        if connections.count + pending.count < settings.maxConnectionCount || linked || pending[peer] != nil {
            if pending[peer] != nil { pending[peer] = nil }
            open(Connection(id: id, peer: peer, transport: t, outgoing: false), now: now, &out)
            return
        }
        // Full. A peer we cannot reach otherwise — a newcomer with no links, or a part of the mesh
        // we are cut off from (two full cliques would otherwise never join) — may take a link
        // whose loss keeps our side whole. At most once per evictionBackoff.
        let outsider = !component().contains(peer)
        if outsider, lastEviction.map({ now >= $0 + settings.evictionBackoffMillis }) ?? true, let victim = evictionCandidate() {
            lastEviction = now
            counters.evictions += 1
            let newcomer = (graph[peer]?.neighbours.isEmpty ?? true) && (r.load ?? 0) == 0
            out.append(.close(victim.id, reason: newcomer ? "evicted to make room for a newcomer" : "evicted to join another part of the mesh"))
            dropConnection(victim.id, now: now, &out)
            open(Connection(id: id, peer: peer, transport: t, outgoing: false), now: now, &out)
            return
        }
        counters.refusedConnections += 1
        out.append(.close(id, reason: "no free connection slot"))
    }

    /// A link whose peer stays reachable without it (the most connected such peer first).
    func evictionCandidate() -> Connection? {
        let candidates = connections.values.filter { c in
            component(without: c.peer).contains(c.peer)
        }
        return candidates.max { a, b in
            let la = graph[a.peer]?.neighbours.count ?? 0, lb = graph[b.peer]?.neighbours.count ?? 0
            return (la, b.peer) < (lb, a.peer)
        }
    }

    func dropConnection(_ id: ConnectionID, now: UInt64, _ out: inout [MeshAction]) {
        guard let c = connections.removeValue(forKey: id) else { return }
        componentCache = nil
        // A link we dialled that ended (refused, evicted, dropped): wait backoffMillis before
        // dialling that peer again, so a full peer is not dialled every connectDelay.
        if c.outgoing, var r = peers[c.peer] {
            r.failedAt = now
            peers[c.peer] = r
        }
        out.append(.event(.peerReplicator(c.peer, c.transport, outgoing: c.outgoing, activity: .offline, error: nil)))
        if !connections.values.contains(where: { $0.peer == c.peer }) { announceOwnLinks(&out) }
    }

    /// Decides whether to dial someone now.
    func plan(now: UInt64, _ out: inout [MeshAction]) {
        guard connections.count + pending.count < settings.maxConnectionCount else { return }
        if let last = lastDial, now < last + settings.connectDelayMillis { return }
        guard let (peer, t) = choosePeer(now: now, planning: true) else { return }
        lastDial = now
        pending[peer] = (t, now)
        out.append(.connect(peer, t))
        out.append(.event(.peerReplicator(peer, t, outgoing: true, activity: .connecting, error: nil)))
    }

    func nextDialWake(now: UInt64) -> UInt64? {
        guard connections.count + pending.count < settings.maxConnectionCount else { return nil }
        var times: [UInt64] = []
        if let last = lastDial, now < last + settings.connectDelayMillis, hasCandidates {
            times.append(last + settings.connectDelayMillis)
        }
        for at in joinAt.values where at > now { times.append(at) }
        for r in peers.values where !r.heardOn.isEmpty {
            if let f = r.failedAt, now < f + backoff(r) { times.append(f + backoff(r)) }
        }
        return times.min()
    }

    /// Someone heard that we hold no link to and are not dialling (backoffs aside).
    var hasCandidates: Bool {
        let linked = Set(connections.values.map(\.peer))
        return peers.contains { !$0.value.heardOn.isEmpty && !linked.contains($0.key) && pending[$0.key] == nil }
    }

    /// backoffMillis, as the seed says: a fixed delay before retrying a peer that failed.
    func backoff(_ r: PeerRecord) -> UInt64 { settings.backoffMillis }

    /// `planning`: called to dial now (may note join times); otherwise only asks whether anyone
    /// could be dialled at all.
    func choosePeer(now: UInt64, planning: Bool) -> (PeerID, MeshTransport)? {
        typealias Candidate = (peer: PeerID, transport: MeshTransport, load: Int)
        let linked = Set(connections.values.map(\.peer))
        var candidates: [Candidate] = []
        for (peer, r) in peers where !r.heardOn.isEmpty && pending[peer] == nil && !linked.contains(peer) {
            if let f = r.failedAt, now < f + backoff(r) { continue }
            let t: MeshTransport
            if r.heardOn.contains(.wifi) && usable.contains(.wifi) { t = .wifi }
            else if r.heardOn.contains(.bluetooth) && usable.contains(.bluetooth) { t = .bluetooth }
            else { continue }
            candidates.append((peer, t, graph[peer]?.neighbours.count ?? r.load ?? 0))
        }
        guard !candidates.isEmpty else { return nil }
        let byLoad: (Candidate, Candidate) -> Bool = { ($0.load, $0.peer) < ($1.load, $1.peer) }
        if connections.isEmpty && pending.isEmpty {
            // Alone: anyone will do; the least loaded, ties broken at random so newcomers spread.
            let low = candidates.map(\.load).min()!
            let least = candidates.filter { $0.load == low }.sorted(by: byLoad)
            let pick = least[Int.random(in: 0..<least.count, using: &rng)]
            return (pick.peer, pick.transport)
        }
        let members = component()
        let outside = candidates.filter { !members.contains($0.peer) }
        if planning && !joinAt.isEmpty { joinAt = joinAt.filter { peers[$0.key]?.heardOn.isEmpty == false && !members.contains($0.key) } }
        if !outside.isEmpty {
            // Join the other part. Our component's dialler does it at once; other members that hear
            // it wait a random while first, so the two parts usually get one link, not one per pair
            // that hears each other — and still get joined when the dialler cannot hear them.
            var ready = outside
            if !isDialler(of: members) {
                let spread = max(settings.connectDelayMillis, 1000)
                if planning {
                    for c in outside.sorted(by: byLoad) where joinAt[c.peer] == nil {
                        joinAt[c.peer] = now + spread + UInt64.random(in: 0...(3 * spread), using: &rng)
                    }
                }
                ready = outside.filter { (joinAt[$0.peer] ?? UInt64.max) <= now }
            }
            let max = settings.maxConnectionCount
            let pick = ready.min { ($0.load >= max ? 1 : 0, $0.load, $0.peer) < ($1.load >= max ? 1 : 0, $1.load, $1.peer) }
            return pick.map { ($0.peer, $0.transport) }
        }
        // Inside our component: a second link for a node hanging by one, to a peer with room.
        guard connections.count + pending.count < 2, settings.maxConnectionCount >= 3 else { return nil }
        let room = min(2, settings.maxConnectionCount - 1)
        return candidates.filter { $0.load < room }.min(by: byLoad).map { ($0.peer, $0.transport) }
    }

    /// The lowest peer id among our component's members with a free slot (per gossip).
    func isDialler(of members: Set<PeerID>) -> Bool {
        var dialler: PeerID?
        for p in members {
            let degree = p == me ? connections.count + pending.count : (graph[p]?.neighbours.count ?? 0)
            if degree < settings.maxConnectionCount, dialler.map({ p < $0 }) ?? true { dialler = p }
        }
        return dialler == me
    }

    // MARK: - Gossip

    func announceOwnLinks(_ out: inout [MeshAction]) {
        componentCache = nil
        sequence += 1
        let mine = neighbours
        graph[me] = (sequence, mine)
        for c in connections.values.sorted(by: { $0.id < $1.id }) {
            out.append(.sendTopology(c.id, origin: me, sequence: sequence, neighbours: mine))
        }
    }

    func absorb(origin: PeerID, sequence seq: UInt64, neighbours: [PeerID], from: ConnectionID, _ out: inout [MeshAction]) {
        if origin == me {
            // Our own news from before a restart: make ours newer.
            if seq >= sequence { sequence = seq; announceOwnLinks(&out) }
            return
        }
        if let known = graph[origin], known.sequence >= seq { return }
        graph[origin] = (seq, Array(neighbours.prefix(64)))
        componentCache = nil
        for c in connections.values.sorted(by: { $0.id < $1.id }) where c.id != from {
            out.append(.sendTopology(c.id, origin: origin, sequence: seq, neighbours: neighbours))
        }
        // Forget gossip about nodes nobody links to any more (bounded memory).
        if graph.count > 4 * max(peers.count, 16) {
            let members = component()
            graph = graph.filter { members.contains($0.key) }
            componentCache = nil
        }
    }

    /// Peers reachable from us through links, using our own links and gossip for the rest.
    /// `without`: as if our direct link to that peer were gone.
    func component(without cut: PeerID? = nil) -> Set<PeerID> {
        if cut == nil, let c = componentCache { return c }
        // Links both ends report (our own list for ours): a crashed node's last list cannot glue
        // parts together that are no longer linked.
        var adjacency: [PeerID: [PeerID]] = [:]
        let mine = Set(neighbours)
        for (origin, entry) in graph where origin != me {
            for n in entry.neighbours where n != origin {
                let mutual = n == me ? mine.contains(origin) : (graph[n]?.neighbours.contains(origin) ?? false)
                if mutual { adjacency[origin, default: []].append(n) }
            }
        }
        var seen: Set<PeerID> = [me]
        var queue = neighbours.filter { $0 != cut }
        seen.formUnion(queue)
        while let p = queue.popLast() {
            for n in adjacency[p] ?? [] where !seen.contains(n) {
                if cut != nil && ((p == cut && n == me) || (p == me && n == cut)) { continue }
                seen.insert(n)
                queue.append(n)
            }
        }
        if cut == nil { componentCache = seen }
        return seen
    }

}
