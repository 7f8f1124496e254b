import Glibc
import ShoalCore

/// A TCP connection as a `ByteStream`: non-blocking socket, waits with `poll` and a timeout,
/// TCP_NODELAY and keepalive on. Carries TLS between gateways on Wi-Fi.
public final class TCPStream: ByteStream, @unchecked Sendable {
    public private(set) var fd: Int32
    /// A pipe that `wake()` writes to: a read waiting for the peer returns `.timeout` at once, so
    /// the thread that owns the stream (and its TLS session) can send what was queued for it.
    private let wakeFD: Int32
    private let wakeWriteFD: Int32

    public init(fd: Int32) {
        self.fd = fd
        var pair: [Int32] = [-1, -1]
        if pipe(&pair) == 0 {
            for p in pair {
                _ = fcntl(p, F_SETFL, fcntl(p, F_GETFL) | O_NONBLOCK)
                _ = fcntl(p, F_SETFD, FD_CLOEXEC)
            }
        }
        wakeFD = pair[0]
        wakeWriteFD = pair[1]
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit {
        close()
        if wakeFD >= 0 { Glibc.close(wakeFD) }
        if wakeWriteFD >= 0 { Glibc.close(wakeWriteFD) }
    }

    /// Interrupts a read that is waiting (from any thread).
    public func wake() {
        var one: UInt8 = 1
        _ = Glibc.write(wakeWriteFD, &one, 1)
    }

    /// Connects to an IPv4 address (dotted quad) and port within `timeoutMillis`.
    public static func connect(ipv4 host: String, port: UInt16, timeoutMillis: Int32) throws(SystemError) -> TCPStream {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &addr.sin_addr) == 1 else { throw SystemError(call: "inet_pton(\(host))", code: EINVAL) }
        let fd = try SystemCall.run("socket(AF_INET)") { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0) }
        let stream = TCPStream(fd: fd)
        let rc = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 {
            guard errno == EINPROGRESS else { throw SystemError(call: "connect(\(host):\(port))", code: errno) }
            var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let n = try SystemCall.run("poll(connect)") { poll(&p, 1, timeoutMillis) }
            guard n > 0 else { throw SystemError(call: "connect(\(host):\(port))", code: ETIMEDOUT) }
            var err: Int32 = 0
            var len = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
            guard err == 0 else { throw SystemError(call: "connect(\(host):\(port))", code: err) }
        }
        return stream
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        guard fd >= 0 else { throw .closed }
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n >= 0 { return n }
            switch errno {
            case EINTR: continue
            case EAGAIN:
                var p = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
                let r = poll(&p, wakeFD >= 0 ? 2 : 1, Int32(clamping: timeoutMillis))
                if r == 0 { throw .timeout }
                if r < 0 && errno != EINTR { throw .failed("poll: \(String(cString: strerror(errno)))") }
                if p[1].revents != 0 {
                    var drained = [UInt8](repeating: 0, count: 64)
                    _ = Glibc.read(wakeFD, &drained, 64)
                    throw .timeout
                }
            case ECONNRESET: return 0
            default: throw .failed("read: \(String(cString: strerror(errno)))")
            }
        }
    }

    public func write(_ bytes: UnsafeRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        guard fd >= 0 else { throw .closed }
        while true {
            let n = send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return n }
            switch errno {
            case EINTR: continue
            case EAGAIN:
                var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                let r = poll(&p, 1, Int32(clamping: timeoutMillis))
                if r == 0 { throw .timeout }
                if r < 0 && errno != EINTR { throw .failed("poll: \(String(cString: strerror(errno)))") }
            case EPIPE, ECONNRESET: throw .closed
            default: throw .failed("send: \(String(cString: strerror(errno)))")
            }
        }
    }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }
}

/// A listening TCP socket on an IPv4 address (port 0 picks a free one).
public final class TCPListener: @unchecked Sendable {
    public private(set) var fd: Int32
    public let port: UInt16

    public init(ipv4 host: String = "127.0.0.1", port: UInt16 = 0, backlog: Int32 = 16) throws(SystemError) {
        let fd = try SystemCall.run("socket(AF_INET)") { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &addr.sin_addr)
        do {
            try SystemCall.run("bind(\(host):\(port))") {
                withUnsafePointer(to: &addr) { p in p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            }
            try SystemCall.run("listen") { listen(fd, backlog) }
            var bound = sockaddr_in()
            var len = socklen_t(MemoryLayout<sockaddr_in>.size)
            try SystemCall.run("getsockname") {
                withUnsafeMutablePointer(to: &bound) { p in p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
            }
            self.port = UInt16(bigEndian: bound.sin_port)
            self.fd = fd
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    deinit { close() }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    /// Accepts one connection, or nil if none came within the timeout.
    public func accept(timeoutMillis: Int32) throws(SystemError) -> TCPStream? {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard try SystemCall.run("poll(listener)", { poll(&p, 1, timeoutMillis) }) > 0 else { return nil }
        let client = try SystemCall.run("accept") { Glibc.accept(fd, nil, nil) }
        _ = fcntl(client, F_SETFD, FD_CLOEXEC)
        return TCPStream(fd: client)
    }
}
