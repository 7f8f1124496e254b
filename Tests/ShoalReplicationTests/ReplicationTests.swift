import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalTesting
import ShoalWire
import Testing

func makeNodes(_ names: [String], seed: UInt64 = 1, policies: [CollectionPolicy]? = nil, settings: ReplicationSettings = ReplicationSettings()) throws -> [TestNode] {
    var rng = SeededRandom(seed: seed)
    return try names.map { try TestNode($0, policies: policies, settings: settings, rng: &rng) }
}

@Suite("Replication over in-memory links")
struct ReplicationTests {
    @Test("mesh gossip goes by reference to a peer whose HELLO takes it, held until that HELLO; in full to one that does not; a prefix never sent closes the link")
    func gossipByReference() throws {
        let nodes = try makeNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        let (a, b) = (nodes[0].node, nodes[1].node)
        let x = PeerID(bytes: Array(repeating: 5, count: 32))
        func frames(_ actions: [ReplicationAction]) -> [[UInt8]] { actions.compactMap { if case .send(_, let f) = $0 { f } else { nil } } }
        func gossip(_ actions: [ReplicationAction]) -> [(PeerID, [PeerID])] {
            actions.compactMap { if case .event(.topology(_, _, let o, _, let n)) = $0 { (o, n) } else { nil } }
        }
        let helloA = frames(a.linkOpened(1)), helloB = frames(b.linkOpened(1))
        // Before b's HELLO, a does not know which form b takes: entries wait, the newest per origin.
        #expect(a.topologyFrames(1, [(x, 1, [a.peer])]).isEmpty)
        #expect(a.topologyFrames(1, [(x, 2, [a.peer, b.peer]), (b.peer, 1, [x])]).isEmpty)
        let afterHello = frames(a.framesReceived(1, helloB, now: 1))
        let held = try afterHello.map { try ReplicationMessage(decoding: $0) }.filter { if case .topologyRefs = $0 { true } else { false } }
        // One frame, origins in id order, x's newest entry; ids in full where first named.
        var table = PeerRefTable()
        let expected = table.message([(x, 2, [a.peer, b.peer]), (b.peer, 1, [x])].sorted { $0.0 < $1.0 })
        #expect(held == [expected])
        let again = try #require(a.topologyFrames(1, [(x, 3, [b.peer]), (a.peer, 4, [x])]).first)
        #expect(try ReplicationMessage(decoding: again) == .topologyRefs([.init(sequence: 3, refs: [.short(x.prefix64), .short(b.peer.prefix64)]),
                                                                         .init(sequence: 4, refs: [.short(a.peer.prefix64), .short(x.prefix64)])]))
        // b resolves both frames to the ids a meant.
        let received = b.framesReceived(1, helloA + afterHello + [again], now: 2)
        let told = gossip(received)
        #expect(told.count == 4)
        #expect(told.contains { $0.0 == x && $0.1 == [a.peer, b.peer] } && told.contains { $0.0 == b.peer && $0.1 == [x] })
        #expect(told.suffix(2).map(\.0) == [x, a.peer] && told.suffix(2).map(\.1) == [[b.peer], [x]])
        // A peer whose HELLO lacks the bit (a gateway from before it) gets `topology`.
        let old = ReplicationMessage.hello(version: ReplicationMessage.protocolVersion, peer: PeerID(bytes: Array(repeating: 6, count: 32)), group: "test.group",
                                           capabilities: ReplicationMessage.Capability.announcedVersions, purgeHorizonMillis: 0, neighbours: [], collections: [])
        _ = a.linkOpened(2)
        _ = a.frameReceived(2, old.encoded(), now: 3)
        let plain = a.topologyFrames(2, [(x, 3, [b.peer]), (b.peer, 3, [x])])
        #expect(try plain.map { try ReplicationMessage(decoding: $0) } == [.topology(origin: x, sequence: 3, neighbours: [b.peer]),
                                                                           .topology(origin: b.peer, sequence: 3, neighbours: [x])])
        // A short reference to an id never sent in full on the link: a protocol violation.
        let bad = ReplicationMessage.topologyRefs([.init(sequence: 4, refs: [.short(12345)])]).encoded()
        let refused = b.frameReceived(1, bad, now: 4)
        #expect(refused.contains { if case .close(1) = $0 { true } else { false } })
        #expect(gossip(refused).isEmpty)
    }

    @Test("versions go with their field stamps only to a peer whose HELLO sets protocol2, as format 1 to others; HELLO versions 1 and 2 are taken, 3 is refused")
    func protocolTwo() throws {
        let nodes = try makeNodes(["a"])
        defer { nodes.forEach { $0.close() } }
        let a = nodes[0].node
        try nodes[0].put("x", #"{"f":1,"g":1}"#)
        try nodes[0].put("x", #"{"f":2,"g":1}"#)  // g keeps its first write's stamp
        func versionsSent(link: LinkID, version: UInt16, capabilities: UInt32) throws -> [[UInt8]] {
            _ = a.linkOpened(link)
            let hello = ReplicationMessage.hello(version: version, peer: PeerID(bytes: Array(repeating: UInt8(link), count: 32)), group: "test.group",
                                                 capabilities: capabilities, purgeHorizonMillis: 0, neighbours: [],
                                                 collections: [.init(name: readings.description, push: true, pull: true)])
            var actions = a.frameReceived(link, hello.encoded(), now: 1)
            actions += a.frameReceived(link, ReplicationMessage.subscribe(collection: readings.description, since: 0).encoded(), now: 2)
            return try actions.compactMap { if case .send(link, let f) = $0 { f } else { nil } }.flatMap { f -> [[UInt8]] in
                switch try ReplicationMessage(decoding: f) {
                case .announce(_, _, _, let changes), .push(_, _, _, let changes, _): changes.map(\.version)
                default: []
                }
            }
        }
        let base = ReplicationMessage.Capability.announcedVersions | ReplicationMessage.Capability.compactTopology
        let toOld = try versionsSent(link: 1, version: 1, capabilities: base)
        let toNew = try versionsSent(link: 2, version: 1, capabilities: base | ReplicationMessage.Capability.protocol2)
        let toLaterNew = try versionsSent(link: 3, version: 2, capabilities: base | ReplicationMessage.Capability.protocol2)
        let held = try #require(try nodes[0].snapshot()["x"]?.1)
        #expect(held.first == 2, "the stored version has stamps")
        #expect(toNew == [held] && toLaterNew == [held])
        #expect(toOld == [DocumentVersion.documentLevel(held)] && toOld.first?.first == 1)
        #expect(try DocumentVersion(decoding: toOld[0]).vector == DocumentVersion(decoding: held).vector)
        _ = a.linkOpened(4)
        let future = ReplicationMessage.hello(version: 3, peer: PeerID(bytes: Array(repeating: 4, count: 32)), group: "test.group",
                                              capabilities: base, purgeHorizonMillis: 0, neighbours: [], collections: [])
        let refused = a.frameReceived(4, future.encoded(), now: 3)
        #expect(refused.contains { if case .close(4) = $0 { true } else { false } })
    }

    @Test("announces are bounded by bytes as well as count: versions with many field stamps go in several batches, and all arrive")
    func announceByteBudget() throws {
        var settings = ReplicationSettings()
        settings.batchSizeBytes = 20_000
        let nodes = try makeNodes(["a", "b"], settings: settings)
        defer { nodes.forEach { $0.close() } }
        // 40 documents of 150 fields; one field changed after: 149 stamps, ~2 KB a version.
        let wide = "{" + (0..<150).map { "\"field\($0)\":\($0)" }.joined(separator: ",")
        for i in 0..<40 {
            try nodes[0].put("w-\(i)", wide + "}")
            nodes[0].wall.advance(1)
            try nodes[0].put("w-\(i)", wide + ",\"extra\":1}")
        }
        let version = try #require(try nodes[0].snapshot()["w-0"]?.1)
        #expect(version.count > 1500)
        let net = Network(nodes, seed: 5)
        net.connect(0, 1)
        net.settle()
        try expectConverged(nodes)
        #expect(try nodes[1].snapshot().count == 40)
        let announces = net.announces.filter { $0.from == 0 }
        #expect(announces.count >= 3 && announces.allSatisfy { $0.changes < 40 && $0.bytes < 45_000 }, "announces \(announces)")
        #expect(net.closeErrors().isEmpty)
    }

    @Test("two nodes converge both ways")
    func twoNodes() throws {
        let nodes = try makeNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        for i in 0..<50 { try nodes[0].put("a-\(i)", "{\"i\":\(i)}") }
        for i in 0..<50 { try nodes[1].put("b-\(i)", "{\"i\":\(i)}") }
        let net = Network(nodes, seed: 1)
        net.connect(0, 1)
        net.settle()
        #expect(try nodes[0].snapshot().count == 100)
        try expectConverged(nodes)
        // No echo: each side pushed only its own 50 documents, not the 50 it had just received.
        for n in 0..<2 {
            let pushed = net.events.compactMap { e -> [ReplicationEvent.Item]? in
                guard e.node == n, case .documents(_, _, .push, let items) = e.event else { return nil }
                return items
            }.flatMap { $0 }.map(\.id)
            #expect(Set(pushed) == Set((0..<50).map { "\(n == 0 ? "a" : "b")-\($0)" }), "node \(n) pushed \(pushed.count)")
        }
        // Continuous: a later write flows without reconnecting.
        try nodes[1].put("late", "{\"x\":1}")
        net.committed(1)
        net.settle()
        #expect(try nodes[0].snapshot()["late"]?.0 == "{\"x\":1}")
        #expect(net.closeErrors().isEmpty)
    }

    @Test("a pull's echoes are never announced back, and local writes among them (either collection, announced at once or only found by the next pump) still go out")
    func echoesSkippedLocalWritesKept() throws {
        for seed in UInt64(1)...8 {
            for notify in [true, false] {
                // Small batches: many applied transactions, so local writes land between echoes.
                var settings = ReplicationSettings()
                settings.batchMaxCount = 10
                let nodes = try makeNodes(["a", "b"], seed: seed, settings: settings)
                defer { nodes.forEach { $0.close() } }
                for i in 0..<300 { try nodes[0].put("a-\(i)", "{\"i\":\(i)}") }
                let net = Network(nodes, seed: seed)
                net.connect(0, 1)
                // B writes while the pull is under way: its sequences fall between the echoes'.
                // Without a notification, only the push stream's next look at the feed (after
                // the next applied batch) can find the write.
                var steps = 0
                var written = 0
                while net.step() {
                    steps += 1
                    if steps % 7 == 0, written < 20 {
                        try nodes[1].put("b-\(written)", "{\"b\":\(written)}", in: written % 2 == 0 ? readings : .default)
                        if notify { net.committed(1) }
                        written += 1
                    }
                }
                net.settle()
                try nodes[1].put("b-late", "{\"late\":true}")
                net.committed(1)
                net.settle()
                try expectConverged(nodes)
                let aHolds = try nodes[0].snapshot().merging(try nodes[0].snapshot(.default)) { first, _ in first }
                for i in 0..<written { #expect(aHolds["b-\(i)"] != nil, "seed \(seed), notify \(notify): b-\(i) did not reach a") }
                #expect(aHolds["b-late"] != nil, "seed \(seed)")
                let pushedByB = net.events.compactMap { e -> [ReplicationEvent.Item]? in
                    guard e.node == 1, case .documents(_, _, .push, let items) = e.event else { return nil }
                    return items
                }.flatMap { $0 }.map(\.id)
                #expect(!pushedByB.contains { $0.hasPrefix("a-") }, "seed \(seed): b pushed back what a gave it")
                #expect(net.closeErrors().isEmpty)
            }
        }
    }

    @Test("three nodes in a line converge though A and C never link")
    func line() throws {
        let nodes = try makeNodes(["a", "b", "c"])
        defer { nodes.forEach { $0.close() } }
        try nodes[0].put("from-a", "{\"v\":1}")
        try nodes[2].put("from-c", "{\"v\":3}")
        let net = Network(nodes, seed: 2)
        net.connect(0, 1)
        net.connect(1, 2)
        net.settle()
        try expectConverged(nodes)
        #expect(try nodes[2].snapshot()["from-a"]?.0 == "{\"v\":1}")
        #expect(try nodes[0].snapshot()["from-c"]?.0 == "{\"v\":3}")
    }

    @Test("concurrent edits of one field converge to one body and version everywhere, the newer write wins (the default field merge), and the conflict is logged")
    func concurrentLastWriteWins() throws {
        let nodes = try makeNodes(["a", "b", "c"])
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: 3)
        try nodes[0].put("x", "{\"v\":\"base\"}")
        let ab = net.connect(0, 1), bc = net.connect(1, 2)
        net.settle()
        net.cut(ab); net.cut(bc)
        nodes[0].wall.advance(1000)
        try nodes[0].put("x", "{\"v\":\"from a\"}")
        nodes[2].wall.advance(2000)  // c's edit is later in wall time
        try nodes[2].put("x", "{\"v\":\"from c\"}")
        net.connect(0, 1); net.connect(1, 2)
        net.settle()
        try expectConverged(nodes)
        #expect(try nodes[0].snapshot()["x"]?.0 == "{\"v\":\"from c\"}")
        let conflicts = try nodes.flatMap { try $0.store.conflicts() }
        #expect(!conflicts.isEmpty && conflicts.allSatisfy { $0.resolver == "fieldMerge" })
        // The log keeps both bodies: the loser's too, so someone can act on it.
        let bodies = Set(conflicts.flatMap { [$0.localBody, $0.remoteBody] }.compactMap { $0 })
        #expect(bodies.contains("{\"v\":\"from a\"}") && bodies.contains("{\"v\":\"from c\"}"), "\(conflicts)")
        #expect(conflicts.allSatisfy { $0.localBody != nil && $0.remoteBody != nil })
    }

    @Test("a custom resolver that merges fields converges on every node")
    func customResolver() throws {
        let merge = ConflictResolver(name: "mergeFields") { _, local, remote in
            guard let l = local.body.flatMap({ try? JSONValue.parse($0) })?.objectValue,
                  let r = remote.body.flatMap({ try? JSONValue.parse($0) })?.objectValue else { return .takeRemote }
            var m = l
            for (k, v) in r where m[k] == nil || k > "m" { m[k] = v }  // deliberately not symmetric
            return .merged(JSONValue.object(m).compactText)
        }
        var policy = CollectionPolicy(name: readings)
        policy.resolver = merge
        let nodes = try makeNodes(["a", "b", "c"], policies: [CollectionPolicy(name: .default), policy])
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: 4)
        try nodes[0].put("x", "{\"base\":1}")
        let l1 = net.connect(0, 1), l2 = net.connect(1, 2)
        net.settle()
        net.cut(l1); net.cut(l2)
        try nodes[0].put("x", "{\"a\":1,\"z\":\"a\"}")
        try nodes[1].put("x", "{\"b\":2,\"z\":\"b\"}")
        try nodes[2].put("x", "{\"c\":3,\"z\":\"c\"}")
        net.connect(0, 1); net.connect(1, 2); net.connect(0, 2)
        net.settle()
        try expectConverged(nodes)
        let final = try JSONValue.parse(try #require(try nodes[0].snapshot()["x"]?.0))
        #expect(final["z"] != nil)
        #expect(try nodes.flatMap { try $0.store.conflicts() }.contains { $0.resolver == "mergeFields" && $0.outcome == "merged" })
    }

    @Test("deletes replicate, and a later edit beats an earlier delete (and the other way round)")
    func deletes() throws {
        let nodes = try makeNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: 5)
        try nodes[0].put("gone", "{}")
        try nodes[0].put("revived", "{}")
        try nodes[0].put("deleted-later", "{}")
        let link = net.connect(0, 1)
        net.settle()
        try nodes[0].delete("gone")
        net.committed(0)
        net.settle()
        #expect(try nodes[1].snapshot()["gone"]?.0 == nil)
        #expect(try nodes[1].snapshot()["gone"] != nil)  // a tombstone, not absence
        net.cut(link)
        try nodes[0].delete("revived")
        nodes[1].wall.advance(5000)
        try nodes[1].put("revived", "{\"back\":true}")
        nodes[0].wall.advance(9000)
        try nodes[1].put("deleted-later", "{\"edit\":1}")
        try nodes[0].delete("deleted-later")
        net.connect(0, 1)
        net.settle()
        try expectConverged(nodes)
        #expect(try nodes[0].snapshot()["revived"]?.0 == "{\"back\":true}")
        #expect(try nodes[0].snapshot()["deleted-later"]?.0 == nil)
    }

    @Test("document-id, push and pull filters hold")
    func filters() throws {
        var onlyTwo = CollectionPolicy(name: readings)
        onlyTwo.documentIDs = ["d1", "d2", "secret"]
        onlyTwo.pushFilter = { _, doc in !(doc.body?.contains("secret") ?? false) }
        var pullNoRed = CollectionPolicy(name: readings)
        pullNoRed.pullFilter = { _, doc in !(doc.body?.contains("red") ?? false) }
        var rng = SeededRandom(seed: 6)
        let a = try TestNode("a", policies: [onlyTwo], rng: &rng)
        let b = try TestNode("b", policies: [pullNoRed], rng: &rng)
        defer { a.close(); b.close() }
        try a.put("d1", "{\"c\":\"blue\"}")
        try a.put("d2", "{\"c\":\"red\"}")
        try a.put("d3", "{\"c\":\"blue\"}")
        try a.put("secret", "{\"c\":\"secret\"}")
        let net = Network([a, b], seed: 6)
        net.connect(0, 1)
        net.settle()
        #expect(Set(try b.snapshot().keys) == ["d1"])
        #expect(net.pulled(at: 1).contains { $0.id == "d2" && $0.error == "refused by the pull filter" })
    }

    @Test("a link cut mid-batch resumes from the checkpoint: nothing lost, no acknowledged document sent twice")
    func cutMidBatch() throws {
        var settings = ReplicationSettings()
        settings.batchMaxCount = 100
        let nodes = try makeNodes(["a", "b"], settings: settings)
        defer { nodes.forEach { $0.close() } }
        for i in 0..<3000 { try nodes[0].put("d-\(i)", "{\"i\":\(i)}") }
        let net = Network(nodes, seed: 7)
        let link = net.connect(0, 1)
        for _ in 0..<40 { net.step() }
        net.cut(link)
        let before = try nodes[1].snapshot().count
        #expect(before > 0 && before < 3000)
        let checkpoint = try nodes[1].store.checkpoint(peer: "\(nodes[0].peer)@\(String(nodes[0].store.epoch, radix: 16))", collection: readings, direction: .pull)
        #expect(checkpoint > 0)
        net.connect(0, 1)
        net.settle()
        try expectConverged(nodes)
        #expect(try nodes[1].snapshot().count == 3000)
        let received = net.pulled(at: 1).map(\.id)
        #expect(received.count == 3000, "every body crossed exactly once (\(received.count))")
        #expect(Set(received).count == 3000)
    }

    @Test("in a triangle each body reaches each node once, and a silent peer's request is taken over after requestTimeoutMillis")
    func multiHopWithoutWaste() throws {
        let nodes = try makeNodes(["a", "b", "c"])
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: 8)
        net.connect(0, 1); net.connect(1, 2); let ac = net.connect(0, 2)
        net.settle()
        for i in 0..<200 { try nodes[0].put("t-\(i)", "{\"i\":\(i)}") }
        net.committed(0)
        net.settle()
        try expectConverged(nodes)
        #expect(net.pulled(at: 2).count == 200, "c received \(net.pulled(at: 2).count) bodies for 200 documents")
        #expect(net.pulled(at: 1).count == 200)

        // Now a's frames to c stall: c's requests to a must go to b once the timeout passes.
        try nodes[0].put("late", "{\"l\":1}")
        net.paused.insert([ac, 2])
        net.committed(0)
        net.settle()
        net.tick(6000)
        net.settle()
        #expect(try nodes[2].snapshot()["late"]?.0 == "{\"l\":1}")
    }

    @Test("a link whose pushes bring bodies already held is pruned (no bodies); a request there, its joining the tree or the lease running out puts its pushes back; nothing is lost")
    func pruneAndGraft() throws {
        let nodes = try makeNodes(["a", "b", "c"])
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: 12)
        // No mesh: every link carries pushes, so each body reaches b and c twice, until pruned.
        let ab = net.connect(0, 1), bc = net.connect(1, 2), ac = net.connect(0, 2)
        net.settle()
        func write(_ id: String) throws {
            try nodes[0].put(id, "{\"id\":\"\(id)\"}")
            net.committed(0)
            net.settle()
        }
        for i in 0..<40 { try write("p-\(i)") }
        try expectConverged(nodes)
        let held = nodes.map(\.node.heldPushedBodies).reduce(0, +)
        // Without pruning: one of b's and one of c's two copies of each of the 40 (80).
        #expect(held <= 8, "\(held) bodies pushed to a node that held them")
        let prunes = net.pushModes.filter { if case .prune = $0.message { true } else { false } }
        #expect(!prunes.isEmpty && prunes.count <= 6, "\(prunes.count) prunes")

        // c pruned one of its two links; cut the other: c's only path now announces to it, c
        // waits pruneWaitMillis for a push elsewhere, then asks, which puts that path's pushes back.
        let prunedAtC = try #require(prunes.last { $0.from == 2 }?.link)
        net.cut(prunedAtC == bc ? ac : bc)
        try write("after-cut")
        #expect(try nodes[2].snapshot()["after-cut"] == nil, "asked before pruneWaitMillis")
        net.tick(ReplicationSettings().pruneWaitMillis)
        net.settle()
        #expect(try nodes[2].snapshot()["after-cut"]?.0 == "{\"id\":\"after-cut\"}")
        try write("pushed-again")
        #expect(try nodes[2].snapshot()["pushed-again"] != nil, "the request did not put pushes back")

        // A tree change at a node that pruned its link from a sends a graft there: a pushes to it
        // again, so a's next write is there without waiting pruneWaitMillis.
        let ac2 = net.connect(0, 2)
        net.settle()
        for i in 0..<20 { try write("q-\(i)") }
        net.tick(ReplicationSettings().pruneWaitMillis)
        net.settle()
        let fromA = try #require(net.pushModes.last { m in
            guard case .prune = m.message else { return false }
            return (m.from == 1 && m.link == ab) || (m.from == 2 && m.link == ac2)
        }, "no link from a was pruned")
        func grafted(since count: Int) -> Bool {
            net.pushModes.dropFirst(count).contains { m in
                guard case .graft = m.message else { return false }
                return m.from == fromA.from && m.link == fromA.link
            }
        }
        // Off X's tree, then on it again: the pruned link is X's path now.
        var before = net.pushModes.count
        net.process(fromA.from, nodes[fromA.from].node.setTreeLink(fromA.link, false))
        #expect(!grafted(since: before), "grafted a link that left the tree")
        net.process(fromA.from, nodes[fromA.from].node.setTreeLink(fromA.link, true))
        #expect(grafted(since: before), "no graft when the pruned link joined the tree")
        net.settle()
        try write("after-graft")
        #expect(try nodes[fromA.from].snapshot()["after-graft"] != nil, "a did not push again after the graft")

        // A prune is a lease: pruneLeaseMillis later the link is grafted without any tree change.
        for i in 0..<10 { try write("r-\(i)") }
        let pruned = try #require(net.pushModes.last { if case .prune = $0.message { true } else { false } })
        before = net.pushModes.count
        net.tick(ReplicationSettings().pruneLeaseMillis)
        #expect(net.pushModes.dropFirst(before).contains { m in
            guard case .graft = m.message else { return false }
            return m.from == pruned.from && m.link == pruned.link
        }, "the prune outlived its lease")
        net.settle()
        try expectConverged(nodes)
        #expect(net.closeErrors().isEmpty)
    }

    @Test("one document changed in several batches on a pruned link: after the prune wait, every batch asks for it at once (none waits for the next tick)")
    func prunedRepeats() throws {
        // "p" makes real versions and bodies; "n" is the node under test, fed by hand on two links.
        let nodes = try makeNodes(["p", "n"])
        defer { nodes.forEach { $0.close() } }
        let (p, n) = (nodes[0], nodes[1])
        let name = readings.description
        let first = try p.put("x", "{\"x\":1}")
        var ys: [Change] = []
        for v in 1...3 { p.wall.advance(1); ys.append(try p.put("y", "{\"y\":\(v)}")) }
        let hello = { (id: UInt8) in ReplicationMessage.hello(version: 1, peer: PeerID(bytes: Array(repeating: id, count: 32)), group: "test.group",
            capabilities: ReplicationMessage.Capability.prune | ReplicationMessage.Capability.protocol2, purgeHorizonMillis: 0, neighbours: [],
            collections: [.init(name: name, push: true, pull: false)]).encoded() }
        func change(_ c: Change, _ seq: UInt64) -> ReplicationMessage.AnnouncedChange {
            .init(sequence: seq, id: c.id.description, deleted: false, version: c.version)
        }
        let body = Array("{\"x\":1}".utf8)
        var out: [ReplicationAction] = []
        _ = n.node.linkOpened(1); _ = n.node.linkOpened(2)
        out += n.node.frameReceived(1, hello(7), now: 1)
        out += n.node.frameReceived(2, hello(8), now: 1)
        // x comes by link 1, then by link 2 too: link 2 is pruned.
        out += n.node.frameReceived(1, ReplicationMessage.push(collection: name, batch: 1, upTo: 1, changes: [change(first, 1)],
                                                               documents: [.init(id: "x", deleted: false, version: [], body: body)]).encoded(), now: 2)
        out += n.node.frameReceived(2, ReplicationMessage.push(collection: name, batch: 1, upTo: 1, changes: [change(first, 1)],
                                                               documents: [.init(id: "x", deleted: false, version: [], body: body)]).encoded(), now: 2)
        let frames = { (acts: [ReplicationAction]) in acts.compactMap { a -> ReplicationMessage? in
            guard case .send(2, let bytes) = a else { return nil }
            return try? ReplicationMessage(decoding: bytes)
        } }
        #expect(frames(out).contains(.prune(collection: name)), "\(frames(out).map(\.kind))")
        // y changes three times; link 2 pushes each without its body, and nobody else brings it.
        out = []
        for (k, y) in ys.enumerated() {
            out += n.node.frameReceived(2, ReplicationMessage.push(collection: name, batch: UInt64(2 + k), upTo: UInt64(2 + k),
                                                                   changes: [change(y, UInt64(2 + k))], documents: []).encoded(), now: 3)
        }
        #expect(!frames(out).contains { if case .request = $0 { true } else { false } }, "asked before the prune wait")
        let due = try #require(n.node.wakeAt)
        let asked = frames(n.node.wake(now: due)).compactMap { m -> UInt64? in
            if case .request(_, let batch, let ids) = m, ids == ["y"] { return batch }
            return nil
        }
        #expect(asked.sorted() == [2, 3, 4], "batches asking for y: \(asked)")
    }

    @Test("a requested document unchanged since its announce goes without its version (as announced); one changed since goes with its new version")
    func asAnnounced() throws {
        var settings = ReplicationSettings()
        settings.eagerBodyBytes = 0  // announce, request, documents: no eager push
        let nodes = try makeNodes(["a", "b"], settings: settings)
        defer { nodes.forEach { $0.close() } }
        for k in 0..<5 { try nodes[0].put("d\(k)", "{\"k\":\(k)}") }
        let net = Network(nodes, seed: 3)
        let link = net.connect(0, 1)
        // Once b's request for the five is on its way to a, hold it; change d1 before a answers.
        var steps = 0
        while !(net.queues[link]?[0]?.contains { $0.first == 4 } ?? false) {
            guard net.step() else { Issue.record("b never asked for the documents"); return }
            steps += 1
            precondition(steps < 10_000)
        }
        net.paused.insert([link, 0])
        net.settle()
        net.paused.remove([link, 0])
        try nodes[0].put("d1", "{\"k\":\"changed\"}")
        net.settle()
        net.committed(0)
        net.settle()
        try expectConverged(nodes)
        #expect(try nodes[1].snapshot()["d1"]?.0 == "{\"k\":\"changed\"}")
        var entries: [String: ReplicationMessage.DocumentBody] = [:]
        for f in net.documentFrames where f.from == 0 {
            if case .documents(_, _, _, let docs) = f.message { for d in docs where entries[d.id] == nil { entries[d.id] = d } }
        }
        #expect(entries.count == 5)
        for (id, d) in entries {
            #expect(d.asAnnounced == (id != "d1"), "\(id)")
            #expect(d.version.isEmpty == (id != "d1"), "\(id)")
        }
    }

    @Test("a peer that did not offer the capability gets every version in full; an 'as announced' body that is not the announced version's is refused")
    func asAnnouncedNegotiated() throws {
        var settings = ReplicationSettings()
        settings.eagerBodyBytes = 0
        let nodes = try makeNodes(["a"], settings: settings)
        defer { nodes.forEach { $0.close() } }
        try nodes[0].put("d0", "{\"k\":0}")
        let peer = PeerID(bytes: Array(repeating: 7, count: 32))
        func hello(_ capabilities: UInt32) -> [UInt8] {
            ReplicationMessage.hello(version: 1, peer: peer, group: "test.group", capabilities: capabilities, purgeHorizonMillis: 0,
                                     neighbours: [], collections: [.init(name: "sensors.readings", push: true, pull: true)]).encoded()
        }
        // An old peer (no capability bit) subscribes and asks for what a announces.
        var actions = nodes[0].node.linkOpened(1) + nodes[0].node.frameReceived(1, hello(0), now: 1)
        actions += nodes[0].node.frameReceived(1, ReplicationMessage.subscribe(collection: "sensors.readings", since: 0).encoded(), now: 1)
        func sent(_ actions: [ReplicationAction]) -> [ReplicationMessage] {
            actions.compactMap { if case .send(1, let bytes) = $0 { return try? ReplicationMessage(decoding: bytes) }; return nil }
        }
        guard let batch = sent(actions).compactMap({ m -> UInt64? in if case .announce(_, let b, _, _) = m { return b }; return nil }).first else {
            Issue.record("no announce: \(sent(actions).map(\.kind))")
            return
        }
        let answer = sent(nodes[0].node.frameReceived(1, ReplicationMessage.request(collection: "sensors.readings", batch: batch, ids: ["d0"]).encoded(), now: 2))
        let docs = answer.flatMap { m -> [ReplicationMessage.DocumentBody] in if case .documents(_, _, _, let d) = m { return d }; return [] }
        #expect(docs.count == 1 && !docs[0].asAnnounced && !docs[0].version.isEmpty)

        // A hostile peer (as pusher) announces x with a version, is asked for it, and sends it
        // "as announced" with a body that is not the one the version names: refused, not stored.
        var hostile = nodes[0].node.linkOpened(2) + nodes[0].node.frameReceived(2, hello(2), now: 1)
        let version = DocumentVersion(vector: try VersionVector(entries: [.init(peer: peer, timestamp: HLCTimestamp(rawValue: 5 << 16))]),
                                      bodyDigest: DocumentVersion.digest(of: "{\"x\":1}"))
        hostile += nodes[0].node.frameReceived(2, ReplicationMessage.announce(collection: "sensors.readings", batch: 1, upTo: 1,
            changes: [.init(sequence: 1, id: "x", deleted: false, version: version.encoded)]).encoded(), now: 2)
        #expect(sent(hostile.map { if case .send(2, let b) = $0 { return .send(1, b) }; return $0 }).contains { if case .request(_, 1, ["x"]) = $0 { return true }; return false })
        hostile += nodes[0].node.frameReceived(2, ReplicationMessage.documents(collection: "sensors.readings", batch: 1, final: true,
            documents: [.init(id: "x", deleted: false, version: [], body: Array("{\"x\":2}".utf8), asAnnounced: true)]).encoded(), now: 3)
        let refused = hostile.flatMap { a -> [ReplicationEvent.Item] in
            if case .event(.documents(_, _, .pull, let items)) = a { return items }
            return []
        }
        #expect(refused.count == 1 && refused[0].error?.contains("digest") == true, "\(refused)")
        #expect(try nodes[0].snapshot().keys.sorted() == ["d0"])
    }

    @Test("garbage, truncated, oversize-count, repeated and out-of-order frames close the link with a typed error and leave the store intact")
    func hostileFrames() throws {
        let nodes = try makeNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        try nodes[0].put("keep", "{\"k\":1}")
        let peer = PeerID(bytes: Array(repeating: 7, count: 32))
        let hello = ReplicationMessage.hello(version: 1, peer: peer, group: "test.group", capabilities: 0, purgeHorizonMillis: 0,
                                             neighbours: [], collections: [.init(name: "sensors.readings", push: true, pull: true)]).encoded()
        let cases: [(String, [[UInt8]], (ReplicationError) -> Bool)] = [
            ("garbage", [[0xFF, 1, 2, 3]], { if case .wire(.unknownType) = $0 { return true }; return false }),
            ("truncated hello", [Array(hello.prefix(20))], { if case .wire(.truncated) = $0 { return true }; return false }),
            ("count larger than the frame", [[3, 0, 1, 0x61] + Array(repeating: 0, count: 16) + [0xFF, 0xFF, 0xFF, 0xFF]], { if case .wire = $0 { return true }; return false }),
            ("documents before hello", [ReplicationMessage.documents(collection: "sensors.readings", batch: 1, final: true, documents: []).encoded()],
             { if case .protocolViolation = $0 { return true }; return false }),
            ("wrong group", [ReplicationMessage.hello(version: 1, peer: peer, group: "other", capabilities: 0, purgeHorizonMillis: 0, neighbours: [], collections: []).encoded()],
             { if case .wrongGroup = $0 { return true }; return false }),
            ("future protocol", [ReplicationMessage.hello(version: 9, peer: peer, group: "test.group", capabilities: 0, purgeHorizonMillis: 0, neighbours: [], collections: []).encoded()],
             { if case .protocolVersion(9) = $0 { return true }; return false }),
            ("ack of an unknown batch", [hello, ReplicationMessage.acknowledge(collection: "sensors.readings", batch: 99, upTo: 5).encoded()],
             { if case .protocolViolation = $0 { return true }; return false }),
            ("documents never requested", [hello, ReplicationMessage.documents(collection: "sensors.readings", batch: 1, final: true,
                documents: [.init(id: "keep", deleted: true, version: [], body: [])]).encoded()],
             { if case .protocolViolation = $0 { return true }; return false }),
            // A repeated announce (the same batch again) would be a second batch waiting for what the first settled.
            ("the same batch twice", [hello] + Array(repeating: ReplicationMessage.announce(collection: "sensors.readings", batch: 4, upTo: 9, changes: [
                .init(sequence: 9, id: "elsewhere", deleted: false, version: DocumentVersion(vector: try VersionVector(entries: [.init(peer: peer, timestamp: HLCTimestamp(rawValue: 5 << 16))]), bodyDigest: 1).encoded)]).encoded(), count: 2),
             { if case .protocolViolation = $0 { return true }; return false }),
            // A later batch up to a lower sequence, behind one still waiting: the checkpoint would pass it.
            ("upTo going back", [hello, ReplicationMessage.announce(collection: "sensors.readings", batch: 4, upTo: 100, changes: []).encoded(),
                                 ReplicationMessage.announce(collection: "sensors.readings", batch: 5, upTo: 50, changes: []).encoded()],
             { if case .protocolViolation = $0 { return true }; return false }),
            ("prune of a collection not pushed", [hello, ReplicationMessage.prune(collection: "nowhere").encoded()],
             { if case .protocolViolation = $0 { return true }; return false }),
        ]
        for (i, (name, frames, matches)) in cases.enumerated() {
            let link = 1000 + i
            var actions = nodes[0].node.linkOpened(link)
            for f in frames { actions += nodes[0].node.frameReceived(link, f, now: 1) }
            let errors = actions.compactMap { a -> ReplicationError? in
                if case .event(.linkClosed(_, _, let e?)) = a { return e }
                return nil
            }
            #expect(errors.count == 1 && matches(errors[0]), "\(name): \(errors)")
            #expect(actions.contains { if case .close(link) = $0 { return true }; return false }, "\(name): link not closed")
        }
        #expect(try nodes[0].snapshot()["keep"]?.0 == "{\"k\":1}")
        #expect(try nodes[0].store.integrityProblems(full: true).isEmpty)
    }

    @Test("a peer whose clock runs far ahead is flagged and does not drag our clock forward")
    func clockSkew() throws {
        let nodes = try makeNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        nodes[1].wall.advance(3_600_000)  // b is an hour ahead
        try nodes[1].put("from-the-future", "{}")
        let net = Network(nodes, seed: 9)
        net.connect(0, 1)
        net.settle()
        #expect(net.events.contains { if $0.node == 0, case .clockSkew(_, _, let ahead) = $0.event { return ahead >= 3_500_000 }; return false })
        let before = nodes[0].node.clock.last
        #expect(before.physicalMillis < nodes[0].wall.read() + 60_001)
        #expect(try nodes[0].snapshot()["from-the-future"] != nil)  // its document is still taken
    }

    @Test("a purged delete is not brought back by a peer that still holds the document; the refusal is logged")
    func purgedDeleteNotResurrected() throws {
        let nodes = try makeNodes(["a", "b", "c"])
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: 10)
        try nodes[0].put("x", "{\"v\":1}")
        try nodes[0].put("kept", "{\"v\":1}")
        let ab = net.connect(0, 1), bc = net.connect(1, 2)
        net.settle()
        #expect(try nodes[2].snapshot()["x"]?.0 == "{\"v\":1}")
        net.cut(ab); net.cut(bc)
        nodes[0].wall.advance(10)
        try nodes[0].delete("x")
        // Retention passes: a's tombstone for x is purged.
        let removed = try nodes[0].store.purgeTombstones(olderThan: Int64(NodeClock.systemWallMillis()) + 60_000)
        #expect(removed.map(\.1) == ["x"])
        #expect(try nodes[0].snapshot()["x"] == nil)
        // c never heard of the delete, and a holds no record of x any more.
        net.connect(0, 2)
        net.settle()
        #expect(try nodes[0].snapshot()["x"] == nil, "x came back")
        let refusals = try nodes[0].store.conflicts().filter { $0.resolver == "purgeHorizon" }
        #expect(refusals.map(\.id) == ["x"])
        #expect(net.closeErrors().isEmpty)
        // A document written after the horizon still flows.
        nodes[2].wall.advance(120_000)
        try nodes[2].put("new", "{\"v\":2}")
        net.committed(2)
        net.settle()
        #expect(try nodes[0].snapshot()["new"]?.0 == "{\"v\":2}")
    }
}
