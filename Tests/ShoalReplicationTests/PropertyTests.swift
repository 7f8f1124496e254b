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
        for link in net.links.keys.sorted() { net.cut(link) }
        for i in 0..<(nodes.count - 1) { net.connect(i, i + 1) }
        for _ in 0..<5 {
            net.settle()
            net.tick(4000)
        }
        net.settle()
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
