/// ShoalLinux: everything that talks to the Linux kernel or a system daemon — sockets, the serial
/// console, systemd notify, and (the only importer of each) avahi-client, libbluetooth and libgpiod.
/// Every syscall goes through `SystemCall.run`, which retries EINTR and turns -1 into a typed error
/// that names the call.
import Glibc
import ShoalCore

public struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
    public let call: String
    public let code: Int32
    public init(call: String, code: Int32) {
        self.call = call
        self.code = code
    }
    public var description: String { "\(call): \(String(cString: strerror(code))) (errno \(code))" }
}

public enum SystemCall {
    /// Runs a syscall that returns -1 and sets errno on failure, retrying on EINTR.
    @discardableResult
    public static func run<T: FixedWidthInteger>(_ call: @autoclosure () -> String, _ body: () -> T) throws(SystemError) -> T {
        while true {
            let rc = body()
            if rc != -1 { return rc }
            let e = errno
            if e == EINTR { continue }
            throw SystemError(call: call(), code: e)
        }
    }

    /// A call on a non-blocking descriptor: its result, or nil when it would block (EAGAIN).
    @inline(__always)
    public static func nonBlocking<T: FixedWidthInteger>(_ call: @autoclosure () -> String, _ body: () -> T) throws(SystemError) -> T? {
        while true {
            let rc = body()
            if rc != -1 { return rc }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return nil }
            throw SystemError(call: call(), code: e)
        }
    }

    /// poll(2) until something is ready or `timeoutMillis` passed (negative: no limit); an EINTR
    /// waits again for the time that is left. Returns how many descriptors are ready (0: timeout).
    public static func poll(_ fds: inout [pollfd], timeoutMillis: Int, _ call: @autoclosure () -> String) throws(SystemError) -> Int {
        let deadline = timeoutMillis < 0 ? Int.max : monotonicMillis() + timeoutMillis
        while true {
            let left = timeoutMillis < 0 ? -1 : max(0, deadline - monotonicMillis())
            let n = Glibc.poll(&fds, nfds_t(fds.count), Int32(clamping: left))
            if n >= 0 { return Int(n) }
            let e = errno
            if e == EINTR { continue }
            throw SystemError(call: call(), code: e)
        }
    }

    /// poll(2) on one descriptor for `events`; returns the events that came (empty: timeout).
    public static func poll(_ fd: Int32, _ events: Int16, timeoutMillis: Int, _ call: @autoclosure () -> String) throws(SystemError) -> Int16 {
        var fds = [pollfd(fd: fd, events: events, revents: 0)]
        return try poll(&fds, timeoutMillis: timeoutMillis, call()) > 0 ? fds[0].revents : 0
    }

    /// Waits `millis` milliseconds (a poll on no descriptor; an EINTR waits again for what is left).
    public static func pause(millis: Int) {
        var none: [pollfd] = []
        _ = try? poll(&none, timeoutMillis: millis, "pause")
    }

    /// setsockopt(2) with an integer value.
    public static func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32, _ call: @autoclosure () -> String) throws(SystemError) {
        var v = value
        try run(call()) { setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size)) }
    }

    /// getsockopt(2) of an integer value (SO_ERROR after a non-blocking connect).
    public static func option(_ fd: Int32, _ level: Int32, _ name: Int32, _ call: @autoclosure () -> String) throws(SystemError) -> Int32 {
        var v: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        try run(call()) { getsockopt(fd, level, name, &v, &len) }
        return v
    }

    /// Makes a descriptor non-blocking and close-on-exec (what every socket and pipe of ours is).
    public static func setNonBlockingCloseOnExec(_ fd: Int32, _ call: @autoclosure () -> String) throws(SystemError) {
        let flags = try run("\(call()): fcntl(F_GETFL)") { fcntl(fd, F_GETFL) }
        try run("\(call()): fcntl(F_SETFL)") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        try run("\(call()): fcntl(F_SETFD)") { fcntl(fd, F_SETFD, FD_CLOEXEC) }
    }
}

/// A host name that did not resolve: getaddrinfo(3)'s own words (`Name or service not known`).
public struct NameLookupError: Error, Sendable, Equatable, CustomStringConvertible {
    public let host: String
    public let reason: String
    public init(host: String, reason: String) {
        self.host = host
        self.reason = reason
    }
    public var description: String { "\(host) does not resolve: \(reason)" }
}

extension SystemCall {
    /// getaddrinfo(3) for a TCP host: its numeric addresses (IPv4 and IPv6, in the resolver's order,
    /// at most `limit`), link-local IPv6 ones with `%interface`. It blocks (DNS, /etc/hosts, NSS):
    /// call it on a thread of its own, never on Swift's cooperative pool. EAI_AGAIN is the caller's
    /// to retry later (a name server that does not answer now), not retried here.
    public static func addresses(of host: String, limit: Int = 8) throws(NameLookupError) -> [String] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_ADDRCONFIG
        var result: UnsafeMutablePointer<addrinfo>?
        var rc: Int32
        repeat { rc = getaddrinfo(host, nil, &hints, &result) } while rc == EAI_SYSTEM && errno == EINTR
        guard rc == 0 else {
            let reason = rc == EAI_SYSTEM ? String(cString: strerror(errno)) : String(cString: gai_strerror(rc))
            throw NameLookupError(host: host, reason: reason)
        }
        defer { freeaddrinfo(result) }
        var out: [String] = []
        var item = result
        while let i = item, out.count < limit {
            item = i.pointee.ai_next
            guard let sa = i.pointee.ai_addr else { continue }
            var text = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            guard getnameinfo(sa, i.pointee.ai_addrlen, &text, socklen_t(text.count), nil, 0, NI_NUMERICHOST) == 0 else { continue }
            let address = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if !out.contains(address) { out.append(address) }
        }
        guard !out.isEmpty else { throw NameLookupError(host: host, reason: "no usable address") }
        return out
    }
}
