import ShoalCore

/// How much a replicator logs (the Couchbase seed's log levels; `none` writes nothing).
public enum LogLevel: String, Sendable, CaseIterable, Comparable {
    case debug, verbose, info, warning, error, none

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.core < b.core }

    var core: ShoalCore.LogLevel {
        switch self {
        case .debug: .debug
        case .verbose: .verbose
        case .info: .info
        case .warning: .warning
        case .error: .error
        case .none: .none
        }
    }
}

/// The parts of a replicator that log (the seed's log domains, as a set: `[.peerDiscovery,
/// .multipeer]`). `multipeer` is the seed's name for the mesh and replication together.
public struct LogDomains: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Discovery's own trouble (DNS-SD through avahi-daemon).
    public static let peerDiscovery = LogDomains(rawValue: 1 << 0)
    /// Peers heard and lost, links, advertising, the mesh state, transport switching.
    public static let mesh = LogDomains(rawValue: 1 << 1)
    /// Documents pushed and pulled, conflicts, refusals.
    public static let replication = LogDomains(rawValue: 1 << 2)
    /// TLS sessions and peers' certificates.
    public static let tls = LogDomains(rawValue: 1 << 3)
    /// The database: tombstones purged by retention.
    public static let store = LogDomains(rawValue: 1 << 4)
    /// The seed's `multipeer`: mesh management and replication.
    public static let multipeer: LogDomains = [.mesh, .replication]
    public static let all: LogDomains = [.peerDiscovery, .mesh, .replication, .tls, .store]

    /// The runtime's domains in this set (the others are silent).
    var core: Set<ShoalCore.LogDomain> {
        let pairs: [(LogDomains, ShoalCore.LogDomain)] = [(.peerDiscovery, .peerDiscovery), (.mesh, .mesh), (.replication, .replication), (.tls, .tls), (.store, .store)]
        return Set(pairs.filter { contains($0.0) }.map(\.1))
    }
}

/// Which of a replicator's log lines reach `MultipeerReplicatorConfiguration.log`: those at
/// `level` or above, from `domains` (the seed's `ConsoleLogSink(level:domains:)`). Change it on a
/// running replicator with `MultipeerReplicator.logOptions`, as `shoal log` does on a gateway.
public struct LogOptions: Sendable, Equatable {
    public var level: LogLevel
    public var domains: LogDomains

    /// `info` from every domain (the default; nothing is written while `log` is nil).
    public init(level: LogLevel = .info, domains: LogDomains = .all) {
        self.level = level
        self.domains = domains
    }

    /// Sets `logger`'s level for every domain: `level` in `domains`, `none` elsewhere.
    func apply(to logger: Logger) {
        let on = domains.core
        for d in ShoalCore.LogDomain.allCases { logger.setLevel(on.contains(d) ? level.core : .none, for: d) }
    }
}
