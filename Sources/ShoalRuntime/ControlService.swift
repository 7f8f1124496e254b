import Glibc
import ShoalCore
import ShoalLinux
import ShoalStore
import ShoalSupervision
import ShoalWire
import Synchronization
import ShoalThreads

/// The local control socket (Unix domain, mode 0660) that `shoal status`, `shoal doc …` and
/// `shoal changes` talk to. Accepting and every connection run on OS threads of their own, so a
/// slow client never stalls the gateway; at most `maxConnections` are served at once, an idle one
/// is closed after `idleTimeoutMillis`, and a malformed frame closes only its own connection.
struct ControlService: Service {
    let gateway: Gateway
    let opened: OpenedStore
    static let maxConnections = 16
    static let idleTimeoutMillis: Int32 = 60_000

    func run(context: ServiceContext) async throws {
        let path = gateway.socketPath
        try Files.makeDirectories(Files.directory(of: path))
        let listener = try UnixSocketListener(path: path)
        gateway.logger.info(.control, "control socket listening on \(path)")
        let ended = Latch()
        let failure = Locked<String?>(nil)
        let active = Atomic<Int>(0)
        let gw = gateway, opened = self.opened
        // The accept loop and every connection: joined (with a deadline) when the service stops.
        let workers = WorkerGroup()
        let started = workers.spawn("control-accept") {
            defer { ended.open() }
            var consecutiveErrors = 0
            while !context.isShuttingDown {
                context.heartbeat()
                do {
                    guard let socket = try listener.accept(timeoutMillis: 250) else { continue }
                    consecutiveErrors = 0
                    if active.add(1, ordering: .relaxed).newValue > ControlService.maxConnections {
                        active.subtract(1, ordering: .relaxed)
                        ControlService.refuse(socket, "too many control connections (\(ControlService.maxConnections)); try again")
                        continue
                    }
                    let ok = workers.spawn("control-conn") {
                        defer { active.subtract(1, ordering: .relaxed) }
                        ControlConnection(socket: socket, gateway: gw, opened: opened, context: context).serve()
                    }
                    if !ok {
                        active.subtract(1, ordering: .relaxed)
                        ControlService.refuse(socket, "gateway cannot start a thread for this connection")
                    }
                } catch {
                    consecutiveErrors += 1
                    gw.logger.warning(.control, "accept on \(path) failed: \(error)")
                    if consecutiveErrors >= 50 {
                        failure.withLock { $0 = "accept keeps failing: \(error)" }
                        return
                    }
                    SystemCall.pause(millis: 100)
                }
            }
        }
        guard started else {
            listener.close()
            throw SystemError(call: "pthread_create(control accept loop)", code: 11)
        }
        context.markReady()
        _ = await ended.wait()
        listener.close()
        // Connections see the shutdown within 250 ms (their read timeout).
        let abandoned = (try? await gateway.workThread.run { workers.join(timeoutMillis: 3000) }) ?? []
        if !abandoned.isEmpty { gateway.logger.warning(.control, "stopping: abandoned \(abandoned.joined(separator: ", ")) still blocked after 3 s") }
        if let why = failure.withLock({ $0 }) { throw ControlFailure(message: why) }
    }

    struct ControlFailure: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    static func refuse(_ socket: UnixSocket, _ message: String) {
        if let frame = try? ControlMessage.encode(ControlMessage.failure(ControlError(code: .unavailable, message: message))) {
            try? socket.writeAll(frame, timeoutMillis: 500)
        }
        socket.close()
    }
}

/// One client of the control socket: frames in, one reply per request; `changes` with `follow`
/// turns the connection into a stream of change frames until the client hangs up.
struct ControlConnection {
    let socket: UnixSocket
    let gateway: Gateway
    let opened: OpenedStore
    let context: ServiceContext

    func serve() {
        defer { socket.close() }
        var decoder = FrameDecoder(limit: ControlMessage.frameLimit)
        var idleMillis: Int32 = 0
        var first = true
        while !context.isShuttingDown {
            do {
                guard let bytes = try socket.read(timeoutMillis: 250) else {
                    idleMillis += 250
                    if idleMillis >= ControlService.idleTimeoutMillis { return }
                    continue
                }
                idleMillis = 0
                if bytes.isEmpty { return }  // client closed
                if first {
                    first = false
                    if ControlConnection.looksLikeHTTP(bytes) {
                        // curl pointed at the wrong socket: say where the HTTP API is, in HTTP.
                        let http = Files.directory(of: gateway.storePath) + "/http.sock"
                        let text = "this is shoal's control socket (for the shoal CLI); the HTTP API is on \(http) and \(gateway.httpAddresses.first { !$0.hasPrefix("unix:") } ?? "its http.listen addresses")\n"
                        try? socket.writeAll(Array("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: \(text.utf8.count)\r\nConnection: close\r\n\r\n\(text)".utf8), timeoutMillis: 500)
                        gateway.logger.verbose(.control, "an HTTP request came to the control socket; answered with where the HTTP API is")
                        return
                    }
                }
                decoder.feed(bytes)
                while let payload = try decoder.next() {
                    switch ControlMessage.decode(payload) {
                    case .failure(let error):
                        try send(ControlMessage.failure(error))
                    case .success(let request):
                        if request["op"]?.stringValue == "changes", request["follow"]?.boolValue == true {
                            try follow(request)
                            return
                        }
                        if request["op"]?.stringValue == "doc.query", request["follow"]?.boolValue == true {
                            try followQuery(request)
                            return
                        }
                        try send(ControlHandler(gateway: gateway, opened: opened).handle(request))
                    }
                }
            } catch let error as FrameError {
                // The stream cannot be resynchronised after a bad length: say why and hang up.
                gateway.logger.warning(.control, "control client sent a bad frame: \(error)")
                try? send(ControlMessage.failure(ControlError(code: .badRequest, message: error.description)))
                return
            } catch {
                gateway.logger.verbose(.control, "control connection ended: \(error)")
                return
            }
        }
    }

    func send(_ value: JSONValue) throws {
        try socket.writeAll(try ControlMessage.encode(value))
    }

    /// A request line's start (`GET /`, `POST /`…): a control frame starts with its length, four
    /// bytes that would have to spell a method and claim over a gigabyte.
    static func looksLikeHTTP(_ bytes: [UInt8]) -> Bool {
        let head = String(decoding: bytes.prefix(8), as: UTF8.self)
        return ["GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH "].contains { head.hasPrefix($0) || $0.hasPrefix(head) && head.count >= 4 }
    }

    /// Streams changes after `since` as they commit, until the client hangs up or shoal stops.
    func follow(_ request: [String: JSONValue]) throws {
        var since = request["since"]?.int64Value ?? 0
        try send(ControlMessage.success(["following": true, "since": .int(since)]))
        while !context.isShuttingDown {
            // A hang-up shows as readable-with-EOF; anything else the client sends is ignored.
            if try socket.waitReadable(timeoutMillis: 0) {
                guard let bytes = try socket.read(timeoutMillis: 0), !bytes.isEmpty else { return }
            }
            let store = opened.store
            let changes: [Change]
            do { changes = try store.changes(since: since, limit: 500) } catch {
                // The store closed under us (it is restarting, and this service with it).
                try? send(ControlMessage.failure(ControlHandler.translate(error)))
                return
            }
            if changes.isEmpty {
                _ = store.waitForChange(after: since, timeoutMillis: 500)
                continue
            }
            for c in changes {
                try send(["change": ControlHandler.json(c)])
                since = c.sequence
            }
        }
    }

}
