import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The uplink of real `shoal run` gateways against a real nats-server (NATSServer.swift) on
    /// loopback: gateways that never meet on a mesh converge through the hub; the hub away and back;
    /// a gateway SIGKILLed again and again while it syncs; refusals (password, permissions, the
    /// server's certificate) that leave the gateway up and say why; TLS with the gateway's own
    /// identity. The cluster and two-site tests in namespaces are `UplinkLabTests`.
    @Suite("Uplink processes", .serialized, .enabled(if: NATSServer.available, "needs Debian's nats-server (make deps installs it)"))
    struct UplinkProcessTests {
        static let collection = "sensors.state"

        /// A site file: one collection, the uplink to `servers`, `more` lines under `uplink:`.
        static func site(_ path: String, servers: [String], more: [String] = [], group: String = "test.uplink") throws -> String {
            var text = "group: \(group)\ncollections:\n  - name: \(collection)\n"
            text += "uplink:\n  servers: [\(servers.joined(separator: ", "))]\n  reconnect: {minMillis: 100, maxMillis: 1000}\n"
            text += "  collections: [{name: \(collection)}]\n"
            text += more.map { "  \($0)\n" }.joined()
            text += "http: {enabled: false}\n"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }

        /// Gateways a and b in `base`, both uplinked to `hub` only.
        static func pair(_ base: TemporaryDirectory, _ hub: NATSServer) throws -> (MQTTGateway, MQTTGateway) {
            let a = try MQTTGateway(dataDir: base.path + "/a", site: try site(base.path + "/a.yaml", servers: [hub.url]))
            do {
                return (a, try MQTTGateway(dataDir: base.path + "/b", site: try site(base.path + "/b.yaml", servers: [hub.url])))
            } catch {
                a.kill()
                throw error
            }
        }

        static func uplink(_ g: MQTTGateway) -> [String: Any]? {
            guard let r = try? g.cli(["status", "--json"]), r.status == 0 else { return nil }
            return ((try? Shoal.json(r)) as? [String: Any])?["uplink"] as? [String: Any]
        }

        static func number(_ g: MQTTGateway, _ path: String) -> Int {
            var value: Any? = uplink(g)
            for key in path.split(separator: ".") { value = (value as? [String: Any])?[String(key)] }
            return (value as? Int) ?? 0
        }

        static func stream(_ g: MQTTGateway) throws -> String {
            let r = try g.cli(["status", "--json"])
            let type = try #require(((try Shoal.json(r)) as? [String: Any])?["serviceType"] as? String)  // _C17B206CE9F6._tcp
            return NATSUplinkNames.stream(group: String(type.dropFirst().prefix(12)), collection: collection)
        }

        static func importDocs(_ g: MQTTGateway, prefix: String, count: Int) throws {
            let lines = (0..<count).map { "\(prefix)\($0)\t{\"n\":\($0),\"from\":\"\(prefix)\"}" }.joined(separator: "\n") + "\n"
            let r = try g.cli(["doc", "import", collection, "-"], stdin: lines)
            #expect(r.status == 0, "\(r.stderr)")
        }

        /// Every document of the collection with its version, id → version hex.
        static func versions(_ g: MQTTGateway) throws -> [String: String] {
            try g.documents(collection).compactMapValues { $0["version"] as? String }
        }

        @Test("two gateways that never meet converge through one server, both ways; the hub holds one message per document with Shoal's headers; status shows the uplink")
        func throughOneServer() throws {
            let base = TemporaryDirectory(prefix: "shoal-uplink")
            defer { base.remove() }
            let hub = try NATSServer()
            defer { hub.remove() }
            let (a, b) = try Self.pair(base, hub)
            defer { a.kill(); b.kill() }
            try Self.importDocs(a, prefix: "a", count: 500)
            #expect(try b.cli(["doc", "put", Self.collection, "b0", #"{"from":"b"}"#]).status == 0)
            #expect(eventuallyBlocking(within: 60) { (try? b.documents(Self.collection).count) == 501 && (try? a.documents(Self.collection).count) == 501 },
                    "a: \(String(describing: Self.uplink(a))) b: \(String(describing: Self.uplink(b))) \(a.log().suffix(1500))")
            let va = try Self.versions(a), vb = try Self.versions(b)
            #expect(va == vb, "the same version of every document on both")
            #expect(Self.number(a, "push.published") == 500 && Self.number(b, "push.published") == 1)
            #expect(Self.number(b, "pull.applied") == 500 && Self.number(a, "pull.applied") == 1)
            #expect(Self.uplink(a)?["state"] as? String == "connected")
            let status = try a.cli(["status"])
            #expect(status.stdout.contains("uplink      connected to \(hub.url)"), "\(status.stdout)")

            let dump = try hub.hub(["dump", try Self.stream(a)])
            #expect(dump.ok, "\(dump)")
            #expect(dump.lines.count == 501, "one message per document: \(dump.lines.count)")
            let first = try #require(dump.lines.first { ($0["subject"] as? String)?.hasSuffix(".a7") == true })
            let headers = try #require(first["headers"] as? [String: String])
            #expect(headers["Shoal-Version"] == va["a7"], "the header is the version `doc get --json` shows")
            #expect(headers["Shoal-Origin"] != nil && headers["Shoal-HLC"] != nil && headers["Shoal-Deleted"] == nil)

            // A deletion travels as a tombstone.
            #expect(try a.cli(["doc", "delete", Self.collection, "a3"]).status == 0)
            #expect(eventuallyBlocking(within: 30) { b.document(Self.collection, "a3") == nil })
        }

        @Test("the hub away: writes go on at both gateways and wait in their stores (the push lag shows them), then converge when it is back; nothing is lost")
        func hubAwayAndBack() throws {
            let base = TemporaryDirectory(prefix: "shoal-uplink")
            defer { base.remove() }
            let hub = try NATSServer()
            defer { hub.remove() }
            let (a, b) = try Self.pair(base, hub)
            defer { a.kill(); b.kill() }
            #expect(eventuallyBlocking(within: 30) { Self.uplink(a)?["state"] as? String == "connected" && Self.uplink(b)?["state"] as? String == "connected" })
            _ = hub.stop()
            try Self.importDocs(a, prefix: "a", count: 100)
            try Self.importDocs(b, prefix: "b", count: 100)
            #expect(eventuallyBlocking(within: 60) { Self.number(a, "push.lag") == 100 && Self.uplink(a)?["state"] as? String != "connected" },
                    "\(String(describing: Self.uplink(a)))")
            #expect(try a.cli(["status"]).status == 0, "the gateway is up and answers")
            try hub.restart()
            #expect(eventuallyBlocking(within: 90) { (try? a.documents(Self.collection).count) == 200 && (try? b.documents(Self.collection).count) == 200 },
                    "a: \(String(describing: Self.uplink(a))) b: \(String(describing: Self.uplink(b)))")
            #expect(try Self.versions(a) == Self.versions(b))
            #expect(eventuallyBlocking(within: 30) { Self.number(a, "push.lag") == 0 && Self.number(b, "push.lag") == 0 })
        }

        @Test("concurrent edits of different fields at two gateways that share only the hub both survive (field stamps travel in Shoal-Fields); the same version on both")
        func fieldEditsThroughTheHub() throws {
            let base = TemporaryDirectory(prefix: "shoal-uplink")
            defer { base.remove() }
            let hub = try NATSServer()
            defer { hub.remove() }
            let (a, b) = try Self.pair(base, hub)
            defer { a.kill(); b.kill() }
            #expect(try a.cli(["doc", "put", Self.collection, "x", #"{"x":0,"y":0}"#]).status == 0)
            #expect(eventuallyBlocking(within: 30) { b.document(Self.collection, "x") != nil })
            _ = hub.stop()
            // a's edit of x is older than b's edit of y: whole-document last-write-wins would lose it.
            #expect(try a.cli(["doc", "put", Self.collection, "x", #"{"x":1,"y":0}"#]).status == 0)
            Thread.sleep(forTimeInterval: 0.05)
            #expect(try b.cli(["doc", "put", Self.collection, "x", #"{"x":0,"y":2}"#]).status == 0)
            try hub.restart()
            func body(_ g: MQTTGateway) -> [String: Int]? { g.document(Self.collection, "x")?["body"] as? [String: Int] }
            #expect(eventuallyBlocking(within: 60) { body(a) == ["x": 1, "y": 2] && body(b) == ["x": 1, "y": 2] },
                    "a: \(String(describing: body(a))) b: \(String(describing: body(b)))")
            #expect(eventuallyBlocking(within: 30) { (try? Self.versions(a)) == (try? Self.versions(b)) })
            let dump = try hub.hub(["dump", try Self.stream(a)])
            let headers = dump.lines.compactMap { $0["headers"] as? [String: String] }
            #expect(headers.contains { $0["Shoal-Fields"] != nil }, "a stamped version on the hub carries its stamps: \(headers)")
        }

        @Test("a gateway SIGKILLed three times while it pushes 3,000 documents, and the pulling one killed once: in the end the hub holds each document once and both gateways the same versions")
        func killedWhileSyncing() throws {
            let base = TemporaryDirectory(prefix: "shoal-uplink")
            defer { base.remove() }
            let hub = try NATSServer()
            defer { hub.remove() }
            _ = hub.stop()  // the documents wait in a's store, then go up while a is killed
            let a = try MQTTGateway(dataDir: base.path + "/a", site: try Self.site(base.path + "/a.yaml", servers: [hub.url]))
            defer { a.kill() }
            try Self.importDocs(a, prefix: "k", count: 3000)
            let b = try MQTTGateway(dataDir: base.path + "/b", site: try Self.site(base.path + "/b.yaml", servers: [hub.url]))
            defer { b.kill() }
            try hub.restart()
            var lastPublished = 0
            for round in 1...3 {
                // Kill a once it has published more since its last start (what it published before
                // the kill but had not yet checkpointed is published again: compare-and-set makes it a no-op).
                let moved = eventuallyBlocking(within: 60, every: 0.02) { Self.number(a, "push.published") > 0 }
                let published = Self.number(a, "push.published")
                print("uplink kill \(round): published \(published) since the last start (moved: \(moved))")
                lastPublished = published
                a.kill()
                if round == 2 { b.kill(); try b.start() }
                try a.start()
            }
            #expect(eventuallyBlocking(within: 120) { (try? b.documents(Self.collection).count) == 3000 && Self.number(a, "push.lag") == 0 },
                    "b: \(String(describing: try? b.documents(Self.collection).count)) a: \(String(describing: Self.uplink(a))) \(a.log().suffix(2000))")
            #expect(try Self.versions(a) == Self.versions(b))
            let dump = try hub.hub(["dump", try Self.stream(a)])
            #expect(dump.lines.count == 3000, "the hub holds each document once: \(dump.lines.count)")
            _ = lastPublished
        }

        @Test("refusals leave the gateway up and say why: a wrong password (then corrected: read again at the next connection), a user denied the group's subjects, a server certificate the gateway does not trust")
        func refusals() throws {
            let base = TemporaryDirectory(prefix: "shoal-uplink")
            defer { base.remove() }
            let probe = try MQTTGateway(dataDir: base.path + "/probe", site: try Self.site(base.path + "/probe.yaml", servers: ["nats://127.0.0.1:1"]))
            let stream = try Self.stream(probe)
            let group = String(stream.dropFirst("SHOAL_".count).prefix(12))
            probe.kill()
            let allowed = NATSUplinkNames.gatewayPermissions(group: group, collections: [Self.collection])
            let hub = try NATSServer(.init(users: [
                .init("gw", password: "right", publish: allowed.publish, subscribe: allowed.subscribe),
                // May use the JetStream API for its stream, but not publish documents.
                .init("nodocs", password: "pw", publish: Array(allowed.publish.dropFirst()), subscribe: allowed.subscribe),
            ]))
            defer { hub.remove() }
            try "wrong\n".write(toFile: base.path + "/gw.pass", atomically: true, encoding: .utf8)
            let wrong = try MQTTGateway(dataDir: base.path + "/wrong",
                                        site: try Self.site(base.path + "/wrong.yaml", servers: [hub.url], more: ["username: gw", "passwordFile: \(base.path)/gw.pass"]))
            defer { wrong.kill() }
            var status: [String: Any]?
            #expect(eventuallyBlocking(within: 30) { status = Self.uplink(wrong); return (status?["lastError"] as? String)?.lowercased().contains("authorization") == true },
                    "\(String(describing: status))")
            #expect(status?["state"] as? String == "refused", "\(String(describing: status))")
            #expect(try wrong.cli(["doc", "put", Self.collection, "w1", #"{"w":1}"#]).status == 0, "the gateway works on")
            try "right\n".write(toFile: base.path + "/gw.pass", atomically: true, encoding: .utf8)
            #expect(eventuallyBlocking(within: 30) { Self.number(wrong, "push.published") == 1 }, "\(String(describing: Self.uplink(wrong)))")

            try "pw\n".write(toFile: base.path + "/nodocs.pass", atomically: true, encoding: .utf8)
            let denied = try MQTTGateway(dataDir: base.path + "/denied",
                                         site: try Self.site(base.path + "/denied.yaml", servers: [hub.url], more: ["username: nodocs", "passwordFile: \(base.path)/nodocs.pass"]))
            defer { denied.kill() }
            #expect(try denied.cli(["doc", "put", Self.collection, "d1", #"{"d":1}"#]).status == 0)
            #expect(eventuallyBlocking(within: 60) { status = Self.uplink(denied); return (status?["lastError"] as? String)?.lowercased().contains("permission") == true },
                    "\(String(describing: status)) \(denied.log().suffix(2000))")
            print("uplink permission denied: \(status?["lastError"] ?? "-")")
            #expect(eventuallyBlocking(within: 10) { Self.number(denied, "push.lag") == 1 }, "d1 waits: \(String(describing: Self.uplink(denied)))")
            #expect(Self.number(denied, "push.published") == 0)
            #expect(try denied.cli(["status"]).status == 0)

            // TLS: the server's certificate checked against a CA that did not sign it.
            let tlsHub = try NATSServer(.init(tls: true))
            defer { tlsHub.remove() }
            let strangerDir = base.path + "/stranger"
            _ = try ReplicationProcessTests.peerID(strangerDir)
            let stranger = try MQTTGateway(dataDir: strangerDir, site: try Self.site(base.path + "/stranger.yaml", servers: [tlsHub.url],
                                                                                    more: ["tls: {caFile: \(TestPKI.identityFiles(dataDir: strangerDir).cert), identity: true}"]))
            defer { stranger.kill() }
            #expect(eventuallyBlocking(within: 30) { status = Self.uplink(stranger); return status?["lastError"] is String && Self.number(stranger, "connects") == 0 },
                    "\(String(describing: status))")
            print("uplink untrusted server certificate: \(status?["lastError"] ?? "-")")
            #expect(status?["state"] as? String != "connected")
            #expect(try stranger.cli(["status"]).status == 0)
        }

        @Test("TLS with the gateway's own identity (signed by the hub's CA), mapped to a user by its subject (verify_and_map) with the minimal permissions")
        func tlsIdentity() throws {
            let base = TemporaryDirectory(prefix: "shoal-uplink")
            defer { base.remove() }
            let dir = base.path + "/gw"
            // The hub's PKI first (its CA signs the gateway's identity), then the user named by the
            // identity's subject.
            let pkiDir = TemporaryDirectory(prefix: "shoal-uplink-pki")
            defer { pkiDir.remove() }
            let pki = try TestPKI(directory: pkiDir.path)
            _ = try pki.signedIdentity(dataDir: dir)
            let subject = try NATSServer.certificateSubject(of: TestPKI.identityFiles(dataDir: dir).cert)
            let siteFile = try Self.site(base.path + "/gw.yaml", servers: ["tls://127.0.0.1:1"], more: ["tls: {caFile: \(pki.caCert), identity: true}"])
            let probe = try MQTTGateway(dataDir: dir, site: siteFile)
            let stream = try Self.stream(probe)
            probe.kill()
            let allowed = NATSUplinkNames.gatewayPermissions(group: String(stream.dropFirst("SHOAL_".count).prefix(12)), collections: [Self.collection])
            let hub = try NATSServer(.init(tls: true, clientTrust: [pki.caCert], users: [.init(subject, publish: allowed.publish, subscribe: allowed.subscribe)]))
            defer { hub.remove() }
            let hubCA = try #require(hub.pki).caCert
            let g = try MQTTGateway(dataDir: dir, site: try Self.site(base.path + "/gw.yaml", servers: [hub.url], more: ["tls: {caFile: \(hubCA), identity: true}"]))
            defer { g.kill() }
            #expect(try g.cli(["doc", "put", Self.collection, "t1", #"{"t":1}"#]).status == 0)
            #expect(eventuallyBlocking(within: 30) { Self.number(g, "push.published") == 1 },
                    "\(String(describing: Self.uplink(g))) \(hub.diagnostics())")
            #expect((Self.uplink(g)?["server"] as? String)?.hasPrefix("tls://") == true)
        }
    }
}
