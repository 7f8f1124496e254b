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
