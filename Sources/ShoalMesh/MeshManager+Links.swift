import ShoalCore

/// Links: admitting, opening, dropping, evicting, and choosing whom to dial.
extension MeshManager {
    func open(_ c: Connection, now: UInt64, _ out: inout [MeshAction]) {
        let existing = connections.values.filter { $0.peer == c.peer }
        // Transport switching: a Wi-Fi link joins a Bluetooth LE one to the same peer (handover: the
        // LE link closes once Wi-Fi replicates); a LE link where Wi-Fi runs is not needed.
        if c.transport == .bluetooth, existing.contains(where: { $0.transport == .wifi }) {
            out.append(.close(c.id, reason: "a Wi-Fi link to this peer exists"))
            return
        }
        if c.transport == .wifi, !existing.isEmpty, existing.allSatisfy({ $0.transport == .bluetooth }) {
            add(c, activity: .connecting, &out)
            return
        }
        // One link per pair: keep the one dialled by the lower peer id (both sides decide alike).
        if let other = existing.first(where: { $0.transport == c.transport }) ?? existing.first {
            let dialler: (Connection) -> PeerID = { $0.outgoing ? self.me : $0.peer }
            let preferred = min(me, c.peer)
            let keepNew = dialler(c) == preferred && dialler(other) != preferred || (dialler(c) == dialler(other) && c.id > other.id)
            if !keepNew {
                out.append(.close(c.id, reason: "a link to this peer exists"))
                return
            }
            out.append(.close(other.id, reason: "a link to this peer exists"))
            connections[other.id] = nil
            componentCache = nil
        }
        add(c, activity: .idle, &out)
    }

    /// Keeps a connection: tells the new neighbour everything we know, then everyone our new list.
    func add(_ c: Connection, activity: PeerActivity, _ out: inout [MeshAction]) {
        connections[c.id] = c
        componentCache = nil
        out.append(.event(.peerReplicator(c.peer, c.transport, outgoing: c.outgoing, activity: activity, error: nil)))
        // Everything we know, paced like forwarded gossip (the first entries at once).
        var known = Set(graph.keys)
        known.remove(me)
        if !known.isEmpty {
            gossipOwed[c.id, default: []].formUnion(known)
            gossipFlushAt = 0
        }
        announceOwnLinks(&out)
    }

    func admit(_ id: ConnectionID, _ peer: PeerID, _ t: MeshTransport, now: UInt64, _ out: inout [MeshAction]) {
        // Being dialled is not being heard: we may have no way to dial this peer back.
        let r = peers[peer] ?? PeerRecord()
        let linked = connections.values.contains { $0.peer == peer }
        // A peer we are dialling takes the slot of our dial; the dial stays pending until it opens
        // or fails (the one-link-per-pair rule then keeps one of the two links).
        if slotsTaken < settings.maxConnectionCount || linked || pending[peer] != nil {
            open(Connection(id: id, peer: peer, transport: t, outgoing: false), now: now, &out)
            return
        }
        // Full. A peer we cannot reach otherwise — a newcomer with no links, or a part of the mesh
        // we are cut off from (two full cliques would otherwise never join) — may take a link
        // whose loss keeps our side whole. At most once per evictionBackoff.
        let outsider = !component().contains(peer)
        if outsider, lastEviction.map({ now >= $0 + settings.evictionBackoffMillis }) ?? true, let victim = evictionCandidate() {
            lastEviction = now
            counters.evictions += 1
            let newcomer = (graph[peer]?.neighbours.isEmpty ?? true) && (r.load ?? 0) == 0
            // Every link to that peer (two during a handover), and our dial to it if one is in
            // flight: it no longer holds a slot.
            for c in connections.values.sorted(by: { $0.id < $1.id }) where c.peer == victim.peer {
                out.append(.close(c.id, reason: newcomer ? "evicted to make room for a newcomer" : "evicted to join another part of the mesh"))
                dropConnection(c.id, now: now, &out)
            }
            pending[victim.peer] = nil
            open(Connection(id: id, peer: peer, transport: t, outgoing: false), now: now, &out)
            return
        }
        counters.refusedConnections += 1
        out.append(.close(id, reason: "no free connection slot"))
    }

    /// A link whose peer stays reachable without it (the most connected such peer first).
    func evictionCandidate() -> Connection? {
        let candidates = connections.values.filter { c in
            component(without: c.peer).contains(c.peer)
        }
        return candidates.max { a, b in
            let la = graph[a.peer]?.neighbours.count ?? 0, lb = graph[b.peer]?.neighbours.count ?? 0
            return (la, b.peer) < (lb, a.peer)
        }
    }

    func dropConnection(_ id: ConnectionID, now: UInt64, _ out: inout [MeshAction]) {
        guard let c = connections.removeValue(forKey: id) else { return }
        gossipOwed[id] = nil
        gossipCursor[id] = nil
        componentCache = nil
        // A link we dialled that ended (refused, evicted, dropped): wait backoffMillis before
        // dialling that peer again, so a full peer is not dialled every connectDelay.
        if c.outgoing, var r = peers[c.peer] {
            r.failedAt = now
            r.failedOn = c.transport
            peers[c.peer] = r
        }
        // A lost BLE link: both ends will want it back; the lower id redials first.
        if c.transport == .bluetooth { peers[c.peer, default: PeerRecord()].bluetoothYieldFrom = now }
        out.append(.event(.peerReplicator(c.peer, c.transport, outgoing: c.outgoing, activity: .offline, error: nil)))
        if !connections.values.contains(where: { $0.peer == c.peer }) { announceOwnLinks(&out) }
    }

    /// Decides whether to dial someone now.
    func plan(now: UInt64, _ out: inout [MeshAction]) {
        if let last = lastDial, now < last + settings.connectDelayMillis { return }
        // A handover to Wi-Fi replaces a link: it does not wait for a free slot.
        guard slotsTaken < settings.maxConnectionCount || upgradeCandidate(now: now) != nil else { return }
        if let (peer, t) = upgradeCandidate(now: now) {
            lastDial = now
            pending[peer] = (t, now)
            out.append(.connect(peer, t))
            return
        }
        guard let (peer, t) = choosePeer(now: now, planning: true) else { return }
        lastDial = now
        pending[peer] = (t, now)
        out.append(.connect(peer, t))
        out.append(.event(.peerReplicator(peer, t, outgoing: true, activity: .connecting, error: nil)))
    }

    func nextDialWake(now: UInt64) -> UInt64? {
        var times: [UInt64] = []
        // Handovers to Wi-Fi: one due now (after connectDelay), or when a Wi-Fi backoff ends.
        if usable.contains(.wifi) {
            if upgradeCandidate(now: now) != nil { times.append(max(now + 1, (lastDial ?? 0) + settings.connectDelayMillis)) }
            for c in connections.values where c.transport == .bluetooth {
                guard let r = peers[c.peer], r.heardOn.contains(.wifi) else { continue }
                if let f = r.failedAt, r.failedOn == .wifi, now < f + backoff(r) { times.append(f + backoff(r)) }
                if !wifiWorth(r, now: now), let w = r.wifiFailedAt { times.append(w + settings.wifiRetryAfterFallbackMillis) }
            }
        }
        guard slotsTaken < settings.maxConnectionCount else { return times.min() }
        if let last = lastDial, now < last + settings.connectDelayMillis, hasCandidates {
            times.append(last + settings.connectDelayMillis)
        }
        for at in joinAt.values where at > now { times.append(at) }
        for (peer, r) in peers where !r.heardOn.isEmpty {
            if let f = r.failedAt, now < f + backoff(r) { times.append(f + backoff(r)) }
            if r.heardOn.contains(.bluetooth), yieldsToPeer(peer, r, now: now), let h = r.bluetoothYieldFrom { times.append(h + settings.bluetoothYieldMillis) }
        }
        return times.min()
    }

    /// Peers linked, and dials in flight to peers we hold no link to. A slot is a peer's: during a
    /// handover a peer holds a Bluetooth LE and a Wi-Fi link in one slot; a dial to a linked peer
    /// (a handover, or ours crossing the peer's dial to us) has no slot of its own while that link
    /// is up, and takes one back if it closes first.
    var slotsTaken: Int {
        let linked = Set(connections.values.map(\.peer))
        return linked.count + pending.keys.filter { !linked.contains($0) }.count
    }

    /// Someone heard that we hold no link to and are not dialling (backoffs aside).
    var hasCandidates: Bool {
        let linked = Set(connections.values.map(\.peer))
        return peers.contains { !$0.value.heardOn.isEmpty && !linked.contains($0.key) && pending[$0.key] == nil }
    }

    /// Whether Wi-Fi may be tried with this peer (transport switching): fewer failures in a row
    /// than the fallback limit, or long enough since the last.
    func wifiWorth(_ r: PeerRecord, now: UInt64) -> Bool {
        r.wifiFailures < settings.wifiAttemptsBeforeFallback || (r.wifiFailedAt.map { now >= $0 + settings.wifiRetryAfterFallbackMillis } ?? true)
    }

    /// A peer linked over Bluetooth LE that Wi-Fi can reach now: dial it over Wi-Fi in parallel.
    func upgradeCandidate(now: UInt64) -> (PeerID, MeshTransport)? {
        guard usable.contains(.wifi) else { return nil }
        for c in connections.values.sorted(by: { $0.id < $1.id }) where c.transport == .bluetooth && pending[c.peer] == nil {
            guard let r = peers[c.peer], r.heardOn.contains(.wifi), wifiWorth(r, now: now),
                  !connections.values.contains(where: { $0.peer == c.peer && $0.transport == .wifi }) else { continue }
            if let f = r.failedAt, r.failedOn == .wifi, now < f + backoff(r) { continue }
            return (c.peer, .wifi)
        }
        return nil
    }

    /// Over Bluetooth LE, whether we leave the dial to the peer for now: it has the lower id, and
    /// we began hearing it, or lost our BLE link to it, less than `bluetoothYieldMillis` ago.
    func yieldsToPeer(_ peer: PeerID, _ r: PeerRecord, now: UInt64) -> Bool {
        guard peer < me, let h = r.bluetoothYieldFrom else { return false }
        return now < h + settings.bluetoothYieldMillis
    }

    /// backoffMillis, as the seed says: a fixed delay before retrying a peer that failed.
    func backoff(_ r: PeerRecord) -> UInt64 { settings.backoffMillis }

    /// `planning`: called to dial now (may note join times); otherwise only asks whether anyone
    /// could be dialled at all.
    func choosePeer(now: UInt64, planning: Bool) -> (PeerID, MeshTransport)? {
        typealias Candidate = (peer: PeerID, transport: MeshTransport, load: Int)
        let linked = Set(connections.values.map(\.peer))
        var candidates: [Candidate] = []
        for (peer, r) in peers where !r.heardOn.isEmpty && pending[peer] == nil && !linked.contains(peer) {
            // Wi-Fi preferred; Bluetooth LE where Wi-Fi cannot reach the peer or failed too often.
            let wifiOK = r.heardOn.contains(.wifi) && usable.contains(.wifi)
            let bleOK = r.heardOn.contains(.bluetooth) && usable.contains(.bluetooth)
            let t: MeshTransport
            if wifiOK && (wifiWorth(r, now: now) || !bleOK) { t = .wifi }
            else if bleOK { t = .bluetooth }
            else { continue }
            // A failure's backoff holds up the transport it happened on.
            if let f = r.failedAt, now < f + backoff(r), r.failedOn == nil || r.failedOn == t { continue }
            if t == .bluetooth && yieldsToPeer(peer, r, now: now) { continue }
            candidates.append((peer, t, graph[peer]?.neighbours.count ?? r.load ?? 0))
        }
        guard !candidates.isEmpty else { return nil }
        let byLoad: (Candidate, Candidate) -> Bool = { ($0.load, $0.peer) < ($1.load, $1.peer) }
        if connections.isEmpty && pending.isEmpty {
            // Alone: anyone will do; the least loaded, ties broken at random so newcomers spread.
            let low = candidates.map(\.load).min()!
            let least = candidates.filter { $0.load == low }.sorted(by: byLoad)
            let pick = least[Int.random(in: 0..<least.count, using: &rng)]
            return (pick.peer, pick.transport)
        }
        let members = component()
        let outside = candidates.filter { !members.contains($0.peer) }
        if planning && !joinAt.isEmpty { joinAt = joinAt.filter { peers[$0.key]?.heardOn.isEmpty == false && !members.contains($0.key) } }
        if !outside.isEmpty {
            // Join the other part. Our component's dialler does it at once; other members that hear
            // it wait a random while first, so the two parts usually get one link, not one per pair
            // that hears each other — and still get joined when the dialler cannot hear them.
            var ready = outside
            if !isDialler(of: members) {
                let spread = max(settings.connectDelayMillis, 1000)
                if planning {
                    for c in outside.sorted(by: byLoad) where joinAt[c.peer] == nil {
                        joinAt[c.peer] = now + spread + UInt64.random(in: 0...(3 * spread), using: &rng)
                    }
                }
                ready = outside.filter { (joinAt[$0.peer] ?? UInt64.max) <= now }
            }
            let max = settings.maxConnectionCount
            let pick = ready.min { ($0.load >= max ? 1 : 0, $0.load, $0.peer) < ($1.load >= max ? 1 : 0, $1.load, $1.peer) }
            return pick.map { ($0.peer, $0.transport) }
        }
        // Inside our component: a second link for a node hanging by one, to a peer with room.
        guard slotsTaken < 2, settings.maxConnectionCount >= 3 else { return nil }
        let room = min(2, settings.maxConnectionCount - 1)
        return candidates.filter { $0.load < room }.min(by: byLoad).map { ($0.peer, $0.transport) }
    }

    /// The lowest peer id among our component's members with a free slot (per gossip).
    func isDialler(of members: Set<PeerID>) -> Bool {
        guard slotsTaken < settings.maxConnectionCount else { return false }
        let other: PeerID?
        if let cached = diallerCache { other = cached } else {
            var lowest: PeerID?
            for p in members where p != me {
                if graph[p]?.neighbours.count ?? 0 < settings.maxConnectionCount, lowest.map({ p < $0 }) ?? true { lowest = p }
            }
            diallerCache = .some(lowest)
            other = lowest
        }
        return other.map { me < $0 } ?? true
    }
}
