import Glibc
import ShoalCore
import Synchronization
import ShoalThreads

/// Log lines to stderr. Under systemd ($JOURNAL_STREAM set) each line starts with its syslog
/// priority as `<N>`, which journald reads as the entry's priority; elsewhere lines carry a level
/// name and the time since start, for a person at a terminal.
public final class StderrLogSink: LogSink {
    private let journal: Bool
    private let lock = ConditionLock()

    public init(journal: Bool) { self.journal = journal }

    public func write(_ record: LogRecord) {
        let line: String
        if journal {
            line = "<\(StderrLogSink.priority(record.level))>\(record.domain.rawValue): \(record.message)\n"
        } else {
            let s = record.uptimeMillis / 1000
            let ms = record.uptimeMillis % 1000
            let stamp = "\(s).\(ms < 10 ? "00" : ms < 100 ? "0" : "")\(ms)"
            line = "[\(stamp)] \(record.level.name.uppercased()) \(record.domain.rawValue): \(record.message)\n"
        }
        let bytes = Array(line.utf8)
        lock.withLock {
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes { Glibc.write(STDERR_FILENO, $0.baseAddress! + offset, bytes.count - offset) }
                if n < 0 { if errno == EINTR { continue }; return }
                offset += n
            }
        }
    }

    static func priority(_ level: LogLevel) -> Int {
        switch level {
        case .debug, .verbose: 7
        case .info: 6
        case .warning: 4
        case .error, .none: 3
        }
    }
}
