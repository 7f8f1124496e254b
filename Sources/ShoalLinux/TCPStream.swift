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
public final class TCPStream: ByteStream, @unchecked Sendable {  // one socket, owned by its link's thread (wake() writes a pipe from any)
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
        guard (try? SystemCall.run("pipe", { pipe(&pair) })) != nil else { return (-1, -1) }
        do {
            for p in pair { try SystemCall.setNonBlockingCloseOnExec(p, "wake pipe") }
        } catch {
            for p in pair { Glibc.close(p) }
            return (-1, -1)
        }
        return (pair[0], pair[1])
    }

    /// Takes `fd` (a connected TCP socket): makes it non-blocking, without Nagle's delay, with
    /// keepalives that find a dead peer in about 20 s. Closes it if the kernel refuses any of that.
    public init(fd: Int32) throws(SystemError) {
        self.fd = fd
        (wakeFD, wakeWriteFD) = TCPStream.wakePipe()
        do {
            try SystemCall.setNonBlockingCloseOnExec(fd, "TCP socket")
            try SystemCall.setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1, "setsockopt(TCP_NODELAY)")
            try SystemCall.setOption(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "setsockopt(SO_KEEPALIVE)")
            for (option, name, value) in [(TCP_KEEPIDLE, "TCP_KEEPIDLE", Int32(8)), (TCP_KEEPINTVL, "TCP_KEEPINTVL", 3),
                                          (TCP_KEEPCNT, "TCP_KEEPCNT", 4), (TCP_USER_TIMEOUT, "TCP_USER_TIMEOUT", 20_000)] {
                try SystemCall.setOption(fd, Int32(IPPROTO_TCP), option, value, "setsockopt(\(name))")
            }
        } catch {
            close()
            throw error
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
        // A full pipe already holds a wake-up; a missing one (-1) leaves the read to its timeout.
        _ = try? SystemCall.nonBlocking("write(wake pipe)") { Glibc.write(wakeWriteFD, &one, 1) }
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
        let stream = try TCPStream(fd: fd)
        let shown = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        do {
            try SystemCall.run("connect(\(shown))") {
                withUnsafePointer(to: &address) { p in p.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, length) } }
            }
        } catch where error.code == EINPROGRESS {
            // Non-blocking: wait for it, then ask how it went.
            guard try SystemCall.poll(fd, Int16(POLLOUT), timeoutMillis: Int(timeoutMillis), "poll(connect \(shown))") != 0 else {
                throw SystemError(call: "connect(\(shown))", code: ETIMEDOUT)
            }
            let err = try SystemCall.option(fd, SOL_SOCKET, SO_ERROR, "getsockopt(SO_ERROR)")
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
            let got: Int?
            do { got = try SystemCall.nonBlocking("read") { Glibc.read(fd, buffer.baseAddress, buffer.count) } } catch {
                if error.code == ECONNRESET { return 0 }
                throw .failed("\(error)")
            }
            if let n = got { return n }
            var p = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
            if wakeFD >= 0 { p.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)) }
            if try TCPStream.io({ () throws(SystemError) in try SystemCall.poll(&p, timeoutMillis: timeoutMillis, "poll(read)") }) == 0 { throw .timeout }
            if p.count > 1 && p[1].revents != 0 {
                var drained = [UInt8](repeating: 0, count: 64)
                _ = try? SystemCall.nonBlocking("read(wake pipe)") { Glibc.read(wakeFD, &drained, 64) }
                throw .timeout
            }
        }
    }

    /// A system error as a stream's: a broken pipe or a reset is the peer gone, the rest a failure.
    static func io<T>(_ body: () throws(SystemError) -> T) throws(StreamError) -> T {
        do { return try body() } catch {
            if error.code == EPIPE || error.code == ECONNRESET { throw .closed }
            throw .failed("\(error)")
        }
    }

    public func write(_ bytes: UnsafeRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        guard fd >= 0 else { throw .closed }
        let deadline = monotonicMillis() + timeoutMillis
        while true {
            if let n = try TCPStream.io({ () throws(SystemError) in try SystemCall.nonBlocking("send") { send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) } }) { return n }
            let left = deadline - monotonicMillis()
            if left <= 0 { throw .timeout }
            let events = Int16(POLLOUT) | (ended ? 0 : Int16(POLLIN))
            let came = try TCPStream.io { () throws(SystemError) in try SystemCall.poll(fd, events, timeoutMillis: left, "poll(send)") }
            if came == 0 { throw .timeout }
            // The peer writes too while we wait for room: read what it sent, or neither side moves.
            if came & Int16(POLLIN) != 0 && !ended { try drain() }
        }
    }

    /// Reads what has arrived (without waiting) into `held`, up to `maxHeldBytes`.
    private func drain() throws(StreamError) {
        if heldHead > 0 && heldHead == held.count { held.removeAll(keepingCapacity: true); heldHead = 0 }
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while held.count - heldHead < TCPStream.maxHeldBytes {
            let got: Int?
            do { got = try SystemCall.nonBlocking("read") { chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } } } catch {
                if error.code == ECONNRESET { ended = true; return }
                throw .failed("\(error)")
            }
            guard let n = got else { return }
            if n == 0 { ended = true; return }
            held.append(contentsOf: chunk[0..<n])
            drainedWhileWriting += n
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
public final class TCPListener: @unchecked Sendable {  // one listening socket
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
        do {
            try SystemCall.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1, "setsockopt(SO_REUSEADDR)")
            if family == AF_INET6 { try SystemCall.setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 0, "setsockopt(IPV6_V6ONLY)") }
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

    /// Hands the listening descriptor to another owner (the HTTP server): this object will not
    /// close it.
    public func takeDescriptor() -> Int32 {
        let out = fd
        fd = -1
        return out
    }

    /// Accepts one connection, or nil if none came within the timeout.
    public func accept(timeoutMillis: Int32) throws(SystemError) -> TCPStream? {
        guard try SystemCall.poll(fd, Int16(POLLIN), timeoutMillis: Int(timeoutMillis), "poll(listener)") != 0 else { return nil }
        let client = try SystemCall.run("accept") { Glibc.accept(fd, nil, nil) }
        return try TCPStream(fd: client)
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
