import Glibc
import Synchronization
import ShoalCore
import ShoalGateway
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalTrust
import ShoalWire

/// What to simulate.
private let simulationRuns = Atomic<Int>(0)

public struct SimConfig: Sendable {
    public var nodes = 5
    public var topology = SimTopology.full
    public var kind = SimLinkKind.wifi
    /// A second radio (transport switching): nodes advertise, scan and link on both; `mesh.transports`
    /// gets both. nil: one radio, `kind`.
    public var secondKind: SimLinkKind?
    public var seed: UInt64 = 1
    /// Per-frame loss (frames are retransmitted late, as TCP and L2CAP do).
    public var loss = 0.0
    /// Partitions that come and go every 5–30 s until `faultsUntilMillis`.
    public var partitions = false
    /// Node crashes (and restarts 2–10 s later) until `faultsUntilMillis`.
    public var crashes = false
    /// Clock skew per node, up to this many ms either way.
    public var maxSkewMillis: UInt64 = 0
    /// Per-frame chance that a frame is delivered twice (the copy a little later), and that a frame
    /// is held back behind later ones. The links stand for TCP and L2CAP, which never do either,
    /// so these test the replicator against a buggy or hostile transport: it must close the link
    /// (a protocol error) or tolerate it, and the invariants must still hold. Frame layer only:
    /// under --tls the record layer rejects such frames before the replicator sees them.
    public var duplicate = 0.0
    public var reorder = 0.0
    public var faultsUntilMillis: UInt64 = 0
    /// How long the run may take (virtual ms; 0: not said). The operator's trust plan fits in its
    /// first three fifths, so a short run still has time to converge after it.
    public var runMillis: UInt64 = 0
    public var mesh = MeshSettings()
    /// The documents' collection's resolver (the default: field-level merge).
    public var resolver = ConflictResolver.fieldMerge
    public var replication = ReplicationSettings()
    /// Where the stores go (a tmpfs is fastest); each node gets a subdirectory.
    public var directory = "/tmp"
    /// Advertising fails this many times on every node before it works (exercises the backoff).
    public var advertisingFailures = 0
    /// Real mutual-TLS sessions (mbedTLS) over every simulated link; peer ids come from each
    /// node's own certificate. Costs a real handshake per link.
    public var tls = false
    /// Fleet trust (see Simulation+Trust.swift): a book per node over one site admin key, and an
    /// operator who revokes a victim node at a seeded time.
    public var trust = false
    /// Blobs (see Simulation+Blobs.swift): every node keeps blobs in memory (kept across its
    /// crashes, as a disk would) and fetches those the documents reference.
    public var blobs = false
    public init() {}
}

/// One gateway in the simulation: a real SQLite store and the gateway core the runtime runs (the
/// real replicator and mesh manager, with the same glue).
public final class SimNode {
    public let index: Int
    public let peer: PeerID
    let dir: String
    public internal(set) var store: DocumentStore?
    public internal(set) var core: GatewayCore?
    public var replicator: ReplicationNode? { core?.node }
    public var mesh: MeshManager? { core?.mesh }
    public internal(set) var up = false
    var advertising: Set<MeshTransport> = []
    /// Whom it hears, per transport.
    var heard: [MeshTransport: Set<Int>] = [:]
    var wakeAt: UInt64?
    var advertisingFailuresLeft = 0
    let skew: Int64
    public internal(set) var events: [MeshEvent] = []
    public internal(set) var documentsApplied = 0
    public internal(set) var restarts = 0
    var commitPending = false
    /// With `SimConfig.trust`: this boot's book, the revoked peers its core was told of, and the
    /// documents its pull filters refused.
    public internal(set) var book: TrustBook?
    var toldRevoked: Set<PeerID> = []
    let filterRefusals = SimCounter()
    /// With `SimConfig.blobs`: its blobs (survive a crash, as its disk does).
    public internal(set) var blobStorage: MemoryBlobStorage?

    init(index: Int, peer: PeerID, dir: String, skew: Int64) {
        self.index = index
        self.peer = peer
        self.dir = dir
        self.skew = skew
    }
}

/// A discrete-event simulation of gateways on a radio medium, in virtual time. Everything random
/// comes from one seeded generator, so a run replays exactly from its seed. Real stores (SQLite
/// files) and the gateway core the runtime runs (replicator, mesh manager and their glue) run
/// inside; only radios, links and time are simulated.
public final class Simulation {
    public let config: SimConfig
    public internal(set) var now: UInt64 = 0
    public internal(set) var nodes: [SimNode] = []
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
        var busyUntil = PerSide<UInt64>(0)
        var inFlight = PerSide<Int>(0)
        var tls: SimTLSLink?
        var openedAt: UInt64 = 0
        /// Control bytes per direction: over the link's life, and in the current virtual second.
        var control = PerSide<UInt64>(0)
        var controlSecond = PerSide<UInt64>(0)
        var controlInSecond = PerSide<UInt64>(0)
    }
    /// One value per direction of a link (0: a→b, 1: b→a), held inline: a Conn is copied on every
    /// frame, and arrays there cost a retain and a release each.
    struct PerSide<Value> {
        var ab: Value
        var ba: Value
        init(_ value: Value) { ab = value; ba = value }
        subscript(side: Int) -> Value {
            get { side == 0 ? ab : ba }
            set { if side == 0 { ab = newValue } else { ba = newValue } }
        }
    }
    /// Per node, with `config.tls`: (client, server) contexts.
    var tlsContexts: [(TLSContext, TLSContext)] = []
    var identities: [Identity] = []
    /// With `config.trust`: the site admin key, a second one the entries add, the operator's plan.
    var adminKey: AdminSigningKey?
    var secondAdminKey: AdminSigningKey?
    public internal(set) var trustPlan: SimTrustPlan?
    public internal(set) var trustFigures = SimTrustFigures()
    public internal(set) var handshakes = 0
    var conns: [Int: Conn] = [:]
    var nextConn = 1

    // Figures and invariant checks.
    public internal(set) var bytesSent: UInt64 = 0
    public internal(set) var framesSent: UInt64 = 0
    /// Bytes sent per message type (the frame's first byte: see ReplicationMessage).
    public internal(set) var bytesByType: [UInt8: UInt64] = [:]
    var controlLoadSoFar = SimControlLoad()
    public var debugBodies = getenv("SHOAL_SIM_BYTES") != nil
    public internal(set) var pushedBodies = 0
    public internal(set) var pushedChanges = 0
    public internal(set) var maxFramesInFlight = 0
    /// Frames duplicated or held back by the fault injector.
    public internal(set) var faultyFrames = 0
    public internal(set) var budgetViolations: [String] = []
    public internal(set) var writes: [(node: Int, id: String, version: VersionVector, deleted: Bool)] = []
    public internal(set) var crashCount = 0
    /// With `config.blobs`: blobs written (digest, length), and chunk frames sent to a node that
    /// held that chunk verified already.
    public internal(set) var blobsWritten: [(digest: BlobDigest, length: Int64)] = []
    public internal(set) var blobChunksResent = 0
    public internal(set) var partitionCount = 0
    public internal(set) var log: [String] = []
    public var keepLog = getenv("SHOAL_SIM_LOG") != nil

    enum Event {
        case wake(Int)
        case discoverySweep
        case connect(from: Int, to: Int, MeshTransport)
        case deliver(conn: Int, to: Int, frame: [UInt8])
        case remoteClosed(conn: Int, to: Int)
        case committed(Int)
        case partitionToggle
        case crash(Int)
        case restart(Int)
        case operatorTrust(Int)
    }

    public init(_ config: SimConfig) throws {
        self.config = config
        rng = SeededRandom(seed: config.seed)
        medium = SimMedium(count: config.nodes, topology: config.topology, kind: config.kind, loss: config.loss, rng: &rng)
        medium.duplicate = config.duplicate
        medium.reorder = config.reorder
        // Unique per run in this process (two runs of one seed at once must not share stores).
        let base = "\(config.directory)/shoal-sim-\(getpid())-\(config.seed)-\(UInt32.random(in: 0...UInt32.max, using: &rng))-\(simulationRuns.add(1, ordering: .relaxed).oldValue)"
        baseDirectory = base
        if config.tls {
            // Keys from the run's seed, so a run with TLS repeats exactly (peer ids order the mesh).
            for i in 0..<config.nodes {
                identities.append(try Identity.createSelfSigned(.init(commonName: "sim-gateway-\(i)"), seed: keySeed("gateway \(i)")))
            }
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
            if config.blobs { node.blobStorage = MemoryBlobStorage() }
            nodes.append(node)
        }
        if config.trust { try planTrust() }
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
            if trustPlan != nil { checkRevokedLinks() }
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
        case .wake(let i):
            let n = nodes[i]
            guard n.up, let at = n.wakeAt, at <= now else { return }
            n.wakeAt = nil
            input(n, .tick)
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
            guard n.up, to == conn.b ? conn.openB : conn.openA, let core = n.core else { return }
            var payload = frame
            if let tls = conn.tls {
                // A reordered frame still decrypts in the stream's order (TLS runs over one stream);
                // a duplicated one is a replayed record.
                guard !frame.isEmpty else {
                    note("link \(c): a replayed TLS record (bad record MAC): the session ends")
                    closeSide(c, at: to, tellNode: true)
                    return
                }
                do { payload = try tls.receive(toA: to == conn.a) } catch {
                    note("link \(c): TLS read failed: \(error)")
                    closeSide(c, at: to, tellNode: true)
                    return
                }
            }
            input(n, .frames(c, [core.prepare(payload)]))
        case .remoteClosed(let c, let to):
            guard var conn = conns[c] else { return }
            if to == conn.a { conn.openA = false } else { conn.openB = false }
            conns[c] = conn
            if !conn.openA && !conn.openB { retire(conn); conns[c] = nil }
            input(nodes[to], .linkClosed(c))
        case .committed(let i):
            let n = nodes[i]
            n.commitPending = false
            input(n, .localChangesCommitted)
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
            do { try boot(n) } catch { note("node \(n.index) did not restart: \(error)") }
        case .operatorTrust(let step):
            operatorAct(step)
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
        var meshSettings = config.mesh
        meshSettings.transports = Set(kinds.map(\.transport))
        let policies = try trustPolicies(n, store: store)
        n.core = GatewayCore(peer: n.peer, group: "sim", store: store, clock: clock, collections: policies,
                             replication: config.replication, mesh: meshSettings, sequenceBase: epoch + now,
                             fallbackSeed: config.seed &+ UInt64(n.index), blobs: n.blobStorage)
        n.blobStorage?.documents = store
        n.store = store
        n.up = true
        n.heard = [:]
        n.advertising = []
        n.advertisingFailuresLeft = config.advertisingFailures
        // A restarted node revokes what its store's entries revoke before it links to anyone.
        syncRevoked(n)
        input(n, .start)
        note("node \(n.index) up")
    }

    func crash(_ n: SimNode) {
        crashCount += 1
        note("node \(n.index) crashed")
        for (id, c) in conns.sorted(by: { $0.key < $1.key }) where (c.a == n.index && c.openA) || (c.b == n.index && c.openB) {
            closeSide(id, at: n.index, tellNode: false)
        }
        n.up = false
        n.store?.close()
        n.store = nil
        n.blobStorage?.documents = nil
        n.core = nil
        n.book = nil
        n.toldRevoked = []
        n.wakeAt = nil
        n.heard = [:]
        n.advertising = []
    }

    // MARK: - Discovery

    /// Every 500 ms: scanning nodes hear advertising nodes in range, and lose those gone.
    func sweep() {
        for n in nodes where n.up {
            guard let mesh = n.mesh, mesh.isScanning else { continue }
            for t in kinds.map(\.transport) {
                var heardNow = Set<Int>()
                for o in nodes where o.up && o.index != n.index && medium.hears(n.index, o.index, on: t) && o.advertising.contains(t) {
                    heardNow.insert(o.index)
                }
                let before = n.heard[t] ?? []
                for o in heardNow.subtracting(before).sorted() {
                    input(n, .discovered(nodes[o].peer, t, load: nodes[o].mesh?.connectionCount))
                }
                for o in before.subtracting(heardNow).sorted() {
                    input(n, .lost(nodes[o].peer, t))
                }
                n.heard[t] = heardNow
            }
        }
    }

    /// After a partition: links that cross it break (each side notices after a timeout).
    func cutUnheard() {
        for (id, c) in conns.sorted(by: { $0.key < $1.key }) where !medium.hears(c.a, c.b, on: c.transport) {
            if c.openA { closeSide(id, at: c.a, tellNode: true, notifyPeer: false) }
            if let c2 = conns[id], c2.openB { closeSide(id, at: c.b, tellNode: true, notifyPeer: false) }
        }
    }

    // MARK: - Driving the core

    /// Hands an input to a node's core and carries out what it answers, as the runtime's driver
    /// does with real links.
    func input(_ n: SimNode, _ input: GatewayCore.Input) {
        guard n.up, let core = n.core else { return }
        perform(n, core.handle(input, now: now))
    }

    func perform(_ n: SimNode, _ actions: [GatewayCore.Action]) {
        let knewBefore = n.toldRevoked
        for a in actions {
            guard n.up, n.core != nil else { return }  // a crash ends what is left
            switch a {
            case .startAdvertising(let t):
                if n.advertisingFailuresLeft > 0 {
                    n.advertisingFailuresLeft -= 1
                    input(n, .advertisingFailed(t, reason: "simulated failure"))
                } else {
                    n.advertising.insert(t)
                    input(n, .advertisingStarted(t))
                }
            case .stopAdvertising(let t):
                n.advertising.remove(t)
            case .startScanning, .stopScanning:
                break  // the sweep asks the manager whether it scans
            case .connect(let peer, let t):
                guard let to = nodes.firstIndex(where: { $0.peer == peer }) else { continue }
                let k = kind(t)
                schedule(at: now + k.connectMillis + 2 * k.latencyMillis, .connect(from: n.index, to: to, t))
            case .close(let id, _):
                closeSide(id, at: n.index, tellNode: false)  // the core forgot it already
            case .send(let id, let bytes):
                send(id, from: n.index, bytes)
            case .mesh(let e):
                if n.events.count < 10_000 { n.events.append(e) }
            case .replication(.documents(_, _, .pull, let items)):
                n.documentsApplied += items.count
                if n.book != nil { pulled(n, items, knewBefore: knewBefore) }
            case .replication:
                break
            case .warning(_, let message):
                note("node \(n.index): \(message)")
            }
        }
        guard n.up, let core = n.core else { return }
        if let w = core.nextWake, n.wakeAt.map({ w < $0 }) ?? true {
            n.wakeAt = w
            schedule(at: w, .wake(n.index))
        }
    }

    // MARK: - Workload

    /// Writes a document on a node (a local write, versioned), and lets it announce.
    @discardableResult
    public func write(on i: Int, id: String, body: String) throws -> Bool {
        let n = nodes[i]
        guard n.up, let r = n.replicator else { return false }
        try acknowledged(n, id, try r.writer.put(collection, id: DocumentID(id), body: body))
        return true
    }

    /// A local write committed: remember it for the lost-write check and let the node announce it.
    func acknowledged(_ n: SimNode, _ id: String, _ change: Change) throws {
        writes.append((n.index, id, try DocumentVersion(decoding: change.version).vector, change.deleted))
        committed(n)
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
        try acknowledged(n, id, try r.writer.delete(collection, id: DocumentID(id)))
        return true
    }

    public func crashNow(_ i: Int) { if nodes[i].up { crash(nodes[i]) } }
    public func restartNow(_ i: Int) { if !nodes[i].up { nodes[i].restarts += 1; try? boot(nodes[i]) } }
    /// Cuts (or restores) the radio between two nodes; a link between them breaks.
    public func setBlocked(_ a: Int, _ b: Int, _ blocked: Bool) {
        if blocked { medium.blocked.insert([min(a, b), max(a, b)]); cutUnheard() } else { medium.blocked.remove([min(a, b), max(a, b)]) }
    }

    /// The link kinds in use: `kind`, and `secondKind` if set.
    var kinds: [SimLinkKind] { [config.kind] + (config.secondKind.map { [$0] } ?? []) }

    func kind(_ t: MeshTransport) -> SimLinkKind { kinds.first { $0.transport == t } ?? config.kind }

    /// Takes a node's radio for `t` down (its links over it break; it stops being heard there) or
    /// brings it back; the node's mesh hears of it, as from the radio manager.
    public func setRadio(_ i: Int, _ t: MeshTransport, up: Bool) {
        if up { medium.radioDown[i]?.remove(t) } else { medium.radioDown[i, default: []].insert(t) }
        input(nodes[i], .transport(t, up: up))
        if !up { cutUnheard() }
    }

    /// The transport of the open link between two nodes (nil: none).
    public func linkTransport(_ a: Int, _ b: Int) -> MeshTransport? {
        conns.values.filter { $0.openA && $0.openB && Set([$0.a, $0.b]) == Set([a, b]) }.map(\.transport).sorted().first
    }

    /// Pairs linked over two transports at once (a handover in progress).
    public var parallelLinks: Int {
        var kinds: [[Int]: Set<MeshTransport>] = [:]
        for c in conns.values where c.openA && c.openB { kinds[[min(c.a, c.b), max(c.a, c.b)], default: []].insert(c.transport) }
        return kinds.values.filter { $0.count > 1 }.count
    }

    /// Documents applied by pulls at each node (to compare with what was written: a resend loop
    /// shows as many more).
    public var documentsAppliedTotal: Int { nodes.map(\.documentsApplied).reduce(0, +) }

    public func setPartition(_ side: Set<Int>?) {
        medium.partition = side
        if side != nil { partitionCount += 1; cutUnheard() }
    }

}
