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
    /// The default: field by field, each top-level field's newest write (see README "Conflicts").
    case fieldMerge
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
        case .fieldMerge: .fieldMerge
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
    /// Expiration while the replicator runs (local purges, no tombstones; README "Expiration"):
    /// documents go this many seconds after their last write's HLC time, and one that arrives
    /// already past it is refused. nil: none.
    public var ttlSeconds: Int?
    /// Past this many live documents (or bytes of bodies), the oldest writes are purged here. nil: none.
    public var maxDocuments: Int?
    public var maxBytes: Int?

    public init(collection: String) { self.collection = collection }
    public init(collection: Collection) { self.collection = collection.fullName }
}

/// The mesh options, with the ObjectBox seed's names, defaults and allowed ranges: the same as a
/// board or site file's `mesh:` (a replicator refuses a value a file would refuse, in the same words).
public struct MeshOptions: Sendable, Equatable {
    /// Links kept at once, 1...16.
    public var maxConnectionCount = 3
    public var backoffMillis = 10_000
    public var evictionBackoffMillis = 30_000
    /// 0 seeds from the clock; any other value makes jitter and tie-breaks reproducible.
    public var randomSeed: UInt64 = 0
    public var advertisingDelayMillis = 2_000
    public var advertisingRetryMillis = 5_000
    /// At least `advertisingRetryMillis`.
    public var advertisingRetryMaxMillis = 60_000
    public var connectDelayMillis = 1_000
    public var initialDiscoveryDurationSeconds = 30
    /// 0: no time limit.
    public var discoveryDurationSeconds = 15
    public var discoveryPauseSeconds = 45
    /// At most `discoveryPauseSeconds` (a pause cannot be negative).
    public var discoveryPauseJitterSeconds = 15
    public var requestTimeoutMillis = 5_000
    public var txLogBatchSizeKb = 100
    public var txLogBatchMaxCount = 1000
    /// How long a delete's tombstone is kept, 60 s to a year: every hour a running replicator
    /// purges older ones, as a gateway does, and from then on refuses documents peers offer whose
    /// newest write is older than that (the purge horizon), so a peer away longer cannot bring a
    /// purged delete back. A peer away longer than this may keep documents deleted here.
    public var txLogMaxAgeSeconds = 28_800
    /// Transport switching (both transports on): Wi-Fi failures in a row with a peer before its
    /// link moves to Bluetooth LE (Shoal's; the Couchbase seed says "a small number"), 1...100.
    public var wifiAttemptsBeforeFallback = 3
    /// How long after the last Wi-Fi failure Wi-Fi is tried again for a peer that fell back.
    public var wifiRetryAfterFallbackMillis = 60_000
    public init() {}

    /// These options in the files' form (what the runtime validates and reads).
    var file: ShoalConfig.MeshOptions {
        var o = ShoalConfig.MeshOptions()
        o.maxConnectionCount = Int64(clamping: maxConnectionCount)
        o.backoffMillis = Int64(clamping: backoffMillis)
        o.evictionBackoffMillis = Int64(clamping: evictionBackoffMillis)
        o.randomSeed = Int64(bitPattern: randomSeed)
        o.requestTimeoutMillis = Int64(clamping: requestTimeoutMillis)
        o.advertisingDelayMillis = Int64(clamping: advertisingDelayMillis)
        o.advertisingRetryMillis = Int64(clamping: advertisingRetryMillis)
        o.advertisingRetryMaxMillis = Int64(clamping: advertisingRetryMaxMillis)
        o.connectDelayMillis = Int64(clamping: connectDelayMillis)
        o.initialDiscoveryDurationSeconds = Int64(clamping: initialDiscoveryDurationSeconds)
        o.discoveryDurationSeconds = Int64(clamping: discoveryDurationSeconds)
        o.discoveryPauseSeconds = Int64(clamping: discoveryPauseSeconds)
        o.discoveryPauseJitterSeconds = Int64(clamping: discoveryPauseJitterSeconds)
        o.txLogBatchSizeKb = Int64(clamping: txLogBatchSizeKb)
        o.txLogBatchMaxCount = Int64(clamping: txLogBatchMaxCount)
        o.txLogMaxAgeSeconds = Int64(clamping: txLogMaxAgeSeconds)
        return o
    }

    /// Valid options only (`check` first).
    func settings(_ transports: Set<MultipeerTransport>) -> MeshSettings {
        var m = MeshSettings(file, transports: Set(transports.map(\.mesh)))
        m.wifiAttemptsBeforeFallback = wifiAttemptsBeforeFallback
        m.wifiRetryAfterFallbackMillis = UInt64(wifiRetryAfterFallbackMillis)
        return m
    }

    /// The files' checks (one validation for both), then the two options files do not have.
    func check() throws(ShoalError) {
        if let (key, message) = file.problem() { throw ShoalError("mesh.\(key): \(message)") }
        let own: [(String, Int, ClosedRange<Int64>)] = [
            ("wifiAttemptsBeforeFallback", wifiAttemptsBeforeFallback, 1...100),
            ("wifiRetryAfterFallbackMillis", wifiRetryAfterFallbackMillis, 0...86_400_000),
        ]
        for (key, value, range) in own where !range.contains(Int64(clamping: value)) {
            throw ShoalError("mesh.\(key): \(ConfigReader.outOfRange(Int64(clamping: value), range))")
        }
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
    /// Log lines (the runtime's format: `level domain: message`) go here; nil: none.
    public var log: (@Sendable (String) -> Void)?
    /// Which lines reach `log`: a level and the domains it applies to (default: info, all).
    public var logOptions = LogOptions()

    public init(peerGroupID: String, identity: TLSIdentity, authenticator: MultipeerCertificateAuthenticator,
                collections: [MultipeerCollectionConfiguration], database: Database) {
        self.peerGroupID = peerGroupID
        self.identity = identity
        self.authenticator = authenticator
        self.collections = collections
        self.database = database
    }
}
