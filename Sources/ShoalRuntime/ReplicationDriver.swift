import Glibc
import ShoalConfig
import ShoalCore
import ShoalGateway
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalWire
import Synchronization

/// Drives a gateway core with real links over its transports (`Transport`: TCP with static peers
/// and DNS-SD, Bluetooth LE, the in-process medium). Threads, never the cooperative pool:
/// - one node thread owns the gateway core (mesh manager + replicator + their glue) and the
///   transports' own state: link events, frames and what transports find come to it through an
///   inbox; it feeds them to the core and carries out what the core answers — hands frames to
///   links, asks the transport of each kind to advertise, scan and dial, closes what the mesh
///   refuses;
/// - one thread per link owns that link's TLS session (mbedTLS sessions are single-threaded): it
///   sends what the node queued (a wake-up interrupts its read) and posts what it reads;
/// - the transports' threads (accepting, dialling, probing, DNS-SD, HCI), started through this
///   driver so that stopping joins them.
package final class ReplicationDriver: TransportHost, @unchecked Sendable {  // node-thread state: see above; the rest is atomics and locks
    let core: GatewayCore
    var node: ReplicationNode { core.node }
    var mesh: MeshManager { core.mesh }
    let host: any ReplicationHost
    let serverTLS: TLSContext
    let clientTLS: TLSContext

    enum Input {
        /// An authenticated link: dialled by us (outgoing) or accepted.
        case opened(LinkID, LinkIO, outgoing: Bool)
        case frame(LinkID, PreparedFrame, bytes: Int)
        case closed(LinkID)
        case transport(TransportEvent)
        /// Work a transport runs on the node thread, where its state lives.
        case call(@Sendable () -> Void)
        case retryNetworks
        case radios(RadioSnapshot)
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

    let lock = ConditionLock()
    var inbox: [Input] = []
    let stopping = Atomic<Bool>(false)
    let nextLink = Atomic<Int>(1)
    let threadsRunning = Atomic<Int>(0)
    /// The transports, and the one that carries each of the mesh's radios.
    var transports: [any Transport] = []
    var carrier: [MeshTransport: any Transport] = [:]
    /// Why a radio has no transport here (advertising over it fails with this reason).
    var missing: [MeshTransport: String] = [:]
    /// Heartbeat of the node thread (monotonic ms), for the service's hang check.
    let nodeBeat = Atomic<Int>(0)

    package init(core: GatewayCore, host: any ReplicationHost, serverTLS: TLSContext, clientTLS: TLSContext) {
        self.core = core
        self.host = host
        self.serverTLS = serverTLS
        self.clientTLS = clientTLS
    }

    /// Sees every input the core gets, when, and what it answered (set before `start`; tests
    /// record a run with it and replay it through a fresh core).
    package var tap: (@Sendable (GatewayCore.Input, UInt64, [GatewayCore.Action]) -> Void)?

    package var log: Logger { host.logger }
    package var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// The network transports a site file asks for: TCP (listening, static peers, DNS-SD with
    /// `wifi`) and, with `bluetooth`, Bluetooth LE.
    package func start(listen: HostPort?, peers: [HostPort], wifi: WifiDiscovery? = nil, bluetooth: BluetoothDiscovery? = nil) throws {
        var list: [any Transport] = []
        if let bluetooth {
            list.append(try BluetoothTransport(adapter: bluetooth.adapter, serviceUUID: bluetooth.serviceUUID,
                                               identity: serverTLS.identity, authenticator: serverTLS.authenticator))
        }
        list.append(TCPTransport(listen: listen, peers: peers, wifi: wifi, serverTLS: serverTLS, clientTLS: clientTLS))
        try start(transports: list, missing: [.bluetooth: "the board names no Bluetooth adapter (bluetooth.adapter in its board file)"])
    }

    /// Runs on an in-process medium instead of TCP and DNS-SD.
    package func start(medium: LocalMedium) {
        try? start(transports: [MediumTransport(medium: medium, serverTLS: serverTLS, clientTLS: clientTLS)], missing: [:])
    }

    /// Starts the transports (each carries the radios it names; the first named wins), then the
    /// node thread. `missing` says why a radio no transport carries cannot be used.
    package func start(transports list: [any Transport], missing: [MeshTransport: String]) throws {
        transports = list
        for t in list { for kind in t.kinds.sorted() where carrier[kind] == nil { carrier[kind] = t } }
        self.missing = missing
        for t in list { try t.start(host: self) }
        spawn("repl-node") { self.nodeLoop() }
    }

    /// The port the TCP listener got (useful with port 0).
    package var listenPort: UInt16? { transports.lazy.compactMap(\.listenPort).first }

    /// `retryNetworks()`.
    package func retryNetworks() { post(.retryNetworks) }

    /// The radio manager saw a change.
    package func radiosChanged(_ s: RadioSnapshot) { post(.radios(s)) }

    package func stop() {
        stopping.store(true, ordering: .relaxed)
        for t in transports { t.stop() }
        lock.withLock { lock.broadcast() }
        // Threads notice within a read timeout; wait a little for them, but never forever. The
        // listeners close after their accept loops ended.
        let deadline = monotonicMillis() + 3000
        while threadsRunning.load(ordering: .acquiring) > 0 && monotonicMillis() < deadline { usleep(10_000) }
        for t in transports { t.close() }
    }

    package func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        threadsRunning.add(1, ordering: .relaxed)
        let ok = DetachedThread.start(name: name) {
            body()
            self.threadsRunning.subtract(1, ordering: .releasing)
        }
        if !ok {
            threadsRunning.subtract(1, ordering: .relaxed)
            log.error(.mesh, "cannot start a replication thread")
        }
    }

    func post(_ input: Input) {
        lock.withLock {
            inbox.append(input)
            lock.broadcast()
        }
    }

    // MARK: TransportHost

    package var me: PeerID { node.peer }
    package var group: String { node.group }
    package func post(_ event: TransportEvent) { post(.transport(event)) }
    package func onNodeThread(_ body: @escaping @Sendable () -> Void) { post(.call(body)) }
    package func newLinkID() -> LinkID { nextLink.add(1, ordering: .relaxed).oldValue }
    package func countFailedConnection() { host.updateCounters { $0.failedConnections += 1 } }

    // MARK: node thread

    /// Node-thread state.
    var links: [LinkID: LinkIO] = [:]
    var transportState: [MeshTransport: (active: Bool, error: String?)] = [:]
    var discoveryDetail: [MeshTransport: String] = [:]
    /// The last problem each transport reported (logged once, not at every retry).
    var lastTransportError: [MeshTransport: String] = [:]

    func nodeLoop() {
        var lastSequence = node.store.lastSequence
        var lastPublish = 0
        feed(.start, now: monotonicMillis())
        while !isStopping {
            let wakeIn: Int = core.nextWake.map { max(0, min(100, Int($0) - monotonicMillis())) } ?? 100
            let batch: [Input] = lock.withLock {
                if inbox.isEmpty && wakeIn > 0 { lock.wait(timeoutMillis: wakeIn) }
                let b = inbox
                inbox.removeAll(keepingCapacity: true)
                return b
            }
            let now = monotonicMillis()
            nodeBeat.store(now, ordering: .relaxed)
            // Frames that arrived together on one link go to the core together (the replicator
            // applies consecutive document frames in one transaction).
            var run: (link: LinkID, frames: [PreparedFrame])?
            func flush() {
                if let r = run { feed(.frames(r.link, r.frames), now: now) }
                run = nil
            }
            for input in batch {
                if case .frame(let id, let frame, let bytes) = input {
                    host.updateCounters { $0.messagesReceived += 1; $0.bytesReceived += bytes + 4 }
                    if run?.link == id { run!.frames.append(frame) } else { flush(); run = (id, [frame]) }
                    continue
                }
                flush()
                handle(input, now: now)
            }
            flush()
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
        }
        feed(.stop, now: monotonicMillis())
        for io in links.values { io.close() }
        publish()
    }

    /// One input from the inbox (frames are batched by the loop).
    func handle(_ input: Input, now: Int) {
        switch input {
        case .opened(let id, let io, let outgoing):
            links[id] = io
            feed(.linkOpened(id, peer: io.session.peerID, io.transport, outgoing: outgoing), now: now)
            if core.keeps(id) { carrier[io.transport]?.linkKept(io) }
        case .frame(let id, let frame, _):
            feed(.frames(id, [frame]), now: now)
        case .closed(let id):
            if let io = links.removeValue(forKey: id) { carrier[io.transport]?.linkEnded(io) }
            feed(.linkClosed(id), now: now)
        case .transport(let event):
            handle(event, now: now)
        case .call(let body):
            body()
        case .retryNetworks:
            log.info(.mesh, "retrying the radios now (retryNetworks)")
            feed(.retryNetworks, now: now)
        case .radios(let snapshot):
            for t in transports { t.radiosChanged(snapshot) }
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
