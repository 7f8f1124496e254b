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

/// The node thread's work besides its loop: carrying out what the gateway core asks, and
/// publishing what status and the listeners show.
extension ReplicationDriver {
    /// Hands an input to the core and carries out what it answers.
    func feed(_ input: GatewayCore.Input, now: Int) {
        perform(decide(input, now: now), now: now)
    }

    /// The core's answer to one input (every input goes through here; `tap` sees each).
    func decide(_ input: GatewayCore.Input, now: Int) -> [GatewayCore.Action] {
        let actions = core.handle(input, now: UInt64(now))
        tap?(input, UInt64(now), actions)
        return actions
    }

    /// Carries out the core's actions, in order (an answer from I/O goes back through `feed`).
    func perform(_ actions: [GatewayCore.Action], now: Int) {
        for action in actions {
            switch action {
            case .send(let id, let payload):
                host.updateCounters { $0.messagesSent += 1; $0.bytesSent += payload.count + 4 }
                if let peer = links[id]?.session.peerID { lastActivity[peer] = now }
                if links[id]?.send(payload) == false {
                    log.warning(.replication, "link \(id): the peer does not read what we send (over \(LinkIO.maxQueuedBytes >> 20) MB queued); closing it")
                }
            case .close(let id, let reason):
                log.verbose(.mesh, "closing link \(id): \(reason)")
                links[id]?.close()
            case .connect(let peer, let t): connect(peer, over: t, now: now)
            case .startAdvertising(let t): startAdvertising(t, now: now)
            case .stopAdvertising(let t): stopAdvertising(t)
            case .startScanning(let t): setScanning(t, true)
            case .stopScanning(let t): setScanning(t, false)
            case .mesh(let e): meshEvent(e)
            case .replication(let e): report(e)
            case .warning(let domain, let message): log.warning(domain, message)
            }
        }
    }

    func connect(_ peer: PeerID, over t: MeshTransport, now: Int) {
        guard let transport = carrier[t] else { return feed(.dialFailed(peer, t, reason: missing[t] ?? "no transport carries \(t.rawValue) here"), now: now) }
        transport.dial(peer, over: t)
    }

    func startAdvertising(_ t: MeshTransport, now: Int) {
        guard let transport = carrier[t] else { return feed(.advertisingFailed(t, reason: missing[t] ?? "no transport carries \(t.rawValue) here"), now: now) }
        transport.advertise(t, true)
    }

    func stopAdvertising(_ t: MeshTransport) { carrier[t]?.advertise(t, false) }

    func setScanning(_ t: MeshTransport, _ on: Bool) { carrier[t]?.scan(t, on) }

    func meshEvent(_ e: MeshEvent) {
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
        let syncs = node.syncProgress(now: UInt64(monotonicMillis()))
        let known = Set(mesh.knownPeers)
        lastActivity = lastActivity.filter { known.contains($0.key) }
        view.peers = mesh.knownPeers.compactMap { p in
            guard let info = mesh.info(p) else { return nil }
            let cert = certs[p]
            return MeshView.Peer(info: info, address: transports.lazy.compactMap { $0.address(of: p) }.first, certificateSubject: cert?.subject,
                                 certificateNotAfter: cert?.notAfter, certificate: cert,
                                 sync: SyncProgress.combined(syncs.filter { $0.peer == p }.map(\.progress)),
                                 lastActivityMillis: lastActivity[p])
        }
        view.sync = SyncProgress.combined(syncs.map(\.progress))
        view.transports = transportState
        view.discovery = discoveryDetail
        host.meshViewChanged(view)
        publishBlobCounters()
    }

    /// Copies the replicator's blob counters and fetches to what status and `/metrics` read.
    func publishBlobCounters() {
        let counters = node.blobCounters
        let fetches = node.blobFetchesInProgress.map(\.description)
        host.updateCounters { c in
            c.blob = counters
            c.blobFetches = fetches
        }
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
            log.verbose(.replication, "link \(link): \(direction.rawValue) \(items.count.counted("document")) with \(peer.short)\(errors > 0 ? " (\(errors) refused)" : "")")
        case .clockSkew(_, let peer, let ahead):
            host.updateCounters { _ = $0.skewedPeers.insert(peer.description) }
            log.warning(.replication, "peer \(peer)'s clock runs \(ahead / 1000) s ahead of ours; its timestamps do not move our clock")
        case .conflict(_, let peer, let record):
            host.updateCounters { $0.conflicts += 1 }
            log.info(.replication, "conflict on \(record.collection)/\(record.id) with \(peer.short): \(record.resolver) chose \(record.outcome)")
        case .topology:
            break  // the core hands gossip to the mesh
        case .blob(_, let peer, let digest, let outcome):
            publishBlobCounters()
            switch outcome {
            case .completed(let bytes): log.info(.replication, "blob \(digest.short) complete (\(bytes) bytes, last from \(peer?.short ?? "-"))")
            case .failed(let why): log.warning(.replication, "blob \(digest.short) not fetched: \(why)")
            }
        case .linkClosed(let link, let peer, let error):
            host.updateCounters { _ = $0.peers.removeValue(forKey: String(link)) }
            if let error { linkChildren.failed(link, because: "\(error)") }
            if let error {
                log.warning(.replication, "link \(link) to \(peer?.description ?? "unknown peer") closed: \(error)")
            } else {
                log.info(.replication, "link \(link) to \(peer?.description ?? "unknown peer") closed")
            }
        }
    }
}
