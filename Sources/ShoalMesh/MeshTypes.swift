import ShoalConfig
import ShoalCore

/// A radio a gateway can discover and connect peers over.
public enum MeshTransport: String, Sendable, CaseIterable, Comparable, Hashable {
    case wifi, bluetooth
    public static func < (a: MeshTransport, b: MeshTransport) -> Bool { a.rawValue > b.rawValue }  // wifi first
}

/// The mesh's states, with the ObjectBox seed's names. Created: configured, not started.
/// Discovering: running and looking for peers it could still connect to. FullyConnected: running,
/// with every connection slot used or every peer it can hear already reachable through its links.
/// Stopped: stopped on request. Dead: stopped by an error it cannot recover from.
public enum MeshState: String, Sendable {
    case created = "Created", discovering = "Discovering", fullyConnected = "FullyConnected", stopped = "Stopped", dead = "Dead"
}

/// What a peer's replicator is doing, with the Couchbase seed's activity names.
public enum PeerActivity: String, Sendable {
    case stopped, offline, connecting, idle, busy
}

/// A connection as the driver names it (the same number as the replicator's LinkID).
public typealias ConnectionID = Int

/// The mesh options the manager uses, in milliseconds (the ObjectBox seed's names and defaults;
/// made from `MeshOptions`, the config's form).
public struct MeshSettings: Sendable, Equatable {
    public var maxConnectionCount = 3
    public var backoffMillis: UInt64 = 10_000
    public var evictionBackoffMillis: UInt64 = 30_000
    public var randomSeed: UInt64 = 0
    public var advertisingDelayMillis: UInt64 = 2_000
    public var advertisingRetryMillis: UInt64 = 5_000
    public var advertisingRetryMaxMillis: UInt64 = 60_000
    public var connectDelayMillis: UInt64 = 1_000
    /// 0: the first discovery phase does not stop by time.
    public var initialDiscoveryMillis: UInt64 = 30_000
    /// 0: later discovery phases do not stop by time.
    public var discoveryMillis: UInt64 = 15_000
    public var discoveryPauseMillis: UInt64 = 45_000
    public var discoveryPauseJitterMillis: UInt64 = 15_000
    /// The transports this gateway uses (the Couchbase seed's default: Wi-Fi only).
    public var transports: Set<MeshTransport> = [.wifi]
    /// Transport switching (both transports on): after this many Wi-Fi failures in a row with a
    /// peer (dials that fail, links that close before replicating), use Bluetooth LE for it.
    public var wifiAttemptsBeforeFallback = 3
    /// After falling back, Wi-Fi is tried again for that peer this long after its last failure
    /// (at once if the peer is heard anew on Wi-Fi).
    public var wifiRetryAfterFallbackMillis: UInt64 = 60_000
    /// Over Bluetooth LE the lower peer id dials: the higher one waits this long after it hears
    /// the peer, or loses its BLE link to it, before dialling it itself (for when the lower one
    /// cannot hear it or has no room). Two LE controllers dialling each other at once have each
    /// stopped advertising to initiate, so neither can be reached.
    public var bluetoothYieldMillis: UInt64 = 6_000
    /// Gossip about other nodes' links is forwarded on each link at most once per this interval,
    /// newest entry per origin only: while a large mesh forms, an origin's burst of changes
    /// crosses each link once, not once per change. Our own links are announced at once.
    public var gossipIntervalMillis: UInt64 = 100
    /// At most this many entries per link per interval, so that telling a new neighbour the whole
    /// graph (hundreds of entries in a large mesh) never queues in front of data: on Wi-Fi (64:
    /// about 100 kB/s, 4 % of a 2.5 MB/s link) and on Bluetooth LE (2: about 3 kB/s, 8 % of
    /// 40 kB/s).
    public var gossipPerIntervalWifi = 64
    public var gossipPerIntervalBluetooth = 2

    public init() {}

    public init(_ o: MeshOptions, transports: Set<MeshTransport> = [.wifi]) {
        maxConnectionCount = Int(o.maxConnectionCount)
        backoffMillis = UInt64(o.backoffMillis)
        evictionBackoffMillis = UInt64(o.evictionBackoffMillis)
        randomSeed = UInt64(bitPattern: o.randomSeed)
        advertisingDelayMillis = UInt64(o.advertisingDelayMillis)
        advertisingRetryMillis = UInt64(o.advertisingRetryMillis)
        advertisingRetryMaxMillis = UInt64(o.advertisingRetryMaxMillis)
        connectDelayMillis = UInt64(o.connectDelayMillis)
        initialDiscoveryMillis = UInt64(o.initialDiscoveryDurationSeconds) * 1000
        discoveryMillis = UInt64(o.discoveryDurationSeconds) * 1000
        discoveryPauseMillis = UInt64(o.discoveryPauseSeconds) * 1000
        discoveryPauseJitterMillis = UInt64(o.discoveryPauseJitterSeconds) * 1000
        self.transports = transports
    }
}

/// What the driver tells the manager.
public enum MeshInput: Sendable {
    case start
    case stop
    /// Time passed (the driver calls this at `nextWake`, or whenever it likes).
    case tick
    /// `retryNetworks()`: start advertising and a discovery phase now, forgetting backoffs.
    case retryNetworks
    case transport(MeshTransport, up: Bool)
    case advertisingStarted(MeshTransport)
    case advertisingFailed(MeshTransport, reason: String)
    /// A peer of our group was heard; `load` is its connection count if it advertises one.
    case discovered(PeerID, MeshTransport, load: Int?)
    case lost(PeerID, MeshTransport)
    /// An authenticated peer connected to us. The manager may refuse it (a `.close` action).
    case incoming(ConnectionID, PeerID, MeshTransport)
    /// A connection we asked for is up (authenticated).
    case outgoingOpened(ConnectionID, PeerID, MeshTransport)
    case outgoingFailed(PeerID, MeshTransport, reason: String)
    /// The peer answered over `t` (it is heard) and its authenticator refused us: a failed
    /// attempt, with `backoffMillis` before the next. One input, so hearing it does not dial it
    /// at once.
    case refused(PeerID, MeshTransport, reason: String)
    case closed(ConnectionID)
    /// Gossip from a connection (see `ReplicationMessage.topology`).
    case topology(from: ConnectionID, origin: PeerID, sequence: UInt64, neighbours: [PeerID])
    /// Several entries of gossip from one connection, in order (one frame's): one re-plan for all.
    case topologies(from: ConnectionID, [(origin: PeerID, sequence: UInt64, neighbours: [PeerID])])
    /// Replication on a connection started or stopped moving documents.
    case activity(ConnectionID, busy: Bool)
    /// Replication runs on this connection (both HELLOs done): a Bluetooth LE link to the same
    /// peer that this Wi-Fi link replaces is closed now.
    case replicating(ConnectionID)
    /// Something the mesh cannot run without failed for good (the store, every radio).
    case fatal(String)
}

/// What the manager asks the driver to do.
public enum MeshAction: Sendable, Equatable {
    case startAdvertising(MeshTransport)
    case stopAdvertising(MeshTransport)
    case startScanning(MeshTransport)
    case stopScanning(MeshTransport)
    case connect(PeerID, MeshTransport)
    case close(ConnectionID, reason: String)
    case sendTopology(ConnectionID, origin: PeerID, sequence: UInt64, neighbours: [PeerID])
    case event(MeshEvent)
}

/// The Couchbase seed's listeners, as events.
public enum MeshEvent: Sendable, Equatable {
    case state(MeshState)
    /// Replicator status per transport: active (advertising or scanning works) or in error.
    case transportStatus(MeshTransport, active: Bool, error: String?)
    case peerDiscovery(PeerID, MeshTransport, online: Bool)
    case peerReplicator(PeerID, MeshTransport, outgoing: Bool, activity: PeerActivity, error: String?)
}

/// One peer as the mesh knows it (the Couchbase seed's PeerInfo, less the certificate, which the
/// runtime adds from the TLS session).
public struct PeerInfo: Sendable, Equatable {
    public var peer: PeerID
    public var online: Bool
    public var discoveredOn: [MeshTransport]
    /// The transport of the connection in use, if any.
    public var connectedOn: MeshTransport?
    public var outgoing: Bool?
    /// The peer's own links, from gossip.
    public var neighbours: [PeerID]
    public var activity: PeerActivity
    /// Why the last attempt to link to it failed (a refusal says what the peer refused), until a
    /// link to it opens.
    public var lastError: String? = nil
}

/// The ObjectBox seed's mesh counters the manager keeps (replication keeps the others).
public struct MeshCounters: Sendable, Equatable {
    public var discoveredPeers = 0
    public var connectedPeers = 0
    public var failedConnectionAttempts = 0
    public var evictions = 0
    public var refusedConnections = 0
    public init() {}
}
