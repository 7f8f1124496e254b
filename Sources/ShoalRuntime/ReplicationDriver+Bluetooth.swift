import Glibc
import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalTLS
import ShoalWire

/// Bluetooth LE on the node thread: advertising (an L2CAP LE listener on a dynamic PSM, told in
/// the advertisement), what the scanner hears, and links over L2CAP LE credit-based channels
/// carrying the same TLS sessions and frames as TCP.
extension ReplicationDriver {
    func startBLEAdvertising(now: Int) {
        if l2capListener == nil {
            do {
                let l = try L2CAPListener()
                l2capListener = l
                log.info(.mesh, "bluetooth: listening for L2CAP LE channels on PSM 0x\(String(l.psm, radix: 16))")
                if let why = l.mtuRefused { log.warning(.mesh, "bluetooth: \(why); channels use the kernel's default MTU") }
                spawn("repl-bleaccept") { self.bleAcceptLoop(l) }
            } catch {
                feed(.advertisingFailed(.bluetooth, reason: "\(error)"), now: now)
                return
            }
        }
        guard let ble, let l = l2capListener else { return }
        ble.advertise(BLEAdvert(serviceUUID: ble.serviceUUID, version: UInt8(ReplicationMessage.protocolVersion), psm: l.psm, peer: node.peer.bytes))
        // The answer comes back as an event from the BLE thread.
    }

    func handleBLE(_ event: BLEAgent.Event, now: Int) {
        switch event {
        case .advertising(let ok, let why):
            if ok {
                log.info(.mesh, "bluetooth: advertising on \(ble?.adapter ?? "?") (PSM 0x\(String(l2capListener?.psm ?? 0, radix: 16)))")
                feed(.advertisingStarted(.bluetooth), now: now)
            } else {
                feed(.advertisingFailed(.bluetooth, reason: why ?? "advertising failed"), now: now)
            }
        case .scanning(let ok, let why):
            if !ok { log.warning(.mesh, "bluetooth: \(why ?? "scanning failed")") }
        case .found(let address, let advert, let rssi):
            let peer = PeerID(bytes: advert.peer)
            guard peer != node.peer else { return }
            guard advert.version == UInt8(ReplicationMessage.protocolVersion) else {
                if incompatible.insert(peer).inserted {
                    log.warning(.mesh, "bluetooth: peer \(peer.short) speaks protocol \(advert.version), we speak \(ReplicationMessage.protocolVersion); not connecting")
                }
                return
            }
            bleAddresses[peer] = (address, advert.psm)
            log.verbose(.mesh, "bluetooth: found peer \(peer.short) at \(address) PSM 0x\(String(advert.psm, radix: 16)) (\(rssi) dBm)")
            feed(.discovered(peer, .bluetooth, load: nil), now: now)
        case .lost(let address):
            guard let peer = bleAddresses.first(where: { $0.value.address == address })?.key else { return }
            bleAddresses[peer] = nil
            log.verbose(.mesh, "bluetooth: lost peer \(peer.short)")
            feed(.lost(peer, .bluetooth), now: now)
        }
        if let ble {
            discoveryDetail[.bluetooth] = "BLE service \(GroupID(node.group).bleServiceUUIDText) on \(ble.adapter)"
                + (l2capListener.map { ", PSM 0x\(String($0.psm, radix: 16))" } ?? "")
        }
    }

    /// A channel the mesh asked for, dialled with the scanner paused (the kernel scans to connect).
    func dialBLE(_ peer: PeerID, _ address: BluetoothAddress, psm: UInt16) {
        let stream: L2CAPStream
        let started = monotonicMillis()
        log.verbose(.mesh, "bluetooth: dialling \(peer.short) at \(address) PSM 0x\(String(psm, radix: 16))")
        do {
            stream = try ble!.withScanningPaused { () throws(StreamError) -> L2CAPStream in
                try L2CAPStream.connect(to: address, psm: psm, timeoutMillis: 10_000)
            }
        } catch {
            log.verbose(.mesh, "bluetooth: dial to \(peer.short) failed after \(monotonicMillis() - started) ms: \(error)")
            post(.dialFailed(peer, .bluetooth, "\(address): \(error)"))
            return
        }
        guard let session = handshake(stream, expecting: peer, over: .bluetooth, at: address.description, context: bleClientTLS) else { return }
        log.verbose(.mesh, "bluetooth: channel to \(peer.short) up (MTU send \(stream.sendMTU), receive \(stream.receiveMTU))")
        run(LinkIO(id: nextLink.add(1, ordering: .relaxed).oldValue, session: session, stream: stream, address: nil, transport: .bluetooth), outgoing: true)
    }

    func bleAcceptLoop(_ listener: L2CAPListener) {
        while !isStopping {
            guard let stream = try? listener.accept(timeoutMillis: 250) else {
                if isStopping { break }
                continue
            }
            spawn("repl-blelink") {
                do {
                    let session = try TLSSession.accept(over: stream, context: self.bleServerTLS ?? self.serverTLS)
                    self.run(LinkIO(id: self.nextLink.add(1, ordering: .relaxed).oldValue, session: session, stream: stream, address: nil, transport: .bluetooth), outgoing: false)
                } catch {
                    self.host.updateCounters { $0.failedConnections += 1 }
                    self.log.warning(.tls, "refused an incoming Bluetooth LE link from \(stream.peer): \(error)")
                    stream.close()
                }
            }
        }
    }
}

extension L2CAPStream: LinkStream {}
