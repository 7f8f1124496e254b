import Glibc
import ShoalCore
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalWire

/// What to simulate.
public struct SimConfig: Sendable {
    public var nodes = 5
    public var topology = SimTopology.full
    public var kind = SimLinkKind.wifi
    public var seed: UInt64 = 1
    /// Per-frame loss (frames are retransmitted late, as TCP and L2CAP do).
    public var loss = 0.0
    /// Partitions that come and go every 5–30 s until `faultsUntilMillis`.
    public var partitions = false
    /// Node crashes (and restarts 2–10 s later) until `faultsUntilMillis`.
    public var crashes = false
    /// Clock skew per node, up to this many ms either way.
    public var maxSkewMillis: UInt64 = 0
    public var faultsUntilMillis: UInt64 = 0
    public var mesh = MeshSettings()
    public var replication = ReplicationSettings()
    /// Where the stores go (a tmpfs is fastest); each node gets a subdirectory.
    public var directory = "/tmp"
    /// Advertising fails this many times on every node before it works (exercises the backoff).
    public var advertisingFailures = 0
    /// Real mutual-TLS sessions (mbedTLS) over every simulated link; peer ids come from each
    /// node's own certificate. Costs a real handshake per link.
    public var tls = false
    public init() {}
}

/// One gateway in the simulation: a real SQLite store, the real replicator, the real mesh manager.
public final class SimNode {
    public let index: Int
    public let peer: PeerID
    let dir: String
    public internal(set) var store: DocumentStore?
    public internal(set) var replicator: ReplicationNode?
    public internal(set) var mesh: MeshManager?
    public internal(set) var up = false
    var advertising: Set<MeshTransport> = []
    var heard: Set<Int> = []
    var wakeAt: UInt64?
    var advertisingFailuresLeft = 0
    let skew: Int64
    public internal(set) var events: [MeshEvent] = []
    public internal(set) var documentsApplied = 0
    public internal(set) var restarts = 0
    var commitPending = false

    init(index: Int, peer: PeerID, dir: String, skew: Int64) {
        self.index = index
        self.peer = peer
        self.dir = dir
        self.skew = skew
    }
}

/// A discrete-event simulation of gateways on a radio medium, in virtual time. Everything random
/// comes from one seeded generator, so a run replays exactly from its seed. Real stores (SQLite
/// files), the real replicator and the real mesh manager run inside; only radios and time are
/// simulated.
public final class Simulation {
    public let config: SimConfig
    public private(set) var now: UInt64 = 0
    public private(set) var nodes: [SimNode] = []
    public var medium: SimMedium
    var rng: SeededRandom
    var queue = EventQueue()
    let collection = CollectionName.default
    /// Virtual wall clock base, so HLC timestamps look like real ones.
    let epoch: UInt64 = 1_780_000_000_000

    struct Conn {
        let a: Int  // dialler
        let b: Int
        let transport: MeshTransport
        var openA = true
        var openB = true
        var busyUntil: [UInt64] = [0, 0]  // a→b, b→a
        var inFlight: [Int] = [0, 0]
        var tls: SimTLSLink?
    }
    /// Per node, with `config.tls`: (client, server) contexts.
    var tlsContexts: [(TLSContext, TLSContext)] = []
    public private(set) var handshakes = 0
    var conns: [Int: Conn] = [:]
    var nextConn = 1

    // Figures and invariant checks.
    public private(set) var bytesSent: UInt64 = 0
    public private(set) var framesSent: UInt64 = 0
    /// Bytes sent per message type (the frame's first byte: see ReplicationMessage).
    public private(set) var bytesByType: [UInt8: UInt64] = [:]
    public var debugBodies = getenv("SHOAL_SIM_BYTES") != nil
    public private(set) var pushedBodies = 0
    public private(set) var pushedChanges = 0
    public private(set) var maxFramesInFlight = 0
    public private(set) var budgetViolations: [String] = []
    public private(set) var writes: [(node: Int, id: String, version: VersionVector)] = []
    public private(set) var crashCount = 0
    public private(set) var partitionCount = 0
    public private(set) var log: [String] = []
    public var keepLog = getenv("SHOAL_SIM_LOG") != nil

    enum Event {
        case meshWake(Int)
        case replicationTick(Int)
        case discoverySweep
        case connect(from: Int, to: Int, MeshTransport)
        case deliver(conn: Int, to: Int, frame: [UInt8])
        case remoteClosed(conn: Int, to: Int)
        case committed(Int)
        case partitionToggle
        case crash(Int)
        case restart(Int)
    }

    public init(_ config: SimConfig) throws {
        self.config = config
        rng = SeededRandom(seed: config.seed)
        medium = SimMedium(count: config.nodes, topology: config.topology, kind: config.kind, loss: config.loss, rng: &rng)
        let base = "\(config.directory)/shoal-sim-\(getpid())-\(config.seed)-\(UInt32.random(in: 0...UInt32.max, using: &rng))"
        baseDirectory = base
        var identities: [Identity] = []
        if config.tls {
            for i in 0..<config.nodes { identities.append(try Identity.createSelfSigned(.init(commonName: "sim-gateway-\(i)"))) }
            let auth = PeerAuthenticator.trust(allowedPeers: Set(identities.map(\.peerID)))
            for id in identities {
                tlsContexts.append((try TLSContext(role: .client, identity: id, authenticator: auth),
                                    try TLSContext(role: .server, identity: id, authenticator: auth)))
            }
        }
        for i in 0..<config.nodes {
            let random = PeerID(bytes: (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) })
            let peer = config.tls ? identities[i].peerID : random
            let skew = config.maxSkewMillis == 0 ? 0 : Int64.random(in: -Int64(config.maxSkewMillis)...Int64(config.maxSkewMillis), using: &rng)
            let node = SimNode(index: i, peer: peer, dir: "\(base)/n\(i)", skew: skew)
            nodes.append(node)
        }
        for n in nodes { try boot(n) }
        schedule(at: 500, .discoverySweep)
        if config.partitions { schedule(at: UInt64.random(in: 5_000...30_000, using: &rng), .partitionToggle) }
        if config.crashes { scheduleCrash() }
    }

    let baseDirectory: String

    /// Removes every store the simulation made.
    public func cleanUp() {
        for c in conns.values { c.tls?.close() }
        conns = [:]
        for n in nodes { n.store?.close(); n.store = nil }
        removeTree(baseDirectory)
    }

    // MARK: - Running

    /// Runs until virtual time `until` (ms).
    public func run(until: UInt64) {
        while let e = queue.peek(), e.at <= until {
            _ = queue.pop()
            now = max(now, e.at)
            dispatch(e.event)
        }
        now = max(now, until)
    }

    /// Runs until `done` holds (checked every `every` ms of virtual time) or `limit` passes; returns
    /// the virtual time it held at, or nil.
    public func run(until limit: UInt64, every: UInt64 = 250, while notDone: () -> Bool) -> UInt64? {
        var t = now
        while t < limit {
            t = min(limit, t + every)
            run(until: t)
            if !notDone() { return now }
        }
        return nil
    }

    func schedule(at: UInt64, _ e: Event) { queue.push(at: at, e) }

    func dispatch(_ e: Event) {
        switch e {
        case .meshWake(let i):
            let n = nodes[i]
            guard n.up, let at = n.wakeAt, at <= now else { return }
            n.wakeAt = nil
            meshInput(n, .tick)
        case .replicationTick(let i):
            let n = nodes[i]
            guard n.up, let r = n.replicator else { return }
            replicationActions(n, r.tick(now: now))
            // Changes travel along the mesh's spanning tree only (refreshed each tick, as the
            // runtime does per loop: a stale flag delays a change or sends a duplicate, no more).
            if let m = n.mesh { for id in m.connectionIDs { replicationActions(n, r.setTreeLink(id, m.isTreeLink(id))) } }
            schedule(at: now + 100, .replicationTick(i))
        case .discoverySweep:
            sweep()
            schedule(at: now + 500, .discoverySweep)
        case .connect(let from, let to, let t):
            connect(from, to, t)
        case .deliver(let c, let to, let frame):
            guard var conn = conns[c] else { return }
            let side = to == conn.b ? 0 : 1
            conn.inFlight[side] -= 1
            conns[c] = conn
            let n = nodes[to]
            guard n.up, to == conn.b ? conn.openB : conn.openA, let r = n.replicator else { return }
            var payload = frame
            if let tls = conn.tls {
                do { payload = try tls.receive(toA: to == conn.a) } catch {
                    note("link \(c): TLS read failed: \(error)")
                    closeSide(c, at: to, tellNode: true)
                    return
                }
            }
            replicationActions(n, r.frameReceived(c, payload, now: now))
        case .remoteClosed(let c, let to):
            guard var conn = conns[c] else { return }
            if to == conn.a { conn.openA = false } else { conn.openB = false }
            conns[c] = conn
            if !conn.openA && !conn.openB { conns[c] = nil }
            let n = nodes[to]
            guard n.up else { return }
            if let r = n.replicator { replicationActions(n, r.linkClosed(c, now: now)) }
            meshInput(n, .closed(c))
        case .committed(let i):
            let n = nodes[i]
            n.commitPending = false
            guard n.up, let r = n.replicator else { return }
            replicationActions(n, r.localChangesCommitted())
        case .partitionToggle:
            // Faults stop at faultsUntil: the scenario heals any partition left then.
            if config.faultsUntilMillis > 0 && now >= config.faultsUntilMillis { return }
            if medium.partition == nil {
                let side = Set((0..<config.nodes).filter { _ in Bool.random(using: &rng) })
                medium.partition = side
                partitionCount += 1
                note("partition: \(side.sorted()) | rest")
                cutUnheard()
            } else if medium.partition != nil {
                medium.partition = nil
                note("partition healed")
            }
            schedule(at: now + UInt64.random(in: 5_000...30_000, using: &rng), .partitionToggle)
        case .crash(let i):
            let n = nodes[i]
            guard n.up, config.faultsUntilMillis == 0 || now < config.faultsUntilMillis else { return }
            crash(n)
            schedule(at: now + UInt64.random(in: 2_000...10_000, using: &rng), .restart(i))
            scheduleCrash()
        case .restart(let i):
            let n = nodes[i]
            guard !n.up else { return }
            n.restarts += 1
            try? boot(n)
        }
    }

    func scheduleCrash() {
        let at = now + UInt64.random(in: 3_000...15_000, using: &rng)
        guard config.faultsUntilMillis == 0 || at < config.faultsUntilMillis else { return }
        schedule(at: at, .crash(Int.random(in: 0..<config.nodes, using: &rng)))
    }

    func note(_ s: @autoclosure () -> String) {
        if keepLog { log.append("\(formatSeconds(now)) \(s())") }
    }

    // MARK: - Nodes

    func boot(_ n: SimNode) throws {
        try makeDirectories(n.dir)
        let quiet = Logger(sink: MemoryLogSink(), level: .none)
        let store = try DocumentStore.open(StoreOptions(path: n.dir + "/shoal.db", durability: .normal), logger: quiet)
        try store.createCollection(collection)
        let skew = n.skew, epoch = self.epoch
        let clockNow = SimClockReading(self)
        let clock = try NodeClock(store: store, wallMillis: { UInt64(Int64(epoch + clockNow.read()) + skew) })
        let replicator = ReplicationNode(peer: n.peer, group: "sim", store: store, clock: clock,
                                         collections: [CollectionPolicy(name: collection)], settings: config.replication)
        let mesh = MeshManager(me: n.peer, settings: config.mesh, sequenceBase: epoch + now, fallbackSeed: config.seed &+ UInt64(n.index))
        n.store = store
        n.replicator = replicator
        n.mesh = mesh
        n.up = true
        n.heard = []
        n.advertising = []
        n.advertisingFailuresLeft = config.advertisingFailures
        meshInput(n, .start)
        schedule(at: now + 500, .replicationTick(n.index))
        note("node \(n.index) up")
    }

    func crash(_ n: SimNode) {
        crashCount += 1
        note("node \(n.index) crashed")
        for (id, c) in conns where (c.a == n.index && c.openA) || (c.b == n.index && c.openB) {
            closeSide(id, at: n.index, tellNode: false)
        }
        n.up = false
        n.store?.close()
        n.store = nil
        n.replicator = nil
        n.mesh = nil
        n.wakeAt = nil
        n.heard = []
        n.advertising = []
    }

    // MARK: - Discovery

    /// Every 500 ms: scanning nodes hear advertising nodes in range, and lose those gone.
    func sweep() {
        for n in nodes where n.up {
            guard let mesh = n.mesh, mesh.isScanning else { continue }
            var heardNow = Set<Int>()
            for o in nodes where o.up && o.index != n.index && medium.hears(n.index, o.index) && o.advertising.contains(config.kind.transport) {
                heardNow.insert(o.index)
            }
            for o in heardNow.subtracting(n.heard).sorted() {
                meshInput(n, .discovered(nodes[o].peer, config.kind.transport, load: nodes[o].mesh?.connectionCount))
            }
            for o in n.heard.subtracting(heardNow).sorted() {
                meshInput(n, .lost(nodes[o].peer, config.kind.transport))
            }
            n.heard = heardNow
        }
    }

    /// After a partition: links that cross it break (each side notices after a timeout).
    func cutUnheard() {
        for (id, c) in conns.sorted(by: { $0.key < $1.key }) where !medium.hears(c.a, c.b) {
            if c.openA { closeSide(id, at: c.a, tellNode: true, notifyPeer: false) }
            if let c2 = conns[id], c2.openB { closeSide(id, at: c.b, tellNode: true, notifyPeer: false) }
        }
    }

    // MARK: - Connections

    func connect(_ from: Int, _ to: Int, _ t: MeshTransport) {
        let a = nodes[from], b = nodes[to]
        guard a.up, let meshA = a.mesh else { return }
        guard b.up, let meshB = b.mesh, medium.hears(from, to) else {
            meshInput(a, .outgoingFailed(b.peer, t, reason: "no answer"))
            return
        }
        let id = nextConn
        nextConn += 1
        conns[id] = Conn(a: from, b: to, transport: t)
        // B decides first (accept or refuse), then A; only then does replication start on both,
        // HELLO first, so gossip never precedes it.
        let actionsB = meshB.handle(.incoming(id, a.peer, t), now: now)
        guard meshB.keeps(id) else {
            conns[id] = nil
            meshActions(b, actionsB.filter { if case .close(id, _) = $0 { return false }; return true })
            meshInput(a, .outgoingFailed(b.peer, t, reason: "refused"))
            return
        }
        if config.tls {
            do {
                conns[id]!.tls = try SimTLSLink(client: tlsContexts[from].0, server: tlsContexts[to].1)
                handshakes += 1
            } catch {
                note("link \(id): TLS handshake failed: \(error)")
                conns[id] = nil
                meshActions(b, actionsB + meshB.handle(.closed(id), now: now))
                meshInput(a, .outgoingFailed(b.peer, t, reason: "TLS: \(error)"))
                return
            }
        }
        let actionsA = meshA.handle(.outgoingOpened(id, b.peer, t), now: now)
        if meshA.keeps(id) {
            replicationActions(a, a.replicator!.linkOpened(id, neighbours: []))
            replicationActions(b, b.replicator!.linkOpened(id, neighbours: []))
            note("link \(id): \(from) → \(to)")
        } else {
            // A closed it (a link exists): B learns after a round trip.
            replicationActions(b, b.replicator!.linkOpened(id, neighbours: []))
        }
        meshActions(b, actionsB)
        meshActions(a, actionsA)
        checkBudget(a)
        checkBudget(b)
    }

    func checkBudget(_ n: SimNode) {
        guard let m = n.mesh, m.connectionCount > config.mesh.maxConnectionCount else { return }
        budgetViolations.append("node \(n.index) holds \(m.connectionCount) links at \(now) ms")
    }

    /// Closes one side of a connection now; the other side notices after the link latency.
    func closeSide(_ id: Int, at node: Int, tellNode: Bool, notifyPeer: Bool = true) {
        guard var c = conns[id] else { return }
        let isA = node == c.a
        guard isA ? c.openA : c.openB else { return }
        if isA { c.openA = false } else { c.openB = false }
        conns[id] = c
        let other = isA ? c.b : c.a
        if tellNode, nodes[node].up {
            if let r = nodes[node].replicator { replicationActions(nodes[node], r.linkClosed(id, now: now)) }
            meshInput(nodes[node], .closed(id))
        }
        if (isA ? c.openB : c.openA) {
            // Without a goodbye (crash, partition) the peer notices after a keepalive timeout.
            let delay = notifyPeer ? config.kind.latencyMillis : 3_000
            schedule(at: now + delay, .remoteClosed(conn: id, to: other))
        } else {
            conns[id] = nil
        }
    }

    func send(_ id: Int, from: Int, _ frame: [UInt8]) {
        guard var c = conns[id] else { return }
        let toB = from == c.a
        guard toB ? c.openA : c.openB else { return }
        guard medium.hears(c.a, c.b) else { return }  // partitioned: lost; the link breaks by timeout
        let side = toB ? 0 : 1
        var bytes = UInt64(frame.count + 4 + 21)  // frame length + TLS record (ChaCha20-Poly1305: header 5 + tag 16)
        if let tls = c.tls {
            do { bytes = UInt64(try tls.send(frame, fromA: toB)) } catch {
                note("link \(id): TLS write failed: \(error)")
                return
            }
        }
        bytesSent += bytes
        framesSent += 1
        bytesByType[frame.first ?? 0, default: 0] += bytes
        if debugBodies, case .push(_, _, _, let changes, let docs)? = try? ReplicationMessage(decoding: frame) {
            pushedBodies += docs.count
            pushedChanges += changes.count
        }
        let k = config.kind
        let transmit = (bytes * 1000 + k.bytesPerSecond - 1) / k.bytesPerSecond  // whole ms, rounded up
        var start = max(now, c.busyUntil[side])
        if medium.loss > 0, Double.random(in: 0..<1, using: &rng) < medium.loss { start += k.retransmitMillis }
        c.busyUntil[side] = start + transmit
        c.inFlight[side] += 1
        maxFramesInFlight = max(maxFramesInFlight, c.inFlight[side])
        conns[id] = c
        schedule(at: start + transmit + k.latencyMillis, .deliver(conn: id, to: toB ? c.b : c.a, frame: frame))
    }

    // MARK: - Driving the cores

    func meshInput(_ n: SimNode, _ input: MeshInput) {
        guard n.up, let m = n.mesh else { return }
        meshActions(n, m.handle(input, now: now))
    }

    func meshActions(_ n: SimNode, _ actions: [MeshAction]) {
        guard n.up, let m = n.mesh else { return }
        for a in actions {
            switch a {
            case .startAdvertising(let t):
                if n.advertisingFailuresLeft > 0 {
                    n.advertisingFailuresLeft -= 1
                    meshInput(n, .advertisingFailed(t, reason: "simulated failure"))
                } else {
                    n.advertising.insert(t)
                    meshInput(n, .advertisingStarted(t))
                }
            case .stopAdvertising(let t):
                n.advertising.remove(t)
            case .startScanning, .stopScanning:
                break  // the sweep asks the manager whether it scans
            case .connect(let peer, let t):
                guard let to = nodes.firstIndex(where: { $0.peer == peer }) else { continue }
                schedule(at: now + config.kind.connectMillis + 2 * config.kind.latencyMillis, .connect(from: n.index, to: to, t))
            case .close(let id, _):
                closeSide(id, at: n.index, tellNode: false)
                if let r = n.replicator { replicationActions(n, r.linkClosed(id, now: now)) }
            case .sendTopology(let id, let origin, let seq, let neighbours):
                send(id, from: n.index, ReplicationMessage.topology(origin: origin, sequence: seq, neighbours: neighbours).encoded())
            case .event(let e):
                if n.events.count < 10_000 { n.events.append(e) }
            }
        }
        if let w = m.nextWake, n.wakeAt.map({ w < $0 }) ?? true {
            n.wakeAt = w
            schedule(at: w, .meshWake(n.index))
        }
    }

    func replicationActions(_ n: SimNode, _ actions: [ReplicationAction]) {
        for a in actions {
            guard n.up else { return }
            switch a {
            case .send(let id, let bytes):
                send(id, from: n.index, bytes)
            case .close(let id):
                closeSide(id, at: n.index, tellNode: false)
                meshInput(n, .closed(id))
            case .event(let e):
                switch e {
                case .topology(let link, _, let origin, let seq, let neighbours):
                    meshInput(n, .topology(from: link, origin: origin, sequence: seq, neighbours: neighbours))
                case .documents(_, _, .pull, let items):
                    n.documentsApplied += items.count
                default:
                    break
                }
            }
        }
    }

    // MARK: - Workload

    /// Writes a document on a node (a local write, versioned), and lets it announce.
    @discardableResult
    public func write(on i: Int, id: String, body: String) throws -> Bool {
        let n = nodes[i]
        guard n.up, let r = n.replicator else { return false }
        let change = try r.writer.put(collection, id: DocumentID(id), body: body)
        writes.append((i, id, try DocumentVersion(decoding: change.version).vector))
        committed(n)
        return true
    }

    /// Local commits are announced once per instant, as the runtime's driver does per loop.
    func committed(_ n: SimNode) {
        guard !n.commitPending else { return }
        n.commitPending = true
        schedule(at: now, .committed(n.index))
    }

    @discardableResult
    public func delete(on i: Int, id: String) throws -> Bool {
        let n = nodes[i]
        guard n.up, let r = n.replicator, let store = n.store else { return false }
        // Only what this node holds (and not already deleted) can be deleted here.
        guard let held = try store.get(collection, id: DocumentID(id)), !held.isDeleted else { return false }
        let change = try r.writer.delete(collection, id: DocumentID(id))
        writes.append((i, id, try DocumentVersion(decoding: change.version).vector))
        committed(n)
        return true
    }

    public func crashNow(_ i: Int) { if nodes[i].up { crash(nodes[i]) } }
    public func restartNow(_ i: Int) { if !nodes[i].up { nodes[i].restarts += 1; try? boot(nodes[i]) } }
    /// Cuts (or restores) the radio between two nodes; a link between them breaks.
    public func setBlocked(_ a: Int, _ b: Int, _ blocked: Bool) {
        if blocked { medium.blocked.insert([min(a, b), max(a, b)]); cutUnheard() } else { medium.blocked.remove([min(a, b), max(a, b)]) }
    }

    public func setPartition(_ side: Set<Int>?) {
        medium.partition = side
        if side != nil { partitionCount += 1; cutUnheard() }
    }

    // MARK: - Checking

    /// id → (body, version bytes) on a node, tombstones included.
    public func snapshot(_ i: Int) -> [String: (String?, [UInt8])] {
        guard let s = nodes[i].store, let docs = try? s.list(collection, limit: 1_000_000, includeDeleted: true) else { return [:] }
        var out: [String: (String?, [UInt8])] = [:]
        for d in docs { out[d.id] = (d.body, d.version) }
        return out
    }

    public var upNodes: [Int] { nodes.filter(\.up).map(\.index) }

    /// Every up node holds the same documents with the same versions and bodies.
    public var converged: Bool {
        let up = upNodes
        guard let first = up.first else { return true }
        let a = snapshot(first)
        for i in up.dropFirst() {
            let b = snapshot(i)
            guard a.count == b.count else { return false }
            for (k, v) in a { guard let w = b[k], w.0 == v.0, w.1 == v.1 else { return false } }
        }
        return true
    }

    /// Cheap pre-check: every up node holds as many documents as were ever written.
    public var countsMatch: Bool {
        let ids = Set(writes.map(\.id)).count
        return upNodes.allSatisfy { i in
            guard let stats = try? nodes[i].store?.stats() else { return false }
            return stats.documents + stats.tombstones >= ids
        }
    }

    /// Writes whose version is not covered by the version every up node holds (should be none).
    public func lostWrites() -> [String] {
        var lost: [String] = []
        for i in upNodes {
            let snap = snapshot(i)
            for w in writes {
                guard let held = snap[w.id], let v = try? DocumentVersion(decoding: held.1) else { lost.append("\(w.id) missing on node \(i)"); continue }
                let c = v.vector.compare(w.version)
                if c != .dominates && c != .equal { lost.append("\(w.id) from node \(w.node) not covered on node \(i)") }
            }
        }
        return lost
    }

    /// Pairs linked by more than one open connection.
    public var duplicateLinks: [String] {
        var seen: [[Int]: Int] = [:]
        for c in conns.values where c.openA && c.openB { seen[[min(c.a, c.b), max(c.a, c.b)], default: 0] += 1 }
        return seen.filter { $0.value > 1 }.map { "nodes \($0.key[0])–\($0.key[1]) hold \($0.value) links" }
    }

    /// Open links (both ends open), each once.
    public var links: [(Int, Int)] {
        conns.values.filter { $0.openA && $0.openB }.map { (min($0.a, $0.b), max($0.a, $0.b)) }.sorted { ($0.0, $0.1) < ($1.0, $1.1) }
    }

    /// Whether the link graph joins every part the radio graph joins (among up nodes).
    public var meshConnected: Bool {
        let up = Set(upNodes)
        let radio = medium.components(up: up)
        var adjacency: [Int: [Int]] = [:]
        for (a, b) in links { adjacency[a, default: []].append(b); adjacency[b, default: []].append(a) }
        for comp in radio {
            guard let s = comp.first else { continue }
            var seen: Set<Int> = [s]
            var queue = [s]
            while let x = queue.popLast() { for y in adjacency[x] ?? [] where !seen.contains(y) { seen.insert(y); queue.append(y) } }
            if seen != comp { return false }
        }
        return true
    }

    public func linkCount(_ i: Int) -> Int { links.filter { $0.0 == i || $0.1 == i }.count }

    /// Graphviz text of the current links.
    public func dot() -> String {
        var out = "graph shoal {\n  node [shape=circle];\n"
        for n in nodes { out += "  n\(n.index) [label=\"\(n.index)\\n\(n.peer.short)\"\(n.up ? "" : ", style=dashed")];\n" }
        for (a, b) in links { out += "  n\(a) -- n\(b);\n" }
        return out + "}\n"
    }
}

/// Lets a node's clock read the simulation's virtual time without holding the simulation strongly.
final class SimClockReading: @unchecked Sendable {
    weak var sim: Simulation?
    init(_ sim: Simulation) { self.sim = sim }
    func read() -> UInt64 { sim?.now ?? 0 }
}

func formatSeconds(_ ms: UInt64) -> String {
    let tenths = ms / 100
    return "\(tenths / 10).\(tenths % 10)s"
}

func makeDirectories(_ path: String) throws {
    var current = ""
    for part in path.split(separator: "/") {
        current += "/" + part
        if mkdir(current, 0o700) != 0 && errno != EEXIST { throw SimError(message: "cannot create \(current): errno \(errno)") }
    }
}

func removeTree(_ path: String) {
    guard let d = opendir(path) else { unlink(path); return }
    while let e = readdir(d) {
        let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name == "." || name == ".." { continue }
        let child = path + "/" + name
        var st = stat()
        if lstat(child, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR { removeTree(child) } else { unlink(child) }
    }
    closedir(d)
    rmdir(path)
}

public struct SimError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// A binary heap of timed events; ties keep insertion order, so a seed replays exactly.
struct EventQueue {
    struct Entry { let at: UInt64; let seq: UInt64; let event: Simulation.Event }
    var heap: [Entry] = []
    var seq: UInt64 = 0

    mutating func push(at: UInt64, _ e: Simulation.Event) {
        seq += 1
        heap.append(Entry(at: at, seq: seq, event: e))
        var i = heap.count - 1
        while i > 0 {
            let p = (i - 1) / 2
            guard less(heap[i], heap[p]) else { break }
            heap.swapAt(i, p)
            i = p
        }
    }

    func peek() -> Entry? { heap.first }

    mutating func pop() -> Entry? {
        guard !heap.isEmpty else { return nil }
        heap.swapAt(0, heap.count - 1)
        let top = heap.removeLast()
        var i = 0
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < heap.count && less(heap[l], heap[m]) { m = l }
            if r < heap.count && less(heap[r], heap[m]) { m = r }
            if m == i { break }
            heap.swapAt(i, m)
            i = m
        }
        return top
    }

    func less(_ a: Entry, _ b: Entry) -> Bool { (a.at, a.seq) < (b.at, b.seq) }
    var count: Int { heap.count }
}
