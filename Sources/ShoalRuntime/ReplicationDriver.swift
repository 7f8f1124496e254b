import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalWire
import Synchronization

/// Drives the sans-IO `ReplicationNode` with real links: TCP + mutual TLS to the site file's static
/// peers and from its listen address. Threads, never the cooperative pool:
/// - one node thread owns the node: link events and frames come to it through an inbox, it runs
///   the node and hands frames to the links;
/// - one thread per link owns that link's TLS session (mbedTLS sessions are single-threaded): it
///   sends what the node queued (a wake-up interrupts its read) and posts what it reads;
/// - a listener thread and one connector thread per static peer, which redials with backoff.
final class ReplicationDriver: @unchecked Sendable {
    let node: ReplicationNode
    let gateway: Gateway
    let serverTLS: TLSContext
    let clientTLS: TLSContext
    let backoffMillis: Int

    private enum Input {
        case opened(LinkID, LinkIO)
        case frame(LinkID, PreparedFrame, bytes: Int)
        case closed(LinkID)
    }

    private let lock = ConditionLock()
    private var inbox: [Input] = []
    private let stopping = Atomic<Bool>(false)
    private let nextLink = Atomic<Int>(1)
    private let threadsRunning = Atomic<Int>(0)
    private var listener: TCPListener?
    /// Heartbeat of the node thread (monotonic ms), for the service's hang check.
    let nodeBeat = Atomic<Int>(0)

    init(node: ReplicationNode, gateway: Gateway, serverTLS: TLSContext, clientTLS: TLSContext, backoffMillis: Int) {
        self.node = node
        self.gateway = gateway
        self.serverTLS = serverTLS
        self.clientTLS = clientTLS
        self.backoffMillis = max(100, backoffMillis)
    }

    var log: Logger { gateway.logger }
    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    static func nowMillis() -> Int {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
    }

    func start(listen: HostPort?, peers: [HostPort]) throws {
        if let listen {
            let l = try TCPListener(ipv4: listen.host, port: listen.port)
            listener = l
            log.info(.mesh, "replication listening on \(listen.host):\(l.port)")
            spawn("repl-accept") { self.acceptLoop(l) }
        }
        spawn("repl-node") { self.nodeLoop() }
        for p in peers { spawn("repl-dial") { self.dialLoop(p) } }
    }

    /// The port the listener got (useful with port 0).
    var listenPort: UInt16? { listener?.port }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        lock.withLock { lock.broadcast() }
        listener?.close()
        // Threads notice within a read timeout; wait a little for them, but never forever.
        let deadline = ReplicationDriver.nowMillis() + 3000
        while threadsRunning.load(ordering: .relaxed) > 0 && ReplicationDriver.nowMillis() < deadline { usleep(10_000) }
    }

    private func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        threadsRunning.add(1, ordering: .relaxed)
        let ok = DetachedThread.start(name: name) {
            body()
            self.threadsRunning.subtract(1, ordering: .relaxed)
        }
        if !ok {
            threadsRunning.subtract(1, ordering: .relaxed)
            log.error(.mesh, "cannot start a replication thread")
        }
    }

    private func post(_ input: Input) {
        lock.withLock {
            inbox.append(input)
            lock.broadcast()
        }
    }

    // MARK: node thread

    private func nodeLoop() {
        var links: [LinkID: LinkIO] = [:]
        var lastSequence = node.store.lastSequence
        var lastTick = 0
        while !isStopping {
            let batch: [Input] = lock.withLock {
                if inbox.isEmpty { lock.wait(timeoutMillis: 100) }
                let b = inbox
                inbox.removeAll(keepingCapacity: true)
                return b
            }
            let now = ReplicationDriver.nowMillis()
            nodeBeat.store(now, ordering: .relaxed)
            var actions: [ReplicationAction] = []
            // Frames that arrived together on one link go to the node together (it applies
            // consecutive document frames in one transaction).
            var run: (link: LinkID, frames: [PreparedFrame])?
            func flush() {
                if let r = run { actions += node.preparedFramesReceived(r.link, r.frames, now: UInt64(now)) }
                run = nil
            }
            for input in batch {
                switch input {
                case .opened(let id, let io):
                    flush()
                    links[id] = io
                    actions += node.linkOpened(id, neighbours: node.connectedPeers)
                case .frame(let id, let frame, let bytes):
                    gateway.counters.withLock { $0.messagesReceived += 1; $0.bytesReceived += bytes + 4 }
                    if run?.link == id { run!.frames.append(frame) } else { flush(); run = (id, [frame]) }
                case .closed(let id):
                    flush()
                    links.removeValue(forKey: id)
                    actions += node.linkClosed(id, now: UInt64(now))
                }
            }
            flush()
            if now - lastTick >= 250 {
                lastTick = now
                actions += node.tick(now: UInt64(now))
            }
            let seq = node.store.lastSequence
            if seq != lastSequence {
                lastSequence = seq
                actions += node.localChangesCommitted()
            }
            for action in actions {
                switch action {
                case .send(let id, let payload):
                    gateway.counters.withLock { $0.messagesSent += 1; $0.bytesSent += payload.count + 4 }
                    links[id]?.send(payload)
                case .close(let id):
                    links[id]?.close()
                case .event(let e):
                    report(e)
                }
            }
        }
        for io in links.values { io.close() }
    }

    private func report(_ e: ReplicationEvent) {
        switch e {
        case .peerConnected(let link, let peer):
            gateway.counters.withLock { $0.peers[String(link)] = peer.description }
            log.info(.replication, "replicating with peer \(peer) (link \(link))")
        case .documents(let link, let peer, let direction, let items):
            gateway.counters.withLock { c in
                if direction == .pull { c.documentsReceived += items.count } else { c.documentsSent += items.count }
            }
            let errors = items.filter { $0.error != nil }.count
            log.verbose(.replication, "link \(link): \(direction.rawValue) \(items.count) documents with \(peer.short)\(errors > 0 ? " (\(errors) refused)" : "")")
        case .clockSkew(_, let peer, let ahead):
            gateway.counters.withLock { _ = $0.skewedPeers.insert(peer.description) }
            log.warning(.replication, "peer \(peer)'s clock runs \(ahead / 1000) s ahead of ours; its timestamps do not move our clock")
        case .conflict(_, let peer, let record):
            gateway.counters.withLock { $0.conflicts += 1 }
            log.info(.replication, "conflict on \(record.collection)/\(record.id) with \(peer.short): \(record.resolver) chose \(record.outcome)")
        case .topology:
            break  // static peers: no mesh manager to tell yet
        case .linkClosed(let link, let peer, let error):
            gateway.counters.withLock { _ = $0.peers.removeValue(forKey: String(link)) }
            if let error {
                log.warning(.replication, "link \(link) to \(peer?.description ?? "unknown peer") closed: \(error)")
            } else {
                log.info(.replication, "link \(link) to \(peer?.description ?? "unknown peer") closed")
            }
        }
    }

    // MARK: links

    private func acceptLoop(_ listener: TCPListener) {
        while !isStopping {
            guard let stream = try? listener.accept(timeoutMillis: 250) else { continue }
            spawn("repl-link") {
                do {
                    let session = try TLSSession.accept(over: stream, context: self.serverTLS)
                    self.run(LinkIO(id: self.nextLink.add(1, ordering: .relaxed).oldValue, session: session, stream: stream))
                } catch {
                    self.gateway.counters.withLock { $0.failedConnections += 1 }
                    self.log.warning(.tls, "refused an incoming replication link: \(error)")
                }
            }
        }
    }

    private func dialLoop(_ peer: HostPort) {
        var delay = backoffMillis
        while !isStopping {
            do {
                let stream = try TCPStream.connect(ipv4: peer.host, port: peer.port, timeoutMillis: 5000)
                let session = try TLSSession.connect(over: stream, context: clientTLS)
                delay = backoffMillis
                run(LinkIO(id: nextLink.add(1, ordering: .relaxed).oldValue, session: session, stream: stream))
            } catch {
                gateway.counters.withLock { $0.failedConnections += 1 }
                log.verbose(.mesh, "cannot link to \(peer): \(error); retrying in \(delay) ms")
            }
            // Wait out the backoff, but wake at once on stop.
            let until = ReplicationDriver.nowMillis() + delay
            lock.withLock {
                while !isStopping && ReplicationDriver.nowMillis() < until { lock.wait(timeoutMillis: until - ReplicationDriver.nowMillis()) }
            }
            delay = min(delay * 2, 60_000)
        }
    }

    /// Runs one link on the calling thread until it closes.
    private func run(_ io: LinkIO) {
        post(.opened(io.id, io))
        var decoder = FrameDecoder(limit: ReplicationMessage.frameLimit)
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let bodyLimit = node.store.options.maxBodyBytes
        loop: while !isStopping && !io.isClosed {
            do {
                for payload in io.takeOutbox() {
                    try io.session.write(try FrameEncoder.encode(payload, limit: ReplicationMessage.frameLimit), timeoutMillis: 30_000)
                }
                let n = try buffer.withUnsafeMutableBytes { (raw) throws(TLSError) -> Int in try io.session.read(into: raw, timeoutMillis: 1000) }
                if n == 0 { break loop }
                decoder.feed(buffer[0..<n])
                // Decoding and checking documents happen here, on the link's thread, so the node's
                // thread only resolves and writes.
                while let frame = try decoder.next() {
                    post(.frame(io.id, ReplicationNode.prepare(frame, maxBodyBytes: bodyLimit), bytes: frame.count))
                }
            } catch TLSError.timeout {
                continue
            } catch {
                log.verbose(.replication, "link \(io.id): \(error)")
                break loop
            }
        }
        // What the node queued last (an error frame before a close) goes out if it can.
        for payload in io.takeOutbox() {
            if let frame = try? FrameEncoder.encode(payload, limit: ReplicationMessage.frameLimit) { try? io.session.write(frame, timeoutMillis: 1000) }
        }
        io.session.close()
        post(.closed(io.id))
    }
}

/// One link's session, its outbox, and the wake-up that interrupts its read.
final class LinkIO: @unchecked Sendable {
    let id: LinkID
    let session: TLSSession
    let stream: TCPStream
    private let outbox = Mutex<[[UInt8]]>([])
    private let closedFlag = Atomic<Bool>(false)

    init(id: LinkID, session: TLSSession, stream: TCPStream) {
        self.id = id
        self.session = session
        self.stream = stream
    }

    var isClosed: Bool { closedFlag.load(ordering: .relaxed) }

    func send(_ payload: [UInt8]) {
        outbox.withLock { $0.append(payload) }
        stream.wake()
    }

    func takeOutbox() -> [[UInt8]] { outbox.withLock { o in defer { o.removeAll() }; return o } }

    func close() {
        closedFlag.store(true, ordering: .relaxed)
        stream.wake()
    }
}
