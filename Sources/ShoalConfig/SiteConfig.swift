import ShoalCore

/// The site file (/etc/shoal/shoal.yaml, or --config): what one deployment shares across its
/// gateways — the group id, the identity label, the collections and how they sync — and overrides
/// of the board's mesh and log settings.
public struct SiteConfig: Sendable, Equatable {
    /// Couchbase's peerGroupID / ObjectBox's meshId: only gateways of one group see each other.
    public var group: String
    public var identityLabel: String
    public var collections: [CollectionSettings]
    /// Who may join: a file of trusted root certificates (PEM) and/or peer ids (64 hex digits,
    /// the SHA-256 of a peer's certificate). A peer passes if its chain verifies to a root or its
    /// id is listed. With neither, only this gateway's own CA (if CA-signed) is trusted.
    public var rootCertificatesPath: String?
    /// Where the site file names it, for errors about the file it names.
    public var rootCertificatesMark: SourceMark?
    public var allowedPeers: [String] = []
    /// The fleet's trust (`trust:`): admin public keys that may sign `_trust` entries (hex as
    /// `shoal trust keygen` prints it, or a PEM file's path), CRL files checked at every handshake,
    /// and how many days before an expiry (identity, trust checkpoint) the gateway warns.
    public var trust = TrustSettings()
    /// Updates of Shoal itself over the mesh (`updates:`): the release keys that may sign
    /// `_releases` manifests, where releases are installed, how long a new binary has to confirm.
    public var updates = UpdateSettings()
    /// Where this gateway accepts replication links (IPv4 `address:port`), nil for nowhere.
    public var listenAddress: HostPort?
    /// Peers this gateway dials itself (wired gateways on Ethernet, before discovery exists); a host
    /// name is resolved at each dial (`.local` through avahi-daemon where the system cannot).
    public var staticPeers: [HostPort] = []
    /// The radios this site syncs over (the Couchbase seed's `transports`; default Wi-Fi only).
    /// Wi-Fi means TCP to static peers and, where the board names a Wi-Fi interface, DNS-SD
    /// discovery through avahi-daemon.
    public var transports: [SiteTransport] = [.wifi]
    /// The local HTTP API (`http:`).
    public var http = HTTPSettings()
    /// The MQTT bridge (`mqtt:`); no brokers, no bridge.
    public var mqtt = MQTTSettings()
    /// The NATS JetStream uplink (`uplink:`); no servers, no uplink.
    public var uplink = UplinkSettings()
    /// Blob storage (`storage:`): the bytes of blob chunks the gateway may hold (`blobBudget`; nil:
    /// no budget, only garbage is collected) and the largest blob it accepts (`maxBlobSize`).
    public var blobBudgetBytes: Int64?
    public var maxBlobBytes: Int64?
    /// Days of validity for an identity the gateway creates for itself.
    public var identityValidDays: Int64 = 365
    /// The site's `mesh:` and `log:` mappings, applied over the board's.
    public var meshNode: ConfigNode?
    public var logNode: ConfigNode?
    public var source: String

    public struct TrustSettings: Sendable, Equatable {
        public struct Item: Sendable, Equatable {
            public var text: String
            public var mark: SourceMark
            public var key: String
        }
        public var adminKeys: [Item] = []
        public var crlFiles: [Item] = []
        public var warnDays: Int64 = 14
        public init() {}
    }

    public struct UpdateSettings: Sendable, Equatable {
        /// Release public keys: hex as `shoal release keygen` prints it, or a PEM file's path.
        public var releaseKeys: [TrustSettings.Item] = []
        /// Where releases are installed (`releases/<version>/shoal`, the `current` and `previous`
        /// links, the state file). The unit's ExecStart runs `<installDir>/current/shoal`.
        public var installDir = "/var/lib/shoal/updates"
        /// How long a new binary has, from its start, to reach READY and pass its health check.
        public var confirmSeconds: Int64 = 120
        /// After an install or a rollback, the next install waits this long (the unit's
        /// StartLimitIntervalSec: systemd stops starting a unit that starts too often).
        public var holdOffSeconds: Int64 = 300
        /// Whether this gateway installs releases (it relays manifests and writes its status anyway).
        public var enabled = false
        public init() {}
    }

    public struct CollectionSettings: Sendable, Equatable {
        public var name: CollectionName
        public var push = true
        public var pull = true
        /// A built-in conflict resolver; custom ones are Swift code (the library product).
        public var resolver = ResolverSpec.fieldMerge
        /// Only these documents replicate (nil: all).
        public var documentIDs: [String]?
        public var pushFilter: FilterSpec?
        public var pullFilter: FilterSpec?
        /// Expiration (local purges, no tombstones): documents go `ttlSeconds` after their last
        /// write (its HLC time, alike on every gateway); past `maxDocuments` / `maxBytes` of
        /// bodies the oldest writes go first. Nil: no limit.
        public var ttlSeconds: Int64?
        public var maxDocuments: Int64?
        public var maxBytes: Int64?
        /// Expression indexes to keep (`indexes: [site, [site, pressure]]`): each a list of fields.
        public var indexes: [[String]] = []
        /// When the blobs its documents refer to are fetched (`blobs: eager | onDemand`).
        public var blobs = BlobFetch.eager
        public init(name: CollectionName) { self.name = name }
    }

    /// The site used when no file is given: a demo group with the default collection and one more.
    public static let embeddedDefault = """
        # Shoal's built-in site settings, used when neither --config nor /etc/shoal/shoal.yaml exists.
        group: shoal.demo
        identity:
          label: shoal
        # No authenticator: a demo gateway trusts no other peer until you add
        # rootCertificates or allowedPeers.
        collections:
          - name: _default._default
          - name: sensors.readings
        """
}

/// When a collection's blobs come to a gateway: `eager`, as soon as a document refers to them (and
/// the budget never drops them), or `onDemand`, when a reader asks (and the budget may drop them,
/// least recently used first: they can be fetched again).
public enum BlobFetch: String, Sendable, Equatable, CaseIterable {
    case eager
    case onDemand
}

/// A numeric address and a TCP port, as written in the site file: `192.168.1.20:4984`, or IPv6 in
/// brackets (`[::]:4984`, `[fe80::1%wlan0]:4984`).
public struct HostPort: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16
    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    public init?(parsing text: String) {
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":"),
                  let port = UInt16(text[text.index(close, offsetBy: 2)...]) else { return nil }
            let host = String(text[text.index(after: text.startIndex)..<close])
            let address = host.prefix { $0 != "%" }
            guard address.contains(":"), address.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else { return nil }
            self.init(host: host, port: port)
            return
        }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let port = UInt16(parts[1]) else { return nil }
        let octets = parts[0].split(separator: ".", omittingEmptySubsequences: false)
        if octets.count == 4, octets.allSatisfy({ UInt8($0) != nil }) {
            self.init(host: String(parts[0]), port: port)
            return
        }
        guard HostPort.isHostName(parts[0]) else { return nil }
        self.init(host: String(parts[0]), port: port)
    }

    /// A DNS host name (`gw2.local`, `localhost`): labels of letters, digits and '-', not starting or
    /// ending with '-', at most 63 bytes each and 253 in all; not all digits and dots (that is a
    /// malformed address, not a name).
    static func isHostName(_ text: Substring) -> Bool {
        guard !text.isEmpty, text.utf8.count <= 253 else { return false }
        let labels = text.split(separator: ".", omittingEmptySubsequences: false)
        for label in labels {
            guard !label.isEmpty, label.utf8.count <= 63, label.first != "-", label.last != "-",
                  label.utf8.allSatisfy({ $0 < 0x80 && (Character(Unicode.Scalar($0)).isLetter || Character(Unicode.Scalar($0)).isNumber || $0 == 0x2D) })
            else { return false }
        }
        return !text.allSatisfy { $0.isNumber || $0 == "." }
    }

    /// A host name to resolve, not a numeric address.
    public var isName: Bool {
        !isIPv6 && !(host.split(separator: ".", omittingEmptySubsequences: false).count == 4
            && host.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { UInt8($0) != nil })
    }

    public var isIPv6: Bool { host.contains(":") }
    public var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// A radio a site syncs over (`transports:` in the site file).
public enum SiteTransport: String, Sendable, Equatable, CaseIterable {
    case wifi, bluetooth
}
