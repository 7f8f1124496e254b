import Glibc

/// A connected Unix stream socket (the control socket, from either end). Reads and writes wait
/// with `poll` and a timeout, so a stuck peer never blocks a thread forever.
public final class UnixSocket: @unchecked Sendable {  // one socket, owned by its connection's thread
    public private(set) var fd: Int32

    public init(fd: Int32) { self.fd = fd }
    deinit { close() }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    /// Connects to a listening socket at `path`.
    public static func connect(path: String) throws(SystemError) -> UnixSocket {
        let fd = try SystemCall.run("socket(AF_UNIX)") { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        let sock = UnixSocket(fd: fd)
        var addr = try UnixSocket.address(path)
        try SystemCall.run("connect(\(path))") {
            withUnsafePointer(to: &addr) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
        }
        return sock
    }

    static func address(_ path: String) throws(SystemError) -> sockaddr_un {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard bytes.count < capacity else { throw SystemError(call: "socket path \(path) (over \(capacity - 1) bytes)", code: ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
            raw[bytes.count] = 0
        }
        return addr
    }

    /// Waits until readable (true) or the timeout passes (false).
    public func waitReadable(timeoutMillis: Int32) throws(SystemError) -> Bool {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let n = try SystemCall.run("poll") { poll(&p, 1, timeoutMillis) }
        return n > 0
    }

    /// Reads what is there (up to `max` bytes); empty at end of stream; nil on timeout.
    public func read(max: Int = 65536, timeoutMillis: Int32) throws(SystemError) -> [UInt8]? {
        guard try waitReadable(timeoutMillis: timeoutMillis) else { return nil }
        var buffer = [UInt8](repeating: 0, count: max)
        let fd = self.fd
        let n = try SystemCall.run("read(control socket)") {
            buffer.withUnsafeMutableBytes { p in Glibc.read(fd, p.baseAddress, max) }
        }
        return Array(buffer.prefix(n))
    }

    /// Writes every byte, waiting at most `timeoutMillis` for each chunk to be taken.
    public func writeAll(_ bytes: [UInt8], timeoutMillis: Int32 = 5000) throws(SystemError) {
        var offset = 0
        while offset < bytes.count {
            var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let ready = try SystemCall.run("poll") { poll(&p, 1, timeoutMillis) }
            guard ready > 0 else { throw SystemError(call: "write(control socket): peer not reading", code: ETIMEDOUT) }
            let start = offset
            let n = try SystemCall.run("send(control socket)") {
                bytes.withUnsafeBytes { raw in send(fd, raw.baseAddress! + start, bytes.count - start, Int32(MSG_NOSIGNAL)) }
            }
            offset += n
        }
    }
}

/// A listening Unix stream socket at a path, created with mode 0660.
public final class UnixSocketListener: @unchecked Sendable {  // one listening socket
    public let path: String
    public private(set) var fd: Int32

    /// Binds `path`. A stale socket file left by a crashed shoal is removed; a live one (another
    /// shoal answers on it) is an error, so two gateways never share one store by accident.
    public init(path: String, backlog: Int32 = 16) throws(SystemError) {
        self.path = path
        if access(path, F_OK) == 0 {
            if let other = try? UnixSocket.connect(path: path) {
                other.close()
                throw SystemError(call: "bind(\(path)): another shoal is already serving this socket", code: EADDRINUSE)
            }
            unlink(path)
        }
        let fd = try SystemCall.run("socket(AF_UNIX)") { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        self.fd = fd
        do {
            var addr = try UnixSocket.address(path)
            let oldMask = umask(0o117)
            defer { umask(oldMask) }
            try SystemCall.run("bind(\(path))") {
                withUnsafePointer(to: &addr) { p in
                    p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                }
            }
            try SystemCall.run("chmod(\(path))") { chmod(path, 0o660) }
            try SystemCall.run("listen(\(path))") { listen(fd, backlog) }
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    deinit { close() }

    public func close() {
        if fd >= 0 {
            Glibc.close(fd)
            unlink(path)
        }
        fd = -1
    }

    /// Hands the listening descriptor to another owner (the HTTP server): this object will neither
    /// close it nor unlink the path.
    public func takeDescriptor() -> Int32 {
        let out = fd
        fd = -1
        return out
    }

    /// Accepts one connection, or nil if none came within the timeout.
    public func accept(timeoutMillis: Int32) throws(SystemError) -> UnixSocket? {
        guard try SystemCall.poll(fd, Int16(POLLIN), timeoutMillis: Int(timeoutMillis), "poll(\(path))") != 0 else { return nil }
        let client = try SystemCall.run("accept(\(path))") { Glibc.accept(fd, nil, nil) }
        do { try SystemCall.run("fcntl(F_SETFD)") { fcntl(client, F_SETFD, FD_CLOEXEC) } } catch {
            Glibc.close(client)
            throw error
        }
        return UnixSocket(fd: client)
    }
}
