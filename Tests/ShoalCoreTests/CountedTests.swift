import ShoalCore
import ShoalStatus
import Testing

@Suite("Counted nouns")
struct CountedTests {
    @Test("a count takes its noun in the right number: 1 peer, 0 peers, 2 crashes")
    func counted() {
        #expect(1.counted("peer") == "1 peer")
        #expect(0.counted("peer") == "0 peers")
        #expect(Int64(2).counted("tombstone") == "2 tombstones")
        #expect(1.counted("crash", plural: "crashes") == "1 crash" && 3.counted("crash", plural: "crashes") == "3 crashes")
    }

    @Test("shoal status says 1 peer connected and 1 tombstone, not 1 peers and 1 tombstones")
    func statusText() {
        var s = GatewayStatus(state: .running, version: "t", boardID: "b", boardName: "b", boardSupport: "s", group: "g", serviceType: "_X._tcp",
                              uptimeSeconds: 1, storePath: "/", durability: "full", documents: 3, tombstones: 1, collections: [],
                              lastSequence: 4, meshState: "Connected", connectedPeers: 1, peerID: nil, identityLabel: "l",
                              identityNotAfter: nil, identityProblem: nil, children: [])
        s.transports = [.init(name: "wifi", active: true, error: nil, discovery: "listening on port 4984")]
        #expect(s.text.contains("Connected, 1 peer connected"), "\(s.text)")
        #expect(s.text.contains("3 live, 1 tombstone, last sequence 4"), "\(s.text)")
        #expect(s.text.contains("wifi        active; listening on port 4984"), "\(s.text)")
    }
}
