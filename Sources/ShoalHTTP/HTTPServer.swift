import CMicroHTTPD
import Glibc
import ShoalCore
import ShoalLinux
import ShoalThreads

/// One HTTP listener served by GNU libmicrohttpd: its own epoll thread pool, so no request ever
/// runs on Swift's cooperative pool, and every limit set: connections (in all and per client
/// address), an idle timeout, header memory (431), body size (413, answered from the
/// Content-Length before the body is read), and an optional bearer token (401 before the handler
/// runs). The handler gets the whole request and answers synchronously; a streamed answer
/// (`HTTPStream`) holds no thread while it waits.
public final class HTTPServer: @unchecked Sendable {  // a C daemon handle; state under locks
    public struct Limits: Sendable {
        /// libmicrohttpd's pool. A handler blocks its thread (a store call, a write's commit),
        /// so the pool bounds how many PUTs can share one group commit: in `shoal bench http`
        /// (durability full, 2 cores) HTTP PUT/s over the control socket's was 1.25-1.28 with 2
        /// threads and 2.04-2.10 with 16. An idle thread costs about 10 KB of RSS; streams and
        /// slow clients hold none.
        public var threads: UInt32 = 16
        public var maxConnections: UInt32 = 256
        public var maxConnectionsPerAddress: UInt32 = 64
        public var connectionTimeoutSeconds: UInt32 = 30
        /// Per connection, for the request line and headers (past it: 431).
        public var headerMemoryBytes = 32 * 1024
        public init() {}
    }

    public typealias Handler = @Sendable (HTTPRequest) -> HTTPResponse

    /// What the server says to log (libmicrohttpd's own messages and handler failures).
    public typealias Log = @Sendable (String) -> Void

    public let name: String
    let handler: Handler
    let bodyLimit: @Sendable (_ method: String, _ path: String) -> Int
    let bearerToken: String?
    /// Paths a GET may have without the token (the web console's page, which holds no data: it
    /// asks for the token itself and sends it with every API call).
    let openPaths: Set<String>
    let log: Log
    /// Set once, right after the daemon starts; read only by `stop()`.
    private var daemon: OpaquePointer?
    private let loggerBox: UnsafeMutablePointer<shoal_mhd_logger>
    private let streams = Locked<[ObjectIdentifier: HTTPStream]>([:])
    /// Who is connected and who is idle: past `maxConnections`, the longest idle makes room.
    let connections: HTTPConnections
    /// A chunked body found over its limit is answered 413 at once (`answerEarly`), then the rest
    /// of it is read and dropped, so that closing does not reset the connection under the answer;
    /// past this much more, the connection is closed at once.
    static let discardMaxBytes = 64 << 20
    private let stopped = Locked(false)

    /// Serves on `listenFD` (a listening socket; the server owns it from here on). `bearerToken`:
    /// every request must carry `Authorization: Bearer <token>`.
    /// A loopback listener with no token: only requests whose Host names loopback (`localhost`,
    /// `127.x.x.x`, `[::1]`, any port) are served, so a web page that rebinds its own DNS name to
    /// 127.0.0.1 cannot read the API from a browser on this machine (or behind an ssh tunnel).
    let loopbackHostsOnly: Bool

    public init(name: String, listenFD: Int32, limits: Limits, bearerToken: String?, loopbackHostsOnly: Bool = false, openPaths: Set<String> = [],
                bodyLimit: @escaping @Sendable (String, String) -> Int, log: @escaping Log, handler: @escaping Handler) throws(HTTPServerError) {
        self.name = name
        self.openPaths = openPaths
        self.loopbackHostsOnly = loopbackHostsOnly
        self.handler = handler
        self.bodyLimit = bodyLimit
        self.bearerToken = bearerToken
        self.log = log
        connections = HTTPConnections(limit: Int(limits.maxConnections))
        loggerBox = UnsafeMutablePointer<shoal_mhd_logger>.allocate(capacity: 1)
        let logBox = LogBox(log)
        loggerBox.initialize(to: shoal_mhd_logger(fn: { cls, message in
            guard let cls, let message else { return }
            let box = Unmanaged<LogBox>.fromOpaque(cls).takeUnretainedValue()
            let text = String(cString: message).trimmingTrailingNewlines()
            box.last.withLock { $0 = text }
            box.log("libmicrohttpd: " + text)
        }, cls: Unmanaged.passRetained(logBox).toOpaque()))
        // The callbacks get this object unretained: the owner calls stop() (which ends the
        // daemon and its threads) before letting it go.
        let me = Unmanaged.passUnretained(self).toOpaque()
        // libmicrohttpd's own limit sits above Shoal's: at its limit it stops accepting (newcomers
        // wait in the backlog), while at Shoal's an idle connection is shut down to make room.
        // Only when every connection is busy does libmicrohttpd's limit refuse.
        let headroom = max(16, limits.maxConnections / 4)
        guard let d = shoal_mhd_start(listenFD, limits.threads, limits.maxConnections + headroom, limits.maxConnectionsPerAddress,
                                      limits.connectionTimeoutSeconds, limits.headerMemoryBytes,
                                      HTTPServer.access, me, HTTPServer.completed, me, HTTPServer.notify, me, loggerBox) else {
            let why = logBox.last.withLock { $0 } ?? "no reason given"
            Unmanaged<LogBox>.fromOpaque(loggerBox.pointee.cls).release()
            loggerBox.deallocate()
            Glibc.close(listenFD)
            throw HTTPServerError(message: "libmicrohttpd would not start on \(name): \(why) (lower http.maxConnections if it is about descriptors or memory)")
        }
        daemon = d
    }

    deinit {
        if !stopped.withLock({ $0 }) { log("HTTP server \(name) released without stop()") }
    }

    /// Stops accepting, ends every stream (their clients see the end of the body), then stops the
    /// daemon and its threads. Idempotent.
    public func stop() {
        guard stopped.withLock({ s -> Bool in defer { s = true }; return !s }), let daemon else { return }
        let listen = shoal_mhd_quiesce(daemon)
        // libmicrohttpd aborts the process if it is stopped with a connection suspended and not
        // resumed: every stream open now is ended (resumed) here, and one queued from here on is
        // ended at once (`queue` sees `stopped`). libmicrohttpd takes up pending resumes itself.
        for stream in streams.withLock({ Array($0.values) }) { stream.wakeForStop() }
        MHD_stop_daemon(daemon)
        if listen >= 0 { Glibc.close(listen) }
        Unmanaged<LogBox>.fromOpaque(loggerBox.pointee.cls).release()
        loggerBox.deallocate()
    }

    /// Streams now open (server-sent events, long polls).
    public var openStreams: Int { streams.withLock { $0.count } }
    /// Bytes each open stream holds for its client.
    public var streamBuffers: [Int] { streams.withLock { Array($0.values) }.map(\.buffered) }
    /// Connections held now.
    public var openConnections: Int { connections.live }
    /// Idle connections shut down to make room, since the start.
    public var idleConnectionsClosed: Int { connections.evicted }

    // MARK: the C side

    final class LogBox: Sendable {
        /// libmicrohttpd's last message: why it would not start, when it would not.
        let last = Locked<String?>(nil)
        let log: Log
        init(_ log: @escaping Log) { self.log = log }
    }

    /// One request's state across libmicrohttpd's calls (headers, then body chunks, then the end).
    final class Pending {
        var body: [UInt8] = []
        var limit = 0
        var answered = false
        /// The body went over `limit` (a chunked one: no Content-Length said so first); the rest
        /// is dropped and counted.
        var tooLarge = false
        var dropped = 0
        /// The 413 went out on the socket when the body went over (else it is queued at the end).
        var answeredEarly = false
        /// What `tooLarge` answers: 413, or 503 when the server's bodies in flight are at their bound.
        var refusal: HTTPResponse?
        /// Bytes of `bodiesInFlight` this request holds.
        var reserved = 0
    }

    /// Request bodies held now across this server's connections, and their bound: 256 slow
    /// uploads of 4 MiB each must not hold 1 GiB (past the bound: 503, try again).
    let bodiesInFlight = Locked(0)
    static let maxBodiesInFlight = 32 << 20

    func reserveBody(_ n: Int, for pending: Pending) -> Bool {
        let ok = bodiesInFlight.withLock { total -> Bool in
            guard total + n <= HTTPServer.maxBodiesInFlight else { return false }
            total += n
            return true
        }
        if ok { pending.reserved += n }
        return ok
    }

    func releaseBody(of pending: Pending) {
        let n = pending.reserved
        pending.reserved = 0
        if n > 0 { bodiesInFlight.withLock { $0 -= n } }
    }

    static let access: MHD_AccessHandlerCallback = { cls, connection, url, method, _, uploadData, uploadSize, conCls in
        guard let cls, let connection, let conCls, let uploadSize else { return .NO }
        let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        let methodText = method.map { String(cString: $0) } ?? "GET"
        let path = url.map { String(cString: $0) } ?? "/"
        // First call: the headers are in. Refuse what cannot be served before reading any body.
        guard let existing = conCls.pointee else {
            let pending = Pending()
            conCls.pointee = Unmanaged.passRetained(pending).toOpaque()
            server.connections.requestStarted(UnsafeMutableRawPointer(connection))
            let open = (methodText == "GET" || methodText == "HEAD") && server.openPaths.contains(path)
            if let token = server.bearerToken, !open, !HTTPServer.authorized(connection, token: token) {
                pending.answered = true
                return server.queue(connection, HTTPServer.error(401, "unauthorized", "this address needs Authorization: Bearer <token> (`shoal http token` prints it)",
                                                              extra: [("WWW-Authenticate", "Bearer realm=\"shoal\"")]))
            }
            if server.loopbackHostsOnly, let host = HTTPServer.value(connection, .HEADER_KIND, "Host"), !HTTPServer.isLoopbackHost(host) {
                pending.answered = true
                return server.queue(connection, HTTPServer.error(403, "forbidden",
                    "this address serves requests for localhost only (Host: \(host.prefix(80))); use 127.0.0.1 or localhost, or a non-loopback http.listen address with the token"))
            }
            if HTTPServer.lengthIsAmbiguous(connection) {
                // libmicrohttpd would take one of them; a proxy in front might take the other.
                pending.answered = true
                return server.queue(connection, HTTPServer.error(400, "bad_request",
                                                              "the body's length is ambiguous (Content-Length twice with different values, or with Transfer-Encoding); send one"))
            }
            pending.limit = server.bodyLimit(methodText, path)
            if let lengthText = HTTPServer.value(connection, .HEADER_KIND, "Content-Length"), let length = Int(lengthText), length > pending.limit {
                pending.answered = true
                return server.queue(connection, HTTPServer.error(413, "payload_too_large", "the body is \(length) bytes; at most \(pending.limit) are taken here"))
            }
            return .YES
        }
        let pending = Unmanaged<Pending>.fromOpaque(existing).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            let n = uploadSize.pointee
            uploadSize.pointee = 0
            if pending.tooLarge {
                pending.dropped += n
                return pending.dropped > HTTPServer.discardMaxBytes ? .NO : .YES
            }
            guard !pending.answered else { return .YES }
            let over = pending.body.count + n > pending.limit
            if over || !server.reserveBody(n, for: pending) {
                pending.tooLarge = true
                pending.dropped = pending.body.count + n
                pending.body = []
                server.releaseBody(of: pending)
                let refusal = over ? HTTPServer.tooLarge(pending.limit)
                    : HTTPServer.error(503, "unavailable", "the gateway holds too many request bodies now (\(HTTPServer.maxBodiesInFlight >> 20) MiB); try again",
                                       extra: [("Retry-After", "1"), ("Connection", "close")])
                pending.refusal = refusal
                pending.answeredEarly = HTTPServer.answerEarly(connection, refusal)
                return .YES
            }
            if let uploadData { pending.body.append(contentsOf: UnsafeRawBufferPointer(start: uploadData, count: n)) }
            return .YES
        }
        if pending.tooLarge {
            pending.tooLarge = false
            pending.answered = true
            // Answered already: close (libmicrohttpd logs it as an application error).
            return pending.answeredEarly ? .NO : server.queue(connection, pending.refusal ?? HTTPServer.tooLarge(pending.limit))
        }
        guard !pending.answered else { return .YES }
        pending.answered = true
        let request = HTTPRequest(method: methodText, rawPath: path, query: HTTPServer.values(connection, .GET_ARGUMENT_KIND, decode: true),
                                  headers: HTTPServer.values(connection, .HEADER_KIND, decode: false), body: pending.body)
        pending.body = []
        let answer = server.handler(request)
        server.releaseBody(of: pending)
        return server.queue(connection, answer)
    }

    static let completed: MHD_RequestCompletedCallback = { cls, connection, conCls, _ in
        if let cls, let connection {
            Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue().connections.requestCompleted(UnsafeMutableRawPointer(connection))
        }
        guard let conCls, let p = conCls.pointee else { return }
        if let cls { Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue().releaseBody(of: Unmanaged<Pending>.fromOpaque(p).takeUnretainedValue()) }
        Unmanaged<Pending>.fromOpaque(p).release()
        conCls.pointee = nil
    }

    static let notify: MHD_NotifyConnectionCallback = { cls, connection, _, code in
        guard let cls, let connection else { return }
        let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        let key = UnsafeMutableRawPointer(connection)
        // MHD_CONNECTION_NOTIFY_STARTED = 0, MHD_CONNECTION_NOTIFY_CLOSED = 1 (microhttpd.h).
        switch code.rawValue {
        case 0:
            // Logged on the first and every 1000th: a flood of connections must not flood the log.
            if server.connections.started(key, fd: shoal_mhd_connection_fd(connection)) > 0, server.connections.evicted % 1000 == 1 {
                server.log("\(server.name): at \(server.connections.limit) connections; shutting the longest idle down to make room (\(server.connections.evicted) so far)")
            }
        case 1:
            server.connections.closed(key)
        default:
            break
        }
    }

    static let readStream: MHD_ContentReaderCallback = { cls, _, buf, max in
        guard let cls, let buf else { return -2 }
        let stream = Unmanaged<HTTPStream>.fromOpaque(cls).takeUnretainedValue()
        let n = stream.read(into: UnsafeMutableRawBufferPointer(start: buf, count: max)) { MHD_suspend_connection($0) }
        return n
    }

    static let freeStream: MHD_ContentReaderFreeCallback = { cls in
        guard let cls else { return }
        let stream = Unmanaged<HTTPStream>.fromOpaque(cls).takeRetainedValue()
        stream.markClosed()
        if let server = stream.server.withLock({ $0 }) { server.streams.withLock { $0[ObjectIdentifier(stream)] = nil } }
        stream.server.withLock { $0 = nil }
    }

    func queue(_ connection: OpaquePointer, _ answer: HTTPResponse) -> MHD_Result {
        let response: OpaquePointer?
        switch answer.body {
        case .bytes(let bytes):
            response = bytes.withUnsafeBytes { b in
                MHD_create_response_from_buffer(b.count, UnsafeMutableRawPointer(mutating: b.baseAddress), .RESPMEM_MUST_COPY)
            }
        case .stream(let stream):
            stream.server.withLock { $0 = self }
            streams.withLock { $0[ObjectIdentifier(stream)] = stream }
            stream.attach(connection) { MHD_resume_connection($0) }
            // Registered before `stopped` is read, so either stop() sees this stream or this sees stop().
            if stopped.withLock({ $0 }) { stream.finish() }
            let retained = Unmanaged.passRetained(stream)
            response = MHD_create_response_from_callback(UInt64.max, 4096, HTTPServer.readStream, retained.toOpaque(), HTTPServer.freeStream)
            if response == nil {
                // libmicrohttpd made no response, so it will never call freeStream: undo here.
                retained.release()
                streams.withLock { $0[ObjectIdentifier(stream)] = nil }
                stream.markClosed()
            }
        }
        guard let response else { return .NO }
        defer { MHD_destroy_response(response) }
        for (name, value) in answer.headers { _ = MHD_add_response_header(response, name, value) }
        return MHD_queue_response(connection, UInt32(answer.status), response)
    }

    static func tooLarge(_ limit: Int) -> HTTPResponse {
        error(413, "payload_too_large", "the body is over \(limit) bytes, the most taken here", extra: [("Connection", "close")])
    }

    /// Writes a small answer straight to the connection's socket, for the one case libmicrohttpd
    /// 0.9.75 has no way to answer: a body still coming in (it queues answers only before the body
    /// or after all of it). Nothing else is being written on the socket then (a `100 Continue` is
    /// sent whole before the body is read), and the caller closes the connection afterwards, so
    /// libmicrohttpd never writes after it. False if the socket took none of it (then it is queued
    /// the usual way once the body has ended); a few hundred bytes into an idle socket go whole.
    static func answerEarly(_ connection: OpaquePointer, _ answer: HTTPResponse) -> Bool {
        let fd = shoal_mhd_connection_fd(connection)
        guard fd >= 0, case .bytes(let body) = answer.body else { return false }
        var head = "HTTP/1.1 \(answer.status) \(answer.status == 413 ? "Content Too Large" : "Error")\r\n"
        for (name, value) in answer.headers { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(body.count)\r\n\r\n"
        let bytes = Array(head.utf8) + body
        let n = try? SystemCall.run("send(413)") { bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) } }
        return (n ?? 0) > 0
    }

    public static func error(_ status: Int, _ code: String, _ reason: String, extra: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "application/json; charset=utf-8",
                     text: JSONValue.object(["error": .string(code), "reason": .string(reason)]).compactText + "\n", headers: extra)
    }

    /// `localhost`, `127.0.0.1`, `[::1]`, with or without a port.
    static func isLoopbackHost(_ header: String) -> Bool {
        var host = Substring(header.lowercased())
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return false }
            return host[host.index(after: host.startIndex)..<close] == "::1"
        }
        if let colon = host.lastIndex(of: ":") { host = host[..<colon] }
        if host == "localhost" || host.hasSuffix(".localhost") { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }

    static func authorized(_ connection: OpaquePointer, token: String) -> Bool {
        guard let header = value(connection, .HEADER_KIND, "Authorization") else { return false }
        let prefix = "bearer "  // the scheme's name is case-insensitive (RFC 9110 11.1)
        guard header.lowercased().hasPrefix(prefix) else { return false }
        // Constant time over the token's length: a wrong guess takes as long as a near one.
        let given = Array(header.utf8.dropFirst(prefix.utf8.count)), wanted = Array(token.utf8)
        guard given.count == wanted.count else { return false }
        var diff: UInt8 = 0
        for i in 0..<wanted.count { diff |= given[i] ^ wanted[i] }
        return diff == 0
    }

    static func value(_ connection: OpaquePointer, _ kind: MHD_ValueKind, _ name: String) -> String? {
        MHD_lookup_connection_value(connection, kind, name).map { String(cString: $0) }
    }

    final class Framing {
        var lengths: Set<String> = []
        var transferEncoding = false
    }

    /// Two different Content-Length values, or Content-Length beside Transfer-Encoding (RFC 9112
    /// 6.3: the way request smuggling starts).
    static func lengthIsAmbiguous(_ connection: OpaquePointer) -> Bool {
        let framing = Framing()
        _ = MHD_get_connection_values(connection, .HEADER_KIND, { cls, _, key, value in
            guard let cls, let key else { return .YES }
            let f = Unmanaged<Framing>.fromOpaque(cls).takeUnretainedValue()
            switch String(cString: key).lowercased() {
            case "content-length": f.lengths.insert(value.map { String(cString: $0) } ?? "")
            case "transfer-encoding": f.transferEncoding = true
            default: break
            }
            return .YES
        }, Unmanaged.passUnretained(framing).toOpaque())
        return withExtendedLifetime(framing) { framing.lengths.count > 1 || (!framing.lengths.isEmpty && framing.transferEncoding) }
    }

    final class Collected {
        var values: [String: String] = [:]
        let decode: Bool
        init(decode: Bool) { self.decode = decode }
    }

    static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind, decode: Bool) -> [String: String] {
        let collected = Collected(decode: decode)
        let cls = Unmanaged.passUnretained(collected).toOpaque()
        _ = MHD_get_connection_values(connection, kind, { cls, _, key, value in
            guard let cls, let key else { return .YES }
            let c = Unmanaged<Collected>.fromOpaque(cls).takeUnretainedValue()
            let k = String(cString: key), v = value.map { String(cString: $0) } ?? ""
            if c.decode {
                guard let dk = HTTPRequest.percentDecode(k, plusIsSpace: true), let dv = HTTPRequest.percentDecode(v, plusIsSpace: true) else { return .YES }
                if c.values[dk] == nil { c.values[dk] = dv }
            } else {
                let lk = k.lowercased()
                if c.values[lk] == nil { c.values[lk] = v }
            }
            return .YES
        }, cls)
        return withExtendedLifetime(collected) { collected.values }
    }
}

public struct HTTPServerError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

extension String {
    func trimmingTrailingNewlines() -> String {
        var s = self
        while s.hasSuffix("\n") { s.removeLast() }
        return s
    }
}
