import Foundation
import ShoalCore
@testable import ShoalMesh
import ShoalReplication
@testable import ShoalRuntime
import ShoalStatus
import ShoalSupervision
import Testing

@Suite("Gateway metrics")
struct GatewayMetricsTests {
    static let linked = PeerID(bytes: Array(repeating: 0xab, count: 32))
    static let heard = PeerID(bytes: Array(repeating: 0x0c, count: 32))

    /// A gateway with one linked peer (pulling a sync), one peer only heard, two collections and
    /// a child that restarted twice.
    func metrics(storeOpen: Bool = true) -> GatewayMetrics {
        var mesh = MeshView()
        mesh.state = .discovering
        mesh.counters.discoveredPeers = 2
        mesh.counters.connectedPeers = 1
        mesh.counters.evictions = 1
        mesh.transports = [.wifi: (true, nil), .bluetooth: (false, "no adapter")]
        mesh.peers = [
            MeshView.Peer(info: PeerInfo(peer: Self.linked, online: true, discoveredOn: [.wifi], connectedOn: .wifi, outgoing: false,
                                         neighbours: [], activity: .busy),
                          sync: SyncProgress(received: 40, announced: 100, perSecond: 20), lastActivityMillis: 10_000),
            MeshView.Peer(info: PeerInfo(peer: Self.heard, online: true, discoveredOn: [.bluetooth], connectedOn: nil, outgoing: nil,
                                         neighbours: [], activity: .offline)),
        ]
        var counters = ReplicationCounters()
        counters.messagesSent = 7
        counters.documentsApplied = 40
        counters.documentsReceived = 41
        counters.bytesReceived = 4096
        counters.blob.bytesReceived = 131_072
        counters.blob.chunksVerified = 2
        counters.blob.badChunks = 1
        counters.blob.completed = 1
        counters.blobFetches = ["sha256-" + String(repeating: "0f", count: 32)]
        let report = SupervisionReport()
        report.record("root/store", state: .running, restarts: 2, lastError: "disk \"full\"")
        report.record("root/replication", state: .running, restarts: 0, lastError: nil)
        var m = GatewayMetrics(
            state: .running, version: "0.1.0", board: "sim", group: "plant-7", counters: counters, mesh: mesh, children: report.snapshot,
            ledPattern: "connected: 1 short blink", peerID: String(repeating: "ef", count: 32), identityLabel: "gw",
            identityNotAfterSeconds: 1_900_000_000,
            collections: storeOpen ? [.init(name: "_default._default", documents: 0, tombstones: 0), .init(name: "sensors.readings", documents: 12, tombstones: 3)] : nil,
            lastSequence: storeOpen ? 15 : nil, storeBytes: 8192, uptimeSeconds: 61, startTimeSeconds: 1_800_000_000, residentBytes: 12_000_000,
            nowMillis: 12_500)
        var broker = MQTTBoard.Broker(name: "local", url: "mqtt://127.0.0.1:1883", protocolVersion: "3.1.1")
        broker.state = "connected"
        broker.received = 10
        broker.dropped = ["not_json": 1]
        broker.outDropped = ["publish_refused": 2]
        m.mqtt = [broker]
        m.uplink = Self.uplink()
        return m
    }

    /// An uplink connected to its hub: two collections, one of them push-only and behind.
    static func uplink() -> UplinkBoard.State {
        var u = UplinkBoard.State()
        u.servers = ["nats://10.0.0.5:4222"]
        u.state = "connected"
        u.server = "nats://10.0.0.5:4222"
        u.connects = 2
        u.disconnects = 1
        u.published = 120
        u.alreadyThere = 4
        u.casRetries = 1
        u.received = 80
        u.applied = 77
        u.unchanged = 1
        u.conflicts = 1
        u.skipped = ["foreign": 2]
        u.lastSuccessMillis = 1_800_000_123_500
        u.collections = [
            UplinkBoard.Collection(name: "sensors.state", stream: "SHOAL_C17B206CE9F6_sensors_2Estate", push: true, pull: true,
                                   pushLag: 0, pushLagSeconds: 0, pullLag: 3, pushCheckpoint: 120, pullCheckpoint: 80),
            UplinkBoard.Collection(name: "sensors.readings", stream: "SHOAL_C17B206CE9F6_sensors_2Ereadings", push: true, pull: false,
                                   pushLag: 5, pushLagSeconds: 2.5, pullLag: 0, pushCheckpoint: 40, pullCheckpoint: 0),
        ]
        return u
    }

    @Test("the seed's counters are counters named …_total with their values")
    func counters() {
        let text = metrics().text
        #expect(text.contains("# TYPE shoal_messages_sent_total counter\nshoal_messages_sent_total 7\n"))
        #expect(text.contains("shoal_documents_applied_total 40\n"))
        #expect(text.contains("shoal_documents_received_total 41\n"))
        #expect(text.contains("shoal_received_bytes_total 4096\n"))
        #expect(text.contains("shoal_evictions_total 1\n"))
        #expect(text.contains("shoal_failed_connection_attempts_total 0\n"))
        #expect(text.contains("shoal_discovered_peers 2\n"))
        #expect(text.contains("shoal_connected_peers 1\n"))
    }

    @Test("blob transfers are counters named shoal_blob_transfer_…_total, and the fetches in progress a gauge")
    func blobTransfers() {
        let text = metrics().text
        #expect(text.contains("# TYPE shoal_blob_transfer_received_bytes_total counter\nshoal_blob_transfer_received_bytes_total 131072\n"))
        #expect(text.contains("shoal_blob_transfer_chunks_verified_total 2\n"))
        #expect(text.contains("shoal_blob_transfer_bad_chunks_total 1\n"))
        #expect(text.contains("shoal_blob_transfer_completed_total 1\n"))
        #expect(text.contains("shoal_blob_transfer_sent_bytes_total 0\n"))
        #expect(text.contains("# TYPE shoal_blob_transfer_fetches gauge\nshoal_blob_transfer_fetches 1\n"))
    }

    @Test("a linked peer has its transport, its lag (announced, not yet applied) and its idle time; a peer only heard is online and no more")
    func perPeer() {
        let text = metrics().text
        let a = Self.linked.description, c = Self.heard.description
        #expect(text.contains("shoal_peer_link_info{peer=\"\(a)\",transport=\"wifi\",direction=\"incoming\"} 1\n"))
        #expect(text.contains("shoal_peer_replication_lag_documents{peer=\"\(a)\"} 60\n"))
        #expect(text.contains("shoal_peer_sync_documents_per_second{peer=\"\(a)\"} 20\n"))
        #expect(text.contains("shoal_peer_idle_seconds{peer=\"\(a)\"} 2.5\n"))
        #expect(text.contains("shoal_peer_online{peer=\"\(c)\"} 1\n"))
        #expect(!text.contains("lag_documents{peer=\"\(c)\"}"))
        #expect(!text.contains("shoal_peer_link_info{peer=\"\(c)\""))
    }

    @Test("states are enum gauges (one 1, the rest 0); the LED, build and identity are info gauges")
    func statesAndInfo() {
        let text = metrics().text
        #expect(text.contains("shoal_gateway_state{state=\"running\"} 1\n"))
        #expect(text.contains("shoal_gateway_state{state=\"degraded\"} 0\n"))
        #expect(text.contains("shoal_mesh_state{state=\"Discovering\"} 1\n"))
        #expect(text.contains("shoal_mesh_state{state=\"FullyConnected\"} 0\n"))
        #expect(text.contains("shoal_led_state{pattern=\"connected: 1 short blink\"} 1\n"))
        #expect(text.contains("shoal_build_info{version=\"0.1.0\",board=\"sim\",group=\"plant-7\"} 1\n"))
        #expect(text.contains("shoal_transport_active{transport=\"bluetooth\"} 0\n"))
        #expect(text.contains("shoal_supervision_restarts_total{child=\"root/store\"} 2\n"))
        #expect(text.contains("shoal_supervision_child_state{child=\"root/store\",state=\"running\"} 1\n"))
    }

    @Test("the store's figures per collection; a closed store says so and leaves them out")
    func store() {
        let open = metrics().text
        #expect(open.contains("shoal_collection_documents{collection=\"sensors.readings\"} 12\n"))
        #expect(open.contains("shoal_collection_tombstones{collection=\"sensors.readings\"} 3\n"))
        #expect(open.contains("shoal_store_size_bytes 8192\n"))
        #expect(open.contains("shoal_store_up 1\n"))
        let closed = metrics(storeOpen: false).text
        #expect(closed.contains("shoal_store_up 0\n"))
        #expect(!closed.contains("shoal_collection_documents"))
    }

    @Test("the uplink: connection, push and pull counters, skips by reason (every reason from the start), lags per collection, last success")
    func uplink() {
        let text = metrics().text
        #expect(text.contains("# TYPE shoal_uplink_connected gauge\nshoal_uplink_connected 1\n"))
        #expect(text.contains("shoal_uplink_connects_total 2\n"))
        #expect(text.contains("shoal_uplink_disconnects_total 1\n"))
        #expect(text.contains("shoal_uplink_published_total 120\n"))
        #expect(text.contains("shoal_uplink_already_there_total 4\n"))
        #expect(text.contains("shoal_uplink_cas_retries_total 1\n"))
        #expect(text.contains("shoal_uplink_received_total 80\n"))
        #expect(text.contains("shoal_uplink_applied_total 77\n"))
        #expect(text.contains("shoal_uplink_unchanged_total 1\n"))
        #expect(text.contains("shoal_uplink_conflicts_total 1\n"))
        #expect(text.contains("shoal_uplink_skipped_total{reason=\"foreign\"} 2\n"))
        #expect(text.contains("shoal_uplink_skipped_total{reason=\"too_large\"} 0\n"))
        #expect(text.contains("shoal_uplink_skipped_total{reason=\"refused\"} 0\n"))
        #expect(text.contains("shoal_uplink_push_lag_changes{collection=\"sensors.readings\"} 5\n"))
        #expect(text.contains("shoal_uplink_push_lag_seconds{collection=\"sensors.readings\"} 2.5\n"))
        #expect(text.contains("shoal_uplink_pull_lag_messages{collection=\"sensors.state\"} 3\n"))
        #expect(text.contains("shoal_uplink_pull_lag_messages{collection=\"sensors.readings\"} 0\n"))
        #expect(text.contains("shoal_uplink_last_success_timestamp_seconds 1800000123.5\n"), "\(text)")
    }

    @Test("without an uplink (or before it reports) there is no shoal_uplink_ family; a reconnecting one shows 0")
    func noUplink() {
        var m = metrics()
        m.uplink = nil
        #expect(!m.text.contains("shoal_uplink_"))
        var u = Self.uplink()
        u.state = "reconnecting"
        m.uplink = u
        #expect(m.text.contains("shoal_uplink_connected 0\n"))
    }

    @Test("promtool check metrics finds no problem in the exposition", .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool"), "needs promtool (Debian's prometheus package)"))
    func promtoolAgrees() throws {
        for m in [metrics(), metrics(storeOpen: false)] {
            let (status, output) = try Self.promtool(m.text)
            #expect(status == 0 && output.isEmpty, "promtool: \(output)")
        }
    }

    @Test("every metric the gateway exposes is named in docs/http-api.md")
    func documented() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("docs/http-api.md"), encoding: .utf8)
        for family in metrics().families {
            #expect(doc.contains("`\(family.name)"), "docs/http-api.md does not name \(family.name)")
        }
    }

    /// `promtool check metrics` on `text`: its exit status and what it printed.
    static func promtool(_ text: String) throws -> (Int32, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/promtool")
        p.arguments = ["check", "metrics"]
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        p.standardError = output
        try p.run()
        input.fileHandleForWriting.write(Data(text.utf8))
        try input.fileHandleForWriting.close()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: out, as: UTF8.self))
    }
}
