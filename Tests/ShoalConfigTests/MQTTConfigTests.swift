import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalTesting
import Testing

/// Issue 21, the site file's `mqtt:` section: the contract's example reads as written, and each
/// mistake is an error at its key that says what to write instead.
@Suite("MQTT site settings")
struct MQTTConfigTests {
    /// The contract's example (COMMON.md) with `identity: true` left out: it stands there beside
    /// certFile/keyFile as the alternative to them, and the two together are an error.
    static let example = """
        group: g
        collections:
          - name: sensors.state          # inbound/outbound collections must be listed here
        mqtt:
          brokers:
            - name: local
              url: mqtt://127.0.0.1:1883
              protocol: "3.1.1"
              clientId: shoal-gw1
              keepaliveSeconds: 30
              cleanSession: false
              username: shoal
              passwordFile: /etc/shoal/mqtt.pass
              reconnect: { minMillis: 500, maxMillis: 30000 }
              inbound:
                - topic: sensors/+site/+device/state
                  collection: sensors.state
                  id: "{site}-{device}"
                  mode: replace
                  payload: json
                  topicFields: false
                  qos: 1
                - topic: sensors/+site/+device/log
                  collection: sensors.state
                  id: "{site}-{device}"
                  mode: series
                  timeField: ts
                  keep: 10000
              outbound:
                - collection: sensors.state
                  topic: "shoal/{collection}/{id}"
                  qos: 1
                  retain: false
                  envelope: false
                  deletes: true
            - name: cloud
              url: mqtts://broker.example.com
              protocol: "5"
              tls:
                caFile: /etc/shoal/mqtt-ca.pem
                certFile: /etc/shoal/client.pem
                keyFile: /etc/shoal/client.key
                insecure: false
              outbound:
                - collection: sensors.state
                  topic: "site/{scope}/{name}/{id}"
                  retain: true
                  envelope: true
                  deletes: false
        """

    func load(_ text: String) throws -> SiteConfig { try repoLoader.loadSite(text: text, file: "site.yaml") }

    @Test("the contract's example reads into the settings it describes")
    func fullExample() throws {
        let mqtt = try load(MQTTConfigTests.example).mqtt
        #expect(mqtt.enabled)
        try #require(mqtt.brokers.count == 2)
        let local = mqtt.brokers[0]
        let sensors = try CollectionName(parsing: "sensors.state")
        #expect(local.name == "local")
        #expect(local.host == "127.0.0.1" && local.port == 1883 && !local.useTLS && local.tls == nil)
        #expect(local.protocolVersion == .v311)
        #expect(local.clientID == "shoal-gw1")
        #expect(local.keepaliveSeconds == 30 && !local.cleanSession)
        #expect(local.username == "shoal" && local.passwordFile == "/etc/shoal/mqtt.pass")
        #expect(local.reconnectMinMillis == 500 && local.reconnectMaxMillis == 30_000)
        #expect(local.inbound == [
            MQTTInboundRule(filter: try MQTTTopicFilter(parsing: "sensors/+site/+device/state"), collection: sensors,
                            id: try MQTTTemplate(parsing: "{site}-{device}")),
            MQTTInboundRule(filter: try MQTTTopicFilter(parsing: "sensors/+site/+device/log"), collection: sensors,
                            id: try MQTTTemplate(parsing: "{site}-{device}"), mode: .series, timeField: "ts", keep: 10_000),
        ])
        #expect(local.outbound == [MQTTOutboundRule(collection: sensors, topic: try MQTTTemplate(parsing: "shoal/{collection}/{id}"))])
        #expect(local.subscriptions == [MQTTSubscription(filter: "sensors/+/+/state", qos: 1), MQTTSubscription(filter: "sensors/+/+/log", qos: 1)])

        let cloud = mqtt.brokers[1]
        #expect(cloud.host == "broker.example.com" && cloud.port == 8883 && cloud.useTLS)
        #expect(cloud.protocolVersion == .v5)
        #expect(cloud.clientID == nil && cloud.keepaliveSeconds == 30)
        #expect(cloud.tls == MQTTTLSSettings(caFile: "/etc/shoal/mqtt-ca.pem", certFile: "/etc/shoal/client.pem", keyFile: "/etc/shoal/client.key"))
        #expect(cloud.outbound == [MQTTOutboundRule(collection: sensors, topic: try MQTTTemplate(parsing: "site/{scope}/{name}/{id}"),
                                                    retain: true, envelope: true, deletes: false)])
        #expect(mqtt.referencedFiles.map(\.key) == ["mqtt.brokers[0].passwordFile", "mqtt.brokers[1].tls.caFile",
                                                    "mqtt.brokers[1].tls.certFile", "mqtt.brokers[1].tls.keyFile"])
        #expect(mqtt.referencedFiles.map(\.mark.line) == [13, 40, 41, 42])
    }

    @Test("README's mqtt: block in the site file's options reads as written")
    func readmeBlock() throws {
        let readme = try #require(readFile(repoBoards.replacingFirst("/board-configs", with: "/README.md")))
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false)
        let section = try #require(lines.firstIndex { $0 == "### The site file" }, "README.md: no \"### The site file\"")
        let start = try #require(lines[section...].firstIndex { $0.hasPrefix("mqtt:") }, "README.md: no mqtt: block in the site file's options")
        let end = try #require(lines[start...].firstIndex { $0.hasPrefix("```") })
        let text = "group: g\ncollections: [{name: sensors.state}, {name: sensors.readings}]\n" + lines[start..<end].joined(separator: "\n")
        let mqtt = try load(text).mqtt
        #expect(mqtt.brokers.map(\.name) == ["edge"])
        #expect(mqtt.brokers.first?.inbound.map(\.mode) == [.replace, .series])
        #expect(mqtt.brokers.first?.outbound.count == 1)
    }

    @Test("identity: true beside certFile and keyFile, as the contract's comment block shows them, is an error")
    func identityWithCertificate() throws {
        let text = MQTTConfigTests.example.replacingFirst("insecure: false", with: "identity: true\n        insecure: false")
        let e = try #require(configError { _ = try load(text) })
        #expect(e.all.map(\.key) == ["mqtt.brokers[1].tls.identity"], "\(e)")
        #expect(e.message.contains("leave out certFile and keyFile"))
    }

    @Test("no mqtt: section, or no brokers: no bridge")
    func disabled() throws {
        #expect(!(try load("group: g\n")).mqtt.enabled)
        #expect(!(try load("group: g\nmqtt:\n  brokers: []\n")).mqtt.enabled)
        #expect(!(try load("group: g\nmqtt:\n")).mqtt.enabled)
    }

    @Test("mqtts:// turns TLS on with the system's CAs; an IPv6 address is written in brackets")
    func defaults() throws {
        let site = try load(MQTTConfigTests.site(["name: s", "url: mqtts://[::1]", MQTTConfigTests.inbound]))
        let b = try #require(site.mqtt.brokers.first)
        #expect(b.host == "::1" && b.port == 8883 && b.useTLS)
        #expect(b.tls == MQTTTLSSettings())
        #expect(b.protocolVersion == .v311 && b.clientID == nil && !b.cleanSession)
        let rule = try #require(b.inbound.first)
        #expect(rule.mode == .replace && rule.payload == .json && !rule.topicFields && rule.qos == 1 && rule.keep == 10_000 && rule.timeField == nil)
        let plain = try load(MQTTConfigTests.site(["name: p", "url: mqtt://gw.local", MQTTConfigTests.inbound]))
        #expect(plain.mqtt.brokers.first?.port == 1883)
        let bare = try load("group: g\ncollections: [{name: state}]\nmqtt:\n  brokers:\n    - name: b\n      url: mqtt://h\n      inbound: [{topic: \"a/+x\", collection: state, id: \"{x}\"}]\n")
        #expect(bare.mqtt.brokers.first?.inbound.first?.collection == (try CollectionName(parsing: "_default.state")), "a bare name is in _default")
    }

    /// A site file with one broker written as `lines` (flow style within a line).
    static func site(_ lines: [String], more: [String]? = nil) -> String {
        var text = "group: g\ncollections:\n  - name: sensors.state\n  - name: other.thing\nmqtt:\n  brokers:\n    - " + lines.joined(separator: "\n      ") + "\n"
        if let more { text += "    - " + more.joined(separator: "\n      ") + "\n" }
        return text
    }

    static let inbound = #"inbound: [{topic: "sensors/+site/+device/state", collection: sensors.state, id: "{site}-{device}"}]"#
    static let good = ["name: local", "url: mqtt://127.0.0.1:1883", inbound]

    static func replacing(_ key: String, _ line: String) -> [String] {
        good.filter { !$0.hasPrefix(key + ":") } + [line]
    }

    static func inboundWith(_ extra: String) -> [String] {
        ["name: local", "url: mqtt://127.0.0.1:1883",
         #"inbound: [{topic: "sensors/+site/+device/state", collection: sensors.state, id: "{site}-{device}", "# + extra + "}]"]
    }

    static func outboundWith(_ rule: String) -> [String] {
        ["name: local", "url: mqtt://127.0.0.1:1883", "outbound: [{" + rule + "}]"]
    }

    @Test("each mistake is an error at its key that says what is expected", arguments: [
        (replacing("name", "name: Local!"), "mqtt.brokers[0].name", "1 to 32 of a-z, 0-9 and '-' (e.g. local"),
        (replacing("name", "name: " + String(repeating: "a", count: 33)), "mqtt.brokers[0].name", "1 to 32"),
        (Array(good.dropFirst()), "mqtt.brokers[0].name", "is required, e.g. name: local"),
        (replacing("url", "url: http://h:1883"), "mqtt.brokers[0].url", "expected mqtt:// or mqtts://, e.g. mqtt://127.0.0.1:1883"),
        (replacing("url", "url: tcp://h:1883"), "mqtt.brokers[0].url", "tcp:// is written mqtt:// here"),
        (replacing("url", "url: ssl://h:8883"), "mqtt.brokers[0].url", "ssl:// is written mqtts:// here"),
        (replacing("url", "url: 127.0.0.1:1883"), "mqtt.brokers[0].url", "is not a broker url"),
        (replacing("url", "url: mqtt://:1883"), "mqtt.brokers[0].url", "names no host"),
        (replacing("url", "url: mqtt://h:0"), "mqtt.brokers[0].url", "a port is 1 to 65535"),
        (replacing("url", "url: mqtt://h:70000"), "mqtt.brokers[0].url", "a port is 1 to 65535"),
        (replacing("url", "url: mqtt://u:pw@h"), "mqtt.brokers[0].url", "write username: and passwordFile:"),
        (replacing("url", "url: mqtt://h:1883/topic"), "mqtt.brokers[0].url", "no path"),
        (replacing("url", "url: mqtt://fe80::1:1883"), "mqtt.brokers[0].url", "in brackets"),
        (replacing("url", "url: mqtt://bad_host:1883"), "mqtt.brokers[0].url", "not a host name or address"),
        (Array([good[0], good[2]]), "mqtt.brokers[0].url", "is required, e.g. url: mqtt://127.0.0.1:1883"),
        (good + ["protocol: \"4\""], "mqtt.brokers[0].protocol", "is not one of: 3.1.1, 5"),
        (good + ["keepaliveSeconds: 1"], "mqtt.brokers[0].keepaliveSeconds", "out of range 5...3600"),
        (good + ["clientId: \"\""], "mqtt.brokers[0].clientId", "a client id is 1 to 256 bytes"),
        (good + ["passwordFile: /etc/shoal/mqtt.pass"], "mqtt.brokers[0].passwordFile", "add username (e.g. username: shoal)"),
        (good + ["username: \"\""], "mqtt.brokers[0].username", "may not be empty"),
        (good + ["tls: {caFile: /ca.pem}"], "mqtt.brokers[0].tls", "needs an mqtts:// url"),
        (replacing("url", "url: mqtts://h") + ["tls: {certFile: /c.pem}"], "mqtt.brokers[0].tls.keyFile", "both certFile and keyFile"),
        (replacing("url", "url: mqtts://h") + ["tls: {keyFile: /c.key}"], "mqtt.brokers[0].tls.certFile", "both certFile and keyFile"),
        (replacing("url", "url: mqtts://h") + ["tls: {identity: true, certFile: /c.pem, keyFile: /c.key}"], "mqtt.brokers[0].tls.identity", "leave out certFile and keyFile"),
        (replacing("url", "url: mqtts://h") + ["tls: {cafile: /ca.pem}"], "mqtt.brokers[0].tls.cafile", "unknown key"),
        (good + ["reconnect: {minMillis: 5000, maxMillis: 1000}"], "mqtt.brokers[0].reconnect.maxMillis", "below minMillis"),
        (good + ["urll: x"], "mqtt.brokers[0].urll", "unknown key"),
        (Array(good.prefix(2)), "mqtt.brokers[0]", "would do nothing: add a rule under inbound: or outbound:"),
        (inboundWith("mode: append"), "mqtt.brokers[0].inbound[0].mode", "is not one of: replace, merge, series"),
        (inboundWith("payload: xml"), "mqtt.brokers[0].inbound[0].payload", "is not one of: json, text"),
        (inboundWith("timeField: ts"), "mqtt.brokers[0].inbound[0].timeField", "for mode: series only"),
        (inboundWith("mode: merge, keep: 5"), "mqtt.brokers[0].inbound[0].keep", "for mode: series only"),
        (inboundWith("mode: series, keep: 0"), "mqtt.brokers[0].inbound[0].keep", "out of range 1...10000000"),
        (inboundWith("qos: 2"), "mqtt.brokers[0].inbound[0].qos", "qos is 0 (at most once) or 1"),
        (inboundWith("timefield: ts"), "mqtt.brokers[0].inbound[0].timefield", "unknown key"),
        (replacing("inbound", #"inbound: [{topic: "a/+x", collection: missing.coll, id: "{x}"}]"#),
         "mqtt.brokers[0].inbound[0].collection", #"missing.coll is not in the site's collections: list; add "- name: missing.coll" under collections:"#),
        (replacing("inbound", #"inbound: [{topic: "a/+x", collection: "bad name", id: "{x}"}]"#), "mqtt.brokers[0].inbound[0].collection", "A-Z a-z 0-9"),
        (replacing("inbound", #"inbound: [{topic: "a/+x", collection: sensors.state, id: "{x}-{y}"}]"#),
         "mqtt.brokers[0].inbound[0].id", "{y} is not a name in the topic filter a/+x (its names: x; {topic} is the whole topic)"),
        (replacing("inbound", #"inbound: [{topic: "a/b", collection: sensors.state, id: "{b}"}]"#), "mqtt.brokers[0].inbound[0].id", "it names no wildcard"),
        (replacing("inbound", #"inbound: [{topic: "a/+x", collection: sensors.state, id: "{x"}]"#), "mqtt.brokers[0].inbound[0].id", "no '}'"),
        (replacing("inbound", #"inbound: [{topic: "a/+x", collection: sensors.state}]"#), "mqtt.brokers[0].inbound[0].id", #"is required, e.g. id: "{site}-{device}""#),
        (replacing("inbound", #"inbound: [{collection: sensors.state, id: "x"}]"#), "mqtt.brokers[0].inbound[0].topic", "is required, e.g. topic: sensors/+site/+device/state"),
        (replacing("inbound", #"inbound: [{topic: "a/b", collection: sensors.state, id: "x"}, {topic: "a/#x/b", collection: sensors.state, id: "{x}"}]"#),
         "mqtt.brokers[0].inbound[1].topic", "must be the last level"),
        (outboundWith(#"collection: sensors.state, topic: "x/{site}""#), "mqtt.brokers[0].outbound[0].topic", "may use {collection}, {scope}, {name} and {id}"),
        (outboundWith(#"collection: sensors.state, topic: "x/+/{id}""#), "mqtt.brokers[0].outbound[0].topic", "may not contain + or #"),
        (outboundWith(#"collection: sensors.state, topic: "$SYS/{id}""#), "mqtt.brokers[0].outbound[0].topic", "the broker's own"),
        (outboundWith(#"collection: sensors.state"#), "mqtt.brokers[0].outbound[0].topic", "is required"),
        (outboundWith(#"collection: nowhere, topic: "x/{id}""#), "mqtt.brokers[0].outbound[0].collection", #"add "- name: _default.nowhere" under collections:"#),
        (outboundWith(#"collection: sensors.state, topic: "x/{id}", qos: 3"#), "mqtt.brokers[0].outbound[0].qos", "qos is 0"),
        (outboundWith(#"collection: sensors.state, topic: "x/{id}", retain: sometimes"#), "mqtt.brokers[0].outbound[0].retain", "expected true or false"),
    ])
    func mistake(_ lines: [String], _ key: String, _ needle: String) throws {
        let text = MQTTConfigTests.site(lines)
        let e = try #require(configError { _ = try load(text) })
        #expect(e.all.map(\.key) == [key], "\(e)\n---\n\(text)")
        #expect(e.message.contains(needle), "\(e.message)")
        #expect(e.mark.file == "site.yaml" && e.mark.line >= 7, "\(e)")
    }

    @Test("two brokers may not share a name, nor a client id on the same broker")
    func twoBrokers() throws {
        let second = MQTTConfigTests.site(MQTTConfigTests.good, more: MQTTConfigTests.good)
        let e = try #require(configError { _ = try load(second) })
        #expect(e.all.map(\.key) == ["mqtt.brokers[1].name"], "\(e)")
        #expect(e.message.contains("\"local\" is listed twice"))

        let sameID = MQTTConfigTests.site(MQTTConfigTests.good + ["clientId: gw"], more: MQTTConfigTests.replacing("name", "name: other") + ["clientId: gw"])
        let f = try #require(configError { _ = try load(sameID) })
        #expect(f.all.map(\.key) == ["mqtt.brokers[1].clientId"], "\(f)")
        #expect(f.message.contains("give each its own clientId"))
        // The same client id on two different brokers is fine.
        let apart = MQTTConfigTests.site(MQTTConfigTests.good + ["clientId: gw"],
                                         more: ["name: other", "url: mqtt://10.0.0.9", MQTTConfigTests.inbound, "clientId: gw"])
        #expect(try load(apart).mqtt.brokers.count == 2)
    }

    @Test("every mistake in the mqtt section is reported at once, each at its line")
    func everyMistakeReported() throws {
        let text = """
            group: g
            collections:
              - name: sensors.state
            mqtt:
              brokers:
                - name: Bad
                  url: mqtt://h:0
                  keepaliveSeconds: 2
                  inbound:
                    - topic: a/+x
                      collection: nope.nope
                      id: "{y}"
                    - topic: a/#x/b
                      collection: sensors.state
                      id: "{x}"
                      qos: 2
                  outbound:
                    - collection: sensors.state
                      topic: "x/{site}"
              brokerz: []
            """
        let e = try #require(configError { _ = try load(text) })
        #expect(e.all.map(\.key) == ["mqtt.brokers[0].name", "mqtt.brokers[0].url", "mqtt.brokers[0].keepaliveSeconds",
                                     "mqtt.brokers[0].inbound[0].collection", "mqtt.brokers[0].inbound[0].id",
                                     "mqtt.brokers[0].inbound[1].topic", "mqtt.brokers[0].inbound[1].qos",
                                     "mqtt.brokers[0].outbound[0].topic", "mqtt.brokerz"], "\(e)")
        #expect(e.all.map(\.mark.line) == [6, 7, 8, 11, 12, 13, 16, 19, 20])
    }

    @Test("the files a broker names are checked with the site: missing, empty or of the wrong kind, each at its line")
    func filesChecked() throws {
        let dir = TemporaryDirectory(prefix: "shoal-mqtt-files")
        defer { dir.remove() }
        try Files.write(dir.file("key.pem"), "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n")
        try Files.write(dir.file("cert.pem"), "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n")
        try Files.write(dir.file("empty.pass"), "\nsecond line\n")
        try Files.write(dir.file("good.pass"), "s3cret\n")
        let text = """
            group: g
            collections: [{name: sensors.state}]
            mqtt:
              brokers:
                - name: a
                  url: mqtts://h
                  username: shoal
                  passwordFile: \(dir.file("empty.pass"))
                  tls:
                    caFile: \(dir.file("key.pem"))
                    certFile: \(dir.file("missing.pem"))
                    keyFile: \(dir.file("cert.pem"))
                  outbound: [{collection: sensors.state, topic: "x/{id}"}]
                - name: b
                  url: mqtts://h
                  username: shoal
                  passwordFile: \(dir.file("good.pass"))
                  tls: {caFile: \(dir.file("cert.pem")), certFile: \(dir.file("cert.pem")), keyFile: \(dir.file("key.pem"))}
                  outbound: [{collection: sensors.state, topic: "y/{id}"}]
            """
        let e = try #require(configError {
            _ = try repoLoader.loadSite(text: text, file: "site.yaml", checkFiles: ConfigurationLoading.referencedFileProblem)
        })
        #expect(e.all.map(\.key) == ["mqtt.brokers[0].passwordFile", "mqtt.brokers[0].tls.caFile",
                                     "mqtt.brokers[0].tls.certFile", "mqtt.brokers[0].tls.keyFile"], "\(e)")
        #expect(e.all.map(\.mark.line) == [8, 10, 11, 12])
        #expect(e.all[0].message.contains("first line is empty"))
        #expect(e.all[1].message.contains("no certificate in it"))
        #expect(e.all[2].message.contains("no such file (this gateway's client certificate, PEM)"))
        #expect(e.all[3].message.contains("no private key in it"))
        #expect(e.description.hasPrefix("site.yaml:8: mqtt.brokers[0].passwordFile: \(dir.file("empty.pass")): "), "\(e)")

        // Broker b alone names good files: no error.
        let good = text.split(separator: "\n", omittingEmptySubsequences: false)
        let onlyB = (good.prefix(4) + good.suffix(6)).joined(separator: "\n")
        let site = try repoLoader.loadSite(text: onlyB, file: "site.yaml", checkFiles: ConfigurationLoading.referencedFileProblem)
        #expect(site.mqtt.brokers.map(\.name) == ["b"])
        #expect(MQTTBroker.password(fromFile: try #require(try Files.read(dir.file("good.pass")))) == "s3cret")
    }

    @Test("the file check goes through the reader it is given, and a read error names the file")
    func fileReadError() throws {
        struct Unreadable: Error, CustomStringConvertible { var description: String { "permission denied" } }
        let site = try load(MQTTConfigTests.site(MQTTConfigTests.good + ["username: u", "passwordFile: /p"]))
        let e = try #require(site.mqtt.fileProblems { _ throws in throw Unreadable() })
        #expect(e.line == "site.yaml:11: mqtt.brokers[0].passwordFile: /p: cannot be read (permission denied)", "\(e)")
        #expect(site.mqtt.fileProblems { _ in "pw\n" } == nil)
    }
}

extension String {
    func replacingFirst(_ target: String, with replacement: String) -> String {
        guard let r = firstRange(of: target) else { return self }
        return self[..<r.lowerBound] + replacement + self[r.upperBound...]
    }
}
