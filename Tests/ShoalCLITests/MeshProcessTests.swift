import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// Three `shoal run` processes forming a mesh over loopback (static peers as discovery), and the
    /// mesh commands a field engineer reads it with.
    @Suite("Mesh between processes", .serialized)
    struct MeshProcessTests {
        @Test("three gateways: one link per pair, the budget holds, writes cross hops; peers, peer, mesh, events, radios")
        func threeProcesses() async throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let dirs = ["a", "b", "c"].map { base.path + "/" + $0 }
            let ids = try dirs.map { try ReplicationProcessTests.peerID($0) }
            let port = 21_000 + Int(getpid() % 20_000)
            let ports = [port, port + 1, port + 2]
            func site(_ i: Int, peers: [Int], extra: String = "") throws -> String {
                let path = base.path + "/site-\(i).yaml"
                try """
                group: test.mesh
                collections:
                  - name: sensors.readings
                authenticator:
                  allowedPeers: [\(ids.joined(separator: ", "))]
                replication:
                  listen: 127.0.0.1:\(ports[i])
                  peers: [\(peers.map { "127.0.0.1:\(ports[$0])" }.joined(separator: ", "))]
                mesh:
                  connectDelayMillis: 200
                  advertisingDelayMillis: 100
                \(extra)
                """.write(toFile: path, atomically: true, encoding: .utf8)
                return path
            }
            // a and b list each other (both may dial: one link must remain); c may hold one link only.
            let a = try RunningGateway(dataDir: dirs[0], extraArgs: ["--config", try site(0, peers: [1, 2])])
            let b = try RunningGateway(dataDir: dirs[1], extraArgs: ["--config", try site(1, peers: [0])])
            let c = try RunningGateway(dataDir: dirs[2], extraArgs: ["--config", try site(2, peers: [0, 1], extra: "  maxConnectionCount: 1")])
            let gateways = [a, b, c]

            #expect(try c.cli(["doc", "put", "sensors.readings", "from-c", #"{"v":"c"}"#]).status == 0)
            var everywhere = false
            let deadline = Date().addingTimeInterval(40)
            while Date() < deadline && !everywhere {
                everywhere = gateways.allSatisfy { (try? $0.cli(["doc", "get", "sensors.readings", "from-c"]).status) == 0 }
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(everywhere, "a write on c reached a and b")

            func meshJSON(_ g: RunningGateway) throws -> [String: Any] { try Shoal.json(g.cli(["mesh", "--json"])) as? [String: Any] ?? [:] }
            // c holds at most one link; a and b hold one link between them, not two.
            let cMesh = try meshJSON(c)
            #expect((cMesh["counters"] as? [String: Any])?["connectedPeers"] as? Int == 1)
            let aPeers = try Shoal.json(a.cli(["peers", "--json"])) as? [[String: Any]] ?? []
            let linkedFromA = aPeers.filter { $0["connectedOn"] is String }
            #expect(linkedFromA.count <= 2)
            let aToB = linkedFromA.filter { $0["peer"] as? String == ids[1] }
            #expect(aToB.count <= 1)
            #expect(aPeers.contains { $0["peer"] as? String == ids[1] && $0["online"] as? Bool == true })

            // peer: by a prefix, with the certificate of a linked peer.
            if let linked = linkedFromA.first?["peer"] as? String {
                let p = try Shoal.json(a.cli(["peer", String(linked.prefix(10)), "--json"])) as? [String: Any]
                #expect(p?["peer"] as? String == linked)
                #expect(((p?["certificate"] as? [String: Any])?["subject"] as? String)?.contains("CN=") == true)
            }
            #expect(try a.cli(["peer", "ffff0000"]).status == 4)

            // mesh --dot is Graphviz; events tell the story; radios retry is accepted.
            let dot = try a.cli(["mesh", "--dot"])
            #expect(dot.status == 0 && dot.stdout.hasPrefix("graph shoal_mesh {"))
            var events: [Substring] = []
            let seen = Date().addingTimeInterval(20)
            while Date() < seen && !events.contains(where: { $0.contains("\"peerDiscovery\"") }) {
                events = try a.cli(["events", "--json"]).stdout.split(separator: "\n")
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(events.contains { $0.contains("\"peerDiscovery\"") }, "\(events)")
            #expect(events.contains { $0.contains("\"state\"") })
            #expect(try a.cli(["events"]).stdout.contains("mesh state"))
            #expect(try a.cli(["radios", "retry"]).status == 0)
            let status = try a.cli(["status"]).stdout
            #expect(status.contains("Discovering") || status.contains("FullyConnected"))

            for g in gateways.reversed() { #expect(g.stop().status == 0) }
        }
    }
}
