import ShoalCore
@testable import ShoalRuntime
import Testing

@Suite("Uplink text")
struct UplinkTextTests {
    static let now: Int64 = 1_800_000_200_000

    /// The metrics fixture's uplink, connected for 3m20s, with an error 5 minutes old.
    func board() -> UplinkBoard.State {
        var u = GatewayMetricsTests.uplink()
        u.servers = ["nats://10.0.0.5:4222", "nats://10.0.0.6:4222"]
        u.sinceMillis = Self.now - 200_000
        u.lastError = "cannot connect to nats://10.0.0.5:4222: nats: no servers available for connection"
        u.lastErrorAtMillis = Self.now - 300_000
        u.lastSuccessMillis = Self.now - 3_000
        u.skipped = ["foreign": 2, "refused": 0]
        return u
    }

    @Test("shoal uplink status: state since when with its age, the last error's age, push, pull, skips by reason, conflicts")
    func block() {
        let text = UplinkText.block(board().json, nowMillis: Self.now)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines[0] == "uplink  nats://10.0.0.5:4222, nats://10.0.0.6:4222  NATS JetStream", "\(text)")
        #expect(lines[1] == "  state          connected to nats://10.0.0.5:4222 since \(IdentityText.localDate(Self.now / 1000 - 200)) (3m20s ago) (2 connects, 1 disconnect)", "\(text)")
        #expect(text.contains("  last error     cannot connect to nats://10.0.0.5:4222: nats: no servers available for connection (5m0s ago)\n"), "\(text)")
        #expect(text.contains("  last success   \(IdentityText.localDate(Self.now / 1000 - 3)) (3s ago)\n"), "\(text)")
        #expect(text.contains("  push           120 published, 4 already there, 1 CAS retry; lag 5 changes, oldest 2.5 s\n"), "\(text)")
        #expect(text.contains("  pull           80 received, 77 applied, 1 unchanged; lag 3 messages\n"), "\(text)")
        #expect(text.contains("  skipped        foreign 2 (not applied; see the log)\n"), "a reason counted 0 is left out: \(text)")
        #expect(text.contains("  conflicts      1\n"))
    }

    @Test("each collection: its stream, push and pull on or off, their lags and checkpoints, names aligned")
    func collections() {
        let text = UplinkText.block(board().json, nowMillis: Self.now)
        #expect(text.contains("  collections    2\n"))
        #expect(text.contains("\n    sensors.state     SHOAL_C17B206CE9F6_sensors_2Estate  push on, lag 0 (0 s), checkpoint seq 120  pull on, lag 3, checkpoint stream seq 80"), "\(text)")
        #expect(text.hasSuffix("\n    sensors.readings  SHOAL_C17B206CE9F6_sensors_2Ereadings  push on, lag 5 (2.5 s), checkpoint seq 40  pull off"), "\(text)")
    }

    @Test("a fresh uplink: never succeeded, no error, nothing skipped; a long lag reads in minutes")
    func fresh() {
        var u = UplinkBoard.State()
        u.servers = ["tls://hub.example.com:4222"]
        u.collections = [UplinkBoard.Collection(name: "a.b", stream: "S", push: true, pull: true, pushLag: 7, pushLagSeconds: 250)]
        let text = UplinkText.block(u.json, nowMillis: Self.now)
        #expect(text.contains("  state          connecting (0 connects, 0 disconnects)\n"), "\(text)")
        #expect(!text.contains("last error"))
        #expect(text.contains("  last success   never\n"))
        #expect(text.contains("  skipped        none\n"))
        #expect(text.contains("lag 7 changes, oldest 4m10s\n"), "\(text)")
    }

    @Test("the control answer: no uplink: section, configured but not reporting yet, or the block")
    func answer() {
        #expect(UplinkText.answer(["uplink": nil, "configured": false], nowMillis: Self.now)
            == "no uplink: the site file has no uplink: section (see README, \"When one site is not enough\")")
        #expect(UplinkText.answer(["uplink": nil, "configured": true], nowMillis: Self.now).hasPrefix("uplink configured but not started yet"))
        #expect(UplinkText.answer(["uplink": board().json, "configured": true], nowMillis: Self.now).hasPrefix("uplink  nats://"))
    }

    @Test("uplink events in shoal events: connected to a server, disconnected from it with why")
    func events() {
        #expect(UplinkText.event(["type": "uplink", "connected": true, "server": "nats://10.0.0.5:4222", "error": nil])
            == "uplink connected to nats://10.0.0.5:4222")
        #expect(UplinkText.event(["type": "uplink", "connected": false, "server": "nats://10.0.0.5:4222", "error": "the connection was closed: by the server"])
            == "uplink disconnected from nats://10.0.0.5:4222 — the connection was closed: by the server")
        #expect(UplinkText.event(["type": "uplink", "connected": false, "server": "", "error": nil]) == "uplink disconnected")
    }
}
