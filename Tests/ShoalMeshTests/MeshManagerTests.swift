import ShoalConfig
import ShoalCore
import ShoalMesh
import ShoalRuntime
import Testing

/// A peer id whose order is known: ids made with a larger `n` sort later.
func peer(_ n: UInt8) -> PeerID { PeerID(bytes: [n] + Array(repeating: 0xAB, count: 31)) }

func manager(_ me: PeerID = peer(1), _ edit: (inout MeshSettings) -> Void = { _ in }) -> MeshManager {
    var s = MeshSettings()
    s.randomSeed = 42
    edit(&s)
    return MeshManager(me: me, settings: s, sequenceBase: 1, fallbackSeed: 7)
}

/// Drives a manager through time, waking it exactly when it asks; returns what it did, with times.
func timeline(_ m: MeshManager, until end: UInt64, start: UInt64 = 0, respond: (MeshAction, UInt64) -> MeshInput? = { _, _ in nil }) -> [(UInt64, MeshAction)] {
    var out: [(UInt64, MeshAction)] = []
    var pending: [(UInt64, MeshInput)] = [(start, .start)]
    while let (t, input) = pending.first {
        pending.removeFirst()
        for a in m.handle(input, now: t) {
            out.append((t, a))
            if let r = respond(a, t) { pending.insert((t, r), at: 0) }
        }
        if pending.isEmpty, let w = m.nextWake, w <= end { pending.append((w, .tick)) }
    }
    return out
}

@Suite("Mesh manager")
struct MeshManagerTests {
    @Test("discovery runs in phases: initial duration, pauses with uniform jitter, later durations")
    func discoveryPhases() {
        let m = manager()
        let t = timeline(m, until: 600_000)
        let starts = t.filter { if case .startScanning = $0.1 { return true }; return false }.map(\.0)
        let stops = t.filter { if case .stopScanning = $0.1 { return true }; return false }.map(\.0)
        #expect(starts.first == 0)
        #expect(stops.first == 30_000)  // initialDiscoveryDurationSeconds
        #expect(starts.count >= 5)
        var pauses: [UInt64] = []
        for i in 1..<min(starts.count, stops.count) {
            #expect(stops[i] - starts[i] == 15_000)  // discoveryDurationSeconds
            pauses.append(starts[i] - stops[i - 1])
        }
        for p in pauses { #expect((30_000...60_000).contains(p), "pause \(p) ms outside 45 s ± 15 s") }
        #expect(Set(pauses).count > 1, "jitter varies the pauses")
        // The same seed replays the same timeline; another seed does not.
        let again = timeline(manager(), until: 600_000).map(\.0)
        #expect(again == t.map(\.0))
        let other = timeline(manager(peer(1)) { $0.randomSeed = 43 }, until: 600_000)
        #expect(other.map(\.0) != t.map(\.0))
    }

    @Test("no jitter means exact pauses; zero durations do not stop by time")
    func zeroSettings() {
        let exact = timeline(manager { $0.discoveryPauseJitterMillis = 0 }, until: 200_000)
        let starts = exact.filter { if case .startScanning = $0.1 { return true }; return false }.map(\.0)
        #expect(Array(starts.prefix(3)) == [0, 75_000, 135_000])
        let forever = timeline(manager { $0.initialDiscoveryMillis = 0 }, until: 36_000_000)
        #expect(!forever.contains { if case .stopScanning = $0.1 { return true }; return false })
        let later = timeline(manager { $0.discoveryMillis = 0; $0.discoveryPauseJitterMillis = 0 }, until: 36_000_000)
        let stops = later.filter { if case .stopScanning = $0.1 { return true }; return false }.map(\.0)
        #expect(stops == [30_000])
    }

    @Test("advertising starts after the delay and backs off exponentially up to the cap on failure")
    func advertisingBackoff() {
        let m = manager()
        var attempts = 0
        let t = timeline(m, until: 400_000) { a, _ in
            guard case .startAdvertising(let tr) = a else { return nil }
            attempts += 1
            return attempts <= 7 ? .advertisingFailed(tr, reason: "rfkill") : .advertisingStarted(tr)
        }
        let times = t.filter { if case .startAdvertising = $0.1 { return true }; return false }.map(\.0)
        // 2 s delay, then 5, 10, 20, 40, 60 (capped), 60, 60 s after each failure.
        #expect(Array(times.prefix(8)) == [2_000, 7_000, 17_000, 37_000, 77_000, 137_000, 197_000, 257_000])
        #expect(times.count == 8)
        #expect(m.isAdvertising(.wifi))
        #expect(t.contains { $0.1 == .event(.transportStatus(.wifi, active: true, error: nil)) })
        #expect(t.contains { $0.1 == .event(.transportStatus(.wifi, active: false, error: "rfkill")) })
    }

    @Test("a transport's status is an event only when it changes, not at every failed retry")
    func transportStatusOnChangeOnly() {
        let m = manager()
        var attempts = 0
        let t = timeline(m, until: 400_000) { a, _ in
            guard case .startAdvertising(let tr) = a else { return nil }
            attempts += 1
            return attempts <= 5 ? .advertisingFailed(tr, reason: "no replication.listen") : (attempts == 6 ? .advertisingFailed(tr, reason: "rfkill") : .advertisingStarted(tr))
        }
        let statuses = t.compactMap { if case .event(.transportStatus(_, let active, let error)) = $0.1 { return "\(active) \(error ?? "-")" }; return nil }
        #expect(attempts == 7)
        #expect(statuses == ["false no replication.listen", "false rfkill", "true -"])
    }

    @Test("retryNetworks starts advertising and a discovery phase at once")
    func retryNetworks() {
        let m = manager()
        _ = m.handle(.start, now: 0)
        _ = m.handle(.tick, now: 2_000)
        _ = m.handle(.advertisingFailed(.wifi, reason: "no permission"), now: 2_000)
        _ = m.handle(.tick, now: 30_000)  // the first phase ends
        #expect(!m.isScanning)
        let a = m.handle(.retryNetworks, now: 31_000)
        #expect(a.contains(.startAdvertising(.wifi)))
        #expect(a.contains(.startScanning(.wifi)))
    }

    @Test("at least connectDelay between dials; backoff before redialling a failed peer")
    func dialPacing() {
        let m = manager()
        _ = m.handle(.start, now: 0)
        var dials: [(UInt64, PeerID)] = []
        func record(_ actions: [MeshAction], _ t: UInt64) {
            for case .connect(let p, _) in actions { dials.append((t, p)) }
        }
        record(m.handle(.discovered(peer(2), .wifi, load: 0), now: 100), 100)
        record(m.handle(.discovered(peer(3), .wifi, load: 0), now: 150), 150)
        #expect(dials.count == 1)
        let first = dials[0].1
        record(m.handle(.outgoingFailed(first, .wifi, reason: "refused"), now: 200), 200)
        #expect(dials.count == 1, "the next dial waits for connectDelay")
        var t: UInt64 = 200
        while let w = m.nextWake, w <= 20_000 { t = w; record(m.handle(.tick, now: t), t) }
        #expect(dials.count >= 2)
        #expect(dials[1].0 >= 1_100)
        let redials = dials.dropFirst().filter { $0.1 == first }
        for r in redials { #expect(r.0 >= 10_200, "\(first.short) redialled \(r.0 - 200) ms after failing") }
        #expect(m.counters.failedConnectionAttempts == 1)
    }

    @Test("a peer that refuses us is heard, counted, shows why, and is redialled only after backoffMillis: even the refusal that first made it heard")
    func refusal() {
        let m = manager()
        _ = m.handle(.start, now: 0)
        var dials: [UInt64] = []
        func record(_ actions: [MeshAction], _ t: UInt64) { for case .connect(peer(2), _) in actions { dials.append(t) } }
        // A static-peer probe: the first we hear of peer 2 is its refusal. Heard-then-failed as two
        // inputs would dial it at once (hearing a peer anew forgets its backoff).
        let first = m.handle(.refused(peer(2), .wifi, reason: "peer 2 refused us: not in its allowedPeers"), now: 100)
        record(first, 100)
        #expect(first.contains(.event(.peerDiscovery(peer(2), .wifi, online: true))))
        #expect(first.contains(.event(.peerReplicator(peer(2), .wifi, outgoing: true, activity: .offline, error: "peer 2 refused us: not in its allowedPeers"))))
        #expect(m.info(peer(2))?.lastError == "peer 2 refused us: not in its allowedPeers")
        #expect(m.info(peer(2))?.online == true)
        var t: UInt64 = 100
        while let w = m.nextWake, w <= 30_000 {
            t = w
            let actions = m.handle(.tick, now: t)
            record(actions, t)
            // Every dial is refused again.
            if actions.contains(.connect(peer(2), .wifi)) { _ = m.handle(.refused(peer(2), .wifi, reason: "again"), now: t) }
        }
        #expect(!dials.isEmpty)
        #expect(dials.first.map { $0 >= 10_100 } == true, "dialled \(dials) after a refusal at 100")
        for (a, b) in zip(dials, dials.dropFirst()) { #expect(b - a >= 10_000, "redialled \(b - a) ms after a refusal") }
        #expect(m.counters.failedConnectionAttempts == 1 + dials.count)
        // A link that opens clears it.
        _ = m.handle(.outgoingOpened(7, peer(2), .wifi), now: t + 1)
        #expect(m.info(peer(2))?.lastError == nil)
    }

    @Test("when both sides dial, both keep the link dialled by the lower peer id")
    func oneLinkPerPair() {
        let a = manager(peer(1)), b = manager(peer(2))
        _ = a.handle(.start, now: 0)
        _ = b.handle(.start, now: 0)
        // Link 10 dialled by a, link 11 by b, crossing.
        _ = a.handle(.outgoingOpened(10, peer(2), .wifi), now: 5)
        _ = b.handle(.incoming(10, peer(1), .wifi), now: 5)
        let ax = a.handle(.incoming(11, peer(2), .wifi), now: 6)
        let bx = b.handle(.outgoingOpened(11, peer(1), .wifi), now: 6)
        #expect(a.keeps(10) && !a.keeps(11))
        #expect(b.keeps(10) && !b.keeps(11))
        #expect(ax.contains { if case .close(11, _) = $0 { return true }; return false })
        #expect(bx.contains { if case .close(11, _) = $0 { return true }; return false })
        #expect(a.connectionCount == 1 && b.connectionCount == 1)
    }

    @Test("a dial keeps its slot while the peer's crossing link comes and goes: never over maxConnectionCount, never dialled twice")
    func dialKeepsItsSlot() {
        let m = manager(peer(1)) { $0.maxConnectionCount = 2; $0.connectDelayMillis = 200 }
        _ = m.handle(.start, now: 0)
        var dials: [PeerID] = []
        func record(_ actions: [MeshAction]) { for case .connect(let p, .wifi) in actions { dials.append(p) } }
        record(m.handle(.discovered(peer(2), .wifi, load: 0), now: 100))
        #expect(dials == [peer(2)])
        // Peer 2 dials us too, and closes that link (it keeps the one dialled by the lower id,
        // ours, whose handshake has not finished here yet).
        _ = m.handle(.incoming(11, peer(2), .wifi), now: 150)
        #expect(m.keeps(11))
        _ = m.handle(.closed(11), now: 160)
        // Two more peers are heard: one slot is free, not two, and peer 2 is not dialled again.
        record(m.handle(.discovered(peer(3), .wifi, load: 0), now: 400))
        record(m.handle(.discovered(peer(4), .wifi, load: 0), now: 400))
        var t: UInt64 = 400
        while let w = m.nextWake, w <= 5_000 { t = w; record(m.handle(.tick, now: t)) }
        #expect(dials.count == 2 && dials[0] == peer(2) && dials[1] != peer(2), "dials: \(dials.map(\.short))")
        // Both dials finish: both links are kept, and that is the budget.
        _ = m.handle(.outgoingOpened(10, peer(2), .wifi), now: t + 10)
        _ = m.handle(.outgoingOpened(12, dials[1], .wifi), now: t + 20)
        #expect(m.keeps(10) && m.keeps(12))
        #expect(m.connectionCount == 2 && m.counters.connectedPeers == 2)
        // A dial that finishes after its 30 s, when the slots are taken: closed, not over budget.
        let late = m.handle(.outgoingOpened(13, peer(9), .wifi), now: t + 40_000)
        #expect(!m.keeps(13) && late.contains { if case .close(13, _) = $0 { return true }; return false })
        #expect(m.connectionCount == 2)
    }

    @Test("over Bluetooth LE the lower peer id dials at once; the higher one waits bluetoothYieldMillis, then dials if still unlinked")
    func bluetoothYield() {
        func dials(_ me: PeerID, hearing other: PeerID, until end: UInt64) -> [UInt64] {
            let m = manager(me) { $0.transports = [.bluetooth]; $0.connectDelayMillis = 200 }
            _ = m.handle(.start, now: 0)
            var times: [UInt64] = []
            for case .connect(other, .bluetooth) in m.handle(.discovered(other, .bluetooth, load: 0), now: 1_000) { times.append(1_000) }
            while let w = m.nextWake, w <= end {
                for case .connect(other, .bluetooth) in m.handle(.tick, now: w) { times.append(w) }
                if !times.isEmpty { break }
            }
            return times
        }
        let low = dials(peer(1), hearing: peer(2), until: 20_000)
        #expect(low.first.map { $0 < 2_000 } == true, "the lower id dials within connectDelay: \(low)")
        let high = dials(peer(2), hearing: peer(1), until: 20_000)
        #expect(high.first.map { $0 >= 7_000 && $0 < 8_000 } == true, "the higher id waits 6 s from hearing the peer: \(high)")
        // Wi-Fi has no such rule: both sides may dial (the one-link-per-pair rule sorts it out).
        let m = manager(peer(2))
        _ = m.handle(.start, now: 0)
        #expect(m.handle(.discovered(peer(1), .wifi, load: 0), now: 1_000).contains(.connect(peer(1), .wifi)))
    }

    @Test("a full node evicts for a newcomer at most once per evictionBackoff, and only a link whose loss keeps the mesh connected")
    func eviction() {
        let x = manager(peer(9))
        _ = x.handle(.start, now: 0)
        // x links to P, Q (which link to each other) and R (a leaf).
        _ = x.handle(.incoming(1, peer(2), .wifi), now: 10)
        _ = x.handle(.incoming(2, peer(3), .wifi), now: 10)
        _ = x.handle(.incoming(3, peer(4), .wifi), now: 10)
        _ = x.handle(.topology(from: 1, origin: peer(2), sequence: 5, neighbours: [peer(9), peer(3)]), now: 20)
        _ = x.handle(.topology(from: 2, origin: peer(3), sequence: 5, neighbours: [peer(9), peer(2)]), now: 20)
        _ = x.handle(.topology(from: 3, origin: peer(4), sequence: 5, neighbours: [peer(9)]), now: 20)
        #expect(x.state == .fullyConnected)
        let first = x.handle(.incoming(4, peer(20), .wifi), now: 1_000)
        #expect(x.keeps(4))
        let evicted = first.compactMap { if case .close(let id, _) = $0 { return id }; return nil }
        #expect(evicted.count == 1)
        #expect(evicted.first != 3, "never the leaf: losing it would cut it off")
        #expect(x.connectionCount == 3)
        // Gossip after the eviction: the evicted peer E, the kept one K and R all link to each
        // other, so losing K or R would not cut anyone off. Another newcomer within
        // evictionBackoff is still refused; after it, one is admitted.
        let evictedPeer = evicted.first == 1 ? peer(2) : peer(3)
        let kept = evicted.first == 1 ? peer(3) : peer(2)
        let keptLink: ConnectionID = evicted.first == 1 ? 2 : 1
        _ = x.handle(.topology(from: keptLink, origin: evictedPeer, sequence: 6, neighbours: [kept, peer(4)]), now: 1_100)
        _ = x.handle(.topology(from: keptLink, origin: kept, sequence: 6, neighbours: [peer(9), evictedPeer, peer(4)]), now: 1_100)
        _ = x.handle(.topology(from: 3, origin: peer(4), sequence: 6, neighbours: [peer(9), kept, evictedPeer]), now: 1_100)
        let second = x.handle(.incoming(5, peer(21), .wifi), now: 10_000)
        #expect(!x.keeps(5))
        #expect(second.contains { if case .close(5, _) = $0 { return true }; return false })
        let third = x.handle(.incoming(6, peer(22), .wifi), now: 31_000)
        #expect(x.keeps(6))
        #expect(third.filter { if case .close = $0 { return true }; return false }.count == 1)
        #expect(x.counters.evictions == 2)
        #expect(x.connectionCount <= 3)
        // A peer already reachable through the mesh gains nothing from a link here: refused.
        _ = x.handle(.topology(from: keptLink, origin: peer(30), sequence: 1, neighbours: [kept]), now: 69_000)
        _ = x.handle(.topology(from: keptLink, origin: kept, sequence: 7, neighbours: [peer(9), evictedPeer, peer(4), peer(30)]), now: 69_000)
        _ = x.handle(.incoming(7, peer(30), .wifi), now: 70_000)
        #expect(!x.keeps(7))
    }

    @Test("gossip is forwarded to the other links at the next flush, the newest entry per origin once, never back; old news is dropped and answered")
    func gossip() {
        let m = manager(peer(1))
        _ = m.handle(.start, now: 0)
        _ = m.handle(.incoming(1, peer(2), .wifi), now: 1)
        _ = m.handle(.incoming(2, peer(3), .wifi), now: 1)
        let topology: ([MeshAction]) -> [MeshAction] = { $0.filter { if case .sendTopology = $0 { true } else { false } } }
        // Held for gossipIntervalMillis (100): a newer entry in the meantime replaces it.
        #expect(m.handle(.topology(from: 1, origin: peer(7), sequence: 10, neighbours: [peer(2)]), now: 5).isEmpty)
        #expect(m.nextWake.map { $0 <= 105 } == true, "\(String(describing: m.nextWake))")
        #expect(topology(m.handle(.topology(from: 1, origin: peer(7), sequence: 11, neighbours: [peer(2), peer(3)]), now: 50)).isEmpty)
        #expect(topology(m.handle(.tick, now: 104)).isEmpty)
        #expect(topology(m.handle(.tick, now: 105)) == [.sendTopology(2, origin: peer(7), sequence: 11, neighbours: [peer(2), peer(3)])])
        #expect(topology(m.handle(.tick, now: 300)).isEmpty, "sent once")
        #expect(m.handle(.topology(from: 2, origin: peer(7), sequence: 9, neighbours: []), now: 301).isEmpty)
        #expect(topology(m.handle(.tick, now: 500)) == [.sendTopology(2, origin: peer(7), sequence: 11, neighbours: [peer(2), peer(3)])],
                "old news is not forwarded; its sender is sent ours")
        // Link 2 brings the newest entry itself while link 1 is owed it: only link 1 gets it.
        _ = m.handle(.topology(from: 1, origin: peer(8), sequence: 1, neighbours: []), now: 501)
        _ = m.handle(.topology(from: 2, origin: peer(8), sequence: 2, neighbours: []), now: 502)
        #expect(topology(m.handle(.tick, now: 700)) == [.sendTopology(1, origin: peer(8), sequence: 2, neighbours: [])])
        _ = m.handle(.topology(from: 1, origin: peer(7), sequence: 12, neighbours: [peer(2)]), now: 701)
        #expect(!m.reachable.contains(peer(7)), "a link counts once both ends report it")
        _ = m.handle(.topology(from: 1, origin: peer(2), sequence: 2, neighbours: [peer(1), peer(7)]), now: 702)
        #expect(m.reachable.contains(peer(7)))
        // peer 7 unlinks from 2: no longer reachable.
        _ = m.handle(.topology(from: 1, origin: peer(7), sequence: 13, neighbours: []), now: 703)
        _ = m.handle(.topology(from: 1, origin: peer(2), sequence: 3, neighbours: [peer(1)]), now: 703)
        #expect(!m.reachable.contains(peer(7)))
    }

    @Test("gossip entries from one frame as one input end as the same entries one by one: same graph, same forwarding")
    func gossipBatch() {
        let entries: [(origin: PeerID, sequence: UInt64, neighbours: [PeerID])] = [
            (peer(2), 5, [peer(1), peer(7)]), (peer(7), 3, [peer(2), peer(8)]), (peer(8), 4, [peer(7)]), (peer(7), 2, [])]
        func run(batched: Bool) -> (actions: [MeshAction], reachable: Set<PeerID>) {
            let m = manager(peer(1))
            _ = m.handle(.start, now: 0)
            _ = m.handle(.incoming(1, peer(2), .wifi), now: 1)
            _ = m.handle(.incoming(2, peer(3), .wifi), now: 1)
            if batched {
                _ = m.handle(.topologies(from: 1, entries), now: 2)
            } else {
                for e in entries { _ = m.handle(.topology(from: 1, origin: e.origin, sequence: e.sequence, neighbours: e.neighbours), now: 2) }
            }
            return (m.handle(.tick, now: 200).filter { if case .sendTopology = $0 { true } else { false } }, m.reachable)
        }
        let one = run(batched: false), all = run(batched: true)
        #expect(all.reachable == [peer(2), peer(3), peer(7), peer(8)])
        #expect(all.reachable == one.reachable)
        #expect(all.actions == one.actions)
        #expect(all.actions.contains(.sendTopology(2, origin: peer(7), sequence: 3, neighbours: [peer(2), peer(8)])))
    }

    @Test("a new link is told the graph at most gossipPerInterval entries per interval; what it sends us itself is not sent back; older news from it gets it ours")
    func pacedDump() {
        let m = manager(peer(1)) { $0.gossipPerIntervalWifi = 2 }
        _ = m.handle(.start, now: 0)
        _ = m.handle(.incoming(1, peer(2), .wifi), now: 1)
        for k: UInt8 in 10..<15 { _ = m.handle(.topology(from: 1, origin: peer(k), sequence: 1, neighbours: []), now: 2) }
        // What link 2 is sent about others (our own announcement goes at once, to every link).
        let toLink2: ([MeshAction]) -> [PeerID] = { actions in
            actions.compactMap { if case .sendTopology(2, let origin, _, _) = $0, origin != peer(1) { origin } else { nil } }
        }
        #expect(toLink2(m.handle(.incoming(2, peer(3), .wifi), now: 3)) == [peer(10), peer(11)])
        // Link 2 sends us origin 12 as we know it: it has it, so it is not owed it any more.
        _ = m.handle(.topology(from: 2, origin: peer(12), sequence: 1, neighbours: []), now: 50)
        #expect(toLink2(m.handle(.tick, now: 102)).isEmpty)
        #expect(toLink2(m.handle(.tick, now: 103)) == [peer(13), peer(14)])
        #expect(toLink2(m.handle(.tick, now: 300)).isEmpty)
        // Link 2 sends older news of origin 10: that side is behind, so it is sent ours.
        _ = m.handle(.topology(from: 2, origin: peer(10), sequence: 0, neighbours: []), now: 301)
        #expect(toLink2(m.handle(.tick, now: 400)).isEmpty)
        #expect(toLink2(m.handle(.tick, now: 401)) == [peer(10)])
    }

    @Test("a capped link is sent what it is owed round robin: origins that change every interval do not keep the others waiting")
    func gossipRoundRobin() {
        let m = manager(peer(1)) { $0.gossipPerIntervalWifi = 2 }
        _ = m.handle(.start, now: 0)
        _ = m.handle(.incoming(1, peer(2), .wifi), now: 1)
        _ = m.handle(.incoming(2, peer(3), .wifi), now: 1)
        let toLink2: ([MeshAction]) -> [PeerID] = { actions in
            actions.compactMap { if case .sendTopology(2, let origin, _, _) = $0, origin != peer(1) { origin } else { nil } }
        }
        for k: UInt8 in 10..<14 { _ = m.handle(.topology(from: 1, origin: peer(k), sequence: 1, neighbours: []), now: 2) }
        #expect(toLink2(m.handle(.tick, now: 102)) == [peer(10), peer(11)])
        for k: UInt8 in 10..<12 { _ = m.handle(.topology(from: 1, origin: peer(k), sequence: 2, neighbours: []), now: 150) }
        #expect(toLink2(m.handle(.tick, now: 202)) == [peer(12), peer(13)])
        #expect(toLink2(m.handle(.tick, now: 302)) == [peer(10), peer(11)])
    }

    @Test("states: Created, Discovering, FullyConnected, Stopped, Dead")
    func states() {
        let m = manager { $0.maxConnectionCount = 1 }
        #expect(m.state == .created)
        _ = m.handle(.start, now: 0)
        #expect(m.state == .discovering)
        _ = m.handle(.incoming(1, peer(5), .wifi), now: 1)
        #expect(m.state == .fullyConnected)
        let stop = m.handle(.stop, now: 2)
        #expect(m.state == .stopped)
        #expect(stop.contains { if case .close(1, _) = $0 { return true }; return false })
        #expect(m.handle(.incoming(2, peer(6), .wifi), now: 3).contains { if case .close(2, _) = $0 { return true }; return false })
        _ = m.handle(.fatal("store is gone"), now: 4)
        #expect(m.state == .dead)
        #expect(m.handle(.start, now: 5).isEmpty)
    }

    @Test("a transport going down closes its links and stops its radios")
    func transportDown() {
        let m = manager()
        _ = m.handle(.start, now: 0)
        _ = m.handle(.tick, now: 2_000)
        _ = m.handle(.advertisingStarted(.wifi), now: 2_000)
        _ = m.handle(.incoming(1, peer(5), .wifi), now: 2_100)
        let a = m.handle(.transport(.wifi, up: false), now: 3_000)
        #expect(a.contains(.stopAdvertising(.wifi)))
        #expect(a.contains(.stopScanning(.wifi)))
        #expect(a.contains { if case .close(1, _) = $0 { return true }; return false })
        #expect(m.connectionCount == 0)
        let b = m.handle(.transport(.wifi, up: true), now: 4_000)
        #expect(b.contains(.startAdvertising(.wifi)))
    }

    @Test("every ObjectBox mesh option reaches the manager from a site file")
    func optionsFromConfig() throws {
        let yaml = """
            group: g
            mesh:
              maxConnectionCount: 4
              backoffMillis: 11000
              evictionBackoffMillis: 31000
              randomSeed: 5
              requestTimeoutMillis: 6000
              advertisingDelayMillis: 2100
              advertisingRetryMillis: 5100
              advertisingRetryMaxMillis: 61000
              connectDelayMillis: 1100
              initialDiscoveryDurationSeconds: 31
              discoveryDurationSeconds: 16
              discoveryPauseSeconds: 46
              discoveryPauseJitterSeconds: 14
              txLogBatchSizeKb: 101
              txLogBatchMaxCount: 1001
              txLogMaxAgeSeconds: 28801
            """
        let loader = ConfigurationLoading.loader(directories: [])
        let board = try loader.applying(try loader.loadSite(text: yaml, file: "site.yaml"), to: try loader.loadBoard("sim"))
        let s = MeshSettings(board.mesh)
        #expect(board.mesh.requestTimeoutMillis == 6_000 && board.mesh.txLogBatchSizeKb == 101)
        #expect(board.mesh.txLogBatchMaxCount == 1_001 && board.mesh.txLogMaxAgeSeconds == 28_801)
        #expect(s.maxConnectionCount == 4 && s.backoffMillis == 11_000 && s.evictionBackoffMillis == 31_000 && s.randomSeed == 5)
        #expect(s.advertisingDelayMillis == 2_100 && s.advertisingRetryMillis == 5_100 && s.advertisingRetryMaxMillis == 61_000)
        #expect(s.connectDelayMillis == 1_100 && s.initialDiscoveryMillis == 31_000 && s.discoveryMillis == 16_000)
        #expect(s.discoveryPauseMillis == 46_000 && s.discoveryPauseJitterMillis == 14_000)
    }
}
