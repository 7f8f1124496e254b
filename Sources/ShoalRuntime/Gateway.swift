import ShoalConfig
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalCore
import ShoalStatus
import ShoalStore
import ShoalSupervision
import ShoalTLS
import Synchronization

public enum ShoalVersion {
    public static let current = "0.1.0"
}

/// Everything one running gateway shares between its services: its configuration, logger, the
/// supervision report, and the store once the store service has opened it. Services get this from
/// the composition root; they never reach for globals.
public final class Gateway: Sendable {
    public let board: BoardConfig
    public let site: SiteConfig
    public let logger: Logger
    public let report: SupervisionReport
    public let storePath: String
    public let socketPath: String
    /// SQLite runs here, never on Swift's cooperative pool.
    public let storeThread = BlockingThread(name: "shoal-store")
    private let storeSlot = Locked<DocumentStore?>(nil)
    private let identitySlot = Locked<(Identity?, String?)>((nil, nil))
    private let clockSlot = Locked<NodeClock?>(nil)
    /// Replication figures for status (the ObjectBox seed's counters).
    public let counters = Locked(ReplicationCounters())
    /// The mesh as this gateway sees it, and its recent events (published by the replication driver).
    public let meshView = Locked(MeshView())
    public let meshEvents = MeshEventLog()
    /// The status LED's current pattern (its name), for `shoal status` and the console.
    public let ledPattern = Locked("booting: fast blink")
    /// What the radio manager sees now (nil until it has looked once).
    public let radios = Locked<RadioSnapshot?>(nil)
    /// The replication driver's ear for radio changes: set by the replication service while it runs.
    let radioHook = Locked<(@Sendable (RadioSnapshot) -> Void)?>(nil)
    /// `retryNetworks()`: set by the replication service while it runs.
    let retryRadiosHook = Locked<(@Sendable () -> Void)?>(nil)

    /// Asks the mesh to retry its radios at once (advertising and discovery, forgetting backoffs).
    /// False when replication is not running.
    public func retryRadios() -> Bool {
        guard let hook = retryRadiosHook.withLock({ $0 }) else { return false }
        hook()
        return true
    }
    private let stateSlot = Locked<GatewayState>(.booting)
    private let started = ContinuousClock.now

    public init(board: BoardConfig, site: SiteConfig, logger: Logger, report: SupervisionReport, storePath: String, socketPath: String) {
        self.board = board
        self.site = site
        self.logger = logger
        self.report = report
        self.storePath = storePath
        self.socketPath = socketPath
    }

    /// The open store, or nil while the store service is (re)starting.
    public var store: DocumentStore? { storeSlot.withLock { $0 } }
    func setStore(_ store: DocumentStore?, clock: NodeClock? = nil) {
        storeSlot.withLock { $0 = store }
        clockSlot.withLock { $0 = clock }
    }

    public var clock: NodeClock? { clockSlot.withLock { $0 } }

    /// Versioned local writes, once the store and the identity are there.
    public var writer: LocalWriter? {
        guard let store, let clock, let identity else { return nil }
        return LocalWriter(peer: identity.peerID, store: store, clock: clock)
    }

    /// Where identities live: `<storage>/identities`.
    public var identityDirectory: String { Files.directory(of: storePath) + "/identities" }

    /// The identity, once the identity service has loaded or made it, and any problem with it.
    public var identity: Identity? { identitySlot.withLock { $0.0 } }
    public var identityProblem: String? { identitySlot.withLock { $0.1 } }
    func setIdentity(_ identity: Identity?, problem: String?) { identitySlot.withLock { $0 = (identity, problem) } }

    public var state: GatewayState {
        get { stateSlot.withLock { $0 } }
    }
    func setState(_ s: GatewayState) { stateSlot.withLock { $0 = s } }

    public var uptimeSeconds: Int64 { (ContinuousClock.now - started).components.seconds }

    /// A snapshot of the gateway. Reads the store: call it from a thread, not the cooperative pool.
    public func statusSnapshot() -> GatewayStatus {
        let stats = try? store?.stats()
        let collections = (try? store?.collections())??.map(\.description) ?? site.collections.map(\.name.description)
        var state = self.state
        if state == .running && !report.isHealthy { state = .degraded }
        let c = counters.withLock { $0 }
        let mesh = meshView.withLock { $0 }
        var status = GatewayStatus(
            state: state, version: ShoalVersion.current, boardID: board.id, boardName: board.name,
            boardSupport: board.support.rawValue, group: site.group, serviceType: GroupID(site.group).serviceType,
            uptimeSeconds: uptimeSeconds, storePath: storePath, durability: board.durability.rawValue,
            documents: stats?.documents ?? 0, tombstones: stats?.tombstones ?? 0, collections: collections,
            lastSequence: stats?.lastSequence ?? 0, meshState: mesh.state.rawValue,
            connectedPeers: mesh.counters.connectedPeers,
            peerID: identity?.peerID.description, identityLabel: site.identityLabel,
            identityNotAfter: identity.map { IdentityText.date($0.certificate.notAfter) }, identityProblem: identityProblem,
            children: report.snapshot.map { GatewayStatus.Child(path: $0.path, state: $0.state.rawValue, restarts: $0.restarts, lastError: $0.lastError) })
        status.counters = [
            "failedConnectionAttempts": Int64(c.failedConnections), "messagesSent": Int64(c.messagesSent),
            "messagesReceived": Int64(c.messagesReceived), "documentsReceived": Int64(c.documentsReceived),
            "documentsSent": Int64(c.documentsSent), "bytesSent": Int64(c.bytesSent), "bytesReceived": Int64(c.bytesReceived),
            "conflicts": Int64(c.conflicts), "documentsApplied": Int64(c.documentsApplied),
            "discoveredPeers": Int64(mesh.counters.discoveredPeers), "connectedPeers": Int64(mesh.counters.connectedPeers),
            "evictions": Int64(mesh.counters.evictions),
        ]
        status.clockSkewPeers = c.skewedPeers.sorted()
        status.ledPattern = ledPattern.withLock { $0 }
        status.transports = mesh.transports.keys.sorted().map { t in
            GatewayStatus.Transport(name: t.rawValue, active: mesh.transports[t]!.active, error: mesh.transports[t]!.error, discovery: mesh.discovery[t])
        }
        return status
    }
}

/// The replication counters `shoal status` shows.
public struct ReplicationCounters: Sendable {
    public var peers: [String: String] = [:]  // link → peer id
    public var documentsReceived = 0
    /// Received and written (not refused by a filter, the purge horizon or a check).
    public var documentsApplied = 0
    public var documentsSent = 0
    public var conflicts = 0
    public var failedConnections = 0
    public var messagesSent = 0
    public var messagesReceived = 0
    public var bytesSent = 0
    public var bytesReceived = 0
    public var skewedPeers: Set<String> = []
    public init() {}
}
