import ShoalConfig
import ShoalCore
import ShoalMedium
import ShoalMesh
import ShoalReplication
import ShoalRuntime

/// A radio peers discover each other and replicate over.
public enum MultipeerTransport: String, Sendable, Hashable, CaseIterable, Comparable {
    case wifi, bluetooth
    public static func < (a: MultipeerTransport, b: MultipeerTransport) -> Bool { a.rawValue > b.rawValue }  // Wi-Fi first
    init(_ t: MeshTransport) { self = t == .wifi ? .wifi : .bluetooth }
    var mesh: MeshTransport { self == .wifi ? .wifi : .bluetooth }
}

/// Whether a replicated document is a delete (the seed's document flags).
public struct DocumentFlags: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let deleted = DocumentFlags(rawValue: 1)
    public var description: String { contains(.deleted) ? "deleted" : "none" }
}

/// Two concurrent versions of one document, met during replication.
public struct Conflict: Sendable {
    public let documentID: String
    /// This gateway's version (nil: deleted here).
    public let localDocument: Document?
    /// The peer's version (nil: deleted there).
    public let remoteDocument: Document?
    /// Both versions with their version vectors (for the built-in resolvers).
    let core: (ReplicatedDocument, ReplicatedDocument)
}

/// What a resolver decides. Whatever it is gets a version that dominates both sides, so it
/// replicates; gateways that decided differently converge by a deterministic tie-break.
public enum ConflictResolution: Sendable, Equatable {
    case keepLocal
    case takeRemote
    /// A new body (a JSON object) made from both.
    case merged(json: String)
    case delete
}

/// Resolves conflicts for a collection (the seed's `MultipeerConflictResolver`, answering with a
/// decision rather than a document, so "delete" and "keep mine" need no document).
public protocol MultipeerConflictResolver: Sendable {
    func resolve(peerID: PeerID, conflict: Conflict) -> ConflictResolution
}

/// A resolver from a closure.
public struct ClosureConflictResolver: MultipeerConflictResolver {
    let body: @Sendable (PeerID, Conflict) -> ConflictResolution
    public init(_ body: @escaping @Sendable (_ peerID: PeerID, _ conflict: Conflict) -> ConflictResolution) { self.body = body }
    public func resolve(peerID: PeerID, conflict: Conflict) -> ConflictResolution { body(peerID, conflict) }
}

/// The stock binary's resolvers (the site file's `resolver:`), for code too.
public enum BuiltInConflictResolver: MultipeerConflictResolver, Equatable {
    /// The newest write wins (hybrid logical clock, then peer id); a delete is a write like any other.
    case lastWriteWins
    /// A delete on either side wins; otherwise the newest write.
    case deleteWins
    case localWins
    case remoteWins
    /// Top-level fields of both, the newer side's value where both have a field.
    case mergeFields
    /// The side whose `field` is larger (numbers); the newest write if neither has one.
    case max(field: String)
    case min(field: String)

    var spec: ResolverSpec {
        switch self {
        case .lastWriteWins: .lastWriteWins
        case .deleteWins: .deleteWins
        case .localWins: .localWins
        case .remoteWins: .remoteWins
        case .mergeFields: .mergeFields
        case .max(let f): .maxField(f)
        case .min(let f): .minField(f)
        }
    }

    public func resolve(peerID: PeerID, conflict: Conflict) -> ConflictResolution {
        // Replication uses the core resolver directly; this answers a custom resolver that
        // delegates to a built-in one.
        ConflictResolvers.resolution(CollectionPolicies.resolver(spec).resolve(peerID.raw, conflict.core.0, conflict.core.1))
    }
}

/// Which documents go to a peer or come from one: (peer, document, flags) → replicate or not.
public typealias ReplicationFilter = @Sendable (_ peerID: PeerID, _ document: Document, _ flags: DocumentFlags) -> Bool

/// One collection to replicate, and how (the seed's `MultipeerCollectionConfiguration`).
public struct MultipeerCollectionConfiguration: Sendable {
    /// `scope.collection` (or `collection` in the default scope).
    public var collection: String
    /// nil: last write wins.
    public var conflictResolver: (any MultipeerConflictResolver)?
    /// Only these documents replicate (nil: all).
    public var documentIDs: [String]?
    /// Documents sent to a peer only where this holds.
    public var pushFilter: ReplicationFilter?
    /// Documents taken from a peer only where this holds (a refused one is reported with an error
    /// in the document replication events).
    public var pullFilter: ReplicationFilter?
    /// Send this collection's changes (false: receive only).
    public var push = true
    /// Take peers' changes (false: send only).
    public var pull = true

    public init(collection: String) { self.collection = collection }
    public init(collection: Collection) { self.collection = collection.fullName }
}

/// The mesh options, with the ObjectBox seed's names and defaults.
public struct MeshOptions: Sendable, Equatable {
    public var maxConnectionCount = 3
    public var backoffMillis = 10_000
    public var evictionBackoffMillis = 30_000
    /// 0 seeds from the clock; any other value makes jitter and tie-breaks reproducible.
    public var randomSeed: UInt64 = 0
    public var advertisingDelayMillis = 2_000
    public var advertisingRetryMillis = 5_000
    public var advertisingRetryMaxMillis = 60_000
    public var connectDelayMillis = 1_000
    public var initialDiscoveryDurationSeconds = 30
    /// 0: no time limit.
    public var discoveryDurationSeconds = 15
    public var discoveryPauseSeconds = 45
    public var discoveryPauseJitterSeconds = 15
    public var requestTimeoutMillis = 5_000
    public var txLogBatchSizeKb = 100
    public var txLogBatchMaxCount = 1000
    /// Transport switching (both transports on): Wi-Fi failures in a row with a peer before its
    /// link moves to Bluetooth LE (Shoal's; the Couchbase seed says "a small number").
    public var wifiAttemptsBeforeFallback = 3
    /// How long after the last Wi-Fi failure Wi-Fi is tried again for a peer that fell back.
    public var wifiRetryAfterFallbackMillis = 60_000
    public init() {}

    func settings(_ transports: Set<MultipeerTransport>) -> MeshSettings {
        var m = MeshSettings()
        m.maxConnectionCount = maxConnectionCount
        m.backoffMillis = UInt64(max(0, backoffMillis))
        m.evictionBackoffMillis = UInt64(max(0, evictionBackoffMillis))
        m.randomSeed = randomSeed
        m.advertisingDelayMillis = UInt64(max(0, advertisingDelayMillis))
        m.advertisingRetryMillis = UInt64(max(0, advertisingRetryMillis))
        m.advertisingRetryMaxMillis = UInt64(max(0, advertisingRetryMaxMillis))
        m.connectDelayMillis = UInt64(max(0, connectDelayMillis))
        m.initialDiscoveryMillis = UInt64(max(0, initialDiscoveryDurationSeconds)) * 1000
        m.discoveryMillis = UInt64(max(0, discoveryDurationSeconds)) * 1000
        m.discoveryPauseMillis = UInt64(max(0, discoveryPauseSeconds)) * 1000
        m.discoveryPauseJitterMillis = UInt64(max(0, discoveryPauseJitterSeconds)) * 1000
        m.transports = Set(transports.map(\.mesh))
        m.wifiAttemptsBeforeFallback = max(1, wifiAttemptsBeforeFallback)
        m.wifiRetryAfterFallbackMillis = UInt64(max(0, wifiRetryAfterFallbackMillis))
        return m
    }

    func check() throws(ShoalError) {
        guard (1...64).contains(maxConnectionCount) else { throw ShoalError("mesh.maxConnectionCount must be 1–64, not \(maxConnectionCount)") }
        guard txLogBatchSizeKb >= 1, txLogBatchMaxCount >= 1 else { throw ShoalError("mesh.txLogBatchSizeKb and txLogBatchMaxCount must be at least 1") }
        guard requestTimeoutMillis >= 100 else { throw ShoalError("mesh.requestTimeoutMillis must be at least 100") }
    }
}

/// Where a replicator finds peers and links to them.
public enum Medium: Sendable {
    /// The network: TCP + TLS, DNS-SD through avahi-daemon on the Wi-Fi interface, and static peers.
    case network(NetworkOptions)
    /// An in-process medium shared by replicators in this process (tests, demos, firmware
    /// development without radios).
    case simulated(SimulatedMedium)
}

/// The network medium's settings.
public struct NetworkOptions: Sendable {
    /// Where to accept links, `host:port` or `[v6]:port`. nil with DNS-SD on: every address, a port
    /// the kernel picks (DNS-SD carries it).
    public var listen: String?
    /// Gateways reachable at fixed addresses (wired), probed during discovery phases: `address:port`,
    /// `[v6]:port`, or `host:port` with a host name resolved at each dial (`.local` through avahi-daemon).
    public var staticPeers: [String] = []
    /// Publish and browse with DNS-SD (avahi-daemon must run).
    public var dnssd = true
    /// The Wi-Fi interface whose state is watched (nil: not watched).
    public var wifiInterface: String?
    /// The Bluetooth adapter (`hci0`) for the `.bluetooth` transport: raw-HCI advertising and
    /// scanning, L2CAP LE channels (needs CAP_NET_ADMIN and CAP_NET_RAW, or root).
    public var bluetoothAdapter: String?
    public init(listen: String? = nil, staticPeers: [String] = [], dnssd: Bool = true, wifiInterface: String? = nil, bluetoothAdapter: String? = nil) {
        self.listen = listen
        self.staticPeers = staticPeers
        self.dnssd = dnssd
        self.wifiInterface = wifiInterface
        self.bluetoothAdapter = bluetoothAdapter
    }
}

/// An in-process radio medium, in real time. Replicators started on the same medium hear each
/// other on the transports they advertise and connect through memory pipes carrying the same TLS
/// sessions and frames as TCP. Pairs can be cut (a partition) and a transport taken away from one
/// replicator (a radio going down).
public final class SimulatedMedium: Sendable {
    let raw = LocalMedium()
    public init() {}

    /// Cuts (false) or restores (true) the radio between two peers; their links close when cut.
    public func setReachable(_ a: PeerID, _ b: PeerID, _ reachable: Bool) { raw.setReachable(a.raw, b.raw, reachable) }

    /// Takes `transport` away from `peer` (false) or gives it back (true).
    public func setTransport(_ transport: MultipeerTransport, up: Bool, for peer: PeerID) { raw.setTransport(peer.raw, transport.mesh, up: up) }

    /// Makes connections to and from `peer` over `transport` fail while it is still heard there
    /// (discovery works, connections do not), or work again.
    public func setConnectionsFail(_ transport: MultipeerTransport, _ failing: Bool, for peer: PeerID) { raw.setDialsFail(peer.raw, transport.mesh, failing) }
}

/// Everything a replicator needs (the seed's `MultipeerReplicatorConfiguration`).
public struct MultipeerReplicatorConfiguration: Sendable {
    /// Peers replicate only within a group; on the network it also names the DNS-SD service type.
    public var peerGroupID: String
    public var identity: TLSIdentity
    public var authenticator: MultipeerCertificateAuthenticator
    public var collections: [MultipeerCollectionConfiguration]
    /// The store the collections live in (opened with the same identity).
    public var database: Database
    /// The seed's default: Wi-Fi only.
    public var transports: Set<MultipeerTransport> = [.wifi]
    public var mesh = MeshOptions()
    public var medium: Medium = .network(NetworkOptions())
    /// Log lines (the runtime's format) go here; nil: none.
    public var log: (@Sendable (String) -> Void)?

    public init(peerGroupID: String, identity: TLSIdentity, authenticator: MultipeerCertificateAuthenticator,
                collections: [MultipeerCollectionConfiguration], database: Database) {
        self.peerGroupID = peerGroupID
        self.identity = identity
        self.authenticator = authenticator
        self.collections = collections
        self.database = database
    }
}
