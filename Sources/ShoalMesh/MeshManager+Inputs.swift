import ShoalCore

/// The mesh manager's inputs, one method each (`handle` dispatches). Each says whether the
/// manager then runs its timers and plans connections (`finish`) or answers with what it has.
extension MeshManager {
    enum Next { case finish, skip }

    func startMesh(now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard state == .created || state == .stopped else { return .skip }
        setState(.discovering, &out)
        for t in settings.transports.sorted() where usable.contains(t) {
            advertising[t] = Advertising(at: now + settings.advertisingDelayMillis)
        }
        startPhase(initial: true, now: now, &out)
        return .finish
    }

    func stopMesh(now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard isRunning else { return .skip }
        shutDown(now: now, &out)
        setState(.stopped, &out)
        return .finish
    }

    func die(_ reason: String, now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard state != .dead else { return .skip }
        if isRunning { shutDown(now: now, &out) }
        for t in settings.transports.sorted() { reportTransport(t, active: false, error: reason, &out) }
        setState(.dead, &out)
        nextWake = nil
        return .skip
    }

    func retry(now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard isRunning else { return .skip }
        for t in settings.transports.sorted() where usable.contains(t) && advertising[t]?.active != true {
            advertising[t] = Advertising(at: now)
        }
        for k in peers.keys { peers[k]!.failedAt = nil; peers[k]!.failures = 0 }
        if !scanning { startPhase(initial: false, now: now, &out) }
        return .finish
    }

    func transportChanged(_ t: MeshTransport, up: Bool, now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard settings.transports.contains(t) else { return .skip }
        if up {
            guard !usable.contains(t) else { return .skip }
            usable.insert(t)
            if isRunning {
                advertising[t] = Advertising(at: now)
                if scanning { out.append(.startScanning(t)) }
            }
        } else {
            guard usable.remove(t) != nil else { return .skip }
            if advertising[t]?.active == true { out.append(.stopAdvertising(t)) }
            advertising[t] = nil
            if scanning { out.append(.stopScanning(t)) }
            reportTransport(t, active: false, error: "\(t.rawValue) is down", &out)
            for k in peers.keys where peers[k]!.heardOn.contains(t) {
                peers[k]!.heardOn.remove(t)
                out.append(.event(.peerDiscovery(k, t, online: false)))
            }
            for c in connections.values.sorted(by: { $0.id < $1.id }) where c.transport == t {
                out.append(.close(c.id, reason: "\(t.rawValue) went down"))
                dropConnection(c.id, now: now, &out)
            }
            pending = pending.filter { $0.value.transport != t }
        }
        return .finish
    }

    func advertisingStarted(_ t: MeshTransport, now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard isRunning, usable.contains(t) else { return .skip }
        advertising[t] = Advertising(active: true, failures: 0, at: nil)
        reportTransport(t, active: true, error: nil, &out)
        return .finish
    }

    func advertisingFailed(_ t: MeshTransport, reason: String, now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard isRunning, usable.contains(t) else { return .skip }
        let failures = (advertising[t]?.failures ?? 0) + 1
        advertising[t] = Advertising(active: false, failures: failures, at: now + advertisingBackoff(failures: failures))
        reportTransport(t, active: false, error: reason, &out)
        return .finish
    }

    /// A transport's status goes out as an event only when it changed: advertising retried with
    /// backoff and failing again for the same reason (a site with no listen address) is not news.
    func reportTransport(_ t: MeshTransport, active: Bool, error: String?, _ out: inout [MeshAction]) {
        if let last = reportedTransport[t], last.active == active, last.error == error { return }
        reportedTransport[t] = (active, error)
        out.append(.event(.transportStatus(t, active: active, error: error)))
    }

    func heard(_ peer: PeerID, _ t: MeshTransport, load: Int?, now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard isRunning, peer != me, usable.contains(t) else { return .skip }
        var r = peers[peer] ?? PeerRecord()
        if let load { r.load = load }
        if r.heardOn.insert(t).inserted {
            out.append(.event(.peerDiscovery(peer, t, online: true)))
            // Heard again after being lost: fresh evidence it is there, dial without waiting.
            r.failedAt = nil
            if t == .wifi { r.wifiFailures = 0 }
            if t == .bluetooth { r.bluetoothYieldFrom = now }
        }
        peers[peer] = r
        return .finish
    }

    func lost(_ peer: PeerID, _ t: MeshTransport, _ out: inout [MeshAction]) -> Next {
        guard peers[peer]?.heardOn.remove(t) != nil else { return .skip }
        out.append(.event(.peerDiscovery(peer, t, online: false)))
        return .finish
    }

    func incoming(_ id: ConnectionID, _ peer: PeerID, _ t: MeshTransport, now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard isRunning, peer != me else { out = [.close(id, reason: isRunning ? "a connection to ourselves" : "the mesh is not running")]; return .skip }
        admit(id, peer, t, now: now, &out)
        return .finish
    }

    func outgoingOpened(_ id: ConnectionID, _ peer: PeerID, _ t: MeshTransport, now: UInt64, _ out: inout [MeshAction]) -> Next {
        let dialled = pending.removeValue(forKey: peer) != nil
        guard isRunning else { out = [.close(id, reason: "the mesh is not running")]; return .skip }
        // A new peer needs a free slot. A dial normally brings its own; it has none if it took
        // over 30 s or its peer was evicted meanwhile (eviction forgets the dial).
        let linked = connections.values.contains { $0.peer == peer }
        if !linked, slotsTaken >= settings.maxConnectionCount {
            counters.refusedConnections += 1
            out.append(.close(id, reason: dialled ? "no free connection slot (taken while dialling)" : "no free connection slot (the dial took over 30 s, or its peer was evicted meanwhile)"))
            out.append(.event(.peerReplicator(peer, t, outgoing: true, activity: .offline, error: nil)))
            return .finish
        }
        var r = peers[peer] ?? PeerRecord()
        r.failures = 0
        r.failedAt = nil
        r.lastError = nil
        peers[peer] = r
        open(Connection(id: id, peer: peer, transport: t, outgoing: true), now: now, &out)
        return .finish
    }

    func outgoingFailed(_ peer: PeerID, _ t: MeshTransport, reason: String, now: UInt64, _ out: inout [MeshAction]) -> Next {
        pending[peer] = nil
        counters.failedConnectionAttempts += 1
        var r = peers[peer] ?? PeerRecord()
        r.failures += 1
        r.failedAt = now
        r.failedOn = t
        r.lastError = reason
        if t == .wifi { r.wifiFailures += 1; r.wifiFailedAt = now }
        peers[peer] = r
        out.append(.event(.peerReplicator(peer, t, outgoing: true, activity: .offline, error: reason)))
        return .finish
    }

    func closed(_ id: ConnectionID, now: UInt64, _ out: inout [MeshAction]) -> Next {
        if let c = connections[id], c.transport == .wifi, !c.replicating, var r = peers[c.peer] {
            // A Wi-Fi link that ended before replicating counts as a Wi-Fi failure.
            r.wifiFailures += 1
            r.wifiFailedAt = now
            peers[c.peer] = r
        }
        dropConnection(id, now: now, &out)
        return .finish
    }

    func replicating(_ id: ConnectionID, now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard var c = connections[id], !c.replicating else { return .skip }
        c.replicating = true
        connections[id] = c
        guard c.transport == .wifi else { return .finish }
        peers[c.peer]?.wifiFailures = 0
        // Handover: the Bluetooth LE link to this peer closes once Wi-Fi replicates.
        for old in connections.values.sorted(by: { $0.id < $1.id }) where old.peer == c.peer && old.transport == .bluetooth {
            connections[old.id] = nil
            componentCache = nil
            out.append(.close(old.id, reason: "replication moved to wifi"))
            out.append(.event(.peerReplicator(c.peer, .wifi, outgoing: c.outgoing, activity: c.busy ? .busy : .idle, error: nil)))
        }
        return .finish
    }

    func gossip(from: ConnectionID, origin: PeerID, sequence seq: UInt64, neighbours: [PeerID], now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard connections[from] != nil else { return .skip }
        absorb(origin: origin, sequence: seq, neighbours: neighbours, from: from, now: now, &out)
        return .finish
    }

    func gossip(from: ConnectionID, _ entries: [(origin: PeerID, sequence: UInt64, neighbours: [PeerID])], now: UInt64, _ out: inout [MeshAction]) -> Next {
        guard connections[from] != nil, !entries.isEmpty else { return .skip }
        for e in entries { absorb(origin: e.origin, sequence: e.sequence, neighbours: e.neighbours, from: from, now: now, &out) }
        return .finish
    }

    func activity(_ id: ConnectionID, busy: Bool, _ out: inout [MeshAction]) -> Next {
        guard var c = connections[id], c.busy != busy else { return .skip }
        c.busy = busy
        connections[id] = c
        out.append(.event(.peerReplicator(c.peer, c.transport, outgoing: c.outgoing, activity: busy ? .busy : .idle, error: nil)))
        // Busy or idle is what PeerInfo shows; planning never reads it, so no re-plan (timers
        // still run at nextWake).
        return .skip
    }
}
