import Glibc
import ShoalCore

/// A TCP connection as a `ByteStream`: non-blocking socket, waits with `poll` and a timeout,
/// TCP_NODELAY on. A peer that vanishes without a word (its Wi-Fi went down, it lost power) is
/// noticed in about 20 s: keepalive probes after 8 s of silence, every 3 s, 4 unanswered close the
/// connection, and data unacknowledged for 20 s does too (TCP_USER_TIMEOUT). Carries TLS between
/// gateways on Wi-Fi.
///
/// A write that waits for room keeps reading, and keeps what it read for the next read: a link's
/// thread reads only between writes, and two gateways writing bursts larger than the socket
/// buffers at each other at once would otherwise each wait for the other to read (the same cycle
/// L2CAPStream breaks; on TCP it takes bigger bursts). What is held is bounded by `maxHeldBytes`.
public final class TCPStream: ByteStream, @unchecked Sendable {
    public private(set) var fd: Int32
    /// Read while a write waited, not yet handed out by `read`.
    private var held: [UInt8] = []
    private var heldHead = 0
    /// The peer's end of stream, seen while draining: reads return 0 once `held` is empty.
    private var ended = false
    public static let maxHeldBytes = 16 << 20
    /// Bytes read while a write waited, since the stream opened.
    public private(set) var drainedWhileWriting = 0
    /// A pipe that `wake()` writes to: a read waiting for the peer returns `.timeout` at once, so
    /// the thread that owns the stream (and its TLS session) can send what was queued for it.
    private let wakeFD: Int32
    private let wakeWriteFD: Int32

    /// A non-blocking, close-on-exec pipe (read end, write end) for `wake()`; (-1, -1) if the
    /// system has no descriptors left (then a wake-up waits for the read timeout).
    static func wakePipe() -> (Int32, Int32) {
        var pair: [Int32] = [-1, -1]
        guard pipe(&pair) == 0 else { return (-1, -1) }
        for p in pair {
            _ = fcntl(p, F_SETFL, fcntl(p, F_GETFL) | O_NONBLOCK)
            _ = fcntl(p, F_SETFD, FD_CLOEXEC)
        }
        return (pair[0], pair[1])
    }

    public init(fd: Int32) {
        self.fd = fd
        (wakeFD, wakeWriteFD) = TCPStream.wakePipe()
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, socklen_t(MemoryLayout<Int32>.size))
        for (option, value) in [(TCP_KEEPIDLE, Int32(8)), (TCP_KEEPINTVL, 3), (TCP_KEEPCNT, 4), (TCP_USER_TIMEOUT, 20_000)] {
            var v = value
            setsockopt(fd, Int32(IPPROTO_TCP), option, &v, socklen_t(MemoryLayout<Int32>.size))
        }
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
        try connect(host: host, port: port, timeoutMillis: timeoutMillis)
    }

    /// Connects to a numeric IPv4 or IPv6 address (`fe80::1%wlan0` for a link-local one) and port
    /// within `timeoutMillis`.
    public static func connect(host: String, port: UInt16, timeoutMillis: Int32) throws(SystemError) -> TCPStream {
        let (storage, length) = try SocketAddress.numeric(host, port: port)
        var address = storage
        let fd = try SystemCall.run("socket") { socket(Int32(address.ss_family), Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0) }
        let stream = TCPStream(fd: fd)
        let rc = withUnsafePointer(to: &address) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, length) }
        }
        let shown = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        if rc != 0 {
            guard errno == EINPROGRESS else { throw SystemError(call: "connect(\(shown))", code: errno) }
            var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let n = try SystemCall.run("poll(connect)") { poll(&p, 1, timeoutMillis) }
            guard n > 0 else { throw SystemError(call: "connect(\(shown))", code: ETIMEDOUT) }
            var err: Int32 = 0
            var len = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
            guard err == 0 else { throw SystemError(call: "connect(\(shown))", code: err) }
        }
        return stream
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        guard fd >= 0 else { throw .closed }
        if heldHead < held.count {
            let n = min(buffer.count, held.count - heldHead)
            held.withUnsafeBytes { src in buffer.baseAddress!.copyMemory(from: src.baseAddress! + heldHead, byteCount: n) }
            heldHead += n
            if heldHead == held.count { held.removeAll(keepingCapacity: held.capacity <= 256 * 1024); heldHead = 0 }
            return n
        }
        if ended { return 0 }
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
        let deadline = monotonicMillis() + timeoutMillis
        while true {
            let n = send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return n }
            switch errno {
            case EINTR: continue
            case EAGAIN:
                let left = deadline - monotonicMillis()
                if left <= 0 { throw .timeout }
                var p = pollfd(fd: fd, events: Int16(POLLOUT) | (ended ? 0 : Int16(POLLIN)), revents: 0)
                let r = poll(&p, 1, Int32(clamping: left))
                if r == 0 { throw .timeout }
                if r < 0 && errno != EINTR { throw .failed("poll: \(String(cString: strerror(errno)))") }
                if r > 0 && p.revents & Int16(POLLIN) != 0 && !ended { try drain() }
            case EPIPE, ECONNRESET: throw .closed
            default: throw .failed("send: \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Reads what has arrived (without waiting) into `held`, up to `maxHeldBytes`.
    private func drain() throws(StreamError) {
        if heldHead > 0 && heldHead == held.count { held.removeAll(keepingCapacity: true); heldHead = 0 }
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while held.count - heldHead < TCPStream.maxHeldBytes {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n > 0 { held.append(contentsOf: chunk[0..<n]); drainedWhileWriting += n; continue }
            if n == 0 { ended = true; return }
            if errno == EINTR { continue }
            if errno == EAGAIN { return }
            if errno == ECONNRESET { ended = true; return }
            throw .failed("read: \(String(cString: strerror(errno)))")
        }
        throw .failed("the peer sent \(TCPStream.maxHeldBytes >> 20) MB that waited unread while our writes found no room")
    }

    /// The numeric address of the other end ("127.0.0.2", "fe80::1%eth0"), or "?" if unknown.
    public var remoteHost: String {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let ok = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) == 0 }
        }
        guard ok else { return "?" }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let rc = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
            }
        }
        return rc == 0 ? String(cString: host) : "?"
    }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }
}

/// A listening TCP socket (port 0 picks a free one). `::` listens on every IPv6 and IPv4 address
/// (a dual-stack socket), `0.0.0.0` on every IPv4 one.
public final class TCPListener: @unchecked Sendable {
    public private(set) var fd: Int32
    public let port: UInt16

    public convenience init(ipv4 host: String = "127.0.0.1", port: UInt16 = 0, backlog: Int32 = 16) throws(SystemError) {
        try self.init(host: host, port: port, backlog: backlog)
    }

    public init(host: String, port: UInt16 = 0, backlog: Int32 = 16) throws(SystemError) {
        let (storage, length) = try SocketAddress.numeric(host, port: port)
        var addr = storage
        let family = Int32(addr.ss_family)
        let fd = try SystemCall.run("socket") { socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        var one: Int32 = 1
        var zero: Int32 = 0
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if family == AF_INET6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &zero, socklen_t(MemoryLayout<Int32>.size)) }
        do {
            try SystemCall.run("bind(\(host):\(port))") {
                withUnsafePointer(to: &addr) { p in p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
            }
            try SystemCall.run("listen") { listen(fd, backlog) }
            var bound = sockaddr_storage()
            var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
            try SystemCall.run("getsockname") {
                withUnsafeMutablePointer(to: &bound) { p in p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
            }
            self.port = SocketAddress.port(of: bound)
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

/// Numeric socket addresses (no name lookups: gateways connect to what DNS-SD resolved or what the
/// site file says).
enum SocketAddress {
    static func numeric(_ host: String, port: UInt16) throws(SystemError) -> (sockaddr_storage, socklen_t) {
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &result)
        guard rc == 0, let info = result, let sa = info.pointee.ai_addr else {
            throw SystemError(call: "address \(host)", code: EINVAL)
        }
        defer { freeaddrinfo(result) }
        var storage = sockaddr_storage()
        let length = info.pointee.ai_addrlen
        withUnsafeMutableBytes(of: &storage) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: sa, count: Int(length)))
        }
        return (storage, length)
    }

    static func port(of storage: sockaddr_storage) -> UInt16 {
        var s = storage
        return withUnsafePointer(to: &s) { p -> UInt16 in
            if Int32(storage.ss_family) == AF_INET6 {
                return p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
            }
            return p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
        }
    }
}
