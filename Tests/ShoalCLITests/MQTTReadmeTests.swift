import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// README's MQTT bridge examples, as they stand in README.md, against a real mosquitto: the
    /// Tasmota site file with its mosquitto_pub lines (each `shoal doc get` must print the body its
    /// comment shows, mosquitto_sub the envelope its comment shows, `shoal mqtt status` the drop),
    /// and the Python sensor script with its series site file. Only the broker's port changes
    /// (README says 1883; the test's broker has a port of its own).
    @Suite("README's MQTT examples", .serialized, .enabled(if: Mosquitto.available && MQTTTools.pahoAvailable, "needs mosquitto, mosquitto-clients and paho-mqtt (make deps)"))
    struct MQTTReadmeTests {
        /// The section's lines, up to the next `## ` heading outside a fenced block (a `# comment`
        /// line in a sh block is not a heading).
        static func examples() throws -> [String] {
            let lines = try Readme.text().split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            guard let start = lines.firstIndex(of: "## The MQTT bridge") else { return [] }
            var out: [String] = []
            var fenced = false
            for line in lines[(start + 1)...] {
                if line.hasPrefix("```") { fenced.toggle() }
                if !fenced && line.hasPrefix("## ") { break }
                out.append(line)
            }
            return out
        }

        /// The fenced blocks of `info` in `lines`, in order.
        static func blocks(_ info: String, in lines: [String]) -> [[String]] {
            var out: [[String]] = []
            var rest = lines[...]
            while let start = rest.firstIndex(of: "```" + info) {
                let after = rest[(start + 1)...]
                guard let end = after.firstIndex(where: { $0.hasPrefix("```") }) else { break }
                out.append(Array(after[..<end]))
                rest = after[(end + 1)...]
            }
            return out
        }

        static func json(_ text: String) -> NSDictionary? {
            (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? NSDictionary
        }

        @Test("the Tasmota example: its site file, its mosquitto_pub lines, the bodies and the envelope its comments show, the not_json drop")
        func tasmota() throws {
            let section = try MQTTReadmeTests.examples()
            let yaml = try #require(MQTTReadmeTests.blocks("yaml", in: section).first, "no yaml block in README's MQTT section")
            let sh = try #require(MQTTReadmeTests.blocks("sh", in: section).first, "no sh block in README's MQTT section")
            let base = TemporaryDirectory(prefix: "shoal-mqtt-readme")
            defer { base.remove() }
            let broker = try Mosquitto()
            defer { broker.remove() }
            let site = base.path + "/plant.yaml"
            let text = yaml.joined(separator: "\n").replacingOccurrences(of: "mqtt://127.0.0.1:1883", with: broker.url)
            #expect(text.contains(broker.url), "README's Tasmota site file names no mqtt://127.0.0.1:1883")
            try (text + "\nhttp: {enabled: false}\n").write(toFile: site, atomically: true, encoding: .utf8)
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(eventuallyBlocking(within: 20) { g.state() == "connected" }, "gateway: \(g.log().suffix(2000))")
            let sub = try MQTTTools.Background([MQTTTools.sub, "-h", "127.0.0.1", "-p", String(broker.port), "-i", "readme-sub", "-t", "shoal/#", "-v", "-C", "2", "-W", "30"])
            #expect(broker.waitForSubscription(clientID: "readme-sub", filter: "shoal/#"), "mosquitto_sub did not subscribe: \(broker.diagnostics())")

            var docGets: [(args: [String], expected: String)] = []
            var envelope: String?
            for raw in sh {
                let (code, rawComment) = Readme.splitComment(raw)
                let comment = rawComment.trimmingCharacters(in: .whitespaces)
                if comment.hasPrefix("mosquitto_sub prints: ") { envelope = String(comment.dropFirst("mosquitto_sub prints: ".count)) }
                for command in code.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces) }) where !command.isEmpty {
                    let words = Readme.shellWords(command)
                    switch words.first {
                    case "mosquitto_pub":
                        let r = try MQTTTools.run([MQTTTools.pub, "-h", "127.0.0.1", "-p", String(broker.port)] + words.dropFirst())
                        #expect(r.status == 0, "\(command): \(r.output)")
                    case "shoal" where words.dropFirst().first == "doc":
                        docGets.append((Array(words.dropFirst()), comment))
                    default:
                        break  // shoal run, mosquitto_sub &, shoal mqtt status: the test runs its own
                    }
                }
            }
            #expect(docGets.count == 2, "README's Tasmota example should show two `shoal doc get` lines with the body in their comment")
            #expect(eventuallyBlocking(within: 20) { g.counter("in.received") >= 4 }, "gateway: \(g.log().suffix(2000))")
            // The first two messages are what the comments show (the example's last two lines
            // come after: the text payload replaces the power document, so read it before).
            for (args, expected) in docGets {
                let id = args.last ?? "", collection = args.dropLast().last ?? ""
                if collection == "tasmota.power" { continue }  // checked through the envelope below
                #expect(eventuallyBlocking(within: 10) { g.body(collection, id).map { NSDictionary(dictionary: $0) } == MQTTReadmeTests.json(expected) },
                        "\(collection)/\(id): \(String(describing: g.body(collection, id))) vs README \(expected)")
            }
            let received = sub.wait(timeout: 40).output.split(separator: "\n").map(String.init)
            let shown = try #require(envelope, "README's Tasmota example shows no `mosquitto_sub prints:` line")
            let first = try #require(received.first, "mosquitto_sub received nothing: \(broker.diagnostics())")
            let peer = try #require((MQTTReadmeTests.json(try g.cli(["status", "--json"]).stdout)?["peerID"]) as? String)
            let (shownTopic, shownJSON) = (String(shown.prefix { $0 != " " }), String(shown.drop { $0 != " " }.dropFirst()))
            #expect(first.hasPrefix(shownTopic + " "), "mosquitto_sub: \(first) vs README \(shown)")
            #expect(MQTTReadmeTests.json(String(first.drop { $0 != " " }.dropFirst())) == MQTTReadmeTests.json(shownJSON.replacingOccurrences(of: "<this gateway's peer id>", with: peer)),
                    "mosquitto_sub: \(first) vs README \(shown)")
            // The power document's comment: its first message's body is in the envelope above;
            // the JSON in the doc-get comment is that body.
            if let power = docGets.first(where: { $0.args.contains("tasmota.power") }), let envelopeBody = MQTTReadmeTests.json(String(first.drop { $0 != " " }.dropFirst()))?["body"] as? NSDictionary {
                #expect(envelopeBody == MQTTReadmeTests.json(power.expected), "README's tasmota.power comment \(power.expected) vs what was published \(envelopeBody)")
            }
            #expect(eventuallyBlocking(within: 10) { g.counter("in.dropped.not_json") == 1 }, "\(String(describing: g.mqttStatus()))")
            let status = try g.cli(["mqtt", "status"])
            #expect(status.status == 0 && status.stdout.contains("not_json 1"), "\(status.stdout)")
        }

        @Test("the Python sensor script and its series site file: three readings become boiler-1@<ts>, with the topic's fields")
        func pythonSensor() throws {
            let section = try MQTTReadmeTests.examples()
            let yaml = try #require(MQTTReadmeTests.blocks("yaml", in: section).dropFirst().first, "no second yaml block in README's MQTT section")
            let python = try #require(MQTTReadmeTests.blocks("python", in: section).first, "no python block in README's MQTT section")
            let base = TemporaryDirectory(prefix: "shoal-mqtt-readme")
            defer { base.remove() }
            let broker = try Mosquitto()
            defer { broker.remove() }
            let site = base.path + "/boiler.yaml"
            try (yaml.joined(separator: "\n").replacingOccurrences(of: "mqtt://127.0.0.1:1883", with: broker.url) + "\nhttp: {enabled: false}\n")
                .write(toFile: site, atomically: true, encoding: .utf8)
            let g = try MQTTGateway(dataDir: base.path + "/gw", site: site)
            defer { g.kill() }
            #expect(eventuallyBlocking(within: 20) { g.state() == "connected" }, "gateway: \(g.log().suffix(2000))")
            let script = base.path + "/sensor.py"
            let source = python.joined(separator: "\n").replacingOccurrences(of: "\"127.0.0.1\", 1883", with: "\"127.0.0.1\", \(broker.port)")
            #expect(source.contains(String(broker.port)), "README's script connects to no \"127.0.0.1\", 1883")
            try source.write(toFile: script, atomically: true, encoding: .utf8)
            let r = try MQTTTools.run(["/usr/bin/env", "python3", script], timeout: 60)
            #expect(r.status == 0, "\(r.output)")
            var docs: [String: [String: Any]] = [:]
            #expect(eventuallyBlocking(within: 20) {
                docs = (try? g.documents("boiler.readings")) ?? [:]
                return docs.count == 3
            }, "boiler.readings: \(docs.keys.sorted()) \(g.log().suffix(2000))")
            for id in docs.keys {
                #expect(id.hasPrefix("boiler-1@"), "\(id)")
                let body = g.body("boiler.readings", id)
                #expect(body?["site"] as? String == "east" && body?["device"] as? String == "boiler-1" && body?["celsius"] != nil, "\(id): \(String(describing: body))")
                #expect(id == "boiler-1@\((body?["ts"] as? Int).map(String.init) ?? "?")", "the id's time key is the reading's ts: \(id) \(String(describing: body))")
            }
        }
    }
}
