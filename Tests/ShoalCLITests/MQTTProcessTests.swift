import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The MQTT bridge of a real `shoal run` against a real mosquitto (Mosquitto.swift) with real
    /// clients (mosquitto_pub/mosquitto_sub, paho): each inbound mode, text payloads, outbound with
    /// and without envelope, no loop back, TLS with the gateway's identity, bad input counted by
    /// reason, two gateways on two brokers through the mesh. The streams with a broker or gateway
    /// killed mid-way are `MQTTCrashTests`.
    @Suite("MQTT bridge processes", .serialized, .enabled(if: Mosquitto.available, "needs Debian's mosquitto and mosquitto-clients (make deps installs them)"))
    struct MQTTProcessTests {
        @Test("inbound modes: replace (with topic fields), merge, series with keep (time field and arrival keys), a Tasmota text payload, a wrapped JSON scalar, a retained message on connect")
        func inboundModes() throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let broker = try Mosquitto()
            defer { broker.remove() }
            // Retained before the gateway exists: it arrives on connect like any other message.
            #expect(try MQTTTools.publish(broker, topic: "sensors/west/boiler/state", message: #"{"on":true}"#, retain: true).status == 0)
            let site = base.path + "/site.yaml"
            try MQTTSiteFile.write(site, collections: ["sensors.state", "sensors.meta", "sensors.readings", "sensors.arrivals", "tasmota.power", "sensors.temp"], brokers: [
                .init(url: broker.url, clientID: "shoal-modes", inbound: [
                    #"{ topic: "sensors/+site/+device/state", collection: sensors.state, id: "{site}-{device}", topicFields: true }"#,
                    #"{ topic: "meta/+device", collection: sensors.meta, id: "{device}", mode: merge }"#,
                    #"{ topic: "readings/+device", collection: sensors.readings, id: "{device}", mode: series, timeField: ts, keep: 5 }"#,
                    #"{ topic: "arrivals/+device", collection: sensors.arrivals, id: "{device}", mode: series }"#,
                    #"{ topic: "stat/+device/POWER", collection: tasmota.power, id: "{device}", payload: text }"#,
                    #"{ topic: "temp/+device", collection: sensors.temp, id: "{device}" }"#,
                ]),
            ])
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(broker.waitForSubscription(clientID: "shoal-modes", filter: "stat/+/POWER"), "\(broker.diagnostics()) gateway: \(g.log().suffix(2000))")

            // Retained on connect, with the topic's fields (topicFields: true).
            #expect(eventuallyBlocking(within: 20) { g.body("sensors.state", "west-boiler").map { NSDictionary(dictionary: $0) } == ["on": true, "site": "west", "device": "boiler"] },
                    "west-boiler: \(String(describing: g.body("sensors.state", "west-boiler"))) \(g.log().suffix(2000))")

            // replace: the message is the document.
            try MQTTTools.publish(broker, topic: "sensors/east/pump1/state", message: #"{"p":1,"extra":"x"}"#)
            try MQTTTools.publish(broker, topic: "sensors/east/pump1/state", message: #"{"p":2}"#)
            #expect(eventuallyBlocking(within: 20) { g.document("sensors.state", "east-pump1")?["revision"] as? Int == 2 })
            #expect(g.body("sensors.state", "east-pump1").map { NSDictionary(dictionary: $0) } == ["p": 2, "site": "east", "device": "pump1"])

            // merge: top-level fields into the existing document.
            try MQTTTools.publish(broker, topic: "meta/pump1", message: #"{"a":1,"b":{"x":1}}"#)
            try MQTTTools.publish(broker, topic: "meta/pump1", message: #"{"b":{"y":2},"c":3}"#)
            #expect(eventuallyBlocking(within: 20) { g.document("sensors.meta", "pump1")?["revision"] as? Int == 2 })
            #expect(g.body("sensors.meta", "pump1").map { NSDictionary(dictionary: $0) } == ["a": 1, "b": ["y": 2], "c": 3])

            // series keyed by the time field, 5 kept: the oldest are deleted.
            for ts in 1...8 { try MQTTTools.publish(broker, topic: "readings/pump1", message: #"{"ts":\#(ts),"v":\#(ts * 10)}"#) }
            var live: [String] = []
            #expect(eventuallyBlocking(within: 30) {
                live = ((try? g.documents("sensors.readings")) ?? [:]).filter { ($0.value["deleted"] as? Bool) != true }.keys.sorted()
                return live == (4...8).map { "pump1@\($0)" }
            }, "series live: \(live)")
            #expect(g.body("sensors.readings", "pump1@8").map { NSDictionary(dictionary: $0) } == ["ts": 8, "v": 80])
            // The same message again keys the same document and writes nothing.
            let unchangedBefore = g.counter("in.unchanged")
            try MQTTTools.publish(broker, topic: "readings/pump1", message: #"{"ts":8,"v":80}"#)
            #expect(eventuallyBlocking(within: 20) { g.counter("in.unchanged") == unchangedBefore + 1 })
            #expect(g.document("sensors.readings", "pump1@8")?["revision"] as? Int == 1)
            #expect(g.counter("in.expired") >= 3, "\(String(describing: g.mqttStatus()))")

            // series without a time field: arrival keys (13 digits of millis, 3 of a counter), one
            // document per message even with the same body.
            for _ in 1...3 { try MQTTTools.publish(broker, topic: "arrivals/pump2", message: #"{"v":1}"#) }
            var arrivals: [String] = []
            #expect(eventuallyBlocking(within: 20) { arrivals = ((try? g.documents("sensors.arrivals")) ?? [:]).keys.sorted(); return arrivals.count == 3 }, "\(arrivals)")
            #expect(arrivals.allSatisfy { $0.hasPrefix("pump2@") && $0.dropFirst(6).count == 16 && $0.dropFirst(6).allSatisfy(\.isNumber) }, "\(arrivals)")

            // Tasmota: stat/<device>/POWER with ON/OFF text.
            try MQTTTools.publish(broker, topic: "stat/plug1/POWER", message: "ON")
            try MQTTTools.publish(broker, topic: "stat/plug1/POWER", message: "OFF")
            #expect(eventuallyBlocking(within: 20) { g.body("tasmota.power", "plug1").map { NSDictionary(dictionary: $0) } == ["value": "OFF", "device": "plug1"] },
                    "\(String(describing: g.body("tasmota.power", "plug1")))")

            // A JSON scalar is wrapped, with the topic's fields.
            try MQTTTools.publish(broker, topic: "temp/t1", message: "21.5")
            #expect(eventuallyBlocking(within: 20) { g.body("sensors.temp", "t1").map { NSDictionary(dictionary: $0) } == ["value": 21.5, "device": "t1"] },
                    "\(String(describing: g.body("sensors.temp", "t1")))")

            let status = try #require(g.mqttStatus(), "shoal mqtt status --json")
            #expect(status["state"] as? String == "connected" && status["connects"] as? Int == 1, "\(status)")
            #expect(((status["in"] as? [String: Any])?["dropped"] as? [String: Any])?.isEmpty == true, "\(status)")
            #expect(g.counter("in.received") == 1 + 2 + 2 + 9 + 3 + 2 + 1, "\(status)")
            #expect((status["subscriptions"] as? [String])?.count == 6, "\(status)")
            // The same in `shoal status --json` and the human form.
            let overall = try Shoal.json(g.cli(["status", "--json"])) as? [String: Any]
            #expect(((overall?["mqtt"] as? [String: Any])?["brokers"] as? [[String: Any]])?.first?["name"] as? String == "local")
            let text = try g.cli(["mqtt", "status"]).stdout
            #expect(text.contains("state          connected") && text.contains("dropped        none"), "\(text)")
            // A connect event.
            let events = try g.cli(["events", "--json"]).stdout
            #expect(events.contains(#""type":"mqtt""#) || events.contains(#""type": "mqtt""#), "\(events.suffix(1500))")
            #expect(g.stop() == 0, "\(g.log().suffix(2000))")
        }

        @Test("outbound: a local change goes out as the body and as an envelope, a deletion as an empty payload and deleted:true; a change from the broker is not sent back to its topic, an echo of our own writes nothing; after a broker outage and a gateway restart the changes made meanwhile go out")
        func outbound() throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let broker = try Mosquitto()
            defer { broker.remove() }
            let site = base.path + "/site.yaml"
            try MQTTSiteFile.write(site, collections: ["sensors.cmd", "sensors.state"], brokers: [
                .init(url: broker.url, clientID: "shoal-out", inbound: [
                    #"{ topic: "shoal/sensors.state/+id", collection: sensors.state, id: "{id}" }"#,
                ], outbound: [
                    #"{ collection: sensors.cmd, topic: "out/plain/{id}" }"#,
                    #"{ collection: sensors.cmd, topic: "out/env/{collection}/{id}", envelope: true }"#,
                    #"{ collection: sensors.state, topic: "shoal/{collection}/{id}" }"#,
                ]),
            ])
            let dataDir = base.path + "/gw"
            let peer = try ReplicationProcessTests.peerID(dataDir)
            let g = try MQTTGateway(dataDir: dataDir, site: site)
            defer { g.kill() }
            #expect(broker.waitForSubscription(clientID: "shoal-out", filter: "shoal/sensors.state/+"), "\(broker.diagnostics())")
            let out = try MQTTTools.subscribe(broker, filter: "out/#", count: 4, id: "out-sub", timeout: 40)
            let echo = try MQTTTools.subscribe(broker, filter: "shoal/#", count: 100, id: "echo-sub", timeout: 40)
            #expect(broker.waitForSubscription(clientID: "out-sub", filter: "out/#") && broker.waitForSubscription(clientID: "echo-sub", filter: "shoal/#"))

            #expect(try g.cli(["doc", "put", "sensors.cmd", "valve1", #"{"open":true}"#]).status == 0)
            #expect(eventuallyBlocking(within: 20) { out.messages().count >= 2 }, "out/#: \(out.output())")
            #expect(try g.cli(["doc", "delete", "sensors.cmd", "valve1"]).status == 0)
            out.wait(timeout: 30)
            let got = out.messages()
            #expect(got.filter { $0.topic == "out/plain/valve1" }.map(\.payload) == [#"{"open":true}"#, "(null)"], "out/#: \(out.output())")
            let envelopes = got.filter { $0.topic == "out/env/sensors.cmd/valve1" }.compactMap { try? JSONSerialization.jsonObject(with: Data($0.payload.utf8)) as? [String: Any] }
            #expect(envelopes.count == 2, "out/#: \(out.output())")
            if envelopes.count == 2 {
                #expect(envelopes[0]["id"] as? String == "valve1" && envelopes[0]["revision"] as? Int == 1 && envelopes[0]["deleted"] as? Bool == false, "\(envelopes[0])")
                #expect(envelopes[0]["origin"] as? String == peer, "the origin is the gateway's peer id \(peer): \(envelopes[0])")
                #expect((envelopes[0]["body"] as? [String: Any])?["open"] as? Bool == true, "\(envelopes[0])")
                #expect(envelopes[1]["deleted"] as? Bool == true && envelopes[1]["revision"] as? Int == 2, "\(envelopes[1])")
            }

            // From the broker on shoal/sensors.state/b1: written, not published back to that topic.
            try MQTTTools.publish(broker, topic: "shoal/sensors.state/b1", message: #"{"v":1}"#)
            #expect(eventuallyBlocking(within: 20) { g.counter("out.skippedLoops") >= 1 }, "\(String(describing: g.mqttStatus()))")
            // A local change goes out once; its echo from the broker changes nothing.
            #expect(try g.cli(["doc", "put", "sensors.state", "local1", #"{"v":2}"#]).status == 0)
            #expect(eventuallyBlocking(within: 20) { g.counter("in.unchanged") >= 1 }, "the echo of local1: \(String(describing: g.mqttStatus()))")
            Thread.sleep(forTimeInterval: 1.5)  // anything that would loop has had time to
            let echoed = echo.messages()
            #expect(echoed.filter { $0.topic == "shoal/sensors.state/b1" }.count == 1, "shoal/#: \(echo.output())")
            #expect(echoed.filter { $0.topic == "shoal/sensors.state/local1" }.map(\.payload) == [#"{"v":2}"#], "shoal/#: \(echo.output())")
            #expect(g.document("sensors.state", "b1")?["revision"] as? Int == 1 && g.document("sensors.state", "local1")?["revision"] as? Int == 1)
            echo.stop()

            // A broker outage, and the gateway restarted during it: the changes made meanwhile go
            // out from the durable checkpoint once the broker is back.
            let resumed = try MQTTTools.python("subscribe.py", ["--port", String(broker.port), "--topic", "out/plain/#", "--count", "5", "--timeout", "60",
                                                                "--client-id", "resume-sub", "--no-clean", "--collect", "--ready-file", base.path + "/ready"])
            #expect(eventuallyBlocking(within: 20) { FileManager.default.fileExists(atPath: base.path + "/ready") }, "\(resumed.output())")
            broker.stop()
            #expect(eventuallyBlocking(within: 20) { g.state() != "connected" }, "\(String(describing: g.mqttStatus()))")
            for i in 1...3 { #expect(try g.cli(["doc", "put", "sensors.cmd", "later\(i)", #"{"n":\#(i)}"#]).status == 0) }
            #expect(g.stop() == 0)
            try broker.start()
            try g.start()
            for i in 4...5 { #expect(try g.cli(["doc", "put", "sensors.cmd", "later\(i)", #"{"n":\#(i)}"#]).status == 0) }
            let r = resumed.json(timeout: 60)
            let topics = ((r?["messages"] as? [[String: Any]]) ?? []).compactMap { $0["topic"] as? String }
            #expect(Set(topics) == Set((1...5).map { "out/plain/later\($0)" }), "subscribe.py: \(resumed.output().suffix(2000)) gateway: \(g.log().suffix(2000))")
            #expect(g.stop() == 0)
        }

        @Test("TLS with client certificates: gateways present their own identity files (self-signed, and signed by the broker's CA) over mqtts://; a wrong CA file or an identity the broker does not trust keeps the bridge disconnected and the gateway up")
        func tlsIdentity() throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let selfDir = base.path + "/self", signedDir = base.path + "/signed", strangerDir = base.path + "/stranger", wrongCADir = base.path + "/wrongca"
            _ = try ReplicationProcessTests.peerID(selfDir)
            _ = try ReplicationProcessTests.peerID(strangerDir)
            _ = try ReplicationProcessTests.peerID(wrongCADir)
            let broker = try Mosquitto(.init(tls: true, clientTrust: [TestPKI.identityFiles(dataDir: selfDir).cert, TestPKI.identityFiles(dataDir: wrongCADir).cert]))
            defer { broker.remove() }
            let pki = try #require(broker.pki)
            _ = try pki.signedIdentity(dataDir: signedDir)
            let tlsURL = try #require(broker.tlsURL)
            func site(_ name: String, caFile: String) throws -> String {
                let path = base.path + "/\(name).yaml"
                try MQTTSiteFile.write(path, collections: ["sensors.tls"], brokers: [
                    .init(url: tlsURL, clientID: "shoal-\(name)", inbound: [#"{ topic: "tls/+device", collection: sensors.tls, id: "{device}" }"#],
                          more: ["tls: { caFile: \(caFile), identity: true }"]),
                ])
                return path
            }
            let selfSigned = try MQTTGateway(dataDir: selfDir, site: try site("self", caFile: pki.caCert))
            defer { selfSigned.kill() }
            let signed = try MQTTGateway(dataDir: signedDir, site: try site("signed", caFile: pki.caCert))
            defer { signed.kill() }
            for id in ["shoal-self", "shoal-signed"] {
                #expect(broker.waitForSubscription(clientID: id, filter: "tls/+"), "\(id): \(broker.diagnostics())")
            }
            try MQTTTools.publish(broker, topic: "tls/pump1", message: #"{"p":1}"#)  // on the plain listener
            for g in [selfSigned, signed] {
                #expect(eventuallyBlocking(within: 20) { g.body("sensors.tls", "pump1")?["p"] as? Int == 1 }, "\(g.dataDir): \(String(describing: g.mqttStatus())) \(g.log().suffix(1500))")
                #expect((g.mqttStatus()?["url"] as? String)?.hasPrefix("mqtts://") == true)
            }

            // The broker's certificate checked against a CA that did not sign it; an identity the
            // broker does not trust. Neither connects; both gateways stay up and say why.
            let wrongCA = try MQTTGateway(dataDir: wrongCADir, site: try site("wrongca", caFile: TestPKI.identityFiles(dataDir: strangerDir).cert))
            defer { wrongCA.kill() }
            let stranger = try MQTTGateway(dataDir: strangerDir, site: try site("stranger", caFile: pki.caCert))
            defer { stranger.kill() }
            for g in [wrongCA, stranger] {
                var status: [String: Any]?
                #expect(eventuallyBlocking(within: 20) { status = g.mqttStatus(); return status?["lastError"] is String && (status?["connects"] as? Int ?? 0) == 0 },
                        "\(g.dataDir): \(String(describing: status))")
                #expect(status?["state"] as? String != "connected", "\(String(describing: status))")
                print("TLS refused (\(g.dataDir.split(separator: "/").last!)): \(status?["lastError"] ?? "-")")
                #expect(try g.cli(["status"]).status == 0)
            }
            #expect(!broker.hasSubscription(clientID: "shoal-wrongca", filter: "tls/+") && !broker.hasSubscription(clientID: "shoal-stranger", filter: "tls/+"))
            for g in [selfSigned, signed, wrongCA, stranger] { #expect(g.stop() == 0, "\(g.log().suffix(1500))") }
        }

        @Test("bad input: non-JSON, invalid UTF-8, oversize (parsed and unread), a topic that makes a bad id, a bad time field — counted by reason in `shoal mqtt status --json`, logged once per rule per minute, nothing written; the bridge and gateway stay up and take the next good message")
        func badInput() throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let broker = try Mosquitto()
            defer { broker.remove() }
            let site = base.path + "/site.yaml"
            try MQTTSiteFile.write(site, collections: ["sensors.bad", "sensors.series"], brokers: [
                .init(url: broker.url, clientID: "shoal-bad", inbound: [
                    #"{ topic: "bad/+device", collection: sensors.bad, id: "{device}" }"#,
                    #"{ topic: "badtime/+device", collection: sensors.series, id: "{device}", mode: series, timeField: ts }"#,
                ]),
            ])
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(broker.waitForSubscription(clientID: "shoal-bad", filter: "bad/+"), "\(broker.diagnostics())")
            let port = String(broker.port)
            try MQTTTools.publish(broker, topic: "bad/d1", message: "not json{")
            let notUTF8 = try MQTTTools.pythonRun("publish.py", ["--port", port, "--topic", "bad/d2", "--payload-hex", "7b2276223a22c328ff227d"])  // {"v":"\xc3\x28\xff"}
            #expect(notUTF8.status == 0, "\(notUTF8.output)")
            // 1.2 MB: parsed, over the 1 MiB body limit; 5 MB: over 4× the limit, not even parsed.
            for size in [1_200_000, 5_000_000] {
                let r = try MQTTTools.pythonRun("publish.py", ["--port", port, "--topic", "bad/d3", "--payload", #"{"v":"{pad:\#(size)}"}"#])
                #expect(r.status == 0, "\(r.output)")
            }
            try MQTTTools.publish(broker, topic: "bad/" + String(repeating: "x", count: 300), message: #"{"v":1}"#)  // a 300-byte id
            try MQTTTools.publish(broker, topic: "badtime/d5", message: #"{"ts":true,"v":1}"#)
            try MQTTTools.publish(broker, topic: "bad/good", message: #"{"v":"after"}"#)
            #expect(eventuallyBlocking(within: 30) { g.body("sensors.bad", "good")?["v"] as? String == "after" }, "\(String(describing: g.mqttStatus())) \(g.log().suffix(2000))")
            let status = try #require(g.mqttStatus())
            let dropped = ((status["in"] as? [String: Any])?["dropped"] as? [String: Int]) ?? [:]
            #expect(dropped == ["not_json": 1, "not_utf8": 1, "too_large": 2, "bad_id": 1, "bad_time": 1], "dropped: \(dropped)")
            #expect(status["state"] as? String == "connected" && status["connects"] as? Int == 1 && status["disconnects"] as? Int == 0, "\(status)")
            #expect(g.counter("in.received") == 7 && g.counter("in.committed") == 1, "\(status)")
            #expect(try g.documents("sensors.bad").keys.sorted() == ["good"])
            #expect(try g.documents("sensors.series").isEmpty)
            #expect(try g.cli(["status"]).status == 0)
            // The human form names each reason.
            let text = try g.cli(["mqtt", "status"]).stdout
            #expect(text.contains("bad_id 1") && text.contains("too_large 2"), "\(text)")
            // Logged once per rule per minute: rule 1 dropped five messages, rule 2 one.
            let log = g.log()
            let warnings = log.split(separator: "\n").filter { $0.contains("dropped a message") }
            #expect(warnings.filter { $0.contains("inbound rule 1") }.count == 1 && warnings.filter { $0.contains("inbound rule 2") }.count == 1,
                    "\(warnings.joined(separator: "\n"))")
            #expect(g.stop() == 0)
        }

        @Test("two gateways on two brokers, replicating over static peers: a message published on A's broker shows up on B's broker once, and on A's once; the echoes write nothing")
        func twoGatewaysTwoBrokers() throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let brokerA = try Mosquitto(), brokerB = try Mosquitto()
            defer { brokerA.remove(); brokerB.remove() }
            let aDir = base.path + "/a", bDir = base.path + "/b"
            let aID = try ReplicationProcessTests.peerID(aDir), bID = try ReplicationProcessTests.peerID(bDir)
            let port = try Mosquitto.freePort()
            func site(_ name: String, broker: Mosquitto, allow: String, replication: String) throws -> String {
                let path = base.path + "/\(name).yaml"
                try MQTTSiteFile.write(path, group: "test.mqtt-mesh", collections: ["sensors.state"], brokers: [
                    .init(url: broker.url, clientID: "shoal-\(name)", inbound: [
                        #"{ topic: "sensors/+site/+device/state", collection: sensors.state, id: "{site}-{device}" }"#,
                        #"{ topic: "shoal/sensors.state/+id", collection: sensors.state, id: "{id}" }"#,
                    ], outbound: [#"{ collection: sensors.state, topic: "shoal/{collection}/{id}" }"#]),
                ], extra: "authenticator:\n  allowedPeers: [\(allow)]\nreplication:\n  \(replication)\n")
                return path
            }
            let b = try MQTTGateway(dataDir: bDir, site: try site("b", broker: brokerB, allow: aID, replication: "listen: 127.0.0.1:\(port)"))
            defer { b.kill() }
            let a = try MQTTGateway(dataDir: aDir, site: try site("a", broker: brokerA, allow: bID, replication: "peers: [127.0.0.1:\(port)]"))
            defer { a.kill() }
            #expect(brokerA.waitForSubscription(clientID: "shoal-a", filter: "shoal/sensors.state/+") && brokerB.waitForSubscription(clientID: "shoal-b", filter: "shoal/sensors.state/+"))
            let onA = try MQTTTools.subscribe(brokerA, filter: "shoal/#", count: 100, id: "watch-a", timeout: 60)
            let onB = try MQTTTools.subscribe(brokerB, filter: "shoal/#", count: 100, id: "watch-b", timeout: 60)
            #expect(brokerA.waitForSubscription(clientID: "watch-a", filter: "shoal/#") && brokerB.waitForSubscription(clientID: "watch-b", filter: "shoal/#"))

            try MQTTTools.publish(brokerA, topic: "sensors/east/pump7/state", message: #"{"pressure":2.7}"#)
            #expect(eventuallyBlocking(within: 45) { onB.messages().contains { $0.topic == "shoal/sensors.state/east-pump7" } },
                    "B's broker: \(onB.output()) a: \(String(describing: a.mqttStatus())) b: \(String(describing: b.mqttStatus())) \(b.log().suffix(1500))")
            Thread.sleep(forTimeInterval: 3)  // a loop would have published again by now
            #expect(onB.messages().filter { $0.topic == "shoal/sensors.state/east-pump7" }.map(\.payload) == [#"{"pressure":2.7}"#], "B's broker: \(onB.output())")
            #expect(onA.messages().filter { $0.topic == "shoal/sensors.state/east-pump7" }.count == 1, "A's broker: \(onA.output())")
            for g in [a, b] {
                #expect(g.document("sensors.state", "east-pump7")?["revision"] as? Int == 1, "\(g.dataDir): \(String(describing: g.document("sensors.state", "east-pump7")))")
                #expect(g.counter("out.published") == 1, "\(String(describing: g.mqttStatus()))")
            }
            #expect(b.counter("in.unchanged") >= 1, "b's echo from its broker: \(String(describing: b.mqttStatus()))")
            onA.stop()
            onB.stop()
            #expect(a.stop() == 0 && b.stop() == 0)
        }
    }
}
