import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// Two `shoal run` processes replicating over TCP + mutual TLS on loopback, each allowing only the
    /// other's peer id: what two wired gateways on one Ethernet do before discovery exists.
    @Suite("Replication between processes", .serialized)
    struct ReplicationProcessTests {
        static func peerID(_ dataDir: String) throws -> String {
            let r = try Shoal.run(["identity", "create", "--board", "sim", "--data-dir", dataDir, "--json"])
            guard r.status == 0, let j = try Shoal.json(r) as? [String: Any], let id = j["peerID"] as? String else {
                throw CocoaError(.fileReadUnknown, userInfo: ["stderr": r.stderr])
            }
            return id
        }

        @Test("two gateways with static peers replicate both ways, and a stranger is refused")
        func twoProcesses() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let aDir = base.path + "/a", bDir = base.path + "/b"
            let aID = try Self.peerID(aDir), bID = try Self.peerID(bDir)
            let port = 20_000 + Int(getpid() % 20_000)
            func site(_ name: String, allow: String, extra: String) throws -> String {
                let path = base.path + "/\(name).yaml"
                try """
                group: test.replication
                collections:
                  - name: sensors.readings
                authenticator:
                  allowedPeers: [\(allow)]
                replication:
                \(extra)
                """.write(toFile: path, atomically: true, encoding: .utf8)
                return path
            }
            let bSite = try site("b", allow: aID, extra: "  listen: 127.0.0.1:\(port)")
            let aSite = try site("a", allow: bID, extra: "  peers: [127.0.0.1:\(port)]")
            let b = try RunningGateway(dataDir: bDir, extraArgs: ["--config", bSite])
            let a = try RunningGateway(dataDir: aDir, extraArgs: ["--config", aSite])
            #expect(try a.cli(["doc", "put", "sensors.readings", "from-a", #"{"v":"a"}"#]).status == 0)
            #expect(try b.cli(["doc", "put", "sensors.readings", "from-b", #"{"v":"b"}"#]).status == 0)
            var aHas = false, bHas = false
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline && !(aHas && bHas) {
                aHas = (try? a.cli(["doc", "get", "sensors.readings", "from-b"]).status) == 0
                bHas = (try? b.cli(["doc", "get", "sensors.readings", "from-a"]).status) == 0
                Thread.sleep(forTimeInterval: 0.1)
            }
            #expect(aHas && bHas)
            let status = try Shoal.json(a.cli(["status", "--json"])) as? [String: Any]
            #expect((status?["mesh"] as? [String: Any])?["connectedPeers"] as? Int == 1)
            #expect(((status?["counters"] as? [String: Any])?["documentsReceived"] as? Int ?? 0) >= 1)
            // Sync progress: the field is there, and null with no catch-up running (live changes are not a sync).
            #expect(status?["sync"] is NSNull, "status sync: \(String(describing: status?["sync"]))")
            let peers = try Shoal.json(a.cli(["peers", "--json"])) as? [[String: Any]]
            #expect(peers?.count == 1 && peers?.allSatisfy { $0["sync"] is NSNull } == true, "peers: \(String(describing: peers))")
            #expect(try a.cli(["peer", String(bID.prefix(8))]).stdout.contains("sync           none running"))

            // A third gateway that b does not allow is refused, and b keeps serving.
            let cDir = base.path + "/c"
            _ = try Self.peerID(cDir)
            let cSite = try site("c", allow: bID, extra: "  peers: [127.0.0.1:\(port)]")
            let c = try RunningGateway(dataDir: cDir, extraArgs: ["--config", cSite])
            Thread.sleep(forTimeInterval: 1.5)
            #expect((try? c.cli(["doc", "get", "sensors.readings", "from-b"]).status) == 4)
            let cEnd = c.stop()
            let bEnd = b.stop()
            let aEnd = a.stop()
            #expect(aEnd.status == 0 && bEnd.status == 0 && cEnd.status == 0)
            #expect(bEnd.stderr.contains("is not in allowedPeers"), "b's log: \(bEnd.stderr.suffix(2000))")
            #expect(aEnd.stderr.contains("replicating with peer \(bID)"))
        }
    }
}
