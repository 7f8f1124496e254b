import Foundation
import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalTesting
import Testing

/// Random concurrent field edits on random gateways, over random link schedules, with the default
/// resolver (field-level merge). Every field must end with the value of its newest write (HLC time,
/// then writer) — so edits of different fields all survive — and every gateway with the same body
/// and version. SHOAL_PROPERTY_SEEDS=N runs more seeds.
@Suite("Field-level merge properties")
struct FieldMergePropertyTests {
    static var seeds: [UInt64] {
        let count = ProcessInfo.processInfo.environment["SHOAL_PROPERTY_SEEDS"].flatMap(Int.init) ?? 16
        return (1...UInt64(count)).map { $0 &* 104_729 }
    }

    @Test("concurrent field edits: each field ends with its newest write everywhere, and all gateways agree", arguments: seeds)
    func concurrentFieldEdits(_ seed: UInt64) throws {
        let nodes = try makeNodes(["g0", "g1", "g2", "g3", "g4"], seed: seed)
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: seed)
        var rng = SeededRandom(seed: seed ^ 0xF1E1D)
        let ids = ["d0", "d1", "d2"], fields = ["f0", "f1", "f2", "f3", "f4", "f5"]
        // (id, field) → the newest write so far: (time, writer, value or nil for a removal).
        var newest: [String: (HLCTimestamp, PeerID, String?)] = [:]
        var edits = 0
        for _ in 0..<220 {
            switch Int.random(in: 0..<100, using: &rng) {
            case 0..<45:
                let n = Int.random(in: 0..<nodes.count, using: &rng), id = ids.randomElement(using: &rng)!
                nodes[n].wall.advance(UInt64.random(in: 0...30, using: &rng))
                let before = try nodes[n].snapshot()[id]?.0.flatMap { try JSONValue.parse($0).objectValue } ?? [:]
                var object = before
                // One or two fields set (or, now and then, removed) in one write.
                for _ in 0..<Int.random(in: 1...2, using: &rng) {
                    let f = fields.randomElement(using: &rng)!
                    if object[f] != nil && Int.random(in: 0..<6, using: &rng) == 0 {
                        object[f] = nil
                    } else {
                        object[f] = .string("\(nodes[n].name)-\(edits)")
                    }
                }
                // What the write changed is what it wrote (a field set then removed again in one
                // write was not written).
                let touched = fields.filter { object[$0] != before[$0] }.map { f in (f, object[f]?.stringValue) }
                let change = try nodes[n].put(id, JSONValue.object(object).compactText)
                let time = try #require(try DocumentVersion(decoding: change.version).vector.timestamp(of: nodes[n].peer))
                for (f, v) in touched {
                    // A write that saw another orders after it (HLC); of concurrent ones the later time, then the larger writer id.
                    if let (t, p, _) = newest["\(id)/\(f)"], (t, p) > (time, nodes[n].peer) { continue }
                    newest["\(id)/\(f)"] = (time, nodes[n].peer, v)
                }
                edits += 1
                net.committed(n)
            case 45..<57:
                let a = Int.random(in: 0..<nodes.count, using: &rng), b = Int.random(in: 0..<nodes.count, using: &rng)
                if a != b && !net.links.values.contains(where: { Set([$0.a, $0.b]) == Set([a, b]) }) { net.connect(a, b) }
            case 57..<65:
                if let link = net.links.keys.sorted().randomElement(using: &rng) { net.cut(link) }
            case 65..<70:
                net.tick(UInt64.random(in: 0...4000, using: &rng))
            default:
                for _ in 0..<Int.random(in: 1...20, using: &rng) { net.step() }
            }
        }
        net.healInLine()
        try expectConverged(nodes)
        #expect(net.closeErrors().isEmpty, "links failed: \(net.closeErrors()) (seed \(seed))")
        let final = try nodes[0].snapshot()
        for id in ids {
            guard let (body, _) = final[id] else { continue }
            let text = try #require(body, "seed \(seed): \(id) deleted")
            let object = try #require(try JSONValue.parse(text).objectValue)
            for f in fields {
                guard let (_, _, value) = newest["\(id)/\(f)"] else { #expect(object[f] == nil); continue }
                #expect(object[f] == value.map { JSONValue.string($0) }, "seed \(seed): \(id).\(f) is \(String(describing: object[f])), its newest write set \(value ?? "nothing")")
            }
        }
    }
}
