import Testing
import ShoalCore
import ShoalGateway
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTesting
import ShoalWire

/// Mesh gossip through the gateway core: by reference to a peer that takes it, in the order the
/// references were made.
@Suite("Gateway core gossip")
struct GatewayCoreGossipTests {
    static func id(_ k: UInt8) -> PeerID { PeerID(bytes: Array(repeating: k, count: 32)) }

    @Test("gossip held for a HELLO goes out before gossip made after it, so every reference the peer gets resolves")
    func heldGossipGoesFirst() throws {
        let dir = TemporaryDirectory(prefix: "shoal-core-gossip")
        defer { dir.remove() }
        let store = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db")), logger: Logger(sink: MemoryLogSink(), level: .none))
        defer { store.close() }
        try store.createCollection(.default)
        var mesh = MeshSettings()
        mesh.gossipPerIntervalWifi = 1  // a new link's dump takes several flushes
        let a = GatewayCore(peer: Self.id(1), group: "core.gossip", store: store, clock: try NodeClock(store: store),
                            collections: [CollectionPolicy(name: .default)], replication: ReplicationSettings(), mesh: mesh,
                            sequenceBase: 1_000, fallbackSeed: 1)
        func hello(_ peer: PeerID, caps: UInt32) -> PreparedFrame {
            a.prepare(ReplicationMessage.hello(version: ReplicationMessage.protocolVersion, peer: peer, group: "core.gossip", capabilities: caps,
                                               purgeHorizonMillis: 0, neighbours: [], collections: []).encoded())
        }
        _ = a.handle(.start, now: 0)
        _ = a.handle(.transport(.wifi, up: true), now: 0)
        // c (a gateway before gossip by reference) tells a of x and y, which link to c.
        let (c, b, x, y) = (Self.id(3), Self.id(2), Self.id(7), Self.id(8))
        _ = a.handle(.linkOpened(2, peer: c, .wifi, outgoing: true), now: 10)
        _ = a.handle(.frames(2, [hello(c, caps: 0)]), now: 11)
        let news = [ReplicationMessage.topology(origin: c, sequence: 5, neighbours: [a.peer, x, y]),
                    .topology(origin: x, sequence: 5, neighbours: [c]), .topology(origin: y, sequence: 5, neighbours: [c])]
        _ = a.handle(.frames(2, news.map { a.prepare($0.encoded()) }), now: 12)
        // b's link opens; its HELLO comes when a's next flush to it is due.
        var toB: [[UInt8]] = []
        func keep(_ actions: [GatewayCore.Action]) { for case .send(1, let f) in actions { toB.append(f) } }
        keep(a.handle(.linkOpened(1, peer: b, .wifi, outgoing: true), now: 1_000))
        keep(a.handle(.frames(1, [hello(b, caps: ReplicationMessage.Capability.compactTopology)]), now: 1_500))
        for t in stride(from: 1_600, through: 2_500, by: 100) { keep(a.handle(.tick, now: UInt64(t))) }
        // b's side: every gossip frame resolves, in the order sent, and b hears of c, x and y.
        var table = PeerRefTable()
        var origins = Set<PeerID>()
        for f in toB where f.first == 10 {
            guard case .topologyRefs(let entries) = try ReplicationMessage(decoding: f) else { continue }
            for e in entries {
                let resolved = table.resolve(e.refs)
                #expect(resolved != nil, "a reference to an id not yet sent in full")
                if let ids = resolved { origins.insert(ids[0]) }
            }
        }
        #expect(origins.isSuperset(of: [c, x, y]))
        #expect(!toB.contains { $0.first == 8 }, "b takes gossip by reference: no topology frame")
    }
}
