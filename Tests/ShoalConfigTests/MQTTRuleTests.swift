import ShoalConfig
import ShoalCore
import Testing

/// Issue 21, the pure rule engine: topic filters with named wildcards, templates, and a payload
/// turned into a document (or a counted drop).
@Suite("MQTT rules")
struct MQTTRuleTests {
    func filter(_ text: String) throws -> MQTTTopicFilter { try MQTTTopicFilter(parsing: text) }

    // MARK: - Topic filters

    @Test("a filter's names are stripped for the broker and come back as fields")
    func namedWildcards() throws {
        let f = try filter("sensors/+site/+device/state")
        #expect(f.mqttFilter == "sensors/+/+/state")
        #expect(f.names == ["site", "device"])
        #expect(f.match("sensors/north/t1/state") == ["site": "north", "device": "t1"])
        #expect(f.match("sensors/north/t1/other") == nil)
        #expect(f.match("sensors/north/state") == nil)
        #expect(f.match("sensors/north/t1/state/extra") == nil)
        #expect(f.match("sensors//t1/state") == ["site": "", "device": "t1"], "an empty level is a level, as MQTT has it")
    }

    @Test("#name takes the remaining levels joined by /, and none: sport/# matches sport")
    func multiLevel() throws {
        let f = try filter("sport/#rest")
        #expect(f.mqttFilter == "sport/#")
        #expect(f.match("sport/tennis/player1") == ["rest": "tennis/player1"])
        #expect(f.match("sport") == ["rest": ""])
        #expect(f.match("sport/") == ["rest": ""])
        #expect(f.match("sports") == nil)
        let unnamed = try filter("sport/#")
        #expect(unnamed.match("sport") == [:])
        #expect(unnamed.match("sport/tennis") == [:])
        #expect(unnamed.match("other/tennis") == nil)
    }

    @Test("# alone matches every topic except the broker's $ topics")
    func hashAlone() throws {
        let f = try filter("#")
        #expect(f.mqttFilter == "#")
        #expect(f.match("a") == [:])
        #expect(f.match("a/b/c") == [:])
        #expect(f.match("/") == [:])
        #expect(f.match("$SYS/broker/uptime") == nil)
        #expect(try filter("#all").match("x/y") == ["all": "x/y"])
    }

    @Test("a filter starting with a wildcard does not match $ topics; one starting with $SYS does")
    func dollarTopics() throws {
        #expect(try filter("+/monitor/Clients").match("$SYS/monitor/Clients") == nil)
        #expect(try filter("+/monitor/Clients").match("a/monitor/Clients") == [:])
        #expect(try filter("$SYS/#").match("$SYS/broker/load") == [:])
        #expect(try filter("$SYS/monitor/+what").match("$SYS/monitor/Clients") == ["what": "Clients"])
    }

    @Test("unnamed + matches one level and gives no field")
    func unnamedPlus() throws {
        let f = try filter("+/+kind/+")
        #expect(f.mqttFilter == "+/+/+")
        #expect(f.names == ["kind"])
        #expect(f.match("a/b/c") == ["kind": "b"])
        #expect(f.match("a/b") == nil)
    }

    @Test("bad filters are refused with the rule they break", arguments: [
        ("", "may not be empty"),
        ("a/#/b", "must be the last level"),
        ("a/b+/c", "a wildcard is a whole level"),
        ("a/+x#/c", "a wildcard's name"),
        ("a/+1x", "a wildcard's name"),
        ("a/+x-y", "a wildcard's name"),
        ("+x/+x", "used twice"),
        ("+topic/x", "\"topic\" is taken"),
        ("a#", "a wildcard is a whole level"),
    ])
    func badFilters(_ text: String, _ needle: String) {
        #expect(throws: MQTTSyntaxError.self) { try MQTTTopicFilter(parsing: text) }
        do throws(MQTTSyntaxError) { _ = try MQTTTopicFilter(parsing: text) } catch { #expect(error.reason.contains(needle), "\(text): \(error)") }
    }

    @Test("empty levels are allowed, as MQTT allows them")
    func emptyLevels() throws {
        let f = try filter("/a//+x/")
        #expect(f.mqttFilter == "/a//+/")
        #expect(f.match("/a//b/") == ["x": "b"])
        #expect(f.match("a//b/") == nil)
    }

    // MARK: - Templates

    @Test("a template renders its placeholders and keeps its literal text")
    func templates() throws {
        let t = try MQTTTemplate(parsing: "{site}-{device}/{site}")
        #expect(t.placeholders == ["site", "device"])
        #expect(t.render(["site": "north", "device": "t1"]) == "north-t1/north")
        #expect(t.render(["site": "north"]) == "north-/north", "a missing field renders as nothing")
        #expect(try MQTTTemplate(parsing: "fixed").render([:]) == "fixed")
        #expect(try MQTTTemplate(parsing: "fixed").placeholders.isEmpty)
        #expect(try MQTTTemplate(parsing: "{id}").render(["id": "{x}"]) == "{x}", "fields are not templates")
        #expect(try MQTTTemplate(parsing: "a{_b1}c").literalText == "ac")
    }

    @Test("a stray brace, an empty or a bad placeholder is a parse error", arguments: [
        ("", "may not be empty"),
        ("{site", "no '}'"),
        ("site}", "no '{'"),
        ("a{}b", "empty placeholder"),
        ("{1x}", "placeholder's name"),
        ("{a b}", "placeholder's name"),
        ("{a{b}", "placeholder's name"),
    ])
    func badTemplates(_ text: String, _ needle: String) {
        do throws(MQTTSyntaxError) {
            _ = try MQTTTemplate(parsing: text)
            Issue.record("\"\(text)\" parsed")
        } catch { #expect(error.reason.contains(needle), "\(text): \(error)") }
    }

    // MARK: - Payload → document

    func rule(_ topic: String = "sensors/+site/+device/state", id: String = "{site}-{device}", mode: MQTTInboundMode = .replace,
              payload: MQTTPayloadFormat = .json, topicFields: Bool = false, timeField: String? = nil) throws -> MQTTInboundRule {
        MQTTInboundRule(filter: try filter(topic), collection: try CollectionName(parsing: "sensors.state"), id: try MQTTTemplate(parsing: id),
                        mode: mode, payload: payload, topicFields: topicFields, timeField: timeField)
    }

    func doc(_ r: MQTTInboundRule, _ payload: String, topic: String = "sensors/north/t1/state", max: Int = 1 << 20,
             at millis: Int64 = 1_700_000_000_123, counter: Int = 0) -> Result<MQTTInboundDocument, MQTTDropReason>? {
        r.document(topic: topic, payload: Array(payload.utf8), maxBodyBytes: max, arrivalMillis: millis, counter: counter)
    }

    @Test("a JSON object is the body as it is; the id comes from the topic's fields")
    func objectPayload() throws {
        let d = try #require(doc(try rule(), #"{"t": 21.5, "ok": true}"#)).get()
        #expect(d.id.rawValue == "north-t1")
        #expect(d.body == ["t": .number("21.5"), "ok": true])
        #expect(d.bodyText == #"{"ok":true,"t":21.5}"#)
        #expect(d.fields == ["site": "north", "device": "t1"])
    }

    @Test("a topic the filter does not match gives no document at all")
    func noMatch() throws {
        #expect(doc(try rule(), "{}", topic: "other/north/t1/state") == nil)
    }

    @Test("topicFields adds the named fields to an object without overriding its own keys")
    func topicFields() throws {
        let d = try #require(doc(try rule(topicFields: true), #"{"t": 1, "site": "mine"}"#)).get()
        #expect(d.body == ["t": 1, "site": "mine", "device": "t1"])
        let without = try #require(doc(try rule(), #"{"t": 1}"#)).get()
        #expect(without.body == ["t": 1])
    }

    @Test("a JSON scalar or array is wrapped as {value} with the topic's fields", arguments: [
        ("21.5", JSONValue.number("21.5")), ("\"on\"", .string("on")), ("true", .bool(true)), ("null", .null),
        ("[1,2]", .array([1, 2])),
    ])
    func wrappedJSON(_ payload: String, _ value: JSONValue) throws {
        let d = try #require(doc(try rule(), payload)).get()
        #expect(d.body == ["value": value, "site": "north", "device": "t1"])
    }

    @Test("text mode wraps any UTF-8 payload as a string, Tasmota's ON/OFF included")
    func textPayload() throws {
        let r = try rule("stat/+device/POWER", id: "{device}", payload: .text)
        let d = try #require(doc(r, "ON", topic: "stat/plug1/POWER")).get()
        #expect(d.id.rawValue == "plug1")
        #expect(d.body == ["value": "ON", "device": "plug1"])
        #expect(try #require(doc(r, #"{"not": "parsed"}"#, topic: "stat/plug1/POWER")).get().body["value"] == .string(#"{"not": "parsed"}"#))
        #expect(try #require(doc(r, "", topic: "stat/plug1/POWER")).get().body["value"] == .string(""))
        #expect(try #require(doc(r, "Grüße", topic: "stat/plug1/POWER")).get().body["value"] == .string("Grüße"))
    }

    @Test("a field named value never overrides the wrapped value")
    func valueFieldKept() throws {
        let r = try rule("x/+value", id: "{value}")
        let d = try #require(doc(r, "5", topic: "x/abc")).get()
        #expect(d.body == ["value": 5])
        #expect(d.id.rawValue == "abc")
    }

    @Test("{topic} in an id is the whole topic")
    func topicPlaceholder() throws {
        let d = try #require(doc(try rule("home/#", id: "{topic}"), "1", topic: "home/kitchen/temp")).get()
        #expect(d.id.rawValue == "home/kitchen/temp")
    }

    @Test("invalid UTF-8 is not_utf8, in json and text mode alike")
    func notUTF8() throws {
        for r in [try rule(), try rule(payload: .text)] {
            let bad: [UInt8] = [0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xFF, 0xFE, 0x22, 0x7D]  // {"a":"\xff\xfe"}
            let result = r.document(topic: "sensors/a/b/state", payload: bad, maxBodyBytes: 1000, arrivalMillis: 0, counter: 0)
            #expect(result == .failure(.notUTF8))
            #expect(r.document(topic: "sensors/a/b/state", payload: [0xC3], maxBodyBytes: 1000, arrivalMillis: 0, counter: 0) == .failure(.notUTF8))
        }
    }

    @Test("a payload that is no JSON is not_json, a duplicate key and an empty payload included", arguments: [
        "", "ON", "{", #"{"a": 1, "a": 2}"#, "{} {}", "01", "[1,]",
    ])
    func notJSON(_ payload: String) throws {
        #expect(doc(try rule(), payload) == .failure(.notJSON))
    }

    @Test("a body printed over the store's limit is too_large; one at the limit is written")
    func tooLarge() throws {
        let r = try rule()
        let body = #"{"a":"\#(String(repeating: "x", count: 100))"}"#  // 108 bytes printed
        #expect(body.utf8.count == 108)
        #expect(try #require(doc(r, body, max: 108)).get().bodyText.utf8.count == 108)
        #expect(doc(r, body, max: 107) == .failure(.tooLarge))
        // Whitespace does not count; the printed body does.
        let spaced = "{ \"a\" :   \"\(String(repeating: "x", count: 100))\"   }"
        #expect(try #require(doc(r, spaced, max: 108)).get().bodyText == body)
        // Escapes do: a wrapped text of control characters prints larger than it came.
        let text = try rule(payload: .text)
        #expect(doc(text, String(repeating: "\u{1}", count: 20), max: 100) == .failure(.tooLarge))
        // A payload far over the limit is refused unparsed (even if it is not JSON).
        #expect(doc(r, String(repeating: "y", count: 500), max: 100) == .failure(.tooLarge))
    }

    @Test("an id that is no document id is bad_id: empty, over 250 bytes, control characters")
    func badID() throws {
        let r = try rule("x/+a", id: "{a}")
        #expect(doc(r, "1", topic: "x/") == .failure(.badID))
        #expect(doc(r, "1", topic: "x/" + String(repeating: "i", count: 251)) == .failure(.badID))
        #expect(try #require(doc(r, "1", topic: "x/" + String(repeating: "i", count: 250))).get().id.rawValue.utf8.count == 250)
        #expect(doc(r, "1", topic: "x/a\u{7}b") == .failure(.badID))
    }

    @Test("series: the id is <id>@<time field>, integers printed as integers, strings as they are")
    func seriesTimeField() throws {
        let r = try rule(mode: .series, timeField: "ts")
        let cases: [(String, String)] = [
            (#"{"ts": 1700000000123, "t": 1}"#, "north-t1@1700000000123"),
            (#"{"ts": 1.7e12}"#, "north-t1@1700000000000"),
            (#"{"ts": 1700000000123.0}"#, "north-t1@1700000000123"),
            (#"{"ts": 1700000000.25}"#, "north-t1@1700000000.25"),
            (#"{"ts": "2026-12-02T10:00:00Z"}"#, "north-t1@2026-12-02T10:00:00Z"),
            (#"{"ts": -5}"#, "north-t1@-5"),
        ]
        for (payload, id) in cases {
            #expect(try #require(doc(r, payload)).get().id.rawValue == id, "\(payload)")
        }
        // Redelivered, the same message keys the same document: nothing is counted twice.
        #expect(try #require(doc(r, #"{"ts": 42}"#, at: 1)).get().id == (try #require(doc(r, #"{"ts": 42}"#, at: 2)).get().id))
    }

    @Test("series: a time field of another type (or an empty string) is bad_time", arguments: [
        #"{"ts": true}"#, #"{"ts": null}"#, #"{"ts": [1]}"#, #"{"ts": {"s": 1}}"#, #"{"ts": ""}"#,
    ])
    func seriesBadTime(_ payload: String) throws {
        #expect(doc(try rule(mode: .series, timeField: "ts"), payload) == .failure(.badTime))
    }

    @Test("series without a time field: arrival millis in 13 digits and a 3-digit counter, sorting in arrival order")
    func seriesArrival() throws {
        let r = try rule(mode: .series, timeField: "ts")
        #expect(try #require(doc(r, #"{"t": 1}"#, at: 1_700_000_000_123, counter: 7)).get().id.rawValue == "north-t1@1700000000123007")
        #expect(try #require(doc(r, "21.5", at: 42, counter: 0)).get().id.rawValue == "north-t1@0000000000042000", "a wrapped scalar has no time field")
        let noField = try rule(mode: .series)
        #expect(try #require(doc(noField, #"{"ts": 5}"#, at: 9, counter: 999)).get().id.rawValue == "north-t1@0000000000009999")
        #expect(MQTTInboundRule.arrivalKey(millis: 1, counter: 2) < MQTTInboundRule.arrivalKey(millis: 1, counter: 10))
        #expect(MQTTInboundRule.arrivalKey(millis: 9, counter: 999) < MQTTInboundRule.arrivalKey(millis: 10, counter: 0))
    }

    @Test("the arrival clock gives unique increasing keys within a millisecond, across 1000 of them and when time steps back")
    func arrivalClock() {
        var clock = MQTTArrivalClock()
        var keys: [String] = []
        for now: Int64 in [100, 100, 100, 99, 101] {
            let (m, c) = clock.next(nowMillis: now)
            keys.append(MQTTInboundRule.arrivalKey(millis: m, counter: c))
        }
        #expect(keys == ["0000000000100000", "0000000000100001", "0000000000100002", "0000000000100003", "0000000000101000"])
        var burst = MQTTArrivalClock()
        var last = ""
        for _ in 0..<2500 {
            let (m, c) = burst.next(nowMillis: 5)
            let key = MQTTInboundRule.arrivalKey(millis: m, counter: c)
            #expect(key > last)
            last = key
        }
        #expect(last == "0000000000007499")
    }

    @Test("merge: the incoming top-level fields go over the existing document's")
    func merge() {
        let existing: JSONValue = ["t": 20, "name": "kitchen", "nested": ["a": 1, "b": 2]]
        let incoming: JSONValue = ["t": 21, "nested": ["a": 5]]
        #expect(MQTTInboundRule.merged(existing: existing, incoming: incoming) == ["t": 21, "name": "kitchen", "nested": ["a": 5]])
        #expect(MQTTInboundRule.merged(existing: nil, incoming: incoming) == incoming)
        #expect(MQTTInboundRule.merged(existing: .string("old"), incoming: incoming) == incoming)
        #expect(MQTTInboundRule.merged(existing: existing, incoming: [:]) == existing)
    }

    @Test("every drop reason has the name the runtime counts it by")
    func dropReasonNames() {
        #expect(MQTTDropReason.allCases.map(\.rawValue) == ["not_utf8", "not_json", "too_large", "bad_id", "bad_time", "store_error"])
    }

    // MARK: - Outbound topics and subscriptions

    @Test("an outbound topic renders the collection and id; an id that would make it invalid gives nil")
    func outboundTopic() throws {
        let c = try CollectionName(parsing: "sensors.state")
        let r = MQTTOutboundRule(collection: c, topic: try MQTTTemplate(parsing: "shoal/{collection}/{scope}/{name}/{id}"))
        #expect(r.publishTopic(collection: c, id: try DocumentID("t1")) == "shoal/sensors.state/sensors/state/t1")
        #expect(r.publishTopic(collection: c, id: try DocumentID("a+b")) == nil)
        #expect(r.publishTopic(collection: c, id: try DocumentID("a#")) == nil)
    }

    @Test("subscriptions: one per distinct filter, at the highest QoS a rule asks")
    func subscriptions() throws {
        var b = MQTTBroker(name: "local", host: "127.0.0.1")
        var r0 = try rule("a/+x")
        r0.qos = 0
        var r1 = try rule("a/+y", id: "{y}")
        r1.qos = 1
        let r2 = try rule("b/#", id: "{topic}")
        b.inbound = [r0, r1, r2]
        #expect(b.subscriptions == [MQTTSubscription(filter: "a/+", qos: 1), MQTTSubscription(filter: "b/#", qos: 1)])
        #expect(b.clientID(peerIDHex: "ABCDEF0123456789abcdef") == "shoal-abcdef012345-local")
        b.clientID = "mine"
        #expect(b.clientID(peerIDHex: "ab") == "mine")
        #expect(MQTTBroker(name: "s", host: "h", useTLS: true).port == 8883)
        #expect(MQTTBroker.password(fromFile: "secret\r\nmore\n") == "secret")
        #expect(MQTTBroker.password(fromFile: "secret") == "secret")
    }
}
