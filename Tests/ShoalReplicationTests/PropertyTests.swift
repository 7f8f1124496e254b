import Foundation
import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalTesting
import Testing

/// Random operation sequences over random link schedules and delivery orders, seeded so any
/// failure replays (SHOAL_PROPERTY_SEEDS=N runs more; SHOAL_PROPERTY_SEED=S runs one).
@Suite("Replication properties")
struct ReplicationPropertyTests {
    static var seeds: [UInt64] {
        let env = ProcessInfo.processInfo.environment
        if let one = env["SHOAL_PROPERTY_SEED"].flatMap(UInt64.init) { return [one] }
        let count = env["SHOAL_PROPERTY_SEEDS"].flatMap(Int.init) ?? 24
        return (1...UInt64(count)).map { $0 &* 7919 }
    }

    @Test("all nodes converge and no acknowledged write is lost, whatever the schedule", arguments: seeds)
    func randomSchedules(_ seed: UInt64) throws {
        var settings = ReplicationSettings()
        settings.batchMaxCount = 7
        settings.batchSizeBytes = 300
        settings.requestTimeoutMillis = 3000
        let nodes = try makeNodes(["n0", "n1", "n2", "n3"], seed: seed, settings: settings)
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: seed)
        var rng = SeededRandom(seed: seed ^ 0x5EED)
        let ids = (0..<12).map { "doc-\($0)" }
        for _ in 0..<260 {
            switch Int.random(in: 0..<100, using: &rng) {
            case 0..<30:
                let n = Int.random(in: 0..<nodes.count, using: &rng)
                nodes[n].wall.advance(UInt64.random(in: 0...40, using: &rng))
                let id = ids.randomElement(using: &rng)!
                try nodes[n].put(id, "{\"by\":\"\(nodes[n].name)\",\"r\":\(Int.random(in: 0..<1000, using: &rng))}")
                net.committed(n)
            case 30..<38:
                let n = Int.random(in: 0..<nodes.count, using: &rng)
                let id = ids.randomElement(using: &rng)!
                if let doc = try nodes[n].snapshot()[id], doc.0 != nil {
                    nodes[n].wall.advance(UInt64.random(in: 0...40, using: &rng))
                    try nodes[n].delete(id)
                    net.committed(n)
                }
            case 38..<48:
                let a = Int.random(in: 0..<nodes.count, using: &rng), b = Int.random(in: 0..<nodes.count, using: &rng)
                if a != b && !net.links.values.contains(where: { Set([$0.a, $0.b]) == Set([a, b]) }) { net.connect(a, b) }
            case 48..<54:
                if let link = net.links.keys.sorted().randomElement(using: &rng) { net.cut(link) }
            case 54..<60:
                net.tick(UInt64.random(in: 0...4000, using: &rng))
            default:
                for _ in 0..<Int.random(in: 1...25, using: &rng) { net.step() }
            }
        }
        // Heal: one line through every node, then let time pass until nothing moves.
        net.healInLine()
        try expectConverged(nodes)
        #expect(net.closeErrors().isEmpty, "links failed: \(net.closeErrors()) (seed \(seed))")
        // Every write ever acknowledged locally is reflected in the final version everywhere.
        let final = try nodes[0].snapshot()
        for n in nodes {
            for (c, id, ts) in n.writes where c == readings {
                let version = try DocumentVersion(decoding: try #require(final[id], "seed \(seed): \(id) missing").1)
                #expect((version.vector.timestamp(of: n.peer) ?? .zero) >= ts, "seed \(seed): \(n.name)'s write of \(id) at \(ts) lost")
            }
        }
    }
}

@Suite("Replication properties with retention")
struct RetentionPropertyTests {
    /// Like the schedule property, with tombstone purges mixed in. Purges make divergence
    /// legitimate (a node refuses what predates its horizon), so the property here is the one
    /// that matters: no node ever holds, live, a version that a delete it purged should have beaten.
    @Test("no purged delete is ever resurrected", arguments: ReplicationPropertyTests.seeds)
    func noResurrection(_ seed: UInt64) throws {
        var settings = ReplicationSettings()
        settings.batchMaxCount = 5
        let nodes = try makeNodes(["n0", "n1", "n2"], seed: seed, settings: settings)
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: seed)
        var rng = SeededRandom(seed: seed ^ 0xDEAD)
        let ids = (0..<8).map { "doc-\($0)" }
        var purged: [(node: Int, id: String, version: DocumentVersion)] = []
        for _ in 0..<200 {
            switch Int.random(in: 0..<100, using: &rng) {
            case 0..<30:
                let n = Int.random(in: 0..<nodes.count, using: &rng)
                nodes[n].wall.advance(UInt64.random(in: 1...20, using: &rng))
                try nodes[n].put(ids.randomElement(using: &rng)!, "{\"r\":\(Int.random(in: 0..<100, using: &rng))}")
                net.committed(n)
            case 30..<45:
                let n = Int.random(in: 0..<nodes.count, using: &rng)
                let id = ids.randomElement(using: &rng)!
                if try nodes[n].snapshot()[id]?.0 != nil {
                    nodes[n].wall.advance(UInt64.random(in: 1...20, using: &rng))
                    try nodes[n].delete(id)
                    net.committed(n)
                }
            case 45..<50:
                let n = Int.random(in: 0..<nodes.count, using: &rng)
                let tombstones = try nodes[n].snapshot().filter { $0.value.0 == nil }
                try nodes[n].store.purgeTombstones(olderThan: Int64(NodeClock.systemWallMillis()) + 1)
                for (id, (_, v)) in tombstones { purged.append((n, id, try DocumentVersion(decoding: v))) }
            case 50..<60:
                let a = Int.random(in: 0..<nodes.count, using: &rng), b = Int.random(in: 0..<nodes.count, using: &rng)
                if a != b && !net.links.values.contains(where: { Set([$0.a, $0.b]) == Set([a, b]) }) { net.connect(a, b) }
            case 60..<66:
                if let link = net.links.keys.sorted().randomElement(using: &rng) { net.cut(link) }
            default:
                for _ in 0..<Int.random(in: 1...20, using: &rng) { net.step() }
            }
        }
        for link in net.links.keys.sorted() { net.cut(link) }
        net.connect(0, 1); net.connect(1, 2); net.connect(0, 2)
        for _ in 0..<3 { net.settle(); net.tick(6000) }
        net.settle()
        #expect(net.closeErrors().isEmpty, "seed \(seed): \(net.closeErrors())")
        for p in purged {
            guard let (body, v) = try nodes[p.node].snapshot()[p.id], body != nil else { continue }
            let live = try DocumentVersion(decoding: v)
            switch live.vector.compare(p.version.vector) {
            case .dominates:
                continue  // written after the delete: legitimately alive
            case .concurrent:
                let l = live.vector.current!, d = p.version.vector.current!
                #expect((l.timestamp, l.peer) > (d.timestamp, d.peer), "seed \(seed): \(p.id) revived on n\(p.node) by an older concurrent write")
            case .equal, .dominated:
                Issue.record("seed \(seed): \(p.id) revived on n\(p.node) with a version the purged delete covered")
            }
        }
    }
}
