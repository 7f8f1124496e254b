import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The NATS uplink tests' own harness, proven before the uplink's tests lean on it: a real
    /// nats-server with JetStream on a loopback port of its own (NATSServer.swift), Tests/NATS/hub.py
    /// (nats-py) reading and writing it, its store across restarts, TLS with client certificates
    /// mapped to users, per-user permissions, a three-node JetStream cluster in network namespaces
    /// losing a node, and the two-site lab (NetLab sites + a hub namespace) with the hub cut off.
    @Suite("NATS server fixture", .serialized, .enabled(if: NATSServer.available, "needs Debian's nats-server (make deps installs it)"))
    struct NATSFixtureTests {
        static let group = "C17B206CE9F6"

        static func requireNATSPy() -> Bool {
            if !NATSServer.natsPyAvailable { Issue.record("python3 cannot import nats (nats-py): `make deps` installs Tests/NATS/requirements.txt") }
            return NATSServer.natsPyAvailable
        }

        /// Creates the contract's stream for `collection` and writes `doc` twice by compare-and-set.
        static func writeDocument(_ run: ([String]) throws -> NATSHubResult, collection: String = "sensors.state", replicas: Int = 1,
                                  id: String = "boiler-1", createStream: Bool = true) throws -> NATSHubResult {
            let stream = NATSUplinkNames.stream(group: group, collection: collection)
            let subject = "shoal.\(group).\(NATSUplinkNames.token(collection)).\(NATSUplinkNames.token(id))"
            if createStream {
                let made = try run(["create", stream, "--subjects", "shoal.\(group).\(NATSUplinkNames.token(collection)).*", "--replicas", String(replicas)])
                #expect(made.ok && made.lines.last?["replicas"] as? Int == replicas, "\(made)")
            }
            let first = try run(["put", subject, "--header", "Shoal-Version=01", "--header", "Shoal-Origin=fixture", "--payload", #"{"t":1}"#, "--expect-seq", "0"])
            #expect(first.ok, "\(first)")
            let seq = first.lines.last?["seq"] as? Int ?? -1
            let second = try run(["put", subject, "--header", "Shoal-Version=02", "--header", "Shoal-Origin=fixture", "--payload", #"{"t":2}"#, "--expect-seq", String(seq)])
            #expect(second.ok, "\(second)")
            return second
        }

        @Test("one server: JetStream publish (compare-and-set) and dump through hub.py; a stale sequence refused; the store survives SIGTERM and SIGKILL restarts")
        func singleServer() throws {
            guard Self.requireNATSPy() else { return }
            let started = Date()
            let server = try NATSServer()
            defer { server.remove() }
            #expect(server.port != 4222 && server.isRunning && server.healthz())
            let stream = NATSUplinkNames.stream(group: Self.group, collection: "sensors.state")
            #expect(stream == "SHOAL_C17B206CE9F6_sensors_2Estate")
            _ = try Self.writeDocument { try server.hub($0) }
            let stale = try server.hub(["put", "shoal.\(Self.group).sensors_2Estate.boiler-1", "--payload", "x", "--expect-seq", "1"])
            #expect(stale.status == 1 && stale.lines.last?["code"] as? Int == 10071, "\(stale)")
            let foreign = try server.hub(["put", "shoal.\(Self.group).sensors_2Estate.other", "--payload-hex", "ff00"])
            #expect(foreign.ok, "\(foreign)")
            for hard in [false, true] {
                try server.restart(hard: hard)
                let dump = try server.hub(["dump", stream])
                #expect(dump.ok && dump.lines.count == 2, "after \(hard ? "SIGKILL" : "SIGTERM"): \(dump) \(server.diagnostics())")
                let doc = dump.lines.first
                #expect(doc?["subject"] as? String == "shoal.\(Self.group).sensors_2Estate.boiler-1" && doc?["seq"] as? Int == 2
                        && doc?["payload"] as? String == #"{"t":2}"# && (doc?["headers"] as? [String: Any])?["Shoal-Version"] as? String == "02", "\(dump)")
                #expect(dump.lines.last?["payloadBase64"] as? String == "/wA=", "\(dump)")
                let streams = try server.hub(["streams"])
                #expect(streams.lines.first?["name"] as? String == stream && streams.lines.first?["lastSeq"] as? Int == 3, "\(streams)")
            }
            #expect(server.starts == 3)
            print("NATS fixture: single server test \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        }

        @Test("TLS with verify_and_map: the test client (admin), a gateway's self-signed identity (trusted as itself, mapped by subject to a gateway user) and a CA-signed one connect; no certificate or an untrusted one is refused")
        func tlsClientCertificates() throws {
            guard Self.requireNATSPy() else { return }
            let started = Date()
            let base = TemporaryDirectory()
            defer { base.remove() }
            let selfDir = base.path + "/gw-self", strangerDir = base.path + "/gw-stranger", signedDir = base.path + "/gw-signed"
            _ = try ReplicationProcessTests.peerID(selfDir)
            _ = try ReplicationProcessTests.peerID(strangerDir)
            let selfSigned = TestPKI.identityFiles(dataDir: selfDir), stranger = TestPKI.identityFiles(dataDir: strangerDir)
            let selfSubject = try NATSServer.certificateSubject(of: selfSigned.cert)
            let perms = NATSUplinkNames.gatewayPermissions(group: Self.group, collections: ["sensors"])
            let server = try NATSServer(.init(tls: true, clientTrust: [selfSigned.cert],
                                              users: [.init(selfSubject, publish: perms.publish, subscribe: perms.subscribe)]))
            defer { server.remove() }
            let pki = try #require(server.pki)
            #expect(server.url.hasPrefix("tls://"))
            let admin = try server.hub(["streams"])
            #expect(admin.ok, "the test client certificate (admin): \(admin) \(server.diagnostics())")

            let asSelf = try server.hub(["gateway-check", "--group", Self.group, "--collection", "sensors"],
                                        connection: ["--ca", pki.caCert, "--cert", selfSigned.cert, "--key", selfSigned.key])
            #expect(asSelf.ok && asSelf.lines.last?["ok"] as? Bool == true, "a self-signed gateway identity (\(selfSubject)): \(asSelf) \(server.diagnostics())")

            _ = try pki.signedIdentity(dataDir: signedDir)
            let signed = TestPKI.identityFiles(dataDir: signedDir)
            let signedSubject = try NATSServer.certificateSubject(of: signed.cert)
            // A Shoal identity's subject is "CN=<host name>,O=Shoal": every gateway made on one host
            // maps to the same user. Per-gateway users need gateways on hosts of their own names.
            #expect(signedSubject == selfSubject, "\(signedSubject) vs \(selfSubject)")
            let asSigned = try server.hub(["info", NATSUplinkNames.stream(group: Self.group, collection: "sensors")],
                                          connection: ["--ca", pki.caCert, "--cert", signed.cert, "--key", signed.key])
            #expect(asSigned.ok, "a CA-signed gateway identity (\(signedSubject)), mapped to the same user: \(asSigned) \(server.diagnostics())")
            let listing = try server.hub(["--timeout", "3", "streams"], connection: ["--ca", pki.caCert, "--cert", signed.cert, "--key", signed.key])
            #expect(!listing.ok, "the gateway's user may not list streams: \(listing)")

            let noCert = try server.hub(["streams"], connection: ["--ca", pki.caCert])
            #expect(noCert.status == 2, "no client certificate: \(noCert)")
            let untrusted = try server.hub(["streams"], connection: ["--ca", pki.caCert, "--cert", stranger.cert, "--key", stranger.key])
            #expect(untrusted.status == 2, "an untrusted identity: \(untrusted)")
            #expect(server.isRunning)
            print("NATS fixture: TLS test \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        }

        @Test("users with passwords and subject permissions: a gateway user passes hub.py gateway-check with the minimal list; another group's subjects are refused with a permissions violation; a wrong password is refused")
        func permissions() throws {
            guard Self.requireNATSPy() else { return }
            let started = Date()
            let perms = NATSUplinkNames.gatewayPermissions(group: Self.group, collections: ["sensors"])
            let server = try NATSServer(.init(users: [
                .init("gw1", password: "pw1", publish: perms.publish, subscribe: perms.subscribe),
                .init("gw2", password: "pw2", publish: ["shoal.OTHER.>"], subscribe: ["_INBOX.>"]),
            ]))
            defer { server.remove() }
            let check = try server.hub(["gateway-check", "--group", Self.group, "--collection", "sensors"], connection: ["--user", "gw1", "--password", "pw1"])
            #expect(check.ok && check.lines.last?["ok"] as? Bool == true, "\(check) \(server.diagnostics())")
            let denied = try server.hub(["--timeout", "3", "put", "shoal.\(Self.group).sensors_2Estate.x", "--payload", "{}"], connection: ["--user", "gw2", "--password", "pw2"])
            #expect(denied.status == 1 && denied.output.lowercased().contains("permissions violation"), "\(denied)")
            #expect(server.log().contains("Publish Violation - User \"gw2\""), "\(server.diagnostics())")
            let wrong = try server.hub(["streams"], connection: ["--user", "gw1", "--password", "nope"])
            #expect(wrong.status == 2 && wrong.output.lowercased().contains("authorization"), "\(wrong)")
            print("NATS fixture: permissions test \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        }

        @Test("nats-server 2.9.10 garbles a push consumer's ack reply subject when the stream name holds '%': why tok() escapes as _XX, not %XX")
        func percentInStreamName() throws {
            guard Self.requireNATSPy() else { return }
            let server = try NATSServer(.init(trace: true))
            defer { server.remove() }
            let plain = try server.hub(["gateway-check", "--group", Self.group, "--collection", "sensors_2Estate"])
            #expect(plain.lines.last?["steps"].flatMap { ($0 as? [String: String])?["ordered consumer (CONSUMER.CREATE, heartbeats, flow control)"] } == "ok", "\(plain)")
            let escaped = try server.hub(["--timeout", "3", "gateway-check", "--group", Self.group, "--collection", "sensors%2Estate"])
            let step = escaped.lines.last?["steps"].flatMap { ($0 as? [String: String])?["ordered consumer (CONSUMER.CREATE, heartbeats, flow control)"] }
            #expect(step != "ok", "\(escaped)")
            // The server formats the reply with the stream name as a format string: "%2E" becomes "%!E(uint64=…)".
            #expect(server.log().contains("$JS.ACK.SHOAL_\(Self.group)_sensors%!E("), "\(server.diagnostics())")
            print("NATS fixture: a '%' in a stream name: ordered consumer \(step ?? "?")")
        }

        @Test("a three-node JetStream cluster in network namespaces: an R3 stream; one node killed, publishes still acknowledged; it comes back and catches up", .enabled(if: NetLab.available, "needs root and iproute2"))
        func cluster() throws {
            guard Self.requireNATSPy() else { return }
            let started = Date()
            let lab = try NetLab(sites: [1])
            defer { lab.teardown() }
            let cluster = try NATSCluster(lab: lab)
            defer { cluster.remove() }
            #expect(cluster.urls == ["nats://10.78.1.201:14222", "nats://10.78.1.202:14222", "nats://10.78.1.203:14222"])
            let formed = Date().timeIntervalSince(started)
            let leader = try #require(cluster.metaLeader(), "\(cluster.diagnostics())")
            _ = try Self.writeDocument({ try cluster.hub($0) }, replicas: 3)
            let stream = NATSUplinkNames.stream(group: Self.group, collection: "sensors.state")
            let info = try cluster.hub(["info", stream])
            #expect(info.lines.last?["cluster"] as? String == "shoal-hub" && (info.lines.last?["followers"] as? [Any])?.count == 2, "\(info)")
            // The gateway at site 0 reaches every node.
            let g1 = lab.nodes[0]
            let fromGateway = try NATSHubResult.run(["streams"], servers: cluster.urls, connection: [], ns: g1.ns, timeout: 60)
            #expect(fromGateway.ok && fromGateway.lines.count == 1, "\(fromGateway)")

            // Kill the stream's leader (the hardest case), then publish.
            let streamLeader = info.lines.last?["leader"] as? String ?? leader
            let victim = cluster.servers.firstIndex { $0.serverName == streamLeader } ?? 0
            cluster.kill(victim)
            let killedAt = Date()
            var acked: NATSHubResult?
            #expect(eventuallyBlocking(within: 60, every: 0.5) {
                acked = try? cluster.hub(["--timeout", "5", "put", "shoal.\(Self.group).sensors_2Estate.boiler-2", "--payload", #"{"t":3}"#, "--expect-seq", "0"])
                return acked?.ok == true
            }, "\(String(describing: acked)) \(cluster.diagnostics())")
            let failover = Date().timeIntervalSince(killedAt)
            try cluster.restart(victim)
            #expect(cluster.waitForJetStream(within: 60), "\(cluster.diagnostics())")
            let dump = try cluster.hub(["dump", stream])
            #expect(dump.lines.map { $0["subject"] as? String ?? "" } == ["shoal.\(Self.group).sensors_2Estate.boiler-1", "shoal.\(Self.group).sensors_2Estate.boiler-2"], "\(dump)")
            // The restarted node's own copy: hub.py against it alone.
            #expect(eventuallyBlocking(within: 60, every: 0.5) {
                let own = try? cluster.servers[victim].hub(["info", stream])
                return own?.lines.last?["lastSeq"] as? Int == 3
            })
            print("NATS fixture: cluster formed in \(String(format: "%.1f", formed)) s, publish acknowledged \(String(format: "%.1f", failover)) s after the stream leader's SIGKILL; test \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        }

        @Test("two sites on bridges of their own and a hub on both: a gateway namespace reaches the hub from its site, never the other site; cutting a site's leg cuts it off the hub only", .enabled(if: NetLab.available, "needs root, iproute2, dbus, avahi-daemon and avahi-utils"))
        func twoSites() throws {
            guard Self.requireNATSPy() else { return }
            let started = Date()
            let lab = try NetLab(sites: [1, 1])
            defer { lab.teardown() }
            let (hubHost, hub) = try lab.startHub()
            defer { hub.remove() }
            var phases: [String] = []
            var mark = Date()
            func phase(_ name: String) {
                phases.append("\(name) \(String(format: "%.1f", Date().timeIntervalSince(mark))) s")
                mark = Date()
            }
            phase("lab and hub up (since the test's start: \(String(format: "%.1f", Date().timeIntervalSince(started))) s)")
            let a = lab.nodes(atSite: 0)[0], b = lab.nodes(atSite: 1)[0]
            #expect(a.address == "10.78.1.1" && b.address == "10.78.2.2" && hubHost.addresses == [0: "10.78.1.254", 1: "10.78.2.254"])
            let urlA = hub.url(at: hubHost.addresses[0]!), urlB = hub.url(at: hubHost.addresses[1]!)
            func reach(_ node: NetLab.Node, _ url: String) -> Bool {
                (try? NATSHubResult.run(["--timeout", "3", "streams"], servers: [url], connection: [], ns: node.ns, timeout: 30).ok) == true
            }
            #expect(reach(a, urlA) && reach(b, urlB), "\(hub.diagnostics())")
            #expect(!reach(a, urlB) && !reach(b, urlA))
            // No route from one site to the other (the hub forwards nothing; each site has its own /24).
            #expect(lab.exec(in: a.ns, ["ip", "route", "get", b.address]).status != 0 && lab.exec(in: b.ns, ["ip", "route", "get", a.address]).status != 0)
            #expect(lab.canConnect(from: a.ns, to: hubHost.addresses[0]!, port: hub.port) && !lab.canConnect(from: a.ns, to: hubHost.addresses[1]!, port: hub.port))
            _ = try Self.writeDocument { try NATSHubResult.run($0, servers: [urlA], connection: [], ns: a.ns, timeout: 60) }

            phase("reachability checks and a write")
            try lab.link(hubHost, site: 0, up: false)
            #expect(!reach(a, urlA) && reach(b, urlB))
            phase("cut")
            try lab.link(hubHost, site: 0, up: true)
            #expect(eventuallyBlocking(within: 60, every: 0.5) { reach(a, urlA) })
            phase("healed")
            let dump = try NATSHubResult.run(["dump", NATSUplinkNames.stream(group: Self.group, collection: "sensors.state")], servers: [urlB], connection: [], ns: b.ns, timeout: 60)
            #expect(dump.lines.count == 1, "\(dump)")
            print("NATS fixture: two-site test \(String(format: "%.1f", Date().timeIntervalSince(started))) s: \(phases.joined(separator: ", "))")
        }
    }
}
