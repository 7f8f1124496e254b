import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalTLS
import ShoalWire
import ShoalThreads

/// Bluetooth LE: advertising (an L2CAP LE listener on a dynamic PSM, told in the advertisement),
/// what the scanner hears, and links over L2CAP LE credit-based channels carrying the same TLS
/// sessions and frames as TCP. The adapter is watched for up, down and rfkill.
///
/// An actor on the driver's executor, like TCPTransport: the address book is isolated to it and
/// the driver's calls enter it synchronously on that thread. Its threads — the BLE agent's (HCI
/// advertising and scanning), an accept loop, a dialler per channel — reach it through the host.
package actor BluetoothTransport: Transport {
    package nonisolated let kinds: Set<MeshTransport> = [.bluetooth]
    nonisolated let adapter: String
    nonisolated let serviceUUID: [UInt8]
    /// TLS over Bluetooth LE: the gateway's identity and authenticator with a longer handshake
    /// timeout (a handshake's round trips ride on connection intervals; 30 s).
    nonisolated let serverTLS: TLSContext
    nonisolated let clientTLS: TLSContext
    nonisolated let executor: ThreadExecutor
    package nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    /// Set once (the host and agent by `start`, the listener when advertising first starts); the
    /// listener is closed by the stopping thread.
    nonisolated let parts = Locked<(host: (any TransportHost)?, agent: BLEAgent?, listener: L2CAPListener?)>((nil, nil, nil))
    nonisolated var host: (any TransportHost)? { parts.withLock { $0.host } }
    nonisolated var agent: BLEAgent? { parts.withLock { $0.agent } }
    nonisolated var listener: L2CAPListener? { parts.withLock { $0.listener } }

    // Isolated to the driver's thread.
    /// Where each peer heard can be dialled (address, PSM).
    var addresses: [PeerID: (address: BluetoothAddress, psm: UInt16)] = [:]
    var adapterUp: Bool?
    /// Peers whose advertisement said another protocol version (logged once each).
    var incompatible: Set<PeerID> = []

    /// `credentials`: the driver's (shared, so a renewed certificate reaches these contexts too).
    package init(adapter: String, serviceUUID: [UInt8], credentials: TLSCredentials, authenticator: PeerAuthenticator, executor: ThreadExecutor) throws {
        self.executor = executor
        self.adapter = adapter
        self.serviceUUID = serviceUUID
        serverTLS = try TLSContext(role: .server, credentials: credentials, authenticator: authenticator.over("bluetooth"), handshakeTimeoutMillis: 30_000)
        clientTLS = try TLSContext(role: .client, credentials: credentials, authenticator: authenticator.over("bluetooth"), handshakeTimeoutMillis: 30_000)
    }

    package nonisolated func start(host: any TransportHost) throws {
        parts.withLock { $0.host = host }
        let agent = BLEAgent(adapter: adapter, serviceUUID: serviceUUID) { [weak self] e in
            guard let self else { return }
            host.onNodeThread { self.assumeIsolated { $0.handle(e, host) } }
        }
        if agent.start() { parts.withLock { $0.agent = agent } } else { host.log.error(.mesh, "cannot start the Bluetooth LE thread") }
    }

    package nonisolated func advertise(_ kind: MeshTransport, _ on: Bool) {
        guard let host else { return }
        guard let agent else { return host.post(.advertising(.bluetooth, ok: false, reason: "the Bluetooth LE thread did not start")) }
        guard on else { return agent.advertise(nil) }
        if listener == nil {
            do {
                let l = try L2CAPListener()
                parts.withLock { $0.listener = l }
                host.log.info(.mesh, "bluetooth: listening for L2CAP LE channels on PSM 0x\(String(l.psm, radix: 16))")
                if let why = l.mtuRefused { host.log.warning(.mesh, "bluetooth: \(why); channels use the kernel's default MTU") }
                host.spawn("repl-bleaccept") { self.acceptLoop(l, host) }
            } catch {
                return host.post(.advertising(.bluetooth, ok: false, reason: "\(error)"))
            }
        }
        guard let l = listener else { return }
        agent.advertise(BLEAdvert(serviceUUID: serviceUUID, version: UInt8(ReplicationMessage.protocolVersion), psm: l.psm, peer: host.me.bytes))
        // The answer comes back as an event from the BLE thread.
    }

    package nonisolated func scan(_ kind: MeshTransport, _ on: Bool) { agent?.scan(on) }

    package nonisolated func dial(_ peer: PeerID, over kind: MeshTransport) {
        guard let host else { return }
        guard let agent, let at = assumeIsolated({ $0.addresses[peer] }) else { return host.post(.dialFailed(peer, .bluetooth, reason: "no Bluetooth address known")) }
        host.spawn("repl-bledial") { self.dial(peer, at.address, psm: at.psm, agent, host) }
    }

    /// The same for Bluetooth LE as for Wi-Fi: the adapter present, up and not blocked.
    package nonisolated func radiosChanged(_ s: RadioSnapshot) {
        assumeIsolated { $0.radiosChangedHere(s) }
    }

    func radiosChangedHere(_ s: RadioSnapshot) {
        guard let host, agent != nil, s.bluetoothAdapter != nil else { return }
        let (up, why) = s.bluetoothUsable
        guard up != adapterUp else { return }
        adapterUp = up
        if !up { host.log.info(.mesh, "bluetooth: \(why ?? "not usable")") }
        host.post(.radio(.bluetooth, up: up))
    }

    package nonisolated func stop() {
        guard let agent else { return }
        let abandoned = agent.stop()
        if !abandoned.isEmpty, let host { host.log.warning(.mesh, "bluetooth: stopping: abandoned \(abandoned.joined(separator: ", ")) still blocked after 3 s") }
    }
    package nonisolated func close() { listener?.close() }

    func handle(_ event: BLEAgent.Event, _ host: any TransportHost) {
        let log = host.log
        switch event {
        case .advertising(let ok, let why):
            if ok { log.info(.mesh, "bluetooth: advertising on \(adapter) (PSM 0x\(String(listener?.psm ?? 0, radix: 16)))") }
            host.post(.advertising(.bluetooth, ok: ok, reason: ok ? nil : (why ?? "advertising failed")))
        case .scanning(let ok, let why):
            if !ok { log.warning(.mesh, "bluetooth: \(why ?? "scanning failed")") }
        case .found(let address, let advert, let rssi):
            let peer = PeerID(bytes: advert.peer)
            guard peer != host.me else { return }
            guard advert.version == UInt8(ReplicationMessage.protocolVersion) else {
                if incompatible.insert(peer).inserted {
                    log.warning(.mesh, "bluetooth: peer \(peer.short) speaks protocol \(advert.version), we speak \(ReplicationMessage.protocolVersion); not connecting")
                }
                return
            }
            addresses[peer] = (address, advert.psm)
            log.verbose(.mesh, "bluetooth: found peer \(peer.short) at \(address) PSM 0x\(String(advert.psm, radix: 16)) (\(rssi) dBm)")
            host.post(.discovered(peer, .bluetooth, probe: nil))
        case .lost(let address):
            guard let peer = addresses.first(where: { $0.value.address == address })?.key else { return }
            addresses[peer] = nil
            log.verbose(.mesh, "bluetooth: lost peer \(peer.short)")
            host.post(.lost(peer, .bluetooth))
        }
        host.post(.detail(.bluetooth, "BLE service \(GroupID(host.group).bleServiceUUIDText) on \(adapter)"
            + (listener.map { ", PSM 0x\(String($0.psm, radix: 16))" } ?? "")))
    }

    /// A channel the mesh asked for, dialled with the scanner paused (the kernel scans to connect).
    nonisolated func dial(_ peer: PeerID, _ address: BluetoothAddress, psm: UInt16, _ agent: BLEAgent, _ host: any TransportHost) {
        let stream: L2CAPStream
        let started = monotonicMillis()
        host.log.verbose(.mesh, "bluetooth: dialling \(peer.short) at \(address) PSM 0x\(String(psm, radix: 16))")
        do {
            stream = try agent.withScanningPaused { () throws(StreamError) -> L2CAPStream in
                try L2CAPStream.connect(to: address, psm: psm, timeoutMillis: 10_000)
            }
        } catch {
            host.log.verbose(.mesh, "bluetooth: dial to \(peer.short) failed after \(monotonicMillis() - started) ms: \(error)")
            return host.post(.dialFailed(peer, .bluetooth, reason: "\(address): \(error)"))
        }
        guard let session = host.handshake(stream, expecting: peer, over: .bluetooth, at: address.description, context: clientTLS) else { return }
        host.log.verbose(.mesh, "bluetooth: channel to \(peer.short) up (MTU send \(stream.sendMTU), receive \(stream.receiveMTU))")
        host.run(LinkIO(id: host.newLinkID(), session: session, stream: stream, address: nil, transport: .bluetooth), outgoing: true)
    }

    nonisolated func acceptLoop(_ listener: L2CAPListener, _ host: any TransportHost) {
        var failures = 0
        while !host.isStopping {
            let next: L2CAPStream?
            do { next = try listener.accept(timeoutMillis: 250) } catch {
                if host.isStopping { return }
                // Said once per run of failures; a listener that keeps failing is retried every 250 ms.
                failures += 1
                if failures == 1 { host.log.warning(.mesh, "bluetooth: accepting an L2CAP channel failed: \(error)") }
                SystemCall.pause(millis: 250)
                continue
            }
            failures = 0
            guard let stream = next else { continue }
            host.spawn("repl-blelink") {
                host.acceptAndRun(stream, over: .bluetooth, from: "from \(stream.peer) over Bluetooth LE", context: self.serverTLS)
            }
        }
    }
}

extension L2CAPStream: LinkStream {}
