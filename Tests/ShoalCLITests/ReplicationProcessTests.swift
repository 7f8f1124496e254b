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

        /// A site file in `dir` for a test gateway: one collection, an allow-list, the
        /// `replication:` lines given (indented two spaces) and, when given, `mesh:` options.
        static func writeSite(in dir: String, _ name: String, group: String, allow: [String], replication: [String],
                              mesh: String? = nil) throws -> String {
            let path = dir + "/\(name).yaml"
            var text = """
                group: \(group)
                collections:
                  - name: sensors.readings
                authenticator:
                  allowedPeers: [\(allow.joined(separator: ", "))]
                replication:

                """
            text += replication.map { "  \($0)\n" }.joined()
            if let mesh { text += "mesh: {\(mesh)}\n" }
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }

        @Test("two gateways with static peers replicate both ways, and a stranger is refused")
        func twoProcesses() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let aDir = base.path + "/a", bDir = base.path + "/b"
            let aID = try Self.peerID(aDir), bID = try Self.peerID(bDir)
            let port = 20_000 + Int(getpid() % 20_000)
            func site(_ name: String, allow: String, extra: String) throws -> String {
                try Self.writeSite(in: base.path, name, group: "test.replication", allow: [allow], replication: [extra.trimmingCharacters(in: .whitespaces)], mesh: nil)
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
            // c learns that b refused it (b's alert), and has nothing of b's.
            #expect(eventuallyBlocking(within: 30) { Self.refusals(c).count >= 1 }, "c never learned that b refused it")
            #expect((try? c.cli(["doc", "get", "sensors.readings", "from-b"]).status) == 4)
            let cEnd = c.stop()
            let bEnd = b.stop()
            let aEnd = a.stop()
            #expect(aEnd.status == 0 && bEnd.status == 0 && cEnd.status == 0)
            #expect(bEnd.stderr.contains("is not in allowedPeers"), "b's log: \(bEnd.stderr.suffix(2000))")
            #expect(aEnd.stderr.contains("replicating with peer \(bID)"))
        }

        /// When each refusal a gateway was told of happened (its `shoal events`, monotonic order).
        static func refusals(_ g: RunningGateway) -> [Int64] {
            guard let r = try? g.cli(["events", "--json"]), r.status == 0 else { return [] }
            return r.stdout.split(separator: "\n").compactMap { line -> Int64? in
                guard let e = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      e["type"] as? String == "peerReplicator", (e["error"] as? String)?.contains("refused us") == true else { return nil }
                return (e["atMillis"] as? NSNumber)?.int64Value
            }
        }

        @Test("a gateway the other's authenticator refuses learns why (peers, events, counters) and redials once per backoffMillis; the refusing side warns once per backoff, not every probe")
        func refusedSideLearnsWhy() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let bDir = base.path + "/b", cDir = base.path + "/c"
            let bID = try Self.peerID(bDir), cID = try Self.peerID(cDir)
            let port = 20_000 + Int((getpid() + 7) % 20_000)
            // backoffMillis above the static-peer probe interval (2 s): before, c was refused at
            // every probe, and b warned every 2 s.
            func site(_ name: String, allow: String, extra: String) throws -> String {
                try Self.writeSite(in: base.path, name, group: "test.refusal", allow: [allow], replication: [extra.trimmingCharacters(in: .whitespaces)], mesh: "backoffMillis: 3000")
            }
            let stranger = String(repeating: "0", count: 64)
            let b = try RunningGateway(dataDir: bDir, extraArgs: ["--config", try site("b", allow: stranger, extra: "  listen: 127.0.0.1:\(port)")])
            let c = try RunningGateway(dataDir: cDir, extraArgs: ["--config", try site("c", allow: bID, extra: "  peers: [127.0.0.1:\(port)]")])
            var refusals: [Int64] = []
            #expect(eventuallyBlocking(within: 40) { refusals = Self.refusals(c); return refusals.count >= 3 }, "c saw \(refusals.count) refusals")
            // Redials only per backoffMillis (the events' clock is the wall clock: a little slack).
            for (earlier, later) in zip(refusals, refusals.dropFirst()) {
                #expect(later - earlier >= 2800, "refusals \(later - earlier) ms apart: \(refusals)")
            }
            let peers = try Shoal.json(c.cli(["peers", "--json"])) as? [[String: Any]]
            let bPeer = peers?.first { $0["peer"] as? String == bID }
            #expect(bPeer?["online"] as? Bool == true, "b is heard: \(String(describing: peers))")
            #expect((bPeer?["lastError"] as? String)?.contains("not in its allowedPeers") == true, "\(String(describing: bPeer))")
            let shown = try c.cli(["peer", String(bID.prefix(8))]).stdout
            #expect(shown.contains("last error") && shown.contains("refused us"), "\(shown)")
            let status = try Shoal.json(c.cli(["status", "--json"])) as? [String: Any]
            #expect(((status?["counters"] as? [String: Any])?["failedConnectionAttempts"] as? Int ?? 0) >= 3)
            let cEnd = c.stop(), bEnd = b.stop()
            #expect(cEnd.status == 0 && bEnd.status == 0)
            #expect(!cEnd.stderr.contains("link to unknown peer closed"))
            #expect(cEnd.stderr.contains("WARNING mesh: peer \(bID) refused us"), "c's log: \(cEnd.stderr.suffix(1500))")
            // b warns about c at most once per backoff window: its warnings' times ([seconds] first).
            let warnings = bEnd.stderr.split(separator: "\n").filter { $0.contains("WARNING") && $0.contains("peer \(cID) is not in allowedPeers") }
            let times = warnings.compactMap { line in Double(line.dropFirst().prefix { $0 != "]" }) }
            #expect(!times.isEmpty, "b's log: \(bEnd.stderr.suffix(1500))")
            for (earlier, later) in zip(times, times.dropFirst()) {
                #expect(later - earlier >= 2.9, "b warned \(later - earlier) s apart: \(warnings)")
            }
        }

    
        @Test("a static peer given by host name is resolved at dial time; a name that does not resolve is a failed attempt, not a crash")
        func hostNamePeer() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let aDir = base.path + "/a", bDir = base.path + "/b"
            let aID = try Self.peerID(aDir), bID = try Self.peerID(bDir)
            let port = 20_000 + Int((getpid() + 7) % 20_000)
            func site(_ name: String, allow: String, extra: String) throws -> String {
                try Self.writeSite(in: base.path, name, group: "test.hostname", allow: [allow], replication: [extra.trimmingCharacters(in: .whitespaces)], mesh: "backoffMillis: 500")
            }
            let bSite = try site("b", allow: aID, extra: "  listen: 127.0.0.1:\(port)")
            let aSite = try site("a", allow: bID, extra: "  peers: [no-such-gateway.invalid:\(port), localhost:\(port)]")
            #expect(try Shoal.run(["board", "check", "sim", "--config", aSite]).status == 0)
            let b = try RunningGateway(dataDir: bDir, extraArgs: ["--config", bSite])
            let a = try RunningGateway(dataDir: aDir, extraArgs: ["--config", aSite])
            #expect(try b.cli(["doc", "put", "sensors.readings", "from-b", #"{"v":"b"}"#]).status == 0)
            var aHas = false
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline && !aHas {
                aHas = (try? a.cli(["doc", "get", "sensors.readings", "from-b"]).status) == 0
                Thread.sleep(forTimeInterval: 0.1)
            }
            #expect(aHas, "a dialled b as localhost:\(port)")
            // The running gateway shows the mesh options it runs with (the site's backoffMillis).
            let status = try Shoal.json(a.cli(["status", "--json"])) as? [String: Any]
            #expect((status?["meshOptions"] as? [String: Any])?["backoffMillis"] as? Int == 500)
            let mesh = try Shoal.json(a.cli(["mesh", "--json"])) as? [String: Any]
            #expect((mesh?["options"] as? [String: Any])?["backoffMillis"] as? Int == 500)
            #expect(((status?["counters"] as? [String: Any])?["failedConnectionAttempts"] as? Int ?? 0) >= 1, "the unresolvable name counts as a failed attempt")
            let aEnd = a.stop()
            _ = b.stop()
            #expect(aEnd.status == 0)
            #expect(aEnd.stderr.contains("static peer no-such-gateway.invalid:\(port): no-such-gateway.invalid does not resolve"), "\(aEnd.stderr.suffix(3000))")
            let warnings = aEnd.stderr.components(separatedBy: "no-such-gateway.invalid does not resolve").count - 1
            #expect(warnings == 1, "logged once, not at every retry (\(warnings) times)")
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
                return try Self.writeSite(in: base.path, name, group: "test.renewal", allow: others.map { ids[$0]! },
                                          replication: ["listen: 127.0.0.1:\(ports[name]!)",
                                                        "peers: [\(others.map { "127.0.0.1:\(ports[$0]!)" }.joined(separator: ", "))]"])
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
