import ShoalCore
import Testing

@Suite("JSON values")
struct JSONValueTests {
    @Test("parses every kind of value and prints it back compactly with sorted keys")
    func roundTrip() throws {
        let text = #"{"b": [1, -2.5e3, true, false, null], "a": "x\"y\\z\n\u00e9\ud83d\ude00", "c": {}}"#
        let v = try JSONValue.parse(text)
        #expect(v["a"]?.stringValue == "x\"y\\z\né😀")
        #expect(v["b"]?.arrayValue?.count == 5)
        #expect(v.compactText == #"{"a":"x\"y\\z\né😀","b":[1,-2.5e3,true,false,null],"c":{}}"#)
        #expect(try JSONValue.parse(v.compactText) == v)
        #expect(try JSONValue.parse(v.prettyText) == v)
    }

    @Test("keeps a number's literal text, so big integers are never rounded")
    func numbersKeepTheirText() throws {
        let v = try JSONValue.parse(#"{"n": 12345678901234567890, "f": 0.1}"#)
        #expect(v["n"] == .number("12345678901234567890"))
        #expect(v.compactText == #"{"f":0.1,"n":12345678901234567890}"#)
    }

    @Test("rejects malformed text with the byte offset", arguments: [
        "", "{", "{\"a\"}", "{\"a\":1,}", "[1,]", "01", "1.", "-", "\"abc", "\"\\x\"", "\"\\ud800\"", "tru", "{} x",
        "{\"a\":1,\"a\":2}", "\"a\u{01}b\"", "[1 2]", "{a:1}", "nul",
    ])
    func rejectsMalformed(_ text: String) {
        #expect(throws: JSONError.self) { try JSONValue.parse(text) }
        #expect(throws: JSONError.self) { try JSONValue.validate(text) }
    }

    @Test("a duplicate key is found among few keys and among many (validation keeps few in a list, more in a set)", arguments: [3, 15, 16, 17, 40])
    func duplicateKeys(_ count: Int) throws {
        let keys = (0..<count).map { "\"key-number-\($0)\":\($0)" }
        let distinct = "{" + keys.joined(separator: ",") + "}"
        #expect(try JSONValue.validate(distinct))
        // The repeat comes last, and repeats the first key, the middle one and the one before it.
        for again in Set([0, count / 2, count - 1]) {
            let text = "{" + (keys + ["\"key-number-\(again)\":0"]).joined(separator: ",") + "}"
            #expect(throws: JSONError.self) { try JSONValue.validate(text) }
            #expect(throws: JSONError.self) { try JSONValue.parse(text) }
        }
        // An escaped spelling of the same key is the same key.
        #expect(throws: JSONError.self) { try JSONValue.validate(#"{"ab":1,"a\u0062":2}"#) }
    }

    @Test("validation finds a duplicate key exactly when the parser does: plain keys (compared by their bytes), escaped spellings, canonically equal non-ASCII keys, nested objects, past 16 keys")
    func validateFindsDuplicatesAsTheParserDoes() {
        let pool = ["a", "b", "ab", #"a\u0062"#, #"\u0061"#, "é", #"e\u0301"#, "e\u{301}", "x y"] + (0..<20).map { "k\($0)" }
        var rng = SeededRandom(seed: 27)
        func object(_ depth: Int) -> String {
            let n = Int(rng.next() % 22)
            let members = (0..<n).map { _ -> String in
                let key = pool[Int(rng.next() % UInt64(pool.count))]
                let value = depth < 3 && rng.next() % 4 == 0 ? object(depth + 1) : String(rng.next() % 100)
                return "\"\(key)\":\(value)"
            }
            return "{" + members.joined(separator: ",") + "}"
        }
        var duplicates = 0
        for _ in 0..<2_000 {
            let text = object(0)
            let parsed = (try? JSONValue.parse(text)) != nil
            let validated = (try? JSONValue.validate(text)) != nil
            #expect(parsed == validated, "\(text)")
            if !parsed { duplicates += 1 }
        }
        #expect(duplicates > 200 && duplicates < 1_800)  // both outcomes were tried
    }

    @Test("validation without building the tree agrees with the parser", arguments: [
        #"{"a": [1, {"b": "c\u00e9"}], "d": -0.5e-3, "é": "ü"}"#, "[]", "\"x\"", "12", "{}",
    ])
    func validateAgrees(_ text: String) throws {
        let value = try JSONValue.parse(text)
        #expect(try JSONValue.validate(text) == value.isObject)
    }

    @Test("refuses nesting deeper than the limit instead of overflowing the stack")
    func depthLimit() throws {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONError.self) { try JSONValue.parse(deep) }
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        _ = try JSONValue.parse(ok)
    }

    @Test("refuses text over the size limit before parsing it")
    func sizeLimit() {
        #expect(throws: JSONError.self) { try JSONValue.parse("[1,2,3]", limits: .init(maxDepth: 8, maxBytes: 4)) }
    }

    @Test("rejects invalid UTF-8 inside strings")
    func invalidUTF8() {
        let bytes: [UInt8] = [0x22, 0xC3, 0x28, 0x22]
        #expect(throws: JSONError.self) { try JSONValue.parse(bytes: bytes) }
    }
}

@Suite("Names of collections and documents")
struct NameTests {
    @Test("a bare name is in the default scope; scope.collection splits")
    func parsing() throws {
        #expect(try CollectionName(parsing: "sensors") == CollectionName(scope: "_default", name: "sensors"))
        #expect(try CollectionName(parsing: "site.readings").description == "site.readings")
        #expect(try CollectionName(parsing: "_default") == .default)
        #expect(try CollectionName(parsing: "_default._default") == .default)
    }

    @Test("refuses names that break the rules", arguments: ["", "a.b.c", "_x", "%x", "a b", "a/b", String(repeating: "x", count: 252), "."])
    func badCollections(_ text: String) {
        #expect(throws: NameError.self) { try CollectionName(parsing: text) }
    }

    @Test("a document id has 1 to 250 bytes and no control characters")
    func documentIDs() throws {
        _ = try DocumentID(String(repeating: "é", count: 125))
        #expect(throws: NameError.self) { try DocumentID(String(repeating: "é", count: 126)) }
        #expect(throws: NameError.self) { try DocumentID("") }
        #expect(throws: NameError.self) { try DocumentID("a\nb") }
    }
}

@Suite("Logger")
struct LoggerTests {
    @Test("filters per domain and can be changed at run time")
    func levels() {
        let sink = MemoryLogSink()
        let log = Logger(sink: sink, level: .warning)
        log.info(.store, "hidden")
        log.warning(.store, "shown")
        log.setLevel(.debug, for: .mesh)
        log.debug(.mesh, "mesh detail")
        log.debug(.store, "store detail")
        log.setLevel(.none)
        log.error(.store, "silenced")
        #expect(sink.all.map(\.message) == ["shown", "mesh detail"])
    }
}
