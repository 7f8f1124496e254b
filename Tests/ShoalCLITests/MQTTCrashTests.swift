import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The MQTT bridge's promise under faults, with a paho publisher streaming QoS 1 messages
    /// (Tests/MQTT/publish.py) into a real mosquitto and a real `shoal run` taking them:
    /// - the broker stopped or killed and restarted mid-stream: no message the gateway acknowledged
    ///   is lost, none is written twice;
    /// - the gateway SIGKILLed mid-stream: every message the broker saw acknowledged is in the
    ///   store after the restart, and the rest arrive after it.
    /// Which messages the gateway acknowledged is read from the broker's own log (`logAll`: its
    /// "Sending PUBLISH" and "Received PUBACK" lines). Each message has a topic and document of its
    /// own (`stream/dev<k>/<seq>` → `dev<k>-<seq>`), so a redelivery lands on the same document:
    /// revision 1 everywhere means nothing was written twice.
    @Suite("MQTT bridge under faults", .serialized, .enabled(if: Mosquitto.available, "needs Debian's mosquitto and mosquitto-clients (make deps installs them)"))
    struct MQTTCrashTests {
        static let collection = "stream.data"

        static func writeSite(_ path: String, broker: Mosquitto, clientID: String, bridge: Bool = true) throws {
            try MQTTSiteFile.write(path, collections: [collection], brokers: bridge ? [
                .init(url: broker.url, clientID: clientID, inbound: [#"{ topic: "stream/+device/+seq", collection: stream.data, id: "{device}-{seq}" }"#]),
            ] : [])
        }

        /// The document id of a `stream/<device>/<seq>` topic.
        static func id(ofTopic topic: String) -> String {
            let parts = topic.split(separator: "/")
            return parts.count == 3 ? "\(parts[1])-\(parts[2])" : topic
        }

        static func id(ofSeq seq: Int) -> String { "dev\(seq % 10)-\(seq)" }

        /// publish.py streaming `count` messages (`rate` per second, 0: full speed) with a
        /// persistent session, writing the sequence numbers the broker acknowledged to `acked`.
        static func publisher(_ broker: Mosquitto, count: Int, rate: Int, acked: String) throws -> MQTTTools.Background {
            try MQTTTools.python("publish.py", ["--port", String(broker.port), "--topic", "stream/dev{i%10}/{i}", "--payload", #"{"seq":{i},"t":21.5}"#,
                                                "--count", String(count), "--rate", String(rate), "--client-id", "stream-pub", "--no-clean",
                                                "--timeout", "240", "--acked-file", acked])
        }

        static func ackedSeqs(_ path: String) -> Set<Int> {
            Set(((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { Int($0) })
        }

        /// The broker restarted twice mid-stream: `hard` SIGKILLs it (with `saveEveryChange`, so it
        /// keeps what it acknowledged), else SIGTERM (it saves, then exits).
        func brokerRestarts(hard: Bool, count: Int, rate: Int) throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let broker = try Mosquitto(.init(saveEveryChange: hard, logAll: true))
            defer { broker.remove() }
            let site = base.path + "/site.yaml"
            try Self.writeSite(site, broker: broker, clientID: "shoal-stream")
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(broker.waitForSubscription(clientID: "shoal-stream", filter: "stream/+/+"), "\(broker.diagnostics())")
            let ackedFile = base.path + "/acked"
            let publisher = try Self.publisher(broker, count: count, rate: rate, acked: ackedFile)
            for fraction in [3, 3 * 2] {  // at a third and at two thirds of the stream
                let mark = count * fraction / 9
                #expect(eventuallyBlocking(within: 120, every: 0.02) { g.counter("in.committed") >= mark }, "committed \(g.counter("in.committed")) of \(mark): \(g.log().suffix(1500))")
                let committed = g.counter("in.committed")
                try broker.restart(hard: hard, pause: 1)
                print("MQTT broker \(hard ? "SIGKILL" : "SIGTERM")ed and restarted after \(committed) committed")
            }
            let published = publisher.json(timeout: 240)
            #expect(publisher.wait(timeout: 0).status == 0, "publish.py: \(publisher.output().suffix(1500))")
            let ackedByBroker = Self.ackedSeqs(ackedFile)
            // Everything the broker still holds reaches the gateway: wait until it is quiet.
            var docs: [String: [String: Any]] = [:]
            var stable = 0
            _ = eventuallyBlocking(within: 120, every: 1) {
                let now = (try? g.documents(Self.collection)) ?? docs
                stable = now.count == docs.count ? stable + 1 : 0
                docs = now
                return docs.count == count || stable >= 5
            }
            let gatewayAcked = broker.acknowledgedTopics(by: "shoal-stream").map(Self.id(ofTopic:))
            let lostAcked = Set(gatewayAcked).filter { docs[$0] == nil }
            let lostAckedNone = lostAcked.isEmpty  // a Bool: #expect would print the whole collection
            #expect(lostAckedNone, "acknowledged by the gateway but not in its store: \(lostAcked.sorted().prefix(20)) (\(lostAcked.count))")
            let twice = docs.filter { ($0.value["revision"] as? Int) != 1 }
            let twiceNone = twice.isEmpty  // a Bool: #expect would print the whole collection
            #expect(twiceNone, "written more than once: \(twice.keys.sorted().prefix(20))")
            let strangers = Set(docs.keys).subtracting((0..<count).map(Self.id(ofSeq:)))
            let strangersNone = strangers.isEmpty  // a Bool: #expect would print the whole collection
            #expect(strangersNone, "documents no message made: \(strangers.sorted().prefix(20))")
            let missingAcked = ackedByBroker.filter { docs[Self.id(ofSeq: $0)] == nil }
            let neverSent = missingAcked.filter { seq in !broker.log().contains("'stream/dev\(seq % 10)/\(seq)'") }
            if hard {
                // A SIGKILLed broker may lose what it acknowledged to the publisher since its last
                // save; never what the gateway acknowledged (above). Shown, not failed.
                print("MQTT broker SIGKILL: \(missingAcked.count) of \(ackedByBroker.count) messages the broker acknowledged to the publisher are not in the store (\(neverSent.count) never sent to the gateway)")
            } else {
                let missingAckedNone = missingAcked.isEmpty  // a Bool: #expect would print the whole collection
                #expect(missingAckedNone, "acknowledged to the publisher, not in the store: \(missingAcked.sorted().prefix(20)) (\(missingAcked.count); \(neverSent.count) never sent to the gateway)")
            }
            let status = g.mqttStatus() ?? [:]
            #expect(status["state"] as? String == "connected" && (status["connects"] as? Int ?? 0) >= 3, "\(status)")
            print("MQTT broker restarts (\(hard ? "SIGKILL" : "SIGTERM")): \(docs.count) documents of \(count) published (\(ackedByBroker.count) acknowledged to the publisher, \(published?["connects"] ?? "?") publisher connects); the gateway acknowledged \(gatewayAcked.count) deliveries, \(g.counter("in.unchanged")) redeliveries wrote nothing")
            #expect(g.stop() == 0, "\(g.log().suffix(2000))")
        }

        @Test("the broker stopped (SIGTERM) and restarted twice mid-stream: every message acknowledged to the publisher is in the store, each written once")
        func brokerStoppedMidStream() throws {
            try brokerRestarts(hard: false, count: 3000, rate: 400)
        }

        @Test("the broker SIGKILLed and restarted twice mid-stream: every message the gateway acknowledged is in the store, each written once")
        func brokerKilledMidStream() throws {
            try brokerRestarts(hard: true, count: 1500, rate: 150)
        }

        @Test("outbound under faults: 20,000 changes going out while the broker is restarted (SIGTERM) and then the gateway SIGKILLed: every change reaches a persistent subscriber at least once (the durable checkpoint)")
        func outboundAcrossRestarts() throws {
            let count = 20_000
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let broker = try Mosquitto()
            defer { broker.remove() }
            let site = base.path + "/site.yaml"
            try MQTTSiteFile.write(site, collections: ["sensors.out"], brokers: [
                .init(url: broker.url, clientID: "shoal-outbound", outbound: [#"{ collection: sensors.out, topic: "out/{id}" }"#]),
            ])
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            let ready = base.path + "/ready"
            let sub = try MQTTTools.python("subscribe.py", ["--port", String(broker.port), "--topic", "out/#", "--count", String(count), "--timeout", "300",
                                                           "--client-id", "outbound-sub", "--no-clean", "--distinct", "--ready-file", ready])
            #expect(eventuallyBlocking(within: 20, every: 0.05) { FileManager.default.fileExists(atPath: ready) }, "\(sub.output())")
            #expect(eventuallyBlocking(within: 20) { g.state() == "connected" })
            let lines = (0..<count).map { "d\($0)\t{\"n\":\($0)}" }.joined(separator: "\n") + "\n"
            let imported = try g.cli(["doc", "import", "sensors.out", "-"], stdin: lines)
            #expect(imported.status == 0, "\(imported.stderr)")
            // Mid-stream: the broker restarted once a fifth has gone out…
            #expect(eventuallyBlocking(within: 120, every: 0.01) { g.counter("out.acknowledged") >= count / 5 }, "\(String(describing: g.mqttStatus()))")
            try broker.restart(hard: false, pause: 0.5)
            print("MQTT outbound: broker restarted after \(g.counter("out.acknowledged")) acknowledged")
            // … and the gateway SIGKILLed once a fifth more has (its counters start again after the restart).
            let before = g.counter("out.acknowledged")
            #expect(eventuallyBlocking(within: 120, every: 0.01) { g.counter("out.acknowledged") >= before + count / 5 }, "\(String(describing: g.mqttStatus()))")
            g.kill()
            try g.start()
            let result = sub.json(timeout: 300)
            let topics = (result?["topics"] as? [String: Int]) ?? [:]
            let missing = (0..<count).filter { topics["out/d\($0)"] == nil }
            let missingNone = missing.isEmpty
            #expect(missingNone, "never published: \(missing.prefix(20)) (\(missing.count)) subscribe.py: \(sub.output().prefix(300)) \(String(describing: g.mqttStatus()))")
            let again = topics.values.reduce(0, +) - topics.count
            print("MQTT outbound: \(topics.count) of \(count) changes reached the subscriber, \(again) more than once (at least once across the restarts)")
            #expect(g.stop() == 0, "\(g.log().suffix(2000))")
        }

        @Test("a flood of 100,000 QoS 1 messages of 1 KB at full speed: all committed, each once; the bridge is never restarted and the gateway's memory stays bounded (a bounded queue, back-pressure to the broker)")
        func flood() throws {
            let count = 100_000
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let broker = try Mosquitto()
            defer { broker.remove() }
            let site = base.path + "/site.yaml"
            try Self.writeSite(site, broker: broker, clientID: "shoal-flood")
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(broker.waitForSubscription(clientID: "shoal-flood", filter: "stream/+/+"), "\(broker.diagnostics())")
            let idleKB = try #require(g.memoryKB("VmRSS"))
            let publisher = try MQTTTools.python("publish.py", ["--port", String(broker.port), "--topic", "stream/dev{i%10}/{i}",
                                                                "--payload", #"{"seq":{i},"pad":"{pad:1000}"}"#, "--count", String(count), "--timeout", "400"])
            var committed = 0
            var peakKB = idleKB
            let started = Date()
            let done = eventuallyBlocking(within: 240, every: 1) {
                committed = g.counter("in.committed")
                peakKB = max(peakKB, g.memoryKB("VmRSS") ?? 0)
                return committed >= count
            }
            let seconds = Date().timeIntervalSince(started)
            #expect(done, "\(committed) of \(count) committed after \(Int(seconds)) s: \(String(describing: g.mqttStatus())) \(g.log().suffix(2000))")
            let published = publisher.json(timeout: 60)
            #expect(published?["acknowledged"] as? Int == count, "publish.py: \(publisher.output().suffix(1000))")
            peakKB = max(peakKB, g.memoryKB("VmHWM") ?? 0)
            // 100 MB of payloads went through; a bounded queue keeps the gateway far below that.
            #expect(peakKB - idleKB < 48 * 1024, "RSS \(idleKB) kB idle, \(peakKB) kB at the peak")
            let status = g.mqttStatus() ?? [:]
            #expect(status["connects"] as? Int == 1 && status["disconnects"] as? Int == 0, "\(status)")
            let log = g.log()
            #expect(!log.contains("root/mqtt: hung") && !log.contains("root/mqtt/local: hung") && !log.contains("supervision: root/mqtt: restarting"),
                    "the bridge was restarted: \(log.split(separator: "\n").filter { $0.contains("root/mqtt") }.prefix(10).joined(separator: "\n"))")
            let docs = try g.documents(Self.collection)
            #expect(docs.count == count && docs.values.allSatisfy { $0["revision"] as? Int == 1 }, "\(docs.count) documents")
            print("MQTT flood: \(count) messages of 1 KB committed in \(Int(seconds)) s (\(Int(Double(count) / seconds)) msg/s, publisher \(published?["messagesPerSecond"] ?? "?") msg/s); RSS \(idleKB / 1024) MB idle, \(peakKB / 1024) MB at the peak")
            #expect(g.stop() == 0, "\(g.log().suffix(2000))")
        }

        @Test("a gateway with a bridge runs past the supervisor's heartbeat deadline (40 s, idle): root/mqtt is not taken for hung and restarted")
        func idleBeyondHeartbeat() throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let broker = try Mosquitto()
            defer { broker.remove() }
            let site = base.path + "/site.yaml"
            try Self.writeSite(site, broker: broker, clientID: "shoal-idle")
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(broker.waitForSubscription(clientID: "shoal-idle", filter: "stream/+/+"), "\(broker.diagnostics())")
            Thread.sleep(forTimeInterval: 40)
            try MQTTTools.publish(broker, topic: "stream/dev1/1", message: #"{"seq":1}"#)
            #expect(eventuallyBlocking(within: 20) { g.document(Self.collection, "dev1-1") != nil }, "\(String(describing: g.mqttStatus()))")
            let log = g.log()
            #expect(!log.contains("root/mqtt: hung") && !log.contains("supervision: root/mqtt: restarting"),
                    "\(log.split(separator: "\n").filter { $0.contains("root/mqtt") || $0.contains("heartbeat") }.prefix(10).joined(separator: "\n"))")
            #expect(broker.connections(of: "shoal-idle") == 1, "the bridge connected \(broker.connections(of: "shoal-idle")) times")
            #expect(g.stop() == 0)
        }

        @Test("the gateway SIGKILLed three times mid-stream: each time every message the broker saw acknowledged is in the store after the restart; in the end all arrive, each written once")
        func gatewayKilledMidStream() throws {
            let count = 10_000
            let base = TemporaryDirectory(prefix: "shoal-mqtt")
            defer { base.remove() }
            let broker = try Mosquitto(.init(logAll: true))
            defer { broker.remove() }
            let site = base.path + "/site.yaml", quiet = base.path + "/no-bridge.yaml"
            try Self.writeSite(site, broker: broker, clientID: "shoal-killed")
            try Self.writeSite(quiet, broker: broker, clientID: "shoal-killed", bridge: false)
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(broker.waitForSubscription(clientID: "shoal-killed", filter: "stream/+/+"), "\(broker.diagnostics())")
            let ackedFile = base.path + "/acked"
            let publisher = try Self.publisher(broker, count: count, rate: 0, acked: ackedFile)
            var unacknowledgedSeen = 0
            for round in 1...3 {
                // In each run, a fifth of the stream, then SIGKILL.
                #expect(eventuallyBlocking(within: 120, every: 0.01) { g.counter("in.committed") >= count / 5 }, "round \(round): \(g.log().suffix(1500))")
                g.kill()
                let closes = ["Client shoal-killed closed its connection", "Client shoal-killed disconnected", "Socket error on client shoal-killed", "shoal-killed has exceeded timeout"]
                #expect(eventuallyBlocking(within: 20) { closes.map { broker.log().components(separatedBy: $0).count - 1 }.reduce(0, +) >= round },
                        "the broker did not notice the gateway's end: \(broker.diagnostics())")
                let gatewayAcked = Set(broker.acknowledgedTopics(by: "shoal-killed").map(Self.id(ofTopic:)))

                // The store as the SIGKILL left it, read by a gateway without the bridge.
                try g.start(site: quiet)
                let after = try g.documents(Self.collection)
                let lost = gatewayAcked.filter { after[$0] == nil }
                let lostNone = lost.isEmpty  // a Bool: #expect would print the whole collection
                #expect(lostNone, "round \(round): acknowledged to the broker but not in the store after the SIGKILL: \(lost.sorted().prefix(20)) (\(lost.count) of \(gatewayAcked.count))")
                let unacknowledged = Set(after.keys).subtracting(gatewayAcked)
                unacknowledgedSeen += unacknowledged.count
                print("MQTT gateway SIGKILL \(round): \(gatewayAcked.count) messages acknowledged to the broker so far, \(after.count) documents in the store (\(unacknowledged.count) committed but not yet acknowledged: the broker sends them again)")
                #expect(g.stop() == 0)
                try g.start(site: site)  // back with the bridge: the session's queue arrives
            }
            let published = publisher.json(timeout: 240)
            #expect(published?["acknowledged"] as? Int == count, "publish.py: \(publisher.output().suffix(1500))")
            var docs: [String: [String: Any]] = [:]
            #expect(eventuallyBlocking(within: 120, every: 0.5) { docs = (try? g.documents(Self.collection)) ?? docs; return docs.count == count },
                    "\(docs.count) of \(count) documents: \(String(describing: g.mqttStatus()))")
            let twice = docs.filter { ($0.value["revision"] as? Int) != 1 }
            let twiceNone = twice.isEmpty  // a Bool: #expect would print the whole collection
            #expect(twiceNone, "written more than once: \(twice.keys.sorted().prefix(20))")
            #expect(Set(docs.keys) == Set((0..<count).map(Self.id(ofSeq:))))
            print("MQTT gateway SIGKILL: after three kills all \(docs.count) documents, each at revision 1 (\(unacknowledgedSeen) committed-but-unacknowledged at the kills, redelivered and written nothing)")
            #expect(g.stop() == 0, "\(g.log().suffix(2000))")
        }
    }
}
