import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalTesting
import ShoalWire
import Synchronization
import Testing
import ShoalThreads

/// A wall clock a test sets by hand.
final class TestWall: Sendable {
    /// Starts at the real time, so HLC timestamps and the store's own times share one base.
    let millis = Locked<UInt64>(NodeClock.systemWallMillis())
    var read: @Sendable () -> UInt64 { { [self] in millis.withLock { $0 } } }
    func advance(_ ms: UInt64) { millis.withLock { $0 += ms } }
}

let readings = try! CollectionName(parsing: "sensors.readings")

/// One simulated gateway: a real SQLite store in a temporary directory and a replication node.
final class TestNode {
    let name: String
    let dir = TemporaryDirectory(prefix: "shoal-repl")
    let store: DocumentStore
    let wall = TestWall()
    let node: ReplicationNode
    var peer: PeerID { node.peer }
    /// Every local write: (collection, id, this node's timestamp in the new version).
    var writes: [(CollectionName, String, HLCTimestamp)] = []
    /// Where its blobs are kept (nil: blobs off).
    let blobs: BlobStorage?

    init(_ name: String, policies: [CollectionPolicy]? = nil, settings: ReplicationSettings = ReplicationSettings(), rng: inout SeededRandom,
         blobs makeBlobs: ((DocumentStore) -> BlobStorage)? = nil) throws {
        self.name = name
        store = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db"), durability: .normal), logger: Logger(sink: MemoryLogSink(), level: .none))
        let policies = policies ?? [CollectionPolicy(name: .default), CollectionPolicy(name: readings)]
        for p in policies { try store.createCollection(p.name) }
        let clock = try NodeClock(store: store, wallMillis: wall.read)
        let peer = PeerID(bytes: (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) })
        blobs = makeBlobs?(store)
        node = ReplicationNode(peer: peer, group: "test.group", store: store, clock: clock, collections: policies, settings: settings, blobs: blobs)
    }

    @discardableResult
    func put(_ id: String, _ body: String, in c: CollectionName = readings) throws -> Change {
        let change = try node.writer.put(c, id: DocumentID(id), body: body)
        writes.append((c, id, try DocumentVersion(decoding: change.version).vector.timestamp(of: peer)!))
        return change
    }

    @discardableResult
    func delete(_ id: String, in c: CollectionName = readings) throws -> Change {
        let change = try node.writer.delete(c, id: DocumentID(id))
        writes.append((c, id, try DocumentVersion(decoding: change.version).vector.timestamp(of: peer)!))
        return change
    }

    /// Every document of a collection, tombstones included: id → (body, version).
    func snapshot(_ c: CollectionName = readings) throws -> [String: (String?, [UInt8])] {
        var out: [String: (String?, [UInt8])] = [:]
        for d in try store.list(c, limit: 100_000, includeDeleted: true) { out[d.id] = (d.body, d.version) }
        return out
    }

    func close() {
        store.close()
        dir.remove()
    }
}

/// In-memory links between test nodes. Frames on a link stay in order (as on TCP); which link
/// delivers next is chosen by the seeded generator, so every run of a seed is the same.
final class Network {
    var nodes: [TestNode]
    var rng: SeededRandom
    var now: UInt64 = 10_000
    struct LinkEnds { let a: Int; let b: Int }
    var links: [LinkID: LinkEnds] = [:]
    var queues: [LinkID: [Int: [[UInt8]]]] = [:]  // link → receiving node → frames
    var nextLink = 1
    var events: [(node: Int, event: ReplicationEvent)] = []
    var paused: Set<[Int]> = []  // (link, to) pairs not delivering
    /// Message types (a frame's first byte) each node was sent.
    var receivedTypes: [Int: Set<UInt8>] = [:]
    /// Every `documents` frame sent, decoded, with its sender.
    var documentFrames: [(from: Int, message: ReplicationMessage)] = []
    /// Every `announce` and `push` frame sent: sender, changes, bytes.
    var announces: [(from: Int, changes: Int, bytes: Int)] = []
    /// Prune and graft frames sent: by which node, on which link.
    var pushModes: [(from: Int, link: LinkID, message: ReplicationMessage)] = []

    init(_ nodes: [TestNode], seed: UInt64) {
        self.nodes = nodes
        rng = SeededRandom(seed: seed)
    }

    @discardableResult
    func connect(_ a: Int, _ b: Int) -> LinkID {
        let id = nextLink
        nextLink += 1
        links[id] = LinkEnds(a: a, b: b)
        queues[id] = [a: [], b: []]
        process(a, nodes[a].node.linkOpened(id))
        process(b, nodes[b].node.linkOpened(id))
        return id
    }

    func cut(_ link: LinkID) {
        guard let ends = links.removeValue(forKey: link) else { return }
        queues[link] = nil
        process(ends.a, nodes[ends.a].node.linkClosed(link, now: now))
        process(ends.b, nodes[ends.b].node.linkClosed(link, now: now))
    }

    func other(_ link: LinkID, _ node: Int) -> Int? {
        guard let e = links[link] else { return nil }
        return e.a == node ? e.b : e.a
    }

    func process(_ node: Int, _ actions: [ReplicationAction]) {
        for action in actions {
            switch action {
            case .send(let link, let bytes):
                if let to = other(link, node) {
                    queues[link]?[to]?.append(bytes)
                    if let t = bytes.first { receivedTypes[to, default: []].insert(t) }
                    if bytes.first == 5, let m = try? ReplicationMessage(decoding: bytes) { documentFrames.append((node, m)) }
                    if bytes.first == 11 || bytes.first == 12, let m = try? ReplicationMessage(decoding: bytes) { pushModes.append((node, link, m)) }
                    if bytes.first == 3 || bytes.first == 9, let m = try? ReplicationMessage(decoding: bytes) {
                        switch m {
                        case .announce(_, _, _, let changes), .push(_, _, _, let changes, _): announces.append((node, changes.count, bytes.count))
                        default: break
                        }
                    }
                }
            case .close(let link):
                cut(link)
            case .event(let e):
                events.append((node, e))
            }
        }
    }

    /// Local commits happened on `node`: let it announce.
    func committed(_ node: Int) { process(node, nodes[node].node.localChangesCommitted()) }

    /// Delivers one frame; false when nothing is deliverable.
    @discardableResult
    func step() -> Bool {
        var ready: [(LinkID, Int)] = []
        for (link, byNode) in queues { for (to, frames) in byNode where !frames.isEmpty && !paused.contains([link, to]) { ready.append((link, to)) } }
        guard !ready.isEmpty else { return false }
        ready.sort { ($0.0, $0.1) < ($1.0, $1.1) }
        let (link, to) = ready[Int.random(in: 0..<ready.count, using: &rng)]
        // Sometimes several frames arrive together, as they do from a socket.
        let count = min(queues[link]![to]!.count, Int.random(in: 0..<4, using: &rng) == 0 ? Int.random(in: 2...6, using: &rng) : 1)
        let frames = Array(queues[link]![to]!.prefix(count))
        queues[link]![to]!.removeFirst(count)
        process(to, count == 1 ? nodes[to].node.frameReceived(link, frames[0], now: now) : nodes[to].node.framesReceived(link, frames, now: now))
        return true
    }

    /// Delivers until nothing moves (with a bound that catches livelock).
    /// When nothing is left to deliver, a tick (with no time passing) lets acknowledgements held
    /// back for live batches go, as the driver's periodic tick would.
    func settle(maxSteps: Int = 2_000_000) {
        var steps = 0
        while true {
            while step() {
                steps += 1
                precondition(steps < maxSteps, "network did not settle")
            }
            tick(0)
            if !step() { return }
            steps += 1
        }
    }

    /// Heals after a random schedule: every link cut, one line through every node, then time
    /// passes until nothing moves.
    func healInLine() {
        for link in links.keys.sorted() { cut(link) }
        for i in 0..<(nodes.count - 1) { connect(i, i + 1) }
        for _ in 0..<5 {
            settle()
            tick(4000)
        }
        settle()
    }

    func tick(_ ms: UInt64) {
        now += ms
        for i in nodes.indices { process(i, nodes[i].node.tick(now: now)) }
    }

    func pulled(at node: Int) -> [ReplicationEvent.Item] {
        events.compactMap { e -> [ReplicationEvent.Item]? in
            guard e.node == node, case .documents(_, _, .pull, let items) = e.event else { return nil }
            return items
        }.flatMap { $0 }
    }

    func closeErrors() -> [ReplicationError] {
        events.compactMap { if case .linkClosed(_, _, let error?) = $0.event { return error }; return nil }
    }
}

/// All nodes hold the same documents with the same versions.
func expectConverged(_ nodes: [TestNode], _ c: CollectionName = readings, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let first = try nodes[0].snapshot(c)
    for n in nodes.dropFirst() {
        let other = try n.snapshot(c)
        #expect(Set(other.keys) == Set(first.keys), "\(n.name) holds different ids than \(nodes[0].name)", sourceLocation: sourceLocation)
        for (id, (body, version)) in first {
            guard let o = other[id] else { continue }
            #expect(o.0 == body, "\(n.name)/\(id) body differs", sourceLocation: sourceLocation)
            #expect(o.1 == version, "\(n.name)/\(id) version differs", sourceLocation: sourceLocation)
        }
    }
}
