import Glibc
import ShoalConfig
import ShoalCore
import ShoalGateway
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalSupervision
import ShoalTLS
import ShoalWire
import Synchronization
import ShoalThreads

/// Drives a gateway core with real links over its transports (`Transport`: TCP with static peers
/// and DNS-SD, Bluetooth LE, the in-process medium). An actor whose executor is one dedicated
/// thread (`ThreadExecutor`), never Swift's cooperative pool, since the core calls SQLite
/// synchronously:
/// - the actor owns the gateway core (mesh manager + replicator + their glue) and every link:
///   link events, frames and what transports find come to it through an inbox (one turn drains
///   it, so frames that arrived together are applied together); it feeds them to the core and
///   carries out what the core answers — hands frames to links, asks the transport of each kind
///   to advertise, scan and dial, closes what the mesh refuses;
/// - one thread per link owns that link's TLS session (mbedTLS sessions are single-threaded): it
///   sends what the actor queued (a wake-up interrupts its read) and posts what it reads;
/// - the transports' threads (accepting, dialling, probing, DNS-SD, HCI) are workers of this
///   driver, joined with a deadline when it stops; a transport's own state lives on the actor's
///   thread (`onNodeThread`).
package actor ReplicationDriver: TransportHost {
    let core: GatewayCore
    var node: ReplicationNode { core.node }
    var mesh: MeshManager { core.mesh }
    nonisolated let host: any ReplicationHost
    package nonisolated let serverTLS: TLSContext
    package nonisolated let clientTLS: TLSContext
    nonisolated let executor: ThreadExecutor
    nonisolated let workers = WorkerGroup()
    package nonisolated let me: PeerID
    package nonisolated let group: String
    /// The largest body a received document may have (checked on the link's thread).
    nonisolated let maxBodyBytes: Int
    /// Sees every input the core gets, when, and what it answered (tests record a run with it and
    /// replay it through a fresh core).
    nonisolated let tap: (@Sendable (GatewayCore.Input, UInt64, [GatewayCore.Action]) -> Void)?

    package nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    enum Input: Sendable {
        /// An authenticated link: dialled by us (outgoing) or accepted.
        case opened(LinkID, LinkIO, outgoing: Bool)
        case frame(LinkID, PreparedFrame, bytes: Int)
        /// The link's I/O ended: `error` says why when it broke (nil: closed by us or the peer).
        case closed(LinkID, error: String?)
        case transport(TransportEvent)
        case retryNetworks
        case radios(RadioSnapshot)
        case revoked(Set<PeerID>)
    }

    /// Bluetooth LE discovery: the adapter and the group's service UUID.
    package struct BluetoothDiscovery {
        var adapter: String
        var serviceUUID: [UInt8]
        package init(adapter: String, serviceUUID: [UInt8]) {
            self.adapter = adapter
            self.serviceUUID = serviceUUID
        }
    }

    package typealias WifiDiscovery = TCPTransport.WifiDiscovery

    /// What the link and transport threads posted, and whether a turn to drain it is queued.
    nonisolated let inbox = Locked<(inputs: [Input], turnQueued: Bool)>(([], false))
    nonisolated let stopping = Atomic<Bool>(false)
    nonisolated let nextLink = Atomic<Int>(1)
    /// The transports, and the one that carries each of the mesh's radios (set once by `start`).
    nonisolated let started = Locked<(transports: [any Transport], carrier: [MeshTransport: any Transport], missing: [MeshTransport: String])>(([], [:], [:]))
    /// Heartbeat of the actor's thread (monotonic ms), for the service's hang check.
    nonisolated let nodeBeat = Atomic<Int>(0)
    /// The mesh's backoffMillis (a refused peer's wait, and the refusing side's warning window).
    package nonisolated let backoffMillis: Int
    /// Incoming handshakes that failed, for one warning per peer per backoff window.
    nonisolated let incomingRefusals = Locked(RefusalLog())

    /// Fails only if the system refuses to make the driver's thread.
    /// `children`: where the links appear in the supervision tree (the replication service's
    /// report and path); nil: nowhere.
    package init(core: GatewayCore, host: any ReplicationHost, serverTLS: TLSContext, clientTLS: TLSContext,
                 children: (report: SupervisionReport, path: String)? = nil,
                 tap: (@Sendable (GatewayCore.Input, UInt64, [GatewayCore.Action]) -> Void)? = nil) throws(SystemError) {
        guard let executor = ThreadExecutor(name: "repl-node") else { throw SystemError(call: "pthread_create", code: EAGAIN) }
        self.executor = executor
        self.core = core
        self.host = host
        self.serverTLS = serverTLS
        self.clientTLS = clientTLS
        self.tap = tap
        me = core.node.peer
        group = core.node.group
        maxBodyBytes = core.node.store.options.maxBodyBytes
        lastSequence = core.node.store.lastSequence
        linkChildren = LinkChildren(report: children?.report, path: children?.path ?? "replication")
        backoffMillis = Int(clamping: core.mesh.settings.backoffMillis)
    }

    package nonisolated var log: Logger { host.logger }
    package nonisolated var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// The network transports a site file asks for: TCP (listening, static peers, DNS-SD with
    /// `wifi`) and, with `bluetooth`, Bluetooth LE.
    package nonisolated func start(listen: HostPort?, peers: [HostPort], wifi: WifiDiscovery? = nil, bluetooth: BluetoothDiscovery? = nil,
                                   backoffMillis: Int = 10_000) throws {
        var list: [any Transport] = []
        if let bluetooth {
            list.append(try BluetoothTransport(adapter: bluetooth.adapter, serviceUUID: bluetooth.serviceUUID,
                                               credentials: serverTLS.credentials, authenticator: serverTLS.authenticator, executor: executor))
        }
        list.append(TCPTransport(listen: listen, peers: peers, wifi: wifi, serverTLS: serverTLS, clientTLS: clientTLS, executor: executor,
                                 backoffMillis: backoffMillis))
        try start(transports: list, missing: [.bluetooth: "the board names no Bluetooth adapter (bluetooth.adapter in its board file)"])
    }

    /// Starts the transports (each carries the radios it names; the first named wins), then the
    /// core on the actor's thread. `missing` says why a radio no transport carries cannot be used.
    package nonisolated func start(transports list: [any Transport], missing: [MeshTransport: String]) throws {
        var carrier: [MeshTransport: any Transport] = [:]
        for t in list { for kind in t.kinds.sorted() where carrier[kind] == nil { carrier[kind] = t } }
        started.withLock { $0 = (list, carrier, missing) }
        do {
            for t in list { try t.start(host: self) }
        } catch {
            // Those that started (a BLE agent, a listener) and the driver's thread end here.
            stop()
            throw error
        }
        executor.execute { self.assumeIsolated { $0.begin() } }
    }

    /// The port the TCP listener got (useful with port 0).
    package nonisolated var listenPort: UInt16? { started.withLock { $0.transports }.lazy.compactMap(\.listenPort).first }

    /// `retryNetworks()`.
    package nonisolated func retryNetworks() { post(.retryNetworks) }

    /// The fleet's trust revoked these peers: their links close now, and stay closed.
    package nonisolated func peersRevoked(_ peers: Set<PeerID>) { post(.revoked(peers)) }

    /// The radio manager saw a change.
    package nonisolated func radiosChanged(_ s: RadioSnapshot) { post(.radios(s)) }

    /// Stops the core (its links close), then the transports; joins every thread of the driver
    /// for up to 3 s and logs those it had to abandon. Blocks: call it from a thread of your own.
    package nonisolated func stop() {
        guard !stopping.exchange(true, ordering: .relaxed) else { return }
        let transports = started.withLock { $0.transports }
        executor.execute { self.assumeIsolated { $0.end() } }
        for t in transports { t.stop() }
        executor.shutdown()
        let abandoned = workers.join(timeoutMillis: 3000)
        if !abandoned.isEmpty { log.warning(.replication, "stopping: abandoned threads still blocked after 3 s: \(abandoned.joined(separator: ", "))") }
        if !executor.join(timeoutMillis: 1000) { log.warning(.replication, "stopping: abandoned the driver's thread (its current job did not return in 1 s)") }
        // The listeners close after their accept loops ended.
        for t in transports { t.close() }
        // Each transport holds this driver as its host: let go of them, or neither is ever freed.
        started.withLock { $0 = ([], [:], [:]) }
    }

    package nonisolated func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        if !workers.spawn(name, body) { log.error(.mesh, "cannot start a replication thread (\(name))") }
    }

    nonisolated func post(_ input: Input) {
        let queueTurn = inbox.withLock { box -> Bool in
            box.inputs.append(input)
            defer { box.turnQueued = true }
            return !box.turnQueued
        }
        if queueTurn { executor.execute { self.assumeIsolated { $0.turn() } } }
    }

    // MARK: TransportHost

    package nonisolated func post(_ event: TransportEvent) { post(.transport(event)) }
    package nonisolated func onNodeThread(_ body: @escaping @Sendable () -> Void) { executor.execute(body) }
    package nonisolated func newLinkID() -> LinkID { nextLink.add(1, ordering: .relaxed).oldValue }
    package nonisolated func countFailedConnection() { host.updateCounters { $0.failedConnections += 1 } }

    package nonisolated func incomingFailed(from: String, _ error: TLSError) {
        countFailedConnection()
        let window = max(backoffMillis, 1000)
        guard let quiet = incomingRefusals.withLock({ $0.note(error.peer ?? from, nowMillis: monotonicMillis(), windowMillis: window) }) else {
            return log.verbose(.tls, "refused an incoming replication link \(from) again: \(error)")
        }
        let more = quiet > 0 ? " (\(quiet) more since the last warning)" : ""
        if case .refusedByPeer = error {
            log.warning(.tls, "an incoming replication link \(from) ended in its handshake: \(error)\(more)")
        } else {
            log.warning(.tls, "refused an incoming replication link \(from): \(error)\(more); said once per \(window) ms per peer")
        }
    }

    // MARK: On the actor

    var transports: [any Transport] = []
    var carrier: [MeshTransport: any Transport] = [:]
    /// Why a radio has no transport here (advertising over it fails with this reason).
    var missing: [MeshTransport: String] = [:]
    var links: [LinkID: LinkIO] = [:]
    var transportState: [MeshTransport: (active: Bool, error: String?)] = [:]
    var discoveryDetail: [MeshTransport: String] = [:]
    /// The last problem each transport reported (logged once, not at every retry).
    var lastTransportError: [MeshTransport: String] = [:]
    /// Why each peer last refused us (logged once, not at every redial), until a link to it opens.
    var lastRefusal: [PeerID: String] = [:]
    var lastSequence: Int64
    /// One child per linked peer, in the supervision tree.
    var linkChildren: LinkChildren
    var lastPublish = 0
    /// When a frame last went either way on a link to each peer (monotonic ms), for `/metrics`.
    /// Pruned to the peers the mesh knows at each publish.
    var lastActivity: [PeerID: Int] = [:]
    /// When the next timed turn is queued for (nil: none).
    var timedTurnAt: Int?
    /// The core started: turns may drain the inbox (transport threads can post before that).
    var began = false

    /// The links held to `peer` now, in order (what tests compare before and after a fault).
    package func links(to peer: PeerID) -> [LinkID] {
        links.filter { core.keeps($0.key) && $0.value.session.peerID == peer }.map(\.key).sorted()
    }

    func begin() {
        (transports, carrier, missing) = started.withLock { $0 }
        began = true
        feed(.start, now: monotonicMillis())
        turn()
    }

    func end() {
        feed(.stop, now: monotonicMillis())
        for io in links.values { io.close() }
        publish()
        transports = []
        carrier = [:]
        linkChildren.removeAll()
    }

    /// One turn: what was posted (frames of one link together), then timers, local commits and
    /// status; then the next timed turn (at the core's next wake, at most 100 ms away).
    func turn() {
        // Before begin() what was posted waits in the inbox; begin's own turn drains it.
        guard began, !isStopping else { return }
        let now = monotonicMillis()
        nodeBeat.store(now, ordering: .relaxed)
        let batch = inbox.withLock { box -> [Input] in
            defer { box = ([], false) }
            return box.inputs
        }
        drain(batch, now: now)
        if let w = core.nextWake, UInt64(now) >= w { feed(.tick, now: now) }
        let seq = node.store.lastSequence
        if seq != lastSequence {
            lastSequence = seq
            feed(.localChangesCommitted, now: now)
        }
        if now - lastPublish >= 250 {
            lastPublish = now
            publish()
        }
        let next = min(now + 100, core.nextWake.map { max(now + 1, Int($0)) } ?? now + 100)
        if timedTurnAt.map({ next < $0 || $0 <= now }) ?? true {
            timedTurnAt = next
            executor.at(next) {
                self.assumeIsolated { me in
                    if me.timedTurnAt == next { me.timedTurnAt = nil }
                    me.turn()
                }
            }
        }
    }

    /// Frames that arrived together on one link go to the core together (the replicator applies
    /// consecutive document frames in one transaction).
    func drain(_ batch: [Input], now: Int) {
        var run: (link: LinkID, frames: [PreparedFrame])?
        func flush() {
            if let r = run { feed(.frames(r.link, r.frames), now: now) }
            run = nil
        }
        for input in batch {
            if case .frame(let id, let frame, let bytes) = input {
                host.updateCounters { $0.messagesReceived += 1; $0.bytesReceived += bytes + 4 }
                if let peer = links[id]?.session.peerID { lastActivity[peer] = now }
                if run?.link == id { run!.frames.append(frame) } else { flush(); run = (id, [frame]) }
                continue
            }
            flush()
            handle(input, now: now)
        }
        flush()
    }

    /// One input from the inbox (frames are batched by the loop).
    func handle(_ input: Input, now: Int) {
        switch input {
        case .opened(let id, let io, let outgoing):
            links[id] = io
            feed(.linkOpened(id, peer: io.session.peerID, io.transport, outgoing: outgoing), now: now)
            if core.keeps(id) {
                lastRefusal[io.session.peerID] = nil
                carrier[io.transport]?.linkKept(io)
                linkChildren.opened(id, peer: io.session.peerID)
            } else {
                links[id] = nil  // refused: the core asked for its close already; it was never a link
            }
        case .frame(let id, let frame, _):
            feed(.frames(id, [frame]), now: now)
        case .closed(let id, let error):
            if let io = links.removeValue(forKey: id) {
                carrier[io.transport]?.linkEnded(io)
                linkChildren.ended(id, peer: io.session.peerID, error: error, now: now)
            }
            feed(.linkClosed(id), now: now)
        case .transport(let event):
            handle(event, now: now)
        case .retryNetworks:
            log.info(.mesh, "retrying the radios now (retryNetworks)")
            feed(.retryNetworks, now: now)
        case .radios(let snapshot):
            for t in transports { t.radiosChanged(snapshot) }
        case .revoked(let peers):
            feed(.peersRevoked(peers), now: now)
        }
    }

    func handle(_ event: TransportEvent, now: Int) {
        switch event {
        case .advertising(let kind, let ok, let reason):
            feed(ok ? .advertisingStarted(kind) : .advertisingFailed(kind, reason: reason ?? "advertising failed"), now: now)
        case .discovered(let peer, let kind, let probe):
            discovered(peer, kind, probe: probe, now: now)
        case .lost(let peer, let kind):
            feed(.lost(peer, kind), now: now)
        case .radio(let kind, let up):
            feed(.transport(kind, up: up), now: now)
        case .dialFailed(let peer, let kind, let reason):
            countFailedConnection()
            feed(.dialFailed(peer, kind, reason: reason), now: now)
        case .refused(let peer, let kind, let address, let error):
            countFailedConnection()
            // Said once per reason; the redials (one per backoffMillis) are verbose.
            let reason = "\(address): \(error)"
            if lastRefusal[peer] == reason {
                log.verbose(.mesh, "peer \(peer.short) at \(address) refused us again (\(kind.rawValue)); next try in \(backoffMillis) ms")
            } else {
                log.warning(.mesh, "\(error) (at \(address), \(kind.rawValue)); trying again every \(backoffMillis) ms (backoffMillis)")
                lastRefusal[peer] = reason
            }
            feed(.refused(peer, kind, reason: reason), now: now)
        case .detail(let kind, let text):
            discoveryDetail[kind] = text
        }
    }

    /// A peer answered. If a probe found it (a session is up) and the mesh wants that peer now,
    /// the probe becomes the link (one handshake, not two); otherwise the probe is closed.
    func discovered(_ peer: PeerID, _ kind: MeshTransport, probe: LinkIO?, now: Int) {
        var actions = decide(.discovered(peer, kind, load: nil), now: now)
        if let probe {
            if let i = actions.firstIndex(where: { if case .connect(peer, _) = $0 { return true }; return false }) {
                actions.remove(at: i)
                spawn("repl-link") { self.run(probe, outgoing: true) }
            } else {
                probe.session.close()
                probe.stream.close()
            }
        }
        perform(actions, now: now)
    }
}
