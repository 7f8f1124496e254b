import ShoalCore
import ShoalStatus
import Testing

@Suite("Gateway status")
struct GatewayStatusTests {
    func status() -> GatewayStatus {
        GatewayStatus(state: .running, version: "t", boardID: "sim", boardName: "b", boardSupport: "s", group: "g", serviceType: "_X._tcp",
                      uptimeSeconds: 61, storePath: "/s.db", durability: "full", documents: 4_120, tombstones: 0, collections: ["sensors.readings"],
                      lastSequence: 4_120, meshState: "FullyConnected", connectedPeers: 1, peerID: String(repeating: "ab", count: 32),
                      identityLabel: "l", identityNotAfter: nil, identityProblem: nil,
                      children: [.init(path: "root/store", state: "running", restarts: 0, lastError: nil)])
    }

    @Test("a running sync shows on the console line, in the text and in the JSON, and reads back; none shows nothing")
    func syncProgressShown() throws {
        var s = status()
        #expect(!s.consoleLine.contains("syncing"))
        #expect(!s.text.contains("syncing"))
        #expect(s.json["sync"] == JSONValue.null, "the field is there, null, when no sync runs")
        #expect(GatewayStatus(json: s.json)?.sync == nil)

        s.sync = SyncProgress(received: 4_120, announced: 10_000, perSecond: 2_050)
        #expect(s.consoleLine.contains(" | docs 4120 seq 4120 | syncing 4,120/10,000 docs 2,050/s ~3 s | mesh FullyConnected"), "\(s.consoleLine)")
        #expect(s.text.contains("syncing     4,120/10,000 docs 2,050/s ~3 s (received/announced so far)"))
        #expect(s.json["sync"]?["received"]?.int64Value == 4_120)
        #expect(s.json["sync"]?["announced"]?.int64Value == 10_000)
        #expect(s.json["sync"]?["perSecond"]?.int64Value == 2_050)
        #expect(s.json["sync"]?["estimateSeconds"]?.int64Value == 3)
        let back = try #require(GatewayStatus(json: s.json))
        #expect(back.sync == s.sync)
        #expect(back.consoleLine == s.consoleLine)
    }
}
