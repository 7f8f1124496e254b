import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalTesting
import Testing

/// Expiration across gateways: a purge is local; it never deletes or revives anything elsewhere.
@Suite("Expiration across gateways")
struct ExpiryReplicationTests {
    static let day: UInt64 = 86_400_000

    func policies(ttlMillis: Int64? = nil) -> [CollectionPolicy] {
        var p = CollectionPolicy(name: readings)
        p.ttlMillis = ttlMillis
        return [CollectionPolicy(name: .default), p]
    }

    @Test("a replicated document that expires on one gateway only: the other keeps it, and a peer that sends that version again is refused")
    func expiresOnOneGatewayOnly() throws {
        let nodes = try makeNodes(["a", "b", "c"], seed: 31)
        defer { nodes.forEach { $0.close() } }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        let net = Network(nodes, seed: 31)
        try a.put("x", #"{"v":1}"#)
        try a.put("y", #"{"v":1}"#)
        let ab = net.connect(0, 1)
        let ac = net.connect(0, 2)
        net.settle()
        #expect(try b.snapshot()["x"]?.0 == #"{"v":1}"#)
        // b expires x locally.
        #expect(try b.store.setExpiration(readings, id: DocumentID("x"), atMillis: Int64(b.wall.read()) - 1))
        #expect(try b.store.purgeExpired([], nowMillis: Int64(b.wall.read())).expired == 1)
        #expect(try b.snapshot()["x"] == nil)
        // Life goes on: a writes more; b gets it, a keeps x (no delete went out), nothing comes back.
        try a.put("z", #"{"v":1}"#)
        net.committed(0)
        net.settle()
        #expect(try a.snapshot()["x"]?.0 == #"{"v":1}"#)
        #expect(try b.snapshot()["z"] != nil)
        #expect(try b.snapshot()["x"] == nil)
        // c, which b never pulled from, offers b the same version of x (as a resync would): refused,
        // and the pull is not stalled by it (y, z and a new document still arrive).
        net.cut(ab)
        let refusedBefore = b.store.expiryCounts.withLock { $0 }.refused
        try c.put("w", #"{"v":1}"#)
        net.connect(1, 2)
        net.settle()
        #expect(try b.snapshot()["x"] == nil, "x came back to b")
        #expect(try b.snapshot()["w"] != nil)
        #expect(b.store.expiryCounts.withLock { $0 }.refused > refusedBefore)
        #expect(try c.snapshot()["x"]?.0 == #"{"v":1}"#, "c lost x")
        #expect(try a.snapshot()["x"]?.0 == #"{"v":1}"#, "a lost x")
        // No tombstone anywhere: nothing was deleted.
        for n in nodes { #expect(try n.store.count(readings, deleted: true) == 0) }
        // A newer write of x is new data: b takes it.
        a.wall.advance(10)
        try a.put("x", #"{"v":2}"#)
        net.committed(0)
        net.settle()
        #expect(try b.snapshot()["x"]?.0 == #"{"v":2}"#)
        #expect(net.closeErrors().isEmpty)
        _ = ac
    }

    @Test("a TTL is computed from the write's HLC time on every gateway: an already-expired document is refused without stalling the pull, and purges leave no tombstones")
    func ttlAcrossGateways() throws {
        let ttl = Int64(7 * Self.day)
        let nodes = try makeNodes(["a", "b"], seed: 32, policies: policies(ttlMillis: ttl))
        defer { nodes.forEach { $0.close() } }
        let (a, b) = (nodes[0], nodes[1])
        // a wrote "old" eight days ago (its clock then), then "fresh" now.
        let real = a.wall.read()
        a.wall.millis.withLock { $0 = real - 8 * Self.day }
        try a.put("old", #"{"v":1}"#)
        a.wall.millis.withLock { $0 = real }
        for i in 0..<20 { try a.put("fresh-\(i)", #"{"v":1}"#) }
        let net = Network(nodes, seed: 32)
        net.connect(0, 1)
        net.settle()
        #expect(try b.snapshot()["old"] == nil)
        #expect(try b.snapshot().count == 20)
        #expect(b.store.expiryCounts.withLock { $0 }.refused >= 1)
        // a's own pass purges it by the same rule; b is not told anything.
        let rule = ExpiryRule(collection: readings, ttlMillis: ttl)
        #expect(try a.store.purgeExpired([rule], nowMillis: Int64(a.wall.read())).ttl == 1)
        #expect(try a.snapshot()["old"] == nil)
        // Later, both purge the rest at about the same time (same write times, same rule).
        let later = Int64(real + 8 * Self.day)
        #expect(try a.store.purgeExpired([rule], nowMillis: later).ttl == 20)
        #expect(try b.store.purgeExpired([rule], nowMillis: later).ttl == 20)
        for n in nodes { #expect(try n.store.count(readings, deleted: true) == 0) }
        try a.put("after", #"{"v":1}"#)
        net.committed(0)
        net.settle()
        #expect(try b.snapshot().keys.sorted() == ["after"])
        #expect(net.closeErrors().isEmpty)
    }

    @Test("a budget on one gateway purges its oldest writes only there; the versions it dropped are not sent back to it")
    func budgetOnOneGateway() throws {
        let nodes = try makeNodes(["a", "b", "c"], seed: 33)
        defer { nodes.forEach { $0.close() } }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        let net = Network(nodes, seed: 33)
        for i in 0..<5 {
            a.wall.advance(5)
            try a.put("r\(i)", #"{"i":\#(i)}"#)
        }
        let ab = net.connect(0, 1)
        net.connect(0, 2)
        net.settle()
        let budget = ExpiryRule(collection: readings, maxDocuments: 3)
        #expect(try b.store.purgeExpired([budget], nowMillis: Int64(b.wall.read())).budget == 2)
        #expect(try b.snapshot().keys.sorted() == ["r2", "r3", "r4"])  // the two oldest writes went
        net.cut(ab)
        net.connect(1, 2)  // c offers all five again
        net.settle()
        #expect(try b.snapshot().keys.sorted() == ["r2", "r3", "r4"])
        #expect(try a.snapshot().count == 5 && c.snapshot().count == 5)
        #expect(net.closeErrors().isEmpty)
    }
}
