import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMedium
import ShoalMesh
import ShoalReplication
import ShoalRuntime
import ShoalStore
import ShoalTLS
import Synchronization
import ShoalThreads

/// The mesh's states, with the ObjectBox seed's names.
public enum ReplicatorState: String, Sendable {
    case created = "Created", discovering = "Discovering", fullyConnected = "FullyConnected", stopped = "Stopped", dead = "Dead"
    init(_ s: MeshState) { self = ReplicatorState(rawValue: s.rawValue) ?? .dead }
}

/// What a peer's replicator is doing (the seed's activities).
public enum PeerReplicatorActivity: String, Sendable {
    case stopped, offline, connecting, idle, busy
    init(_ a: PeerActivity) { self = PeerReplicatorActivity(rawValue: a.rawValue) ?? .offline }
}

/// The replicator's status per transport (`transport` set) or in aggregate (`transport` nil):
/// active means it advertises and discovers there.
public struct ReplicatorStatus: Sendable, Equatable {
    public let transport: MultipeerTransport?
    public let active: Bool
    public let error: String?
    public let state: ReplicatorState
}

/// A peer heard (online) or lost on a transport.
public struct PeerDiscoveryStatus: Sendable, Equatable {
    public let peerID: PeerID
    public let transport: MultipeerTransport
    public let online: Bool
}

/// A peer's replicator: which way the link was made, what it does, and its last error.
public struct PeerReplicatorStatus: Sendable, Equatable {
    public let peerID: PeerID
    public let transport: MultipeerTransport
    /// We dialled it.
    public let outgoing: Bool
    public let activity: PeerReplicatorActivity
    public let error: String?
}

/// One document in a replication event.
public struct ReplicatedDocumentInfo: Sendable, Equatable {
    /// `scope`, `collection` as the seed splits them.
    public let scope: String
    public let collection: String
    public let id: String
    public let flags: DocumentFlags
    /// Why it was refused (a pull filter, a check), if it was.
    public let error: String?
}

/// Documents sent to a peer (push, acknowledged) or received from it (pull, applied).
public struct PeerDocumentReplication: Sendable, Equatable {
    public let peerID: PeerID
    public let transport: MultipeerTransport
    public let isPush: Bool
    public let documents: [ReplicatedDocumentInfo]
}

/// One peer as this replicator knows it (the seed's `PeerInfo`).
public struct PeerInfo: Sendable {
    public let peerID: PeerID
    /// From its TLS session, while linked.
    public let certificate: TLSCertificate?
    public let online: Bool
    /// The transports it was discovered on.
    public let transports: Set<MultipeerTransport>
    /// The transport replication uses now (nil: not replicating).
    public let replicatorTransport: MultipeerTransport?
    /// Its own links, from the mesh's gossip.
    public let neighborPeers: [PeerID]
    public let replicatorStatus: (activity: PeerReplicatorActivity, error: String?)
    /// We dialled it.
    public let outgoing: Bool?
    /// The sync pulled from it now, while one runs.
    public let syncProgress: SyncProgress?
}

/// How far a catch-up pulled from peers has come: documents received of those announced so far (a
/// peer announces a large catch-up in batches, so the total grows until its last batch), the rate
/// over the last 5 s and the time left for what is announced at that rate. Live changes do not count.
public struct SyncProgress: Sendable, Equatable {
    public let received: Int
    public let announced: Int
    public let documentsPerSecond: Int?
    public let estimatedSecondsLeft: Int?
    /// The last batch announced was full: the peer likely has more, so the total and the estimate
    /// are lower bounds.
    public let moreMayCome: Bool

    init(_ p: ShoalCore.SyncProgress) {
        received = p.received
        announced = p.announced
        documentsPerSecond = p.perSecond
        estimatedSecondsLeft = p.estimateSeconds
        moreMayCome = p.moreMayCome
    }
}

/// The ObjectBox seed's counters, plus bytes and conflicts.
public struct ReplicatorCounters: Sendable, Equatable {
    public var discoveredPeers = 0
    public var connectedPeers = 0
    public var failedConnectionAttempts = 0
    public var messagesSent = 0
    public var messagesReceived = 0
    public var bytesSent = 0
    public var bytesReceived = 0
    /// The seed's "received sync logs": documents received.
    public var documentsReceived = 0
    /// The seed's "applied sync logs": received and written.
    public var documentsApplied = 0
    public var documentsSent = 0
    public var conflicts = 0
    public var evictions = 0
}

/// Replicates a database's collections with peers of the same group over a self-organising mesh
/// (the seed's `MultipeerReplicator`). Threads of its own do the work (never Swift's cooperative
/// pool); `start` and `stop` return quickly (`stop` waits up to 3 s for its threads).
public final class MultipeerReplicator: Sendable {
    public let configuration: MultipeerReplicatorConfiguration
    let host: LibraryHost
    let policies: [CollectionPolicy]
    /// The collections' ttl and budgets, for the retention loop.
    let expiryRules: [ExpiryRule]
    let driver = Locked<ReplicationDriver?>(nil)
    let watcher = Locked<RadioWatcher?>(nil)
    /// The hourly tombstone purge, while started.
    let retention = Locked<RetentionLoop?>(nil)
    let listen: HostPort?
    let staticPeers: [HostPort]

    /// Checks the configuration (collections, mesh options, addresses) and makes the collections.
    public init(config: MultipeerReplicatorConfiguration) throws(ShoalError) {
        configuration = config
        guard !config.peerGroupID.isEmpty else { throw ShoalError("peerGroupID is empty") }
        guard !config.transports.isEmpty else { throw ShoalError("transports is empty: give [.wifi], [.bluetooth] or both") }
        guard config.database.identity.peerID == config.identity.peerID else {
            throw ShoalError("the database was opened with another identity (\(config.database.identity.peerID.short)) than the replicator's (\(config.identity.peerID.short))")
        }
        try config.mesh.check()
        var seen = Set<String>()
        var made: [CollectionPolicy] = []
        var expiryRules: [ExpiryRule] = []
        for c in config.collections {
            let coll = try config.database.collection(c.collection)
            guard seen.insert(coll.fullName).inserted else { throw ShoalError("collection \(coll.fullName) is configured twice") }
            for (label, value) in [("ttlSeconds", c.ttlSeconds), ("maxDocuments", c.maxDocuments), ("maxBytes", c.maxBytes)] {
                if let value, value < 1 { throw ShoalError("collection \(coll.fullName): \(label) is \(value); give 1 or more, or nil for none") }
            }
            if let t = c.ttlSeconds, t > 10 * 365 * 86_400 { throw ShoalError("collection \(coll.fullName): ttlSeconds is \(t), over ten years") }
            expiryRules.append(ExpiryRule(collection: coll.name, ttlMillis: c.ttlSeconds.map { Int64($0) * 1000 },
                                          maxDocuments: c.maxDocuments.map(Int64.init), maxBytes: c.maxBytes.map(Int64.init)))
            made.append(ConflictResolvers.policy(c, name: coll.name))
        }
        if made.isEmpty { throw ShoalError("no collections to replicate") }
        policies = made
        self.expiryRules = expiryRules
        switch config.medium {
        case .network(let n):
            if let l = n.listen {
                guard let hp = HostPort(parsing: l), !hp.isName else { throw ShoalError("listen address \"\(l)\" is not a numeric address:port or [v6]:port") }
                listen = hp
            } else { listen = nil }
            var peers: [HostPort] = []
            for p in n.staticPeers {
                guard let hp = HostPort(parsing: p), hp.port != 0 else { throw ShoalError("static peer \"\(p)\" is not host:port (a host name or address) or [v6]:port") }
                peers.append(hp)
            }
            staticPeers = peers
            if config.transports.contains(.bluetooth) && n.bluetoothAdapter == nil {
                throw ShoalError("the .bluetooth transport on the network needs NetworkOptions.bluetoothAdapter (hci0)")
            }
        case .simulated:
            listen = nil
            staticPeers = []
        }
        host = LibraryHost(log: config.log, options: config.logOptions)
    }

    /// The log level and domains now (from the configuration's `logOptions`). Setting it takes
    /// effect at once, running or not, as `shoal log` does on a gateway.
    public var logOptions: LogOptions {
        get { host.logOptions.withLock { $0 } }
        set {
            let logs = configuration.log != nil
            host.logOptions.withLock { options in
                options = newValue
                if logs { newValue.apply(to: host.logger) }
            }
        }
    }

    /// This replicator's peer id (the digest of its identity's public key).
    public var peerID: PeerID { configuration.identity.peerID }

    /// Starts discovery and replication, and the gateway's retention (tombstones older than
    /// `mesh.txLogMaxAgeSeconds` purged now and every hour). Starting a running replicator does
    /// nothing.
    public func start() throws(ShoalError) {
        let config = configuration
        // The driver, the retention loop and the radio watcher are made, and ended by stop(), under
        // the driver's lock: a stop racing a start cannot miss the parts the start made last.
        try driver.withLock { (d: inout ReplicationDriver?) throws(ShoalError) in
            guard d == nil else { return }
            let made: ReplicationDriver
            do throws(ReplicationAssembly.Failure) { made = try assembly().start(host: host) } catch {
                if case .transport = error, case .network = config.medium {
                    throw ShoalError("cannot listen on \(listen?.description ?? "any address"): \(error)")
                }
                throw ShoalError("\(error)")
            }
            d = made
            let loop = RetentionLoop(maxAgeSeconds: Int64(config.mesh.txLogMaxAgeSeconds), expiryRules: expiryRules, store: config.database.store, logger: host.logger)
            if loop.start() { retention.withLock { $0 = loop } } else { host.logger.warning(.store, "retention: the system refused a thread; tombstones are not purged until the next start") }
            guard case .network(let n) = config.medium, n.wifiInterface != nil || n.bluetoothAdapter != nil else { return }
            let w = RadioWatcher(wifiInterface: n.wifiInterface, bluetoothAdapter: n.bluetoothAdapter) { made.radiosChanged($0) }
            w.start()
            watcher.withLock { $0 = w }
        }
    }

    /// This replicator as the runtime assembles a gateway (the same core, driver and transports as
    /// `shoal run`).
    func assembly() -> ReplicationAssembly {
        let config = configuration
        let id = config.identity.raw
        let settings = ReplicationSettings(config.mesh.file)
        let links: ReplicationAssembly.Links
        switch config.medium {
        case .simulated(let medium):
            links = .transports { server, client in [MediumTransport(medium: medium.raw, serverTLS: server, clientTLS: client)] }
        case .network(let n):
            let group = GroupID(config.peerGroupID)
            let wifi: ReplicationDriver.WifiDiscovery? = n.dnssd && config.transports.contains(.wifi)
                ? .init(serviceType: group.serviceType, serviceName: "shoal-\(id.peerID.short)", interface: n.wifiInterface)
                : nil
            let bluetooth: ReplicationDriver.BluetoothDiscovery? = config.transports.contains(.bluetooth)
                ? n.bluetoothAdapter.map { .init(adapter: $0, serviceUUID: group.bleServiceUUID) }
                : nil
            links = .network(listen: listen, peers: staticPeers, wifi: wifi, bluetooth: bluetooth)
        }
        var a = ReplicationAssembly(identity: id, group: config.peerGroupID, store: config.database.store, clock: config.database.clock,
                                    collections: policies, replication: settings, mesh: config.mesh.settings(config.transports),
                                    authenticator: config.authenticator.raw, links: links)
        a.salt = UInt64(truncatingIfNeeded: ObjectIdentifier(self).hashValue)
        return a
    }

    /// Stops replication: links close, advertising and discovery stop. It can start again.
    public func stop() {
        let parts = driver.withLock { d -> (ReplicationDriver?, RetentionLoop?, RadioWatcher?) in
            defer { d = nil }
            return (d, retention.withLock { r in defer { r = nil }; return r }, watcher.withLock { w in defer { w = nil }; return w })
        }
        parts.2?.stop()
        parts.1?.stop()
        parts.0?.stop()
    }

    /// Asks the mesh to retry advertising and discovery now, forgetting backoffs (ObjectBox's
    /// `retryNetworks()`). False when not started.
    @discardableResult
    public func retryRadios() -> Bool {
        guard let d = driver.withLock({ $0 }) else { return false }
        d.retryNetworks()
        return true
    }

    /// The port the network medium listens on (useful with port 0); nil on the simulated medium.
    public var listenPort: UInt16? { driver.withLock { $0 }?.listenPort }

    public var state: ReplicatorState { host.view.withLock { ReplicatorState($0.state) } }

    /// Peers linked to this one now.
    public var neighborPeers: [PeerID] {
        host.view.withLock { v in v.peers.filter { $0.info.connectedOn != nil }.map { PeerID($0.info.peer) }.sorted() }
    }

    /// Every peer the mesh knows of (heard, linked, or told of by gossip).
    public var knownPeers: [PeerID] { host.view.withLock { v in v.peers.map { PeerID($0.info.peer) }.sorted() } }

    public func peerInfo(for peer: PeerID) -> PeerInfo? {
        guard let e = host.view.withLock({ v in v.peers.first { $0.info.peer == peer.raw } }) else { return nil }
        return PeerInfo(peerID: peer, certificate: e.certificate.map(TLSCertificate.init),
                        online: e.info.online, transports: Set(e.info.discoveredOn.map(MultipeerTransport.init)),
                        replicatorTransport: e.info.connectedOn.map(MultipeerTransport.init),
                        neighborPeers: e.info.neighbours.map(PeerID.init).sorted(),
                        replicatorStatus: (PeerReplicatorActivity(e.info.activity), host.peerErrors.withLock { $0[peer.raw] }),
                        outgoing: e.info.outgoing, syncProgress: e.sync.map(SyncProgress.init))
    }

    /// Every sync pulled from peers now, together (nil: none runs).
    public var syncProgress: SyncProgress? { host.view.withLock { $0.sync }.map(SyncProgress.init) }

    public var counters: ReplicatorCounters {
        let c = host.counters.withLock { $0 }
        let m = host.view.withLock { $0.counters }
        var out = ReplicatorCounters()
        out.discoveredPeers = m.discoveredPeers
        out.connectedPeers = m.connectedPeers
        out.failedConnectionAttempts = c.failedConnections
        out.messagesSent = c.messagesSent
        out.messagesReceived = c.messagesReceived
        out.bytesSent = c.bytesSent
        out.bytesReceived = c.bytesReceived
        out.documentsReceived = c.documentsReceived
        out.documentsApplied = c.documentsApplied
        out.documentsSent = c.documentsSent
        out.conflicts = c.conflicts
        out.evictions = m.evictions
        return out
    }

    /// The status now: one per configured transport, then the aggregate.
    public var status: [ReplicatorStatus] { host.currentStatus(configuration.transports) }

    /// Status changes, per transport and in aggregate (the seed's status listener). Each call
    /// makes a new stream; it starts with the status now.
    public func statusChanges() -> AsyncStream<ReplicatorStatus> {
        let (s, c) = host.status.subscribe()
        for st in status { c.yield(st) }
        return s
    }

    /// Peers heard and lost (the seed's peer discovery status listener).
    public func peerDiscoveryChanges() -> AsyncStream<PeerDiscoveryStatus> { host.discovery.subscribe().0 }

    /// Peers' replicator activity (the seed's peer replicator status listener).
    public func peerReplicatorStatusChanges() -> AsyncStream<PeerReplicatorStatus> { host.replicator.subscribe().0 }

    /// Documents pushed and pulled (the seed's peer document replication listener).
    public func documentReplications() -> AsyncStream<PeerDocumentReplication> { host.documents.subscribe().0 }
}

/// The driver's reports, turned into the library's listeners and figures.
final class LibraryHost: ReplicationHost {
    let logger: Logger
    let counters = Locked(ReplicationCounters())
    let view = Locked(MeshView())
    let transportState = Locked<[MeshTransport: (active: Bool, error: String?)]>([:])
    /// The transport each peer replicates over now (from the mesh's peer replicator events).
    let peerTransport = Locked<[ShoalCore.PeerID: MeshTransport]>([:])
    let peerErrors = Locked<[ShoalCore.PeerID: String]>([:])
    let status = Broadcaster<ReplicatorStatus>()
    let discovery = Broadcaster<PeerDiscoveryStatus>()
    let replicator = Broadcaster<PeerReplicatorStatus>()
    let documents = Broadcaster<PeerDocumentReplication>()

    let logOptions: Locked<LogOptions>

    init(log: (@Sendable (String) -> Void)?, options: LogOptions) {
        logger = Logger(sink: ClosureLogSink(log), level: .none)
        logOptions = Locked(options)
        if log != nil { options.apply(to: logger) }
    }

    func updateCounters(_ body: (inout ReplicationCounters) -> Void) { counters.withLock { body(&$0) } }

    func meshViewChanged(_ v: MeshView) {
        let before = view.withLock { old -> MeshState in
            defer { old = v }
            return old.state
        }
        if before != v.state { aggregateChanged(state: v.state) }
    }

    func currentStatus(_ configured: Set<MultipeerTransport>) -> [ReplicatorStatus] {
        let state = view.withLock { $0.state }
        let ts = transportState.withLock { $0 }
        var out = configured.sorted().map { t in
            ReplicatorStatus(transport: t, active: ts[t.mesh]?.active ?? false, error: ts[t.mesh]?.error, state: ReplicatorState(state))
        }
        out.append(aggregate(state, ts))
        return out
    }

    func aggregate(_ state: MeshState, _ ts: [MeshTransport: (active: Bool, error: String?)]) -> ReplicatorStatus {
        let running = state == .discovering || state == .fullyConnected
        let anyActive = ts.values.contains { $0.active }
        let error = running && anyActive ? nil : ts.keys.sorted().compactMap { ts[$0]!.error }.first
        return ReplicatorStatus(transport: nil, active: running && anyActive, error: error, state: ReplicatorState(state))
    }

    func aggregateChanged(state: MeshState? = nil) {
        let s = state ?? view.withLock { $0.state }
        status.send(aggregate(s, transportState.withLock { $0 }))
    }

    func meshEvent(_ e: MeshEvent) {
        switch e {
        case .state(let s):
            view.withLock { $0.state = s }
            aggregateChanged(state: s)
        case .transportStatus(let t, let active, let error):
            transportState.withLock { $0[t] = (active, error) }
            let s = view.withLock { $0.state }
            status.send(ReplicatorStatus(transport: MultipeerTransport(t), active: active, error: error, state: ReplicatorState(s)))
            aggregateChanged()
        case .peerDiscovery(let p, let t, let online):
            discovery.send(PeerDiscoveryStatus(peerID: PeerID(p), transport: MultipeerTransport(t), online: online))
        case .peerReplicator(let p, let t, let outgoing, let activity, let error):
            peerTransport.withLock { $0[p] = (activity == .offline || activity == .stopped) ? nil : t }
            peerErrors.withLock { $0[p] = error }
            replicator.send(PeerReplicatorStatus(peerID: PeerID(p), transport: MultipeerTransport(t), outgoing: outgoing,
                                                 activity: PeerReplicatorActivity(activity), error: error))
        }
    }

    func replicationEvent(_ e: ReplicationEvent) {
        guard case .documents(_, let peer, let direction, let items) = e else { return }
        let t = peerTransport.withLock { $0[peer] } ?? .wifi
        let docs = items.map { i -> ReplicatedDocumentInfo in
            let parts = i.collection.split(separator: ".", maxSplits: 1).map(String.init)
            return ReplicatedDocumentInfo(scope: parts.first ?? "", collection: parts.count > 1 ? parts[1] : "", id: i.id,
                                          flags: i.deleted ? .deleted : [], error: i.error)
        }
        documents.send(PeerDocumentReplication(peerID: PeerID(peer), transport: MultipeerTransport(t), isPush: direction == .push, documents: docs))
    }
}

/// Log lines to a closure.
struct ClosureLogSink: LogSink {
    let body: (@Sendable (String) -> Void)?
    init(_ body: (@Sendable (String) -> Void)?) { self.body = body }
    func write(_ r: LogRecord) { body?("\(r.level) \(r.domain.rawValue): \(r.message)") }
}
