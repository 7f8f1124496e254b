import Foundation
import ShoalLinux
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The example hub configs in docs/nats/ (README's "When one site is not enough"), each run
    /// through `nats-server -t` and started for real on free loopback ports with its paths, host
    /// names and certificate subjects substituted; single.conf's gateway user proven to do what
    /// the uplink does (hub.py gateway-check) and nothing of another group's.
    @Suite("NATS config examples", .serialized, .enabled(if: NATSServer.available, "needs Debian's nats-server (make deps installs it)"))
    struct NATSConfigExamplesTests {
        static let docs = MQTTTools.repo + "/docs/nats"

        /// A config from docs/nats with `replacements` applied, written to `dir`; `nats-server -t` passes.
        static func prepare(_ name: String, in dir: String, as file: String? = nil, _ replacements: [(String, String)]) throws -> String {
            var text = try String(contentsOfFile: docs + "/" + name, encoding: .utf8)
            for (from, to) in replacements {
                #expect(text.contains(from), "\(name) has no \(from)")
                text = text.replacingOccurrences(of: from, with: to)
            }
            let path = dir + "/" + (file ?? name)
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            let checked = try MQTTTools.run([NATSServer.binary, "-t", "-c", path], timeout: 30)
            #expect(checked.status == 0 && checked.output.contains("is valid"), "nats-server -t -c \(path): \(checked.output)")
            return path
        }

        /// A nats-server started on a prepared config; waits for "Server is ready".
        final class Started {
            let process: ChildProcess
            let log: String
            init(_ config: String, log: String) throws {
                self.log = log
                process = try ChildProcess(path: NATSServer.binary, arguments: ["-c", config, "-l", log], output: log + ".out")
                let ok = eventuallyBlocking(within: 60, every: 0.05) {
                    ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("Server is ready") || process.exitStatus() != nil
                }
                guard ok, process.exitStatus() == nil else {
                    throw MQTTTools.Failed(description: "nats-server -c \(config) did not start: \(text())")
                }
            }
            func text() -> String {
                ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "") + ((try? String(contentsOfFile: log + ".out", encoding: .utf8)) ?? "")
            }
            deinit { process.stop(signal: SIGKILL) }
        }

        static func healthz(_ port: UInt16) -> Bool {
            (try? MQTTTools.run(["/usr/bin/curl", "-s", "-m", "5", "http://127.0.0.1:\(port)/healthz"], timeout: 10).output.contains("\"ok\"")) == true
        }

        @Test("single.conf: valid, starts with TLS and verify_and_map; the admin certificate does anything, the gateway's certificate passes gateway-check with the minimal permissions and is refused another group's subjects and its stream's deletion")
        func single() throws {
            guard NATSFixtureTests.requireNATSPy() else { return }
            let started = Date()
            let base = TemporaryDirectory()
            defer { base.remove() }
            let pki = try TestPKI(directory: base.path + "/certs")
            let gwDir = base.path + "/gw"
            _ = try pki.signedIdentity(dataDir: gwDir)
            let gw = TestPKI.identityFiles(dataDir: gwDir)
            let gwSubject = try NATSServer.certificateSubject(of: gw.cert)
            let port = try Mosquitto.freePort(), http = try Mosquitto.freePort()
            let config = try Self.prepare("single.conf", in: base.path, [
                ("0.0.0.0:4222", "127.0.0.1:\(port)"), ("127.0.0.1:8222", "127.0.0.1:\(http)"),
                ("/var/lib/nats", base.path + "/store"), ("/etc/nats/certs/clients.pem", pki.brokerClientCAs),
                ("/etc/nats/certs/server.crt", pki.serverCert), ("/etc/nats/certs/server.key", pki.serverKey),
                ("CN=hub-admin", NATSServer.testClientSubject), ("CN=gateway-1,O=Shoal", gwSubject),
            ])
            let server = try Started(config, log: base.path + "/single.log")
            let url = ["tls://127.0.0.1:\(port)"]
            let admin = try NATSHubResult.run(["streams"], servers: url, connection: ["--ca", pki.caCert, "--cert", pki.clientCert, "--key", pki.clientKey], ns: nil, timeout: 60)
            #expect(admin.ok, "\(admin) \(server.text().suffix(2000))")
            let check = try NATSHubResult.run(["gateway-check", "--group", "C17B206CE9F6", "--collection", "sensors_2Estate"], servers: url,
                                              connection: ["--ca", pki.caCert, "--cert", gw.cert, "--key", gw.key], ns: nil, timeout: 120)
            #expect(check.ok && check.lines.last?["ok"] as? Bool == true, "gateway \(gwSubject): \(check) \(server.text().suffix(2000))")
            let steps = check.lines.last?["steps"] as? [String: String] ?? [:]
            #expect(steps["ordered consumer (CONSUMER.CREATE, heartbeats, flow control)"] == "ok" && steps["CONSUMER.DELETE (its own ordered consumer)"] == "ok")
            #expect(steps["STREAM.DELETE of its own stream (refused)"]?.hasPrefix("refused") == true)
            print("NATS config examples: single.conf \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        }

        @Test("cluster-node.conf ×3 form a JetStream cluster with an R3 stream; leaf-site.conf connects to it and a client of the leaf creates, writes and reads the hub's R3 stream through it with the hub's JetStream domain")
        func clusterAndLeaf() throws {
            guard NATSFixtureTests.requireNATSPy() else { return }
            let started = Date()
            let base = TemporaryDirectory()
            defer { base.remove() }
            let ports = try (0..<4).map { _ in (client: try Mosquitto.freePort(), http: try Mosquitto.freePort(), route: try Mosquitto.freePort(), leaf: try Mosquitto.freePort()) }
            var nodes: [Started] = []
            for i in 0..<3 {
                let config = try Self.prepare("cluster-node.conf", in: base.path, as: "hub-\(i + 1).conf", [
                    ("server_name: hub-1", "server_name: hub-\(i + 1)"),
                    ("0.0.0.0:4222", "127.0.0.1:\(ports[i].client)"), ("127.0.0.1:8222", "127.0.0.1:\(ports[i].http)"),
                    ("/var/lib/nats", base.path + "/store-\(i + 1)"), ("0.0.0.0:6222", "127.0.0.1:\(ports[i].route)"),
                    ("0.0.0.0:7422", "127.0.0.1:\(ports[i].leaf)"),
                    ("hub-1.example:6222", "127.0.0.1:\(ports[0].route)"), ("hub-2.example:6222", "127.0.0.1:\(ports[1].route)"),
                    ("hub-3.example:6222", "127.0.0.1:\(ports[2].route)"),
                ])
                nodes.append(try Started(config, log: base.path + "/hub-\(i + 1).log"))
            }
            #expect(eventuallyBlocking(within: 60, every: 0.2) { (0..<3).allSatisfy { Self.healthz(ports[$0].http) } },
                    "\(nodes.map { $0.text().suffix(1500) })")
            let leafConfig = try Self.prepare("leaf-site.conf", in: base.path, [
                ("0.0.0.0:4222", "127.0.0.1:\(ports[3].client)"), ("127.0.0.1:8222", "127.0.0.1:\(ports[3].http)"),
                ("hub-1.example:7422", "127.0.0.1:\(ports[0].leaf)"), ("hub-2.example:7422", "127.0.0.1:\(ports[1].leaf)"),
                ("hub-3.example:7422", "127.0.0.1:\(ports[2].leaf)"),
            ])
            let leaf = try Started(leafConfig, log: base.path + "/leaf.log")
            #expect(eventuallyBlocking(within: 60, every: 0.2) { leaf.text().contains("Leafnode connection created") }, "\(leaf.text().suffix(2000))")
            let viaLeaf: ([String]) throws -> NATSHubResult = {
                try NATSHubResult.run(["--domain", "hub"] + $0, servers: ["nats://127.0.0.1:\(ports[3].client)"], connection: [], ns: nil, timeout: 60)
            }
            // Without the domain, the leaf offers no JetStream API (see leaf-site.conf).
            let plain = try NATSHubResult.run(["--timeout", "3", "streams"], servers: ["nats://127.0.0.1:\(ports[3].client)"], connection: [], ns: nil, timeout: 60)
            #expect(!plain.ok, "\(plain)")
            var result: NATSHubResult?
            // Until the leaf's connection carries the hub's JetStream API.
            #expect(eventuallyBlocking(within: 60, every: 0.5) {
                result = try? viaLeaf(["--timeout", "5", "create", "SHOAL_C17B206CE9F6_sensors", "--subjects", "shoal.C17B206CE9F6.sensors.*", "--replicas", "3"])
                return result?.ok == true
            }, "\(String(describing: result)) \(leaf.text().suffix(1500))")
            #expect(result?.lines.last?["cluster"] as? String == "shoal-hub" && result?.lines.last?["replicas"] as? Int == 3, "\(String(describing: result))")
            let put = try viaLeaf(["put", "shoal.C17B206CE9F6.sensors.boiler-1", "--header", "Shoal-Version=01", "--payload", "{}", "--expect-seq", "0"])
            #expect(put.ok, "\(put)")
            let direct = try NATSHubResult.run(["dump", "SHOAL_C17B206CE9F6_sensors"], servers: ["nats://127.0.0.1:\(ports[1].client)"], connection: [], ns: nil, timeout: 60)
            #expect(direct.lines.count == 1 && direct.lines.first?["subject"] as? String == "shoal.C17B206CE9F6.sensors.boiler-1", "\(direct)")
            print("NATS config examples: cluster-node.conf ×3 + leaf-site.conf \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        }
    }
}
