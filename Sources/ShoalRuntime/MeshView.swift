import ShoalCore
import ShoalMesh
import ShoalTLS
import Synchronization
import ShoalThreads

/// What the mesh looks like from this gateway, published by the replication driver's node thread
/// for the control socket (`shoal peers`, `shoal peer`, `shoal mesh`, `shoal events`, `shoal status`).
public struct MeshView: Sendable {
    public struct Peer: Sendable {
        public var info: PeerInfo
        /// host:port we dial it at, when we know one.
        public var address: String?
        /// From its TLS certificate, while linked.
        public var certificateSubject: String?
        public var certificateNotAfter: Int64?
        /// The certificate itself, while linked.
        public var certificate: Certificate?
        /// The sync we pull from it now, while one runs (its links together).
        public var sync: SyncProgress?
        /// When a replication frame last went to or came from it (`monotonicMillis()`), nil if
        /// none did since this gateway started. Kept while the mesh knows the peer, linked or not.
        public var lastActivityMillis: Int? = nil
    }

    public var state = MeshState.created
    public var counters = MeshCounters()
    public var peers: [Peer] = []
    /// Links as gossip tells (each once), ours included.
    public var links: [(PeerID, PeerID)] = []
    public var me: PeerID?
    /// Links on the spanning tree live changes travel along (ours only).
    public var treeNeighbours: [PeerID] = []
    /// Per transport: active (advertising works) and the last error.
    public var transports: [MeshTransport: (active: Bool, error: String?)] = [:]
    /// Per transport, how discovery works now (DNS-SD service, name, port, the daemon's version).
    public var discovery: [MeshTransport: String] = [:]
    /// Every sync pulled now, together (nil: none runs).
    public var sync: SyncProgress?

    public init() {}

    /// Graphviz text: this gateway, its peers, and the links gossip reports; ours bold, tree links
    /// solid, other links dashed.
    public func dot() -> String {
        var out = "graph shoal_mesh {\n  node [shape=box, fontname=\"monospace\"];\n"
        var names = Set<PeerID>()
        for (a, b) in links { names.insert(a); names.insert(b) }
        for p in peers { names.insert(p.info.peer) }
        if let me { names.insert(me) }
        for p in names.sorted() {
            let label = p == me ? "\(p.short)\\n(this gateway)" : p.short
            out += "  \"\(p.short)\" [label=\"\(label)\"\(p == me ? ", style=bold" : "")];\n"
        }
        for (a, b) in links {
            let ours = a == me || b == me
            let tree = ours && (treeNeighbours.contains(a) || treeNeighbours.contains(b))
            out += "  \"\(a.short)\" -- \"\(b.short)\"\(ours ? (tree ? " [penwidth=2]" : " [style=dashed]") : "");\n"
        }
        return out + "}\n"
    }
}

/// The last events the mesh reported (the Couchbase seed's listeners), numbered so `shoal events
/// --follow` can ask for what came after the last one it saw. Bounded.
public final class MeshEventLog: Sendable {
    public struct Entry: Sendable {
        public let sequence: Int64
        public let atMillis: Int64
        public let event: JSONValue
    }
    private let entries = Locked<(next: Int64, items: [Entry])>((1, []))
    public static let capacity = 1000

    public init() {}

    public func append(_ event: JSONValue, atMillis: Int64) {
        entries.withLock { e in
            e.items.append(Entry(sequence: e.next, atMillis: atMillis, event: event))
            e.next += 1
            if e.items.count > MeshEventLog.capacity { e.items.removeFirst(e.items.count - MeshEventLog.capacity) }
        }
    }

    public func after(_ sequence: Int64, limit: Int = 500) -> (entries: [Entry], last: Int64) {
        entries.withLock { e in (Array(e.items.filter { $0.sequence > sequence }.prefix(limit)), e.next - 1) }
    }

    /// An event as JSON, with peer ids in full.
    public static func json(_ e: MeshEvent) -> JSONValue {
        switch e {
        case .state(let s):
            return ["type": "state", "state": .string(s.rawValue)]
        case .transportStatus(let t, let active, let error):
            return ["type": "transport", "transport": .string(t.rawValue), "active": .bool(active), "error": error.map(JSONValue.string) ?? .null]
        case .peerDiscovery(let p, let t, let online):
            return ["type": "peerDiscovery", "peer": .string(p.description), "transport": .string(t.rawValue), "online": .bool(online)]
        case .peerReplicator(let p, let t, let outgoing, let activity, let error):
            return ["type": "peerReplicator", "peer": .string(p.description), "transport": .string(t.rawValue),
                    "direction": .string(outgoing ? "outgoing" : "incoming"), "activity": .string(activity.rawValue), "error": error.map(JSONValue.string) ?? .null]
        }
    }
}
