import Testing
import ShoalCore
import ShoalMesh
import ShoalRuntime
import ShoalStore
import ShoalSupervision
import ShoalTesting
import ShoalTLS

/// Links are the replication service's dynamic children: each shows in the supervision tree, and
/// one that breaks comes back (the mesh dials again) without touching its siblings.
@Suite("Link children")
struct LinkChildrenTests {
    typealias Double = TransportDoubleTests

    @Test("a link that breaks is restarted (a new link to its peer) and its sibling link is left as it was")
    func brokenLinkRestartsAlone() async throws {
        let tmp = TemporaryDirectory(prefix: "shoal-link-children")
        defer { tmp.remove() }
        let ids = try (0..<3).map { try Identity.createSelfSigned(.init(commonName: "child-\($0)")) }
        let auth = PeerAuthenticator.trust(allowedPeers: Set(ids.map(\.peerID)))
        let wire = Double.Wire()
        var gateways: [(driver: ReplicationDriver, transport: Double.PipeTransport, report: SupervisionReport, store: DocumentStore)] = []
        for (i, id) in ids.enumerated() {
            let store = try DocumentStore.open(StoreOptions(path: tmp.file("\(i).db")), logger: Logger(sink: MemoryLogSink(), level: .none))
            try store.createCollection(.default)
            let report = SupervisionReport()
            let (driver, transport) = try Double.gateway(id, store: store, seed: UInt64(i + 1), documents: 0, wire: wire,
                                                         authenticator: auth, report: report)
            gateways.append((driver, transport, report, store))
        }
        defer { for g in gateways { g.driver.stop(); g.store.close() } }

        func child(_ g: Int, _ peer: Int) -> SupervisionReport.Child? {
            gateways[g].report.snapshot.first { $0.path.hasSuffix("/links/\(ids[peer].peerID.short)") }
        }
        // Wait for a gateway linked to both others (the mesh links three gateways in a triangle).
        let began = monotonicMillis()
        var x = -1
        var linksToZ: [Int] = [], linksToY: [Int] = []
        let linked = await eventually(within: 60) {
            x = (0..<3).first { g in (0..<3).filter { $0 != g }.allSatisfy { child(g, $0)?.state == .running } } ?? -1
            return x >= 0
        }
        try #require(linked, "no gateway linked to both others: \(gateways.map { $0.report.snapshot.map { "\($0.path) \($0.state)" } })")
        let others = (0..<3).filter { $0 != x }
        let (y, z) = (others[0], others[1])
        // Once crossing dials (both ends dialled; the mesh keeps one and closes the other) are
        // settled: one link to each, the same ones for a whole second.
        var steady = 0
        for _ in 0..<400 where steady < 20 {
            let nowZ = await gateways[x].driver.links(to: ids[z].peerID), nowY = await gateways[x].driver.links(to: ids[y].peerID)
            steady = nowZ.count == 1 && nowY.count == 1 && nowZ == linksToZ && nowY == linksToY ? steady + 1 : 0
            (linksToZ, linksToY) = (nowZ, nowY)
            try await Task.sleep(for: .milliseconds(50))
        }
        try #require(linksToZ.count == 1 && linksToY.count == 1, "links to z \(linksToZ), to y \(linksToY)")
        print("link children: linked after \(monotonicMillis() - began) ms")

        let brokenAt = monotonicMillis()
        gateways[x].transport.breakLinks(to: ids[y].peerID)
        let broke = await eventually(within: 30) { child(x, y)?.lastError != nil }
        let sawError = monotonicMillis() - brokenAt
        #expect(broke, "the broken link's child shows its error")
        let restarted = await eventually(within: 60) { child(x, y)?.state == .running && child(x, y)?.restarts == 1 }
        print("FIGURE link children: the broken link's error shown after \(sawError) ms, a new link to its peer after \(monotonicMillis() - brokenAt) ms")
        #expect(restarted, "the child for \(y) runs again with one restart: \(String(describing: child(x, y)))")
        #expect(child(x, y)?.lastError?.contains("connection reset (test)") == true, "\(String(describing: child(x, y)?.lastError))")

        // The sibling: the very same link all along, no restart, no error.
        let afterZ = await gateways[x].driver.links(to: ids[z].peerID), afterY = await gateways[x].driver.links(to: ids[y].peerID)
        #expect(afterZ.contains(linksToZ[0]), "the sibling link \(linksToZ[0]) is gone: now \(afterZ)")
        #expect(!afterY.isEmpty && !afterY.contains(linksToY[0]), "the broken link \(linksToY[0]) was replaced: now \(afterY)")
        #expect(child(x, z)?.state == .running && child(x, z)?.restarts == 0 && child(x, z)?.lastError == nil,
                "\(String(describing: child(x, z)))")
    }
}
