import Synchronization
import ShoalThreads

/// The parts of Shoal that log, as the Couchbase seed's `LogDomain` (peerDiscovery, multipeer) grown
/// to the whole gateway. Levels are set per domain, from config and at run time.
public enum LogDomain: String, Sendable, CaseIterable, Codable {
    case peerDiscovery, mesh, replication, store, tls, board, status, supervision, control, runtime, http, mqtt, uplink
}

/// The Couchbase seed's levels. `none` silences a domain.
public enum LogLevel: Int, Sendable, CaseIterable, Comparable, Codable {
    case debug = 0, verbose, info, warning, error, none

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }

    public var name: String {
        switch self {
        case .debug: "debug"
        case .verbose: "verbose"
        case .info: "info"
        case .warning: "warning"
        case .error: "error"
        case .none: "none"
        }
    }

    public init?(name: String) {
        guard let level = LogLevel.allCases.first(where: { $0.name == name.lowercased() }) else { return nil }
        self = level
    }
}

/// One log line before it is printed. Messages carry kinds and ids, never a document body or a key.
public struct LogRecord: Sendable {
    public let level: LogLevel
    public let domain: LogDomain
    public let message: String
    public let uptimeMillis: Int64
}

/// Where log lines go: stderr, the journal, a test's buffer.
public protocol LogSink: Sendable {
    func write(_ record: LogRecord)
}

/// A logger is passed in, never global. It filters by per-domain level before formatting anything.
public final class Logger: Sendable {
    private let levels: Locked<[LogDomain: LogLevel]>
    private let sink: any LogSink
    private let start = ContinuousClock.now

    public init(sink: any LogSink, level: LogLevel = .info) {
        self.sink = sink
        var all: [LogDomain: LogLevel] = [:]
        for d in LogDomain.allCases { all[d] = level }
        self.levels = Locked(all)
    }

    public func setLevel(_ level: LogLevel, for domain: LogDomain? = nil) {
        levels.withLock { levels in
            if let domain { levels[domain] = level } else { for d in LogDomain.allCases { levels[d] = level } }
        }
    }

    public func level(for domain: LogDomain) -> LogLevel { levels.withLock { $0[domain] ?? .info } }

    public func isEnabled(_ level: LogLevel, _ domain: LogDomain) -> Bool {
        level != .none && level >= self.level(for: domain)
    }

    public func log(_ level: LogLevel, _ domain: LogDomain, _ message: @autoclosure () -> String) {
        guard isEnabled(level, domain) else { return }
        let elapsed = ContinuousClock.now - start
        let millis = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        sink.write(LogRecord(level: level, domain: domain, message: message(), uptimeMillis: millis))
    }

    public func debug(_ d: LogDomain, _ m: @autoclosure () -> String) { log(.debug, d, m()) }
    public func verbose(_ d: LogDomain, _ m: @autoclosure () -> String) { log(.verbose, d, m()) }
    public func info(_ d: LogDomain, _ m: @autoclosure () -> String) { log(.info, d, m()) }
    public func warning(_ d: LogDomain, _ m: @autoclosure () -> String) { log(.warning, d, m()) }
    public func error(_ d: LogDomain, _ m: @autoclosure () -> String) { log(.error, d, m()) }
}

/// Keeps records in memory; tests read them back.
public final class MemoryLogSink: LogSink {
    private let records = Locked<[LogRecord]>([])
    public init() {}
    public func write(_ record: LogRecord) { records.withLock { $0.append(record) } }
    public var all: [LogRecord] { records.withLock { $0 } }
    public func contains(_ text: String) -> Bool { all.contains { $0.message.contains(text) } }
}
