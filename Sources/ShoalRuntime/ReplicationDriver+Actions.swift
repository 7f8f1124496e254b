import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalWire

/// The node thread's work besides its loop: carrying out what the replicator and the mesh manager
/// ask, keeping Bluetooth LE links alive, and publishing what status and the listeners show.
extension ReplicationDriver {
    func keepBluetoothLinksAlive(now: Int) {
        for (id, heard) in heardAt {
            guard let io = links[id] else { continue }
            if now - heard >= ReplicationDriver.silenceMillis {
                log.warning(.replication, "link \(id) (bluetooth): nothing heard for \(ReplicationDriver.silenceMillis / 1000) s; closing it")
                heardAt[id] = now  // once
                io.close()
            } else if now - (keptAliveAt[id] ?? 0) >= ReplicationDriver.keepaliveMillis {
                keptAliveAt[id] = now
                let own = mesh.ownAnnouncement
                let payload = ReplicationMessage.topology(origin: node.peer, sequence: own.sequence, neighbours: own.neighbours).encoded()
                host.updateCounters { $0.messagesSent += 1; $0.bytesSent += payload.count + 4 }
                io.send(payload)
            }
        }
    }

    /// Carries out the replicator's actions (which may feed the mesh, which may add more).
    func process(_ actions: inout [ReplicationAction]) {
        let now = monotonicMillis()
        var i = 0
        while i < actions.count {
            switch actions[i] {
            case .send(let id, let payload):
                host.updateCounters { $0.messagesSent += 1; $0.bytesSent += payload.count + 4 }
                if links[id]?.send(payload) == false {
                    log.warning(.replication, "link \(id): the peer does not read what we send (over \(LinkIO.maxQueuedBytes >> 20) MB queued); closing it")
                }
            case .close(let id):
                links[id]?.close()
            case .event(let e):
                if case .topology(let link, _, let origin, let sequence, let neighbours) = e {
                    handleMesh(mesh.handle(.topology(from: link, origin: origin, sequence: sequence, neighbours: neighbours), now: UInt64(now)), now: now)
                } else {
                    if case .peerConnected(let link, _) = e {
                        handleMesh(mesh.handle(.replicating(link), now: UInt64(now)), now: now)
                    }
                    if case .documents(let link, _, _, _) = e {
                        // Documents moving: the peer's replicator is busy until a second passes quietly.
                        if busySince[link] == nil { handleMesh(mesh.handle(.activity(link, busy: true), now: UInt64(now)), now: now) }
                        busySince[link] = now
                    }
                    report(e)
                }
            }
            i += 1
        }
        actions.removeAll()
    }

    /// Carries out the mesh manager's actions.
    func handleMesh(_ actions: [MeshAction], now: Int) {
        var queue = actions
        while !queue.isEmpty {
            let a = queue.removeFirst()
            switch a {
            case .startAdvertising(let t) where medium != nil:
                medium!.setAdvertising(node.peer, t, true)
                queue += mesh.handle(.advertisingStarted(t), now: UInt64(now))
            case .stopAdvertising(let t) where medium != nil:
                medium!.setAdvertising(node.peer, t, false)
            case .startScanning(let t) where medium != nil:
                medium!.setScanning(node.peer, t, true)
            case .stopScanning(let t) where medium != nil:
                medium!.setScanning(node.peer, t, false)
            case .connect(let peer, let t) where medium != nil:
                spawn("repl-dial") { self.dial(peer, over: t, on: self.medium!) }
            case .startAdvertising(.bluetooth) where ble != nil:
                startBLEAdvertising(now: now, &queue)
            case .stopAdvertising(.bluetooth) where ble != nil:
                ble!.advertise(nil)
            case .startScanning(.bluetooth) where ble != nil:
                ble!.scan(true)
            case .stopScanning(.bluetooth) where ble != nil:
                ble!.scan(false)
            case .connect(let peer, .bluetooth) where ble != nil:
                guard let at = bleAddresses[peer] else {
                    queue += mesh.handle(.outgoingFailed(peer, .bluetooth, reason: "no Bluetooth address known"), now: UInt64(now))
                    continue
                }
                spawn("repl-bledial") { self.dialBLE(peer, at.address, psm: at.psm) }
            case .startAdvertising(let t):
                if let why = unbuilt[t] {
                    queue += mesh.handle(.advertisingFailed(t, reason: why), now: UInt64(now))
                } else if let listener {
                    // Listening is how peers reach us; with DNS-SD, publishing tells them where
                    // (the answer comes back as an event from the DNS-SD thread).
                    if let dnssd, let wifi {
                        dnssd.publish(name: wifi.serviceName, port: listener.port,
                                      txt: ["v": String(ReplicationMessage.protocolVersion), "id": node.peer.description])
                    } else {
                        queue += mesh.handle(.advertisingStarted(t), now: UInt64(now))
                    }
                } else {
                    queue += mesh.handle(.advertisingFailed(t, reason: "no replication.listen address in the site file: peers cannot connect here"), now: UInt64(now))
                }
            case .stopAdvertising(let t):
                if t == .wifi { dnssd?.unpublish() }
            case .startScanning(let t):
                guard t == .wifi else { continue }
                scanning.store(true, ordering: .relaxed)
                dnssd?.browse(true)
                probeWake.withLock {
                    probeRequested = true
                    probeWake.broadcast()
                }
            case .stopScanning(let t):
                guard t == .wifi else { continue }
                scanning.store(false, ordering: .relaxed)
                dnssd?.browse(false)
            case .connect(let peer, _):
                guard let list = addresses[peer], !list.isEmpty else {
                    queue += mesh.handle(.outgoingFailed(peer, .wifi, reason: "no address known"), now: UInt64(now))
                    continue
                }
                spawn("repl-dial") { self.dial(peer, at: list) }
            case .close(let id, let reason):
                log.verbose(.mesh, "closing link \(id): \(reason)")
                links[id]?.close()
            case .sendTopology(let id, let origin, let sequence, let neighbours):
                let payload = ReplicationMessage.topology(origin: origin, sequence: sequence, neighbours: neighbours).encoded()
                host.updateCounters { $0.messagesSent += 1; $0.bytesSent += payload.count + 4 }
                links[id]?.send(payload)
            case .event(let e):
                host.meshEvent(e)
                switch e {
                case .state(let s): log.info(.mesh, "mesh state: \(s.rawValue)")
                case .transportStatus(let t, let active, let error):
                    transportState[t] = (active, error)
                    // Say a problem once; its retries (with backoff) are verbose until it changes.
                    if !active, let error {
                        if lastTransportError[t] == error { log.verbose(.mesh, "\(t.rawValue): \(error) (still)") } else { log.warning(.mesh, "\(t.rawValue): \(error)") }
                    } else if active, lastTransportError[t] != nil {
                        log.info(.mesh, "\(t.rawValue): active again")
                    }
                    lastTransportError[t] = active ? nil : error
                case .peerDiscovery(let p, let t, let online): log.verbose(.mesh, "peer \(p.short) \(online ? "discovered" : "lost") on \(t.rawValue)")
                case .peerReplicator(let p, _, let outgoing, let activity, let error):
                    log.verbose(.mesh, "peer \(p.short) (\(outgoing ? "outgoing" : "incoming")): \(activity.rawValue)\(error.map { " — \($0)" } ?? "")")
                }
            }
        }
    }

    /// Publishes what `shoal peers/peer/mesh/status` show.
    func publish() {
        var view = MeshView()
        view.state = mesh.state
        view.counters = mesh.counters
        view.me = node.peer
        view.links = mesh.knownLinks
        view.treeNeighbours = links.keys.filter { mesh.isTreeLink($0) }.compactMap { links[$0]?.session.peerID }
        var certs: [PeerID: Certificate] = [:]
        for io in links.values { certs[io.session.peerID] = io.session.peerCertificate }
        view.peers = mesh.knownPeers.compactMap { p in
            guard let info = mesh.info(p) else { return nil }
            let cert = certs[p]
            return MeshView.Peer(info: info, address: addresses[p]?.first?.description, certificateSubject: cert?.subject, certificateNotAfter: cert?.notAfter, certificate: cert)
        }
        view.transports = transportState
        view.discovery = discoveryDetail
        host.meshViewChanged(view)
    }

    func report(_ e: ReplicationEvent) {
        host.replicationEvent(e)
        switch e {
        case .peerConnected(let link, let peer):
            host.updateCounters { $0.peers[String(link)] = peer.description }
            log.info(.replication, "replicating with peer \(peer) (link \(link))")
        case .documents(let link, let peer, let direction, let items):
            let errors = items.filter { $0.error != nil }.count
            host.updateCounters { c in
                if direction == .pull {
                    c.documentsReceived += items.count
                    c.documentsApplied += items.count - errors
                } else {
                    c.documentsSent += items.count
                }
            }
            log.verbose(.replication, "link \(link): \(direction.rawValue) \(items.count) documents with \(peer.short)\(errors > 0 ? " (\(errors) refused)" : "")")
        case .clockSkew(_, let peer, let ahead):
            host.updateCounters { _ = $0.skewedPeers.insert(peer.description) }
            log.warning(.replication, "peer \(peer)'s clock runs \(ahead / 1000) s ahead of ours; its timestamps do not move our clock")
        case .conflict(_, let peer, let record):
            host.updateCounters { $0.conflicts += 1 }
            log.info(.replication, "conflict on \(record.collection)/\(record.id) with \(peer.short): \(record.resolver) chose \(record.outcome)")
        case .topology:
            break  // handled in process()
        case .linkClosed(let link, let peer, let error):
            host.updateCounters { _ = $0.peers.removeValue(forKey: String(link)) }
            if let error {
                log.warning(.replication, "link \(link) to \(peer?.description ?? "unknown peer") closed: \(error)")
            } else {
                log.info(.replication, "link \(link) to \(peer?.description ?? "unknown peer") closed")
            }
        }
    }
}
