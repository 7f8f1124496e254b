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

        @Test("three gateways trusting each other by peer id: one whose self-signed certificate reached its renewal point renews it over its key, keeps its peer id, and all three replicate")
        func renewalKeepsTheAllowLists() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let aDir = base.path + "/a", bDir = base.path + "/b", cDir = base.path + "/c"
            let aID = try Self.peerID(aDir), cID = try Self.peerID(cDir)
            // b's certificate is valid one day from an hour ago: inside the last day, so b's identity
            // service renews it at its first look, before replication starts.
            let made = try Shoal.run(["identity", "create", "--board", "sim", "--data-dir", bDir, "--days", "1", "--json"])
            let bMade = try #require(try Shoal.json(made) as? [String: Any], "\(made.stderr)")
            let bID = try #require(bMade["peerID"] as? String)
            let oldNotAfter = try #require(bMade["notAfter"] as? String)
            let port = 30_000 + Int(getpid() % 20_000)
            let ports = ["a": port, "b": port + 1, "c": port + 2]
            let ids = ["a": aID, "b": bID, "c": cID]
            func site(_ name: String) throws -> String {
                let others = ["a", "b", "c"].filter { $0 != name }
                let path = base.path + "/\(name).yaml"
                try """
                group: test.renewal
                collections:
                  - name: sensors.readings
                authenticator:
                  allowedPeers: [\(others.map { ids[$0]! }.joined(separator: ", "))]
                replication:
                  listen: 127.0.0.1:\(ports[name]!)
                  peers: [\(others.map { "127.0.0.1:\(ports[$0]!)" }.joined(separator: ", "))]
                """.write(toFile: path, atomically: true, encoding: .utf8)
                return path
            }
            let b = try RunningGateway(dataDir: bDir, extraArgs: ["--config", try site("b")])
            let a = try RunningGateway(dataDir: aDir, extraArgs: ["--config", try site("a")])
            let c = try RunningGateway(dataDir: cDir, extraArgs: ["--config", try site("c")])
            let gateways = ["a": a, "b": b, "c": c]
            for (name, gw) in gateways {
                #expect(try gw.cli(["doc", "put", "sensors.readings", "from-\(name)", #"{"v":1}"#]).status == 0)
            }
            let everywhere = eventuallyBlocking(within: 45) {
                gateways.values.allSatisfy { gw in
                    ["a", "b", "c"].allSatisfy { (try? gw.cli(["doc", "get", "sensors.readings", "from-\($0)"]).status) == 0 }
                }
            }
            #expect(everywhere)

            // b kept its peer id; its certificate is the renewed one, and a's link to b presents it.
            let shown = try #require(try Shoal.json(b.cli(["identity", "show", "--json"])) as? [String: Any])
            #expect(shown["peerID"] as? String == bID)
            let newNotAfter = try #require(shown["notAfter"] as? String)
            #expect(newNotAfter != oldNotAfter)
            // Whoever links with b sees the renewed certificate (the mesh need not link every pair).
            let seen = [a, c].map { (try? Shoal.json($0.cli(["peer", bID, "--json"]))) as? [String: Any] }
            let seenNotAfter = seen.compactMap { ($0?["certificate"] as? [String: Any])?["notAfter"] as? Int }
            #expect(!seenNotAfter.isEmpty && seenNotAfter.allSatisfy { $0 > Int(Date().timeIntervalSince1970) + 300 * 86_400 },
                    "a and c see b's certificate: \(seen)")

            let cEnd = c.stop(), aEnd = a.stop(), bEnd = b.stop()
            #expect(aEnd.status == 0 && bEnd.status == 0 && cEnd.status == 0)
            let renewed = bEnd.stderr.split(separator: "\n").first { $0.contains("renewed identity") }.map(String.init) ?? ""
            #expect(renewed.contains(oldNotAfter) && renewed.contains(newNotAfter) && renewed.contains(bID), "b's log: \(bEnd.stderr.suffix(3000))")
            #expect(!bEnd.stderr.contains("restarting replication"))
            #expect(!aEnd.stderr.contains("is not in allowedPeers") && !cEnd.stderr.contains("is not in allowedPeers"))
            // b linked with at least one of them (the mesh need not link every pair; its documents
            // reached both above).
            #expect(aEnd.stderr.contains("replicating with peer \(bID)") || cEnd.stderr.contains("replicating with peer \(bID)"))
        }
    }
}
