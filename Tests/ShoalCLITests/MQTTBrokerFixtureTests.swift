import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The MQTT tests' own harness, proven before the bridge's tests lean on it: a real mosquitto
    /// on a loopback port of its own (Mosquitto.swift), Debian's mosquitto_pub/mosquitto_sub and
    /// the paho scripts in Tests/MQTT/ through it, a persistent session's queued QoS 1 messages
    /// across a broker restart (SIGTERM and SIGKILL), and TLS with client certificates — the test
    /// CA's, and a gateway's own identity files as `shoal identity create` writes them.
    @Suite("MQTT broker fixture", .serialized, .enabled(if: Mosquitto.available, "needs Debian's mosquitto and mosquitto-clients (make deps installs them)"))
    struct MQTTBrokerFixtureTests {
        @Test("mosquitto_pub → mosquitto_sub through the test broker; publish.py → subscribe.py (paho), 5,000 QoS 1 messages, each counted once")
        func pubSub() throws {
            let broker = try Mosquitto()
            defer { broker.remove() }
            #expect(broker.port != 1883)
            let sub = try MQTTTools.subscribe(broker, filter: "fixture/#", count: 3, id: "fixture-sub")
            #expect(broker.waitForSubscription(clientID: "fixture-sub", filter: "fixture/#"), "\(broker.diagnostics())")
            for i in 1...3 {
                let r = try MQTTTools.publish(broker, topic: "fixture/dev\(i)", message: #"{"n":\#(i)}"#)
                #expect(r.status == 0, "mosquitto_pub: \(r.output)")
            }
            let (status, _) = sub.wait(timeout: 30)
            let got = sub.messages()
            #expect(status == 0, "mosquitto_sub: \(sub.output())")
            #expect(got.map(\.topic) == ["fixture/dev1", "fixture/dev2", "fixture/dev3"] && got.map(\.payload) == [#"{"n":1}"#, #"{"n":2}"#, #"{"n":3}"#], "\(got)")

            guard MQTTTools.pahoAvailable else {
                Issue.record("python3 cannot import paho.mqtt: `make deps` installs Tests/MQTT/requirements.txt")
                return
            }
            let ready = broker.dir.path + "/subscribe.ready"
            let paho = try MQTTTools.python("subscribe.py", ["--port", String(broker.port), "--topic", "bench/#", "--count", "5000", "--timeout", "90",
                                                             "--ready-file", ready])
            #expect(eventuallyBlocking(within: 20, every: 0.05) { FileManager.default.fileExists(atPath: ready) }, "subscribe.py: \(paho.output())")
            let published = try MQTTTools.pythonRun("publish.py", ["--port", String(broker.port), "--topic", "bench/dev{i%10}", "--count", "5000",
                                                                   "--payload", #"{"seq":{i},"t":21.5}"#])
            #expect(published.status == 0 && published.json?["acknowledged"] as? Int == 5000, "publish.py: \(published.output)")
            let received = paho.json(timeout: 90)
            #expect(received?["received"] as? Int == 5000 && received?["duplicates"] as? Int == 0, "subscribe.py: \(paho.output().prefix(2000))")
            #expect((received?["topics"] as? [String: Int])?.count == 10)
            print("fixture: publish.py \(published.json?["messagesPerSecond"] ?? "?") msg/s, subscribe.py \(received?["messagesPerSecond"] ?? "?") msg/s")
        }

        @Test("a persistent session's queued QoS 1 messages survive a broker restart after SIGTERM, and after SIGKILL with saveEveryChange; a retained message too")
        func persistence() throws {
            for hard in [false, true] {
                let broker = try Mosquitto(.init(saveEveryChange: hard))
                defer { broker.remove() }
                // Subscribe once with a persistent session, then go away (-E: exit once subscribed).
                let first = try MQTTTools.run([MQTTTools.sub, "-h", "127.0.0.1", "-p", String(broker.port), "-t", "fixture/persist/#", "-q", "1",
                                               "-c", "-i", "persist-sub", "-E"], timeout: 20)
                #expect(first.status == 0, "mosquitto_sub -E: \(first.output)")
                for i in 1...3 { #expect(try MQTTTools.publish(broker, topic: "fixture/persist/\(i)", message: "m\(i)").status == 0) }
                #expect(try MQTTTools.publish(broker, topic: "fixture/retained", message: "kept", retain: true).status == 0)
                if hard { Thread.sleep(forTimeInterval: 0.5) }  // the broker's next loop saves
                try broker.restart(hard: hard)
                #expect(broker.starts == 2)
                let back = try MQTTTools.run([MQTTTools.sub, "-h", "127.0.0.1", "-p", String(broker.port), "-t", "fixture/persist/#", "-q", "1",
                                              "-c", "-i", "persist-sub", "-v", "-C", "3", "-W", "10"], timeout: 20)
                #expect(back.status == 0 && back.output == "fixture/persist/1 m1\nfixture/persist/2 m2\nfixture/persist/3 m3\n",
                        "after \(hard ? "SIGKILL" : "SIGTERM"): \(back.output) \(broker.diagnostics())")
                let retained = try MQTTTools.run([MQTTTools.sub, "-h", "127.0.0.1", "-p", String(broker.port), "-t", "fixture/retained", "-C", "1", "-W", "10"], timeout: 20)
                #expect(retained.output == "kept\n", "\(retained)")
                #expect(broker.connections(of: "persist-sub") == 2)
            }
        }

        @Test("TLS with a required client certificate: the test CA's client, a gateway's self-signed identity (trusted as itself) and a CA-signed one connect; no certificate, an untrusted one or the wrong CA is refused")
        func tlsClientCertificates() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            // A gateway's identity as `shoal identity create` makes it (self-signed by default).
            let selfSignedDir = base.path + "/gw-self", strangerDir = base.path + "/gw-stranger"
            _ = try ReplicationProcessTests.peerID(selfSignedDir)
            _ = try ReplicationProcessTests.peerID(strangerDir)
            let selfSigned = TestPKI.identityFiles(dataDir: selfSignedDir)
            let broker = try Mosquitto(.init(tls: true, clientTrust: [selfSigned.cert]))
            defer { broker.remove() }
            let pki = try #require(broker.pki)
            let signedDir = base.path + "/gw-signed"
            _ = try pki.signedIdentity(dataDir: signedDir)
            let signed = TestPKI.identityFiles(dataDir: signedDir)
            #expect(try String(contentsOfFile: signed.cert, encoding: .utf8).components(separatedBy: "BEGIN CERTIFICATE").count - 1 >= 1)

            let sub = try MQTTTools.subscribe(broker, filter: "tls/#", count: 3, id: "tls-sub")  // on the plain listener
            #expect(broker.waitForSubscription(clientID: "tls-sub", filter: "tls/#"), "\(broker.diagnostics())")
            let withClient = try MQTTTools.publish(broker, topic: "tls/client", message: "by the test client", tls: true)
            #expect(withClient.status == 0, "mosquitto_pub --cert client.crt: \(withClient.output)")
            let withSelfSigned = try MQTTTools.publish(broker, topic: "tls/self", message: "by a self-signed gateway identity", tls: true,
                                                       cert: selfSigned.cert, key: selfSigned.key)
            #expect(withSelfSigned.status == 0, "mosquitto_pub --cert \(selfSigned.cert): \(withSelfSigned.output) \(broker.diagnostics())")
            let withSigned = try MQTTTools.publish(broker, topic: "tls/signed", message: "by a CA-signed gateway identity", tls: true,
                                                   cert: signed.cert, key: signed.key)
            #expect(withSigned.status == 0, "mosquitto_pub --cert \(signed.cert): \(withSigned.output) \(broker.diagnostics())")
            sub.wait(timeout: 30)
            #expect(sub.messages().map(\.topic) == ["tls/client", "tls/self", "tls/signed"], "\(sub.output())")

            // Refused: no client certificate; a gateway identity the broker does not trust; a
            // client that does not trust the broker's CA (the stranger's certificate as its CA).
            let tlsPort = String(try #require(broker.tlsPort))
            let noCert = try MQTTTools.run([MQTTTools.pub, "-h", "127.0.0.1", "-p", tlsPort, "--cafile", pki.caCert, "-t", "tls/x", "-m", "x"], timeout: 20)
            #expect(noCert.status != 0, "\(noCert)")
            let stranger = TestPKI.identityFiles(dataDir: strangerDir)
            let untrusted = try MQTTTools.publish(broker, topic: "tls/x", message: "x", tls: true, cert: stranger.cert, key: stranger.key)
            #expect(untrusted.status != 0, "\(untrusted)")
            let wrongCA = try MQTTTools.run([MQTTTools.pub, "-h", "127.0.0.1", "-p", tlsPort, "--cafile", stranger.cert, "--cert", pki.clientCert,
                                             "--key", pki.clientKey, "-t", "tls/x", "-m", "x"], timeout: 20)
            #expect(wrongCA.status != 0, "\(wrongCA)")
            #expect(broker.isRunning)
        }
    }
}
