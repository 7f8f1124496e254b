import ShoalCore

/// The site file's `uplink:` section: a NATS JetStream server (or cluster) this gateway syncs the
/// mesh's collections with, as a virtual peer. No servers, no uplink. Files it names are checked
/// by the runtime, which reads them (`fileProblems`, as for `mqtt:`).
public struct UplinkSettings: Sendable, Equatable {
    /// `nats://host[:4222]` or `tls://host[:4222]`, tried in order; a cluster's other members are
    /// learned from the server.
    public var servers: [String] = []
    /// Replicas of each stream the gateway creates (3 on an R3 cluster); existing streams are used as they are.
    public var replicas = 1
    /// The hub's JetStream domain, when the gateway reaches it through a leaf node at the site
    /// (the leaf's own JetStream, if any, is another domain); nil: the server's own.
    public var domain: String?
    public var username: String?
    /// The password is the file's first line, read at each connection.
    public var passwordFile: String?
    /// A NATS credentials file (user JWT and NKey seed).
    public var credentialsFile: String?
    /// NKey authentication: the user's public key (`U…`) and the file holding its seed.
    public var nkey: String?
    public var nkeySeedFile: String?
    /// Non-nil with `tls:` or a `tls://` server.
    public var tls: UplinkTLSSettings?
    public var reconnectMinMillis: Int64 = 500
    public var reconnectMaxMillis: Int64 = 30_000
    /// What syncs with the hub: every collection of the site file, both ways, unless listed here.
    public var collections: [UplinkCollection] = []
    /// The files named, with where, for `fileProblems(read:)` (MQTT's file kinds are reused).
    public var referencedFiles: [MQTTFileReference] = []

    public var enabled: Bool { !servers.isEmpty }
    public var useTLS: Bool { tls != nil || servers.contains { $0.hasPrefix("tls://") } }

    public static let defaultPort: UInt16 = 4222
    public static let replicasRange: ClosedRange<Int> = 1...5

    public init() {}

    /// The collection's uplink settings, nil when it does not sync with the hub.
    public func collection(_ name: CollectionName) -> UplinkCollection? {
        collections.first { $0.name == name }
    }

    /// Every problem with the files named, each at its line (see `MQTTSettings.fileProblems`).
    public func fileProblems(read: (String) throws -> String?) -> ConfigError? {
        MQTTSettings(brokers: []).withReferencedFiles(referencedFiles).fileProblems(read: read)
    }
}

/// TLS to the hub. Without `caFile` the server is checked against the system's CAs.
public struct UplinkTLSSettings: Sendable, Equatable {
    public var caFile: String?
    /// Present the gateway's own identity certificate and key (nats-server `verify_and_map` maps
    /// its subject to a user).
    public var identity = false
    public var certFile: String?
    public var keyFile: String?
    public init() {}
}

/// One collection's sync with the hub (`uplink.collections[i]`); filters as for the mesh, without
/// `peers` (the hub is no peer).
public struct UplinkCollection: Sendable, Equatable {
    public var name: CollectionName
    public var push = true
    public var pull = true
    public var pushFilter: FilterSpec?
    public var pullFilter: FilterSpec?
    public init(name: CollectionName) { self.name = name }
}

extension MQTTSettings {
    func withReferencedFiles(_ files: [MQTTFileReference]) -> MQTTSettings {
        var s = self
        s.referencedFiles = files
        return s
    }
}
