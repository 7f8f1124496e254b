import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// A broker that wants a username and password (mosquitto's password_file): the gateway reads
    /// its password from `passwordFile`; a wrong one leaves the bridge refused (and saying so), the
    /// gateway up, and trying again with backoff.
    @Suite("MQTT bridge with a password", .serialized, .enabled(if: Mosquitto.available, "needs Debian's mosquitto and mosquitto-clients (make deps installs them)"))
    struct MQTTAuthTests {
        @Test("username and passwordFile: the right password connects and writes; a wrong one is refused, shown in mqtt status and the log, and the gateway stays up")
        func password() throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt-auth")
            defer { base.remove() }
            let passwd = base.path + "/mosquitto.passwd"
            let made = try MQTTTools.run(["/usr/bin/mosquitto_passwd", "-b", "-c", passwd, "shoal", "s3cret"])
            #expect(made.status == 0, "\(made.output)")
            var options = Mosquitto.Options()
            options.extraConfig = ["allow_anonymous false", "password_file \(passwd)"]
            let broker = try Mosquitto(options)
            defer { broker.remove() }
            try "s3cret\n".write(toFile: base.path + "/right.pass", atomically: true, encoding: .utf8)
            try "guess\n".write(toFile: base.path + "/wrong.pass", atomically: true, encoding: .utf8)

            func site(_ name: String, password: String) throws -> String {
                let path = base.path + "/\(name).yaml"
                try MQTTSiteFile.write(path, collections: ["sensors.state"], brokers: [
                    .init(url: broker.url, clientID: "shoal-auth-\(name)",
                          inbound: [#"{ topic: "sensors/+device/state", collection: sensors.state, id: "{device}" }"#],
                          more: ["username: shoal", "passwordFile: \(password)"]),
                ], extra: "http: {enabled: false}\n")
                return path
            }
            let good = try MQTTGateway(dataDir: base.path + "/good", site: try site("good", password: base.path + "/right.pass"))
            defer { good.kill() }
            let bad = try MQTTGateway(dataDir: base.path + "/bad", site: try site("bad", password: base.path + "/wrong.pass"))
            defer { bad.kill() }

            #expect(broker.waitForSubscription(clientID: "shoal-auth-good", filter: "sensors/+/state"), "\(broker.diagnostics()) gateway: \(good.log().suffix(2000))")
            #expect(try MQTTTools.publish(broker, topic: "sensors/boiler/state", message: #"{"t":1}"#, extra: ["-u", "shoal", "-P", "s3cret"]).status == 0)
            #expect(eventuallyBlocking(within: 20) { good.body("sensors.state", "boiler").map { NSDictionary(dictionary: $0) } == ["t": 1] },
                    "good: \(String(describing: good.mqttStatus())) \(good.log().suffix(2000))")
            // Anonymous clients are refused by this broker: the password really is needed.
            #expect(try MQTTTools.publish(broker, topic: "sensors/x/state", message: "{}").status != 0)

            #expect(eventuallyBlocking(within: 20) { bad.state() == "refused" || (bad.mqttStatus()?["lastError"] as? String)?.contains("refused") == true },
                    "bad: \(String(describing: bad.mqttStatus())) \(bad.log().suffix(2000))")
            let status = try #require(bad.mqttStatus())
            #expect((status["lastError"] as? String)?.lowercased().contains("not authorised") == true || (status["lastError"] as? String)?.contains("refused") == true, "\(status)")
            #expect(bad.log().contains("refused the connection"), "\(bad.log().suffix(2000))")
            let up = try bad.cli(["status"]).status
            #expect(bad.isRunning && up == 0)
            #expect(bad.documentsCount("sensors.state") == 0)
            #expect(bad.state() == "refused", "\(String(describing: bad.mqttStatus()))")

            // The password file corrected: the next attempt reads it, no restart.
            try "s3cret\n".write(toFile: base.path + "/wrong.pass", atomically: true, encoding: .utf8)
            #expect(eventuallyBlocking(within: 30) { bad.state() == "connected" }, "bad after the fix: \(String(describing: bad.mqttStatus())) \(bad.log().suffix(1500))")
        }

        @Test("an empty payload deletes under replace (how a deletion goes out), is dropped as empty in a series; the outbound lag counts while the broker is away")
        func emptyDeletesAndLag() throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt-empty")
            defer { base.remove() }
            let broker = try Mosquitto()
            defer { broker.remove() }
            let site = base.path + "/site.yaml"
            try MQTTSiteFile.write(site, collections: ["dev.state", "dev.series", "dev.out"], brokers: [
                .init(url: broker.url, clientID: "shoal-empty", inbound: [
                    #"{ topic: "state/+dev", collection: dev.state, id: "{dev}" }"#,
                    #"{ topic: "series/+dev", collection: dev.series, id: "{dev}", mode: series }"#,
                ], outbound: [#"{ collection: dev.out, topic: "out/{id}" }"#]),
            ], extra: "http: {enabled: false}\n")
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(broker.waitForSubscription(clientID: "shoal-empty", filter: "state/+"), "\(broker.diagnostics())")
            try MQTTTools.publish(broker, topic: "state/pump", message: #"{"on":true}"#, retain: true)
            #expect(eventuallyBlocking(within: 20) { g.body("state", "pump") != nil || g.body("dev.state", "pump") != nil })
            // Clearing the retained message deletes the document.
            func publishEmpty(_ topic: String, retain: Bool) throws {
                let r = try MQTTTools.run([MQTTTools.pub, "-h", "127.0.0.1", "-p", String(broker.port), "-q", "1", "-t", topic, "-n"] + (retain ? ["-r"] : []))
                #expect(r.status == 0, "\(r.output)")
            }
            try publishEmpty("state/pump", retain: true)
            #expect(eventuallyBlocking(within: 20) { (try? g.documents("dev.state", deleted: true))?["pump"]?["deleted"] as? Bool == true },
                    "\(String(describing: try? g.documents("dev.state", deleted: true))) \(String(describing: g.mqttStatus()))")
            try publishEmpty("series/pump", retain: false)
            #expect(eventuallyBlocking(within: 20) { g.counter("in.dropped.empty") == 1 }, "\(String(describing: g.mqttStatus()))")
            #expect(g.documentsCount("dev.series") == 0)

            // The broker goes away; changes wait, and the lag says how many.
            _ = broker.stop()
            #expect(eventuallyBlocking(within: 20) { g.state() != "connected" })
            for i in 1...5 { #expect(try g.cli(["doc", "put", "dev.out", "d\(i)", #"{"v":\#(i)}"#]).status == 0) }
            #expect(eventuallyBlocking(within: 20) { g.counter("out.lag") == 5 }, "\(String(describing: g.mqttStatus()))")
            try broker.start()
            #expect(eventuallyBlocking(within: 60) { g.counter("out.lag") == 0 && g.counter("out.acknowledged") >= 5 }, "\(String(describing: g.mqttStatus()))")
        }

        @Test("MQTT 5: a publish the broker's ACL refuses (PUBACK reason 135) is counted publish_refused, not acknowledged")
        func refusedPublish() throws {
            let base = TemporaryDirectory(prefix: "shoal-mqtt-acl")
            defer { base.remove() }
            let passwd = base.path + "/mosquitto.passwd", acl = base.path + "/mosquitto.acl"
            #expect(try MQTTTools.run(["/usr/bin/mosquitto_passwd", "-b", "-c", passwd, "shoal", "s3cret"]).status == 0)
            try "user shoal\ntopic read sensors/#\ntopic write allowed/#\n".write(toFile: acl, atomically: true, encoding: .utf8)
            var options = Mosquitto.Options()
            options.extraConfig = ["allow_anonymous false", "password_file \(passwd)", "acl_file \(acl)"]
            let broker = try Mosquitto(options)
            defer { broker.remove() }
            try "s3cret\n".write(toFile: base.path + "/pass", atomically: true, encoding: .utf8)
            let site = base.path + "/site.yaml"
            try MQTTSiteFile.write(site, collections: ["ok.docs", "no.docs"], brokers: [
                .init(url: broker.url, clientID: "shoal-acl", outbound: [
                    #"{ collection: ok.docs, topic: "allowed/{id}" }"#,
                    #"{ collection: no.docs, topic: "denied/{id}" }"#,
                ], more: ["username: shoal", "passwordFile: \(base.path)/pass", #"protocol: "5""#]),
            ], extra: "http: {enabled: false}\n")
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(eventuallyBlocking(within: 20) { g.state() == "connected" }, "\(String(describing: g.mqttStatus())) \(g.log().suffix(2000))")
            for id in ["a", "b"] {
                #expect(try g.cli(["doc", "put", "ok.docs", id, #"{"v":1}"#]).status == 0)
                #expect(try g.cli(["doc", "put", "no.docs", id, #"{"v":1}"#]).status == 0)
            }
            #expect(eventuallyBlocking(within: 20) { g.counter("out.dropped.publish_refused") == 2 && g.counter("out.acknowledged") == 2 },
                    "\(String(describing: g.mqttStatus())) \(g.log().suffix(2000))")
            #expect(g.log().contains("reason code 135"), "\(g.log().suffix(2000))")
        }

        @Test("a resumed session is not subscribed again: a broker restart does not bring retained messages back into a series (3.1.1 and 5)")
        func retainedNotAgain() throws {
            for version in ["3.1.1", "5"] {
                let base = TemporaryDirectory(prefix: "shoal-mqtt-retained")
                defer { base.remove() }
                let broker = try Mosquitto()
                defer { broker.remove() }
                for i in 1...5 {
                    #expect(try MQTTTools.publish(broker, topic: "series/dev\(i)", message: #"{"v":\#(i)}"#, retain: true).status == 0)
                }
                let site = base.path + "/site.yaml"
                try MQTTSiteFile.write(site, collections: ["dev.series"], brokers: [
                    .init(url: broker.url, clientID: "shoal-retained", inbound: [#"{ topic: "series/+dev", collection: dev.series, id: "{dev}", mode: series }"#],
                          more: [#"protocol: "\#(version)""#]),
                ], extra: "http: {enabled: false}\n")
                let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
                defer { g.kill() }
                #expect(eventuallyBlocking(within: 20) { g.documentsCount("dev.series") == 5 }, "MQTT \(version): \(String(describing: g.mqttStatus()))")
                // The broker goes away and comes back with the session (persistence): the bridge
                // reconnects, the session is resumed, and the retained messages stay where they are.
                try broker.restart()
                #expect(eventuallyBlocking(within: 30) { g.counter("connects") >= 2 && g.state() == "connected" }, "MQTT \(version): \(String(describing: g.mqttStatus())) \(g.log().suffix(2000))")
                Thread.sleep(forTimeInterval: 1)
                #expect(g.documentsCount("dev.series") == 5, "MQTT \(version): \((try? g.documents("dev.series"))?.keys.sorted() ?? [])")
                #expect(g.counter("in.received") == 5, "MQTT \(version): \(String(describing: g.mqttStatus()))")
            }
        }
    }
}

extension MQTTGateway {
    /// Live documents in `collection` (0 when it cannot be read).
    func documentsCount(_ collection: String) -> Int {
        ((try? documents(collection)) ?? [:]).filter { ($0.value["deleted"] as? Bool) != true }.count
    }
}
