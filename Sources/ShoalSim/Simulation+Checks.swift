import Glibc
import ShoalCore
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalWire

/// What the invariants read: snapshots, convergence, lost writes, the link graph.
extension Simulation {
    /// id → (body, version bytes) on a node, tombstones included.
    public func snapshot(_ i: Int) -> [String: (String?, [UInt8])] {
        guard let s = nodes[i].store, let docs = try? s.list(collection, limit: 1_000_000, includeDeleted: true) else { return [:] }
        var out: [String: (String?, [UInt8])] = [:]
        for d in docs { out[d.id] = (d.body, d.version) }
        return out
    }

    public var upNodes: [Int] { nodes.filter(\.up).map(\.index) }

    /// Every up node holds the same documents with the same versions and bodies. With trust: every
    /// up node but the revoked one, leaving out the revoked node's writes from its revocation on
    /// (`lateDocuments`: a node that took one before it knew keeps it; the others refuse it).
    public var converged: Bool {
        let up = checkedNodes
        guard let first = up.first else { return true }
        let snaps = up.map { snapshot($0) }
        let late = lateDocuments(snaps)
        let a = snaps[0].filter { !late.contains($0.key) }
        for s in snaps.dropFirst() {
            let b = s.filter { !late.contains($0.key) }
            guard a.count == b.count else { return false }
            for (k, v) in a { guard let w = b[k], w.0 == v.0, w.1 == v.1 else { return false } }
        }
        _ = first
        return true
    }

    /// Documents whose version on some checked node is the revoked node's write from its
    /// revocation on.
    func lateDocuments(_ snaps: [[String: (String?, [UInt8])]]) -> Set<String> {
        guard trustPlan != nil, let cutoff = victimCutoff else { return [] }
        var out = Set<String>()
        for s in snaps { for (k, v) in s where isLate(v.1, cutoff: cutoff) { out.insert(k) } }
        return out
    }

    /// The writes the end checks hold every node to: with trust, none of the revoked node's
    /// (those made before its revocation may not have left it; those after are refused).
    var checkedWrites: [(node: Int, id: String, version: VersionVector, deleted: Bool)] {
        guard let v = trustPlan?.victim else { return writes }
        return writes.filter { $0.node != v }
    }

    /// Cheap pre-check: every up node holds as many documents as were ever written.
    public var countsMatch: Bool {
        let ids = Set(checkedWrites.map(\.id)).count
        return checkedNodes.allSatisfy { i in
            guard let stats = try? nodes[i].store?.stats() else { return false }
            return stats.documents + stats.tombstones >= ids
        }
    }

    /// Writes whose version is not covered by the version every up node holds (should be none).
    public func lostWrites() -> [String] {
        var lost: [String] = []
        let late = lateDocuments(checkedNodes.map { snapshot($0) })
        for i in checkedNodes {
            let snap = snapshot(i)
            for w in checkedWrites where !late.contains(w.id) {
                guard let held = snap[w.id], let v = try? DocumentVersion(decoding: held.1) else { lost.append("\(w.id) missing on node \(i)"); continue }
                let c = v.vector.compare(w.version)
                if c != .dominates && c != .equal { lost.append("\(w.id) from node \(w.node) not covered on node \(i)") }
            }
        }
        return lost
    }

    /// Deletes that had seen every earlier write of their document (their version covers all of
    /// them) and that no write followed: every up node must hold the tombstone. A live document
    /// there is a resurrected delete.
    public func resurrectedDeletes() -> [String] {
        var byID: [String: [(node: Int, version: VersionVector, deleted: Bool)]] = [:]
        for w in writes { byID[w.id, default: []].append((w.node, w.version, w.deleted)) }
        var found: [String] = []
        let snaps = checkedNodes.map { ($0, snapshot($0)) }
        for (id, ws) in byID {
            // The revoked node's writes may never have left it: not checked.
            if let v = trustPlan?.victim, ws.contains(where: { $0.node == v }) { continue }
            guard let last = ws.last, last.deleted else { continue }
            // A delete concurrent with some write leaves the choice to the resolver: not checked.
            guard ws.dropLast().allSatisfy({ let c = last.version.compare($0.version); return c == .dominates || c == .equal }) else { continue }
            for (i, snap) in snaps where snap[id]?.0 != nil {
                found.append("\(id), deleted on node \(last.node) after every write of it, is live on node \(i)")
            }
        }
        return found.sorted()
    }

    /// Pairs linked by more than one open connection.
    public var duplicateLinks: [String] {
        var seen: [[Int]: Int] = [:]
        for c in conns.values where c.openA && c.openB { seen[[min(c.a, c.b), max(c.a, c.b)], default: 0] += 1 }
        return seen.filter { $0.value > 1 }.sorted { ($0.key[0], $0.key[1]) < ($1.key[0], $1.key[1]) }.map { "nodes \($0.key[0])–\($0.key[1]) hold \($0.value) links" }
    }

    /// Open links (both ends open), each once.
    public var links: [(Int, Int)] {
        conns.values.filter { $0.openA && $0.openB }.map { (min($0.a, $0.b), max($0.a, $0.b)) }.sorted { ($0.0, $0.1) < ($1.0, $1.1) }
    }

    /// Whether the link graph joins every part the radio graph joins (among up nodes).
    public var meshConnected: Bool {
        let up = Set(checkedNodes)
        let radio = medium.components(up: up)
        var adjacency: [Int: [Int]] = [:]
        for (a, b) in links { adjacency[a, default: []].append(b); adjacency[b, default: []].append(a) }
        for comp in radio {
            guard let s = comp.first else { continue }
            var seen: Set<Int> = [s]
            var queue = [s]
            while let x = queue.popLast() { for y in adjacency[x] ?? [] where !seen.contains(y) { seen.insert(y); queue.append(y) } }
            // Through the victim's links too, before its revocation closes them (it is not among
            // the checked nodes, so not in `comp`, but it relays until then); no other node.
            let victim = trustPlan?.victim
            if !comp.isSubset(of: seen) || seen.contains(where: { !comp.contains($0) && $0 != victim }) { return false }
        }
        return true
    }

    public func linkCount(_ i: Int) -> Int { links.filter { $0.0 == i || $0.1 == i }.count }

    /// Graphviz text of the current links.
    public func dot() -> String {
        var out = "graph shoal {\n  node [shape=circle];\n"
        for n in nodes { out += "  n\(n.index) [label=\"\(n.index)\\n\(n.peer.short)\"\(n.up ? "" : ", style=dashed")];\n" }
        for (a, b) in links { out += "  n\(a) -- n\(b);\n" }
        return out + "}\n"
    }
}
