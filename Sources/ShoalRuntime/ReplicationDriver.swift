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

/// Drives the sans-IO `ReplicationNode` and `MeshManager` with real links: TCP + mutual TLS.
/// Threads, never the cooperative pool:
/// - one node thread owns the gateway core (mesh manager + replicator + their glue): link events,
///   frames, discoveries come to it through an inbox; it feeds them to the core and carries out
///   what the core answers: hands frames to links, dials whom the mesh chooses, closes what it
///   refuses;
/// - one thread per link owns that link's TLS session (mbedTLS sessions are single-threaded): it
///   sends what the node queued (a wake-up interrupts its read) and posts what it reads;
/// - a listener thread (listening is this transport's "advertising"), a dialler thread per
///   connection the mesh asks for, and a prober for the site's static peers (this transport's
///   "scanning", run in the mesh's discovery phases: a TLS handshake tells who answers there);
/// - with Wi-Fi discovery on, a DNS-SD thread (`DNSSD`, avahi-daemon over D-Bus) publishes this
///   gateway while the mesh advertises and browses while it scans; what it finds and loses comes
///   to the node thread through the same inbox. The node thread also watches the board's Wi-Fi
///   interface and tells the mesh when it goes down or comes back.
package final class ReplicationDriver: @unchecked Sendable {
    let core: GatewayCore
    var node: ReplicationNode { core.node }
    var mesh: MeshManager { core.mesh }
    let host: any ReplicationHost
    let serverTLS: TLSContext
    let clientTLS: TLSContext

    enum Input {
        /// An authenticated link: dialled by us (outgoing) or accepted.
        case opened(LinkID, LinkIO, outgoing: Bool)
        case dialFailed(PeerID, MeshTransport, String)
        case frame(LinkID, PreparedFrame, bytes: Int)
        case closed(LinkID)
        /// A static address answered; `probe` is the session that found out (kept if the mesh
        /// wants this peer now, so the first link costs one handshake, not two).
        case discovered(PeerID, HostPort, probe: LinkIO?)
        case lost(PeerID)
        /// The in-process medium: a peer heard or lost on a transport.
        case heard(PeerID, MeshTransport, online: Bool)
        /// The in-process medium: a transport's radio went down or came back.
        case radio(MeshTransport, up: Bool)
        case retryNetworks
        case dnssd(DNSSD.Event)
        case radios(RadioSnapshot)
        case ble(BLEAgent.Event)
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

    /// Wi-Fi discovery by DNS-SD: the service type (from the group), the name to publish under,
    /// and the board's Wi-Fi interface (watched for up/down; nil: not watched).
    package struct WifiDiscovery {
        var serviceType: String
        var serviceName: String
        var interface: String?
        package init(serviceType: String, serviceName: String, interface: String?) {
            self.serviceType = serviceType
            self.serviceName = serviceName
            self.interface = interface
        }
    }

    let lock = ConditionLock()
    var inbox: [Input] = []
    let stopping = Atomic<Bool>(false)
    let nextLink = Atomic<Int>(1)
    let threadsRunning = Atomic<Int>(0)
    var listener: TCPListener?
    var staticPeers: [HostPort] = []
    var dnssd: DNSSD?
    var ble: BLEAgent?
    var l2capListener: L2CAPListener?
    /// TLS over Bluetooth LE: the same identity and authenticator, a longer handshake timeout
    /// (a handshake's round trips ride on connection intervals; 30 s).
    var bleServerTLS: TLSContext?
    var bleClientTLS: TLSContext?
    /// Where each peer heard over Bluetooth LE can be dialled (address, PSM).
    var bleAddresses: [PeerID: (address: BluetoothAddress, psm: UInt16)] = [:]
    /// The in-process medium, when this driver runs on one instead of TCP and DNS-SD.
    var medium: LocalMedium?
    var wifi: WifiDiscovery?
    /// Transports this gateway cannot run (advertising fails with this reason).
    var unbuilt: [MeshTransport: String] = [.bluetooth: "the board names no Bluetooth adapter (bluetooth.adapter in its board file)"]
    /// Scanning (the mesh's discovery phase) is on: the prober probes.
    let scanning = Atomic<Bool>(false)
    let probeWake = ConditionLock()
    /// A probe round was asked for (under `probeWake`).
    var probeRequested = false
    /// Static addresses whose gateway we are linked to (the prober skips them).
    let linkedAddresses = Locked<Set<String>>([])
    /// Incoming TCP connections still in their TLS handshake, per remote address: a flood or
    /// slow-loris handshakes from one address cannot use up threads, and honest peers (other
    /// addresses) still get in.
    let admission = Locked(HandshakeAdmission())
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

    var log: Logger { host.logger }
    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    package func start(listen: HostPort?, peers: [HostPort], wifi: WifiDiscovery? = nil, bluetooth: BluetoothDiscovery? = nil) throws {
        if let bluetooth {
            unbuilt[.bluetooth] = nil
            bleServerTLS = try TLSContext(role: .server, identity: serverTLS.identity, authenticator: serverTLS.authenticator, handshakeTimeoutMillis: 30_000)
            bleClientTLS = try TLSContext(role: .client, identity: clientTLS.identity, authenticator: clientTLS.authenticator, handshakeTimeoutMillis: 30_000)
            let agent = BLEAgent(adapter: bluetooth.adapter, serviceUUID: bluetooth.serviceUUID) { [weak self] e in self?.post(.ble(e)) }
            if agent.start() { ble = agent } else { log.error(.mesh, "cannot start the Bluetooth LE thread") }
        }
        // DNS-SD tells peers the port, so with discovery on and no address in the site file the
        // gateway listens on every address (IPv6 and IPv4) on a port the kernel picks.
        var address = listen
        if address == nil && wifi != nil { address = HostPort(host: "::", port: 0) }
        if let address {
            var made = try? TCPListener(host: address.host, port: address.port)
            if made == nil && listen == nil { made = try? TCPListener(host: "0.0.0.0", port: 0) }  // a kernel without IPv6
            let l = try made ?? TCPListener(host: address.host, port: address.port)
            listener = l
            log.info(.mesh, "replication listening on \(HostPort(host: address.host, port: l.port))")
            spawn("repl-accept") { self.acceptLoop(l) }
        }
        staticPeers = peers
        if !peers.isEmpty { spawn("repl-probe") { self.probeLoop() } }
        if let wifi {
            self.wifi = wifi
            let agent = DNSSD(serviceType: wifi.serviceType) { [weak self] event in self?.post(.dnssd(event)) }
            if agent.start() { dnssd = agent } else { log.error(.mesh, "cannot start the DNS-SD thread") }
        }
        spawn("repl-node") { self.nodeLoop() }
    }

    /// Runs on an in-process medium instead of TCP and DNS-SD: advertising and scanning go to the
    /// medium, links are memory pipes with the same TLS sessions and frames.
    package func start(medium: LocalMedium) {
        self.medium = medium
        unbuilt = [:]
        let me = node.peer
        medium.join(me, heard: { [weak self] peer, t, online in self?.post(.heard(peer, t, online: online)) },
                    accept: { [weak self] stream, t in
                        guard let self, !self.isStopping else { stream.close(); return }
                        self.spawn("repl-link") { self.acceptLink(stream, transport: t) }
                    },
                    radio: { [weak self] t, up in self?.post(.radio(t, up: up)) })
        spawn("repl-node") { self.nodeLoop() }
    }

    /// The port the listener got (useful with port 0).
    package var listenPort: UInt16? { listener?.port }

    /// `retryNetworks()`.
    package func retryNetworks() { post(.retryNetworks) }

    /// The radio manager saw a change.
    package func radiosChanged(_ s: RadioSnapshot) { post(.radios(s)) }

    package func stop() {
        stopping.store(true, ordering: .relaxed)
        dnssd?.stop()
        ble?.stop()
        medium?.leave(node.peer)
        lock.withLock { lock.broadcast() }
        probeWake.withLock { probeWake.broadcast() }
        // Threads notice within a read timeout; wait a little for them, but never forever. The
        // listeners close after their accept loops ended (closing one under a thread polling it
        // was a data race on its descriptor, found by ThreadSanitizer).
        let deadline = monotonicMillis() + 3000
        while threadsRunning.load(ordering: .acquiring) > 0 && monotonicMillis() < deadline { usleep(10_000) }
        l2capListener?.close()
        listener?.close()
    }

    func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
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

    // MARK: node thread

    /// Node-thread state.
    var links: [LinkID: LinkIO] = [:]
    /// Where each peer can be dialled: static addresses, then what DNS-SD resolved (IPv4 first).
    var addresses: [PeerID: [HostPort]] = [:]
    var staticAddress: [PeerID: HostPort] = [:]
    /// DNS-SD instances (interface/protocol/name) and the peer and address each resolved to.
    var dnsFound: [String: (peer: PeerID, address: HostPort)] = [:]
    var transportState: [MeshTransport: (active: Bool, error: String?)] = [:]
    var discoveryDetail: [MeshTransport: String] = [:]
    var publishedName: String?
    var avahiVersion: String?
    var wifiInterfaceUp: Bool?
    var bluetoothUp: Bool?
    var wifiDownReason: String?
    /// Peers whose TXT said another protocol version (logged once each).
    var incompatible: Set<PeerID> = []
    var linkAddress: [LinkID: String] = [:]
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
            if core.keeps(id), let a = io.address {
                linkAddress[id] = a
                linkedAddresses.withLock { _ = $0.insert(a) }
            }
        case .dialFailed(let peer, let t, let why):
            host.updateCounters { $0.failedConnections += 1 }
            feed(.dialFailed(peer, t, reason: why), now: now)
        case .frame(let id, let frame, _):
            feed(.frames(id, [frame]), now: now)
        case .closed(let id):
            links[id] = nil
            if let a = linkAddress.removeValue(forKey: id) { linkedAddresses.withLock { _ = $0.remove(a) } }
            feed(.linkClosed(id), now: now)
        case .discovered(let peer, let address, let probe):
            staticAddress[peer] = address
            refreshAddresses(peer)
            discoveredStatic(peer, probe: probe, now: now)
        case .lost(let peer):
            feed(.lost(peer, .wifi), now: now)
        case .heard(let peer, let t, let online):
            feed(online ? .discovered(peer, t, load: nil) : .lost(peer, t), now: now)
        case .radio(let t, let up):
            feed(.transport(t, up: up), now: now)
        case .retryNetworks:
            log.info(.mesh, "retrying the radios now (retryNetworks)")
            feed(.retryNetworks, now: now)
        case .dnssd(let event):
            handleDNSSD(event, now: now)
        case .radios(let snapshot):
            radiosChanged(snapshot, now: now)
        case .ble(let event):
            handleBLE(event, now: now)
        }
    }

    /// A static address answered. If the mesh wants that peer now, the probe's session becomes the
    /// link (one handshake, not two); otherwise the probe is closed.
    func discoveredStatic(_ peer: PeerID, probe: LinkIO?, now: Int) {
        var actions = decide(.discovered(peer, .wifi, load: nil), now: now)
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
