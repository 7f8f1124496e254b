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

    func absorb(origin: PeerID, sequence seq: UInt64, neighbours: [PeerID], from: ConnectionID, _ out: inout [MeshAction]) {
        if origin == me {
            // Our own news from before a restart: make ours newer.
            if seq >= sequence { sequence = seq; announceOwnLinks(&out) }
            return
        }
        if let known = graph[origin], known.sequence >= seq { return }
        graph[origin] = (seq, Array(neighbours.prefix(64)))
        componentCache = nil
        for c in connections.values.sorted(by: { $0.id < $1.id }) where c.id != from {
            out.append(.sendTopology(c.id, origin: origin, sequence: seq, neighbours: neighbours))
        }
        // Forget gossip about nodes nobody links to any more (bounded memory).
        if graph.count > 4 * max(peers.count, 16) {
            let members = component()
            graph = graph.filter { members.contains($0.key) }
            componentCache = nil
        }
    }

    /// Peers reachable from us through links, using our own links and gossip for the rest.
    /// `without`: as if our direct link to that peer were gone.
    func component(without cut: PeerID? = nil) -> Set<PeerID> {
        if cut == nil, let c = componentCache { return c }
        // Links both ends report (our own list for ours): a crashed node's last list cannot glue
        // parts together that are no longer linked.
        var adjacency: [PeerID: [PeerID]] = [:]
        let mine = Set(neighbours)
        for (origin, entry) in graph where origin != me {
            for n in entry.neighbours where n != origin {
                let mutual = n == me ? mine.contains(origin) : (graph[n]?.neighbours.contains(origin) ?? false)
                if mutual { adjacency[origin, default: []].append(n) }
            }
        }
        var seen: Set<PeerID> = [me]
        var queue = neighbours.filter { $0 != cut }
        seen.formUnion(queue)
        while let p = queue.popLast() {
            for n in adjacency[p] ?? [] where !seen.contains(n) {
                if cut != nil && ((p == cut && n == me) || (p == me && n == cut)) { continue }
                seen.insert(n)
                queue.append(n)
            }
        }
        if cut == nil { componentCache = seen }
        return seen
    }
}
