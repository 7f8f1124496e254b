import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// A gateway built from the tag protocol-1 (SHOAL_PROTOCOL1_BIN, built by
    /// scripts/protocol1-check.sh) and this tree's gateway, over TCP + mutual TLS on loopback.
    @Suite("Protocol 1 and protocol 2 gateways together", .serialized,
           .enabled(if: ProcessInfo.processInfo.environment["SHOAL_PROTOCOL1_BIN"] != nil, "scripts/protocol1-check.sh runs it"))
    struct ProtocolOneTests {
        static var old: String { ProcessInfo.processInfo.environment["SHOAL_PROTOCOL1_BIN"] ?? "" }

        static func peerID(_ dataDir: String, _ executable: String) throws -> String {
            let r = try Shoal.run(["identity", "create", "--board", "sim", "--data-dir", dataDir, "--json"], executable: executable)
            guard r.status == 0, let j = try Shoal.json(r) as? [String: Any], let id = j["peerID"] as? String else {
                throw CocoaError(.fileReadUnknown, userInfo: ["stderr": r.stderr])
            }
            return id
        }

        static func body(_ g: RunningGateway, _ id: String) -> String? {
            guard let r = try? g.cli(["doc", "get", "sensors.readings", id, "--json"]), r.status == 0,
                  let j = try? Shoal.json(r) as? [String: Any], let b = j["body"] as? [String: Any],
                  let data = try? JSONSerialization.data(withJSONObject: b, options: [.sortedKeys]) else { return nil }
            return String(decoding: data, as: UTF8.self)
        }

        @Test("a protocol-1 gateway and this one replicate both ways, and a conflict between them (stamps on one side only) ends with one body on both")
        func oldAndNew() throws {
            #expect(FileManager.default.isExecutableFile(atPath: Self.old), "SHOAL_PROTOCOL1_BIN is not an executable: \(Self.old)")
            let version = try Shoal.run(["version"], executable: Self.old)
            #expect(version.status == 0)
            let base = TemporaryDirectory()
            defer { base.remove() }
            let newDir = base.path + "/new", oldDir = base.path + "/old"
            let newID = try Self.peerID(newDir, Shoal.binary), oldID = try Self.peerID(oldDir, Self.old)
            let port = 20_000 + Int((getpid() + 13) % 20_000)
            let newSite = try ReplicationProcessTests.writeSite(in: base.path, "new", group: "test.protocol", allow: [oldID], replication: ["listen: 127.0.0.1:\(port)"])
            let oldSite = try ReplicationProcessTests.writeSite(in: base.path, "old", group: "test.protocol", allow: [newID], replication: ["peers: [127.0.0.1:\(port)]"])
            func startNew() throws -> RunningGateway { try RunningGateway(dataDir: newDir, extraArgs: ["--config", newSite]) }
            func startOld() throws -> RunningGateway { try RunningGateway(dataDir: oldDir, extraArgs: ["--config", oldSite], executable: Self.old) }
            var logs: [String] = []

            // Both ways, and an update of one field on the new side (a version with field stamps,
            // which must reach the old gateway without them).
            var new = try startNew(), old = try startOld()
            #expect(try new.cli(["doc", "put", "sensors.readings", "x", #"{"a":1,"b":1,"c":1}"#]).status == 0)
            #expect(try old.cli(["doc", "put", "sensors.readings", "from-old", #"{"v":"old"}"#]).status == 0)
            #expect(eventuallyBlocking(within: 30) { Self.body(old, "x") != nil && Self.body(new, "from-old") != nil }, "no replication between old and new")
            #expect(try new.cli(["doc", "put", "sensors.readings", "x", #"{"a":1,"b":1,"c":2}"#]).status == 0)
            #expect(eventuallyBlocking(within: 30) { Self.body(old, "x") == #"{"a":1,"b":1,"c":2}"# }, "the stamped update never reached the old gateway: \(Self.body(old, "x") ?? "-")")

            // A conflict: the old gateway edits b while the new one is down; then the new one
            // edits a (later) while the old one is down; then both run again.
            logs.append(new.stop(keepDirectory: true).stderr)
            #expect(try old.cli(["doc", "put", "sensors.readings", "x", #"{"a":1,"b":3,"c":2}"#]).status == 0)
            logs.append(old.stop(keepDirectory: true).stderr)
            Thread.sleep(forTimeInterval: 0.05)
            new = try startNew()
            #expect(try new.cli(["doc", "put", "sensors.readings", "x", #"{"a":2,"b":1,"c":2}"#]).status == 0)
            old = try startOld()
            // Equal on both, and still equal 3 s later (a body both hold for a moment, before the
            // other side's version arrives, is not the end).
            var settled = false, equalSince: Date?
            let deadline = Date().addingTimeInterval(40)
            while Date() < deadline && !settled {
                let a = Self.body(new, "x"), b = Self.body(old, "x")
                if a != nil && a == b {
                    equalSince = equalSince ?? Date()
                    settled = Date().timeIntervalSince(equalSince!) >= 3
                } else {
                    equalSince = nil
                }
                if !settled { Thread.sleep(forTimeInterval: 0.2) }
            }
            let final = Self.body(new, "x")
            #expect(settled && final == Self.body(old, "x"), "new holds \(final ?? "-"), old \(Self.body(old, "x") ?? "-")")
            // Whole-document last-write-wins (old) or the field join with the old side's fields
            // counted as its newest write (new): both pick from these, and the digest tie-break
            // makes them agree.
            #expect([#"{"a":2,"b":1,"c":2}"#, #"{"a":2,"b":3,"c":2}"#].contains(final ?? ""), "\(final ?? "-")")
            #expect(try new.cli(["doc", "put", "sensors.readings", "after", #"{"v":1}"#]).status == 0)
            #expect(eventuallyBlocking(within: 30) { Self.body(old, "after") != nil }, "the link did not survive the conflict")
            logs.append(new.stop().stderr)
            logs.append(old.stop().stderr)
            let all = logs.joined(separator: "\n")
            #expect(!all.contains("malformed version") && !all.contains("protocol violation") && !all.contains("speaks replication protocol"),
                    "\(all.suffix(3000))")
            #expect(logs[0].contains("replicating with peer \(oldID)"), "\(logs[0].suffix(2000))")
        }

        @Test("a protocol-1 and a protocol-2 gateway that share a NATS hub, and never meet on a mesh, converge both ways, stamped versions included, with equal version hashes",
              .enabled(if: NATSServer.available, "needs Debian's nats-server (make deps installs it)"))
        func throughTheHub() throws {
            let base = TemporaryDirectory(prefix: "shoal-protocol1-hub")
            defer { base.remove() }
            let hub = try NATSServer()
            defer { hub.remove() }
            let c = UplinkProcessTests.collection
            let new = try MQTTGateway(dataDir: base.path + "/new", site: try UplinkProcessTests.site(base.path + "/new.yaml", servers: [hub.url]))
            defer { new.kill() }
            let old = try MQTTGateway(dataDir: base.path + "/old", site: try UplinkProcessTests.site(base.path + "/old.yaml", servers: [hub.url]),
                                      executable: Self.old)
            defer { old.kill() }
            func body(_ g: MQTTGateway, _ id: String) -> String? {
                guard let d = try? g.documents(c)[id], let b = d["body"] as? [String: Any],
                      let data = try? JSONSerialization.data(withJSONObject: b, options: [.sortedKeys]) else { return nil }
                return String(decoding: data, as: UTF8.self)
            }
            #expect(try new.cli(["doc", "put", c, "x", #"{"a":1,"b":1}"#]).status == 0)
            #expect(try new.cli(["doc", "put", c, "x", #"{"a":1,"b":2}"#]).status == 0)  // a keeps its stamp
            #expect(try old.cli(["doc", "put", c, "y", #"{"v":1}"#]).status == 0)
            #expect(eventuallyBlocking(within: 60) { body(old, "x") == #"{"a":1,"b":2}"# && body(new, "y") == #"{"v":1}"# },
                    "old: \(body(old, "x") ?? "-") new: \(body(new, "y") ?? "-") \(old.log().suffix(1500))")
            #expect(try old.cli(["doc", "put", c, "x", #"{"a":1,"b":3}"#]).status == 0)
            #expect(eventuallyBlocking(within: 60) { body(new, "x") == #"{"a":1,"b":3}"# }, "new: \(body(new, "x") ?? "-")")
            let vNew = try new.documents(c).compactMapValues { $0["version"] as? String }, vOld = try old.documents(c).compactMapValues { $0["version"] as? String }
            #expect(vNew == vOld && vNew.count == 2, "new \(vNew) old \(vOld)")
            let logs = new.log() + old.log()
            #expect(!logs.contains("replaced by this gateway") && !logs.contains("malformed version"), "\(logs.suffix(3000))")
        }
    }
}
