import Testing
import ShoalCore
import ShoalGateway
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTesting

/// Blobs through the gateway core (what the runtime, the library and the simulator drive).
@Suite("Gateway core with blobs")
struct GatewayCoreBlobTests {
    static let collection = CollectionName.default

    final class Gateway {
        let dir = TemporaryDirectory(prefix: "shoal-core-blob")
        let store: DocumentStore
        let blobs: MemoryBlobStorage?
        let core: GatewayCore
        init(seed: UInt8, blobs withBlobs: Bool, policy: BlobPolicy) throws {
            store = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db")), logger: Logger(sink: MemoryLogSink(), level: .none))
            try store.createCollection(GatewayCoreBlobTests.collection)
            let clock = try NodeClock(store: store)
            var c = CollectionPolicy(name: GatewayCoreBlobTests.collection)
            c.blobs = policy
            blobs = withBlobs ? MemoryBlobStorage(documents: store) : nil
            core = GatewayCore(peer: PeerID(bytes: Array(repeating: seed, count: 32)), group: "core.blobs", store: store, clock: clock,
                               collections: [c], replication: ReplicationSettings(), mesh: MeshSettings(),
                               sequenceBase: 1_000, fallbackSeed: UInt64(seed), blobs: blobs)
        }
        func close() { store.close(); dir.remove() }
    }

    /// Carries sends between two cores over link 1 until nothing moves; returns the frames' types
    /// each side received.
    @discardableResult
    static func pump(_ a: Gateway, _ b: Gateway, _ first: [GatewayCore.Action], from start: Int, now: UInt64,
                     also: [GatewayCore.Action] = []) -> [Set<UInt8>] {
        // Actions of side x go to side 1 - x; both sides' first actions are on the wire first.
        var queue: [(to: Int, actions: [GatewayCore.Action])] = [(start == 0 ? 1 : 0, first), (start == 0 ? 0 : 1, also)]
        var types: [Set<UInt8>] = [[], []]
        var steps = 0
        while let (to, actions) = queue.first, steps < 100_000 {
            queue.removeFirst()
            steps += 1
            for action in actions {
                guard case .send(1, let bytes) = action else { continue }
                let target = to == 0 ? a : b
                types[to].insert(bytes.first ?? 0)
                queue.append((to == 0 ? 1 : 0, target.core.handle(.frames(1, [target.core.prepare(bytes)]), now: now)))
            }
        }
        return types
    }

    static func link(_ a: Gateway, _ b: Gateway, now: UInt64) -> [Set<UInt8>] {
        for g in [a, b] {
            _ = g.core.handle(.start, now: now)
            _ = g.core.handle(.transport(.wifi, up: true), now: now)
            _ = g.core.handle(.advertisingStarted(.wifi), now: now)
        }
        let fromA = a.core.handle(.linkOpened(1, peer: b.core.peer, .wifi, outgoing: true), now: now)
        let fromB = b.core.handle(.linkOpened(1, peer: a.core.peer, .wifi, outgoing: false), now: now)
        var types = pump(a, b, fromA, from: 0, now: now, also: fromB)
        for k in 1...4 {
            let t = now + UInt64(k) * 300
            let more = [pump(a, b, a.core.handle(.tick, now: t), from: 0, now: t), pump(a, b, b.core.handle(.tick, now: t), from: 1, now: t)]
            for m in more { for i in 0..<2 { types[i].formUnion(m[i]) } }
        }
        return types
    }

    @Test("a reader's demand through the core fetches an on-demand blob the document did not bring")
    func demand() throws {
        let a = try Gateway(seed: 1, blobs: true, policy: .onDemand), b = try Gateway(seed: 2, blobs: true, policy: .onDemand)
        defer { a.close(); b.close() }
        let content = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let ref = try #require(a.blobs).put(content)
        _ = try a.core.node.writer.put(Self.collection, id: DocumentID("photo"), body: #"{"file":{"@blob":"\#(ref.digest)","length":\#(ref.length)}}"#)
        _ = Self.link(a, b, now: 1_000)
        try #require(a.core.keeps(1), "the mesh did not keep the link")
        #expect(try b.store.get(Self.collection, id: DocumentID("photo")) != nil)
        #expect(b.blobs?.content(ref.digest) == nil)
        let actions = b.core.handle(.demandBlob(ref), now: 3_000)
        Self.pump(a, b, actions, from: 1, now: 3_000)
        #expect(b.blobs?.content(ref.digest) == content)
        #expect(b.core.node.blobCounters.completed == 1)
    }

    @Test("a core without blob storage advertises no capability: its peer sends it no blob frame")
    func noStorage() throws {
        let a = try Gateway(seed: 3, blobs: true, policy: .eager), b = try Gateway(seed: 4, blobs: false, policy: .eager)
        defer { a.close(); b.close() }
        let ref = try #require(a.blobs).put([1, 2, 3])
        _ = try a.core.node.writer.put(Self.collection, id: DocumentID("photo"), body: #"{"file":{"@blob":"\#(ref.digest)","length":3}}"#)
        let types = Self.link(a, b, now: 1_000)
        try #require(a.core.keeps(1), "the mesh did not keep the link")
        #expect(try b.store.get(Self.collection, id: DocumentID("photo")) != nil)
        #expect(!types[1].contains { $0 >= 16 })
        #expect(!types[0].contains { $0 >= 16 })
    }
}
