import Glibc
import ShoalConfig
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalCore
import ShoalStatus
import ShoalStore
import ShoalSupervision
import ShoalTLS
import ShoalTrust
import Synchronization
import ShoalThreads

public enum ShoalVersion {
    public static let current = "0.1.0"
}

/// What one running gateway's services share: its configuration, logger, the supervision report,
/// the two blocking threads, and what the services publish for observers (status, the console,
/// the control socket): counters, the mesh view, the radios, the identity's state. Dependencies a
/// service needs to run (the open store, the identity) do not come from here: the supervisor
/// hands them over when it makes the service (`Provided`). Services get this from the
/// composition root; they never reach for globals.
public final class Gateway: Sendable {
    public let board: BoardConfig
    public let site: SiteConfig
    public let logger: Logger
    public let report: SupervisionReport
    public let storePath: String
    public let socketPath: String
    /// SQLite runs here, never on Swift's cooperative pool.
    public let storeThread = BlockingThread(name: "shoal-store")
    /// Other blocking work of the services (key generation, seeding TLS, console writes, joining
    /// threads when a part stops) runs here, so it never queues in front of SQLite.
    public let workThread = BlockingThread(name: "shoal-work")
    /// The identity as the identity service last found it, and any problem with it: for status
    /// and for the control socket's writes. Dependants get the identity itself through `Provided`.
    private let identitySlot = Locked<(Identity?, String?)>((nil, nil))
    /// Replication figures for status (the ObjectBox seed's counters).
    public let counters = Locked(ReplicationCounters())
    /// Blob uploads open on the control socket (bounded; see `BlobUploads`).
    let blobUploads = BlobUploads()
    /// The mesh as this gateway sees it, and its recent events (published by the replication driver).
    public let meshView = Locked(MeshView())
    /// Live queries open at once over the control socket and HTTP (`shoal doc query --follow`,
    /// `/v1/collections/{c}/query` with SSE): at most `LiveQueryLimits.perGateway`.
    public let liveQueries = LiveQuerySlots(limit: LiveQueryLimits.perGateway)
    public let meshEvents = MeshEventLog()
    /// The MQTT bridge's brokers (empty when the site has no `mqtt:` section).
    public let mqtt = MQTTBoard()
    /// The uplink to a NATS JetStream hub (nil state when the site has no `uplink:` section).
    public let uplink = UplinkBoard()
    /// The status LED's current pattern (its name), for `shoal status` and the console.
    public let ledPattern = Locked("booting: fast blink")
    /// What the radio manager sees now (nil until it has looked once).
    public let radios = Locked<RadioSnapshot?>(nil)
    /// Every change the radio manager sees, to whoever listens (the replication service).
    public let radioChanges = Broadcaster<RadioSnapshot>()
    /// Requests to retry the radios (`shoal mesh retry`, the console's `retry`).
    let retryRequests = Broadcaster<Void>()

    /// Asks the mesh to retry its radios at once (advertising and discovery, forgetting backoffs).
    /// False when replication is not running.
    public func retryRadios() -> Bool {
        guard retryRequests.count > 0 else { return false }
        retryRequests.send(())
        return true
    }
    private let stateSlot = Locked<GatewayState>(.booting)
    /// The exit status a service asked for (the update service's restart code), used once the
    /// tree has stopped.
    private let exitSlot = Locked<Int32?>(nil)
    public var requestedExit: Int32? { exitSlot.withLock { $0 } }
    func requestExit(_ code: Int32) { exitSlot.withLock { $0 = code } }
    private let started = ContinuousClock.now

    /// The fleet's trust: the site file's roots, peers, CRLs and admin keys plus the `_trust`
    /// entries the store holds; every handshake and every incoming document consults it.
    public let trust: TrustBook

    public init(board: BoardConfig, site: SiteConfig, logger: Logger, report: SupervisionReport, storePath: String, socketPath: String,
                trust: TrustBook.Site = TrustBook.Site()) {
        self.trust = TrustBook(site: trust, log: { [logger] line in
            if line.hasPrefix("trust entry taken") { logger.info(.tls, line) } else { logger.warning(.tls, line) }
        })
        self.board = board
        self.site = site
        self.logger = logger
        self.report = report
        self.storePath = storePath
        self.socketPath = socketPath
    }

    /// Where identities live: `<storage>/identities`.
    public var identityDirectory: String { Files.directory(of: storePath) + "/identities" }
    /// The identity's certificate chain and key as PEM files, for clients that present them
    /// (`tls.identity: true` of an MQTT broker or the uplink).
    var identityPEMFiles: (cert: String, key: String) {
        ("\(identityDirectory)/\(site.identityLabel).crt.pem", "\(identityDirectory)/\(site.identityLabel).key.pem")
    }

    /// The identity, once the identity service has loaded or made it, and any problem with it.
    public var identity: Identity? { identitySlot.withLock { $0.0 } }
    public var identityProblem: String? { identitySlot.withLock { $0.1 } }
    func setIdentity(_ identity: Identity?, problem: String?) { identitySlot.withLock { $0 = (identity, problem) } }

    /// Where the local HTTP API listens now (`127.0.0.1:8470`, `unix:/var/lib/shoal/http.sock`),
    /// for status: a port 0 in the site file shows here as the port the kernel gave.
    public var httpAddresses: [String] { httpAddressSlot.withLock { $0 } }
    func setHTTPAddresses(_ addresses: [String]) { httpAddressSlot.withLock { $0 = addresses } }
    private let httpAddressSlot = Locked<[String]>([])

    /// The control socket's answer to `identity` (what `shoal identity show` prints of a running
    /// gateway): where its identity lives, the one in use, and any problem with it. The directory
    /// is absolute: a client in another working directory than `shoal run --data-dir rel` was
    /// started in writes (`identity create --force`) where the gateway reads.
    var identityJSON: JSONValue {
        let (identity, problem) = identitySlot.withLock { $0 }
        let directory = Gateway.absolute(identityDirectory)
        var j = identity.map { IdentityText.json($0, label: site.identityLabel, directory: directory) }?.objectValue
            ?? ["label": .string(site.identityLabel), "directory": .string(directory)]
        j["problem"] = problem.map { .string($0) } ?? .null
        return .object(j)
    }

    /// `path` from this process's working directory when it is relative (as given if that cannot be read).
    static func absolute(_ path: String) -> String {
        guard !path.hasPrefix("/") else { return path }
        var buffer = [CChar](repeating: 0, count: 4097)
        guard getcwd(&buffer, buffer.count) != nil else { return path }
        let cwd = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return (cwd == "/" ? "" : cwd) + "/" + (path.hasPrefix("./") ? String(path.dropFirst(2)) : path)
    }

    public var state: GatewayState {
        get { stateSlot.withLock { $0 } }
    }
    func setState(_ s: GatewayState) { stateSlot.withLock { $0 = s } }

    public var uptimeSeconds: Int64 { (ContinuousClock.now - started).components.seconds }

    /// Expiries to warn of (within the site's `trust.warnDays`, or passed) and the trust in brief.
    func trustStatus(now: Int64 = Identity.now()) -> (warnings: [String], trust: JSONValue) {
        var warnings: [String] = []
        let horizon = site.trust.warnDays * 86_400
        if let notAfter = identity?.certificate.notAfter, notAfter - now <= horizon {
            let days = (notAfter - now) / 86_400
            warnings.append(notAfter <= now
                ? "identity \(site.identityLabel) expired on \(IdentityText.date(notAfter)): peers refuse it; re-issue it (`shoal identity create --force`)"
                : "identity \(site.identityLabel) expires on \(IdentityText.date(notAfter)) (in \(days) days); re-issue it before (`shoal identity create --force`, with --ca-key/--ca-cert if CA-signed)")
        }
        let ledger = trust.ledger
        let current = trust.current()
        var brief: [String: JSONValue] = [
            "entries": .int(Int64(ledger.entries.count)), "allowed": .int(Int64(current.allowedPeers.count)),
            "revoked": .int(Int64(current.revokedPeers.count)), "pending": .int(Int64(trust.pending.count)),
        ]
        var state = "ok"
        if let next = ledger.checkpoint?.nextUpdate {
            brief["nextUpdate"] = .int(next)
            brief["nextUpdateDate"] = .string(IdentityText.date(next))
            if next <= now {
                state = "stale"
                warnings.append("the trust list is past its next update (\(IdentityText.date(next))): it may miss revocations; sign a new checkpoint (`shoal trust checkpoint --admin-key FILE`)")
            } else if next - now <= horizon {
                state = "expiring"
                warnings.append("the trust list's checkpoint runs out on \(IdentityText.date(next)); sign a new one before (`shoal trust checkpoint --admin-key FILE`)")
            }
        }
        brief["state"] = .string(state)
        return (warnings, .object(brief))
    }

    /// A snapshot of the gateway. Reads the store on its read-only connection (never waiting for a
    /// write, however slow the disk): call it from a thread, not the cooperative pool.
    public func statusSnapshot(store: DocumentStore?) -> GatewayStatus {
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
            "evictions": Int64(mesh.counters.evictions), "refusedConnections": Int64(mesh.counters.refusedConnections),
        ]
        status.clockSkewPeers = c.skewedPeers.sorted()
        if let e = store?.expiryCounts.withLock({ $0 }) {
            status.expiration = ["expired": e.expired, "ttl": e.ttl, "budget": e.budget, "refused": e.refused]
        }
        if let store, let b = BlobRetention.figures(store, budget: site.blobBudgetBytes) { status.blobs = b }
        status.blobTransfer = Gateway.blobTransferFigures(c.blob)
        status.blobFetches = c.blobFetches
        status.storeRunning = report.snapshot.first { $0.path == GatewayRuntime.storeChildPath }.map { $0.state == .running } ?? true
        status.ledPattern = ledPattern.withLock { $0 }
        status.httpAddresses = httpAddresses
        status.mqtt = mqtt.json
        status.uplink = uplink.json
        status.sync = mesh.sync
        (status.warnings, status.trust) = trustStatus()
        status.transports = mesh.transports.keys.sorted().compactMap { transportStatus($0, in: mesh) }
        return status
    }

    /// A transport as the mesh sees it (active, last error, how it finds peers): what `shoal
    /// status` and `shoal radios` both show, so they cannot disagree. Nil before the mesh tried it.
    public func transportStatus(_ t: MeshTransport, in view: MeshView? = nil) -> GatewayStatus.Transport? {
        let mesh = view ?? meshView.withLock { $0 }
        guard let state = mesh.transports[t] else { return nil }
        return GatewayStatus.Transport(name: t.rawValue, active: state.active, error: state.error, discovery: mesh.discovery[t])
    }
}

extension Gateway {
    /// The blob transfer counters by the names `shoal status --json` shows under `blobTransfer`.
    static func blobTransferFigures(_ b: BlobCounters) -> [String: Int64] {
        ["bytesSent": b.bytesSent, "bytesReceived": b.bytesReceived, "chunksSent": Int64(b.chunksSent),
         "chunksVerified": Int64(b.chunksVerified), "badChunks": Int64(b.badChunks), "redundantPieces": Int64(b.redundantPieces),
         "completed": Int64(b.completed), "failed": Int64(b.failed), "manifestsReplaced": Int64(b.manifestsReplaced),
         "unprovenChunks": Int64(b.unprovenChunks)]
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
    /// The replicator's blob transfers (`ReplicationNode.blobCounters`) and the blobs it fetches now.
    public var blob = BlobCounters()
    public var blobFetches: [String] = []
    public init() {}
}

/// The store as the store service opened it, with the hybrid logical clock kept in it.
public struct OpenedStore: Sendable {
    public let store: DocumentStore
    public let clock: NodeClock
}

/// What the gateway's services hand to the siblings started after them (see `Provision`).
public struct Provided: Sendable {
    /// By the store service, while the store is open.
    public let store = Provision<OpenedStore>("the store")
    /// By the identity service, while the gateway has a usable identity: what TLS presents (a
    /// renewed certificate reaches running links through them).
    public let identity = Provision<TLSCredentials>("the identity")
    public init() {}
}
