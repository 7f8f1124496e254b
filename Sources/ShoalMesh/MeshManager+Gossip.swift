import ShoalCore

/// Gossip: flooding link lists, reachability, and the spanning tree every node computes alike.
extension MeshManager {
    func announceOwnLinks(_ out: inout [MeshAction]) {
        componentCache = nil
        sequence += 1
        let mine = neighbours
        graph[me] = (sequence, mine)
        for c in connections.values.sorted(by: { $0.id < $1.id }) {
            out.append(.sendTopology(c.id, origin: me, sequence: sequence, neighbours: mine))
        }
    }

    func absorb(origin: PeerID, sequence seq: UInt64, neighbours: [PeerID], from: ConnectionID, now: UInt64, _ out: inout [MeshAction]) {
        if origin == me {
            // Our own news from before a restart: make ours newer.
            if seq >= sequence { sequence = seq; announceOwnLinks(&out) }
            return
        }
        if let known = graph[origin], known.sequence >= seq {
            if known.sequence == seq {
                // The link that brought it has it.
                gossipOwed[from]?.remove(origin)
            } else {
                // It sent older news: that side is behind, and may have no other way to learn.
                gossipOwed[from, default: []].insert(origin)
                if gossipFlushAt == nil { gossipFlushAt = now + settings.gossipIntervalMillis }
            }
            return
        }
        let kept = Array(neighbours.prefix(64))
        let old = graph[origin]?.neighbours ?? []
        graph[origin] = (seq, kept)
        // A newer sequence with the same links (a restart's renumbering) changes nothing.
        if old != kept { linksChanged(of: origin, from: old, to: kept) }
        // Forwarded at the next flush, as the entry is then (a newer one replaces this one).
        for id in connections.keys where id != from { gossipOwed[id, default: []].insert(origin) }
        gossipOwed[from]?.remove(origin)
        if gossipFlushAt == nil, connections.count > 1 { gossipFlushAt = now + settings.gossipIntervalMillis }
        // Forget gossip about nodes nobody links to any more (bounded memory). Only when the
        // graph has doubled since the last sweep: a sweep walks the whole component, and a large
        // mesh whose members are all reachable would otherwise sweep on every update.
        if graph.count > max(4 * max(peers.count, 16), graphSweepMark) {
            let members = component()
            graph = graph.filter { members.contains($0.key) }
            graphSweepMark = 2 * graph.count
            componentCache = nil
        }
    }

    /// Sends each link the newest entry of every origin it is owed (links in id order, origins
    /// in id order: every run alike), unless the link brought that very entry.
    func flushGossip(now: UInt64, _ out: inout [MeshAction]) {
        gossipFlushAt = nil
        let owed = gossipOwed
        gossipOwed = [:]
        if gossipCursor.count > connections.count { gossipCursor = gossipCursor.filter { connections[$0.key] != nil } }
        for id in owed.keys.sorted() {
            guard let c = connections[id] else { continue }
            let cap = max(1, c.transport == .bluetooth ? settings.gossipPerIntervalBluetooth : settings.gossipPerIntervalWifi)
            // In id order, from just past the last origin this link was sent (round robin: on a
            // slow link, origins that change often cannot keep the others waiting for good).
            var origins = owed[id]!.sorted()
            if let last = gossipCursor[id], let split = origins.firstIndex(where: { $0 > last }) {
                origins = Array(origins[split...] + origins[..<split])
            }
            for origin in origins.prefix(cap) {
                gossipCursor[id] = origin
                guard let entry = graph[origin] else { continue }
                out.append(.sendTopology(id, origin: origin, sequence: entry.sequence, neighbours: entry.neighbours))
            }
            if origins.count > cap {
                gossipOwed[id] = Set(origins.dropFirst(cap))
                gossipFlushAt = now + settings.gossipIntervalMillis
            }
        }
    }

    /// Keeps `componentCache` up to date without a walk of the whole mesh where it can (in a
    /// settled mesh, most news is of links among members, or among nodes elsewhere; in a mesh
    /// that forms, most news joins a part to ours); the spanning tree is computed again in any
    /// case. A link that goes away can split ours only when both ends are members: then the next
    /// `component()` walks it all again. A new link both ends report joins another part to ours
    /// when one end is a member and the other is not: that part is walked and added.
    func linksChanged(of origin: PeerID, from old: [PeerID], to new: [PeerID]) {
        treeCache = nil
        let room = settings.maxConnectionCount
        if (old.count < room) != (new.count < room) { diallerCache = nil }
        guard var members = componentCache else { return }
        let inside = members.contains(origin)
        if inside, old.contains(where: { $0 != origin && !new.contains($0) && members.contains($0) }) {
            componentCache = nil
            return
        }
        var grew = false
        for n in new where n != origin && !old.contains(n) && members.contains(n) != members.contains(origin) {
            guard graph[n]?.neighbours.contains(origin) ?? false else { continue }
            walk(from: members.contains(origin) ? n : origin, into: &members)
            grew = true
        }
        if grew { componentCache = members }
    }

    /// Adds `start` and everyone reachable from it through links both ends report to `members`.
    func walk(from start: PeerID, into members: inout Set<PeerID>) {
        guard members.insert(start).inserted else { return }
        var queue = [start]
        while let p = queue.popLast() {
            guard let entry = graph[p] else { continue }
            for n in entry.neighbours where n != p && !members.contains(n) {
                guard graph[n]?.neighbours.contains(p) ?? false else { continue }
                members.insert(n)
                queue.append(n)
            }
        }
    }

    /// Peers reachable from us through links, using our own links and gossip for the rest.
    /// `without`: as if our direct link to that peer were gone.
    func component(without cut: PeerID? = nil) -> Set<PeerID> {
        if cut == nil, let c = componentCache { return c }
        // Links both ends report (our own list for ours): a crashed node's last list cannot glue
        // parts together that are no longer linked. A walk over the gossip as it
        // is (no adjacency built first: in a large mesh this runs after every topology change).
        var seen: Set<PeerID> = [me]
        seen.reserveCapacity(graph.count + 1)
        for n in neighbours where n != cut { walk(from: n, into: &seen) }
        if cut == nil { componentCache = seen }
        return seen
    }
}
