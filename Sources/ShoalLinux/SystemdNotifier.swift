import Glibc

/// sd_notify without libsystemd: datagrams to $NOTIFY_SOCKET (a path, or `@name` for the abstract
/// namespace). Does nothing when not run by systemd. The watchdog interval comes from
/// $WATCHDOG_USEC (only if $WATCHDOG_PID is unset or ours).
public final class SystemdNotifier: Sendable {
    public let socketPath: String?
    public let watchdogMicros: UInt64?

    public init(environment: [String: String] = ProcessEnvironment.current) {
        let path = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        socketPath = path
        if let usec = environment["WATCHDOG_USEC"].flatMap(UInt64.init), usec > 0,
           environment["WATCHDOG_PID"].map({ $0 == String(getpid()) }) ?? true {
            watchdogMicros = usec
        } else {
            watchdogMicros = nil
        }
    }

    public var isActive: Bool { socketPath != nil }

    /// Sends `READY=1`, `STATUS=…`, `WATCHDOG=1`, `STOPPING=1` (lines joined by newlines).
    public func notify(_ state: String) throws(SystemError) {
        guard let path = socketPath else { return }
        let fd = try SystemCall.run("socket(AF_UNIX, SOCK_DGRAM)") { socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        if abstract { bytes[0] = 0 }
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { throw SystemError(call: "NOTIFY_SOCKET too long", code: ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in for (i, b) in bytes.enumerated() { raw[i] = b } }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
        let message = Array(state.utf8)
        try SystemCall.run("sendto(NOTIFY_SOCKET \(path))") {
            withUnsafePointer(to: &addr) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    message.withUnsafeBytes { sendto(fd, $0.baseAddress, message.count, Int32(MSG_NOSIGNAL), sa, length) }
                }
            }
        }
    }
}

/// The process environment as a dictionary (no Foundation).
public enum ProcessEnvironment {
    public static var current: [String: String] {
        var out: [String: String] = [:]
        var p = environ
        while let entry = p.pointee {
            let s = String(cString: entry)
            if let eq = s.firstIndex(of: "=") { out[String(s[..<eq])] = String(s[s.index(after: eq)...]) }
            p += 1
        }
        return out
    }

    public static func get(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
}
