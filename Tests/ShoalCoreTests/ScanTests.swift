import ShoalCore
import Testing

/// The two scans every replicated body goes through, checked against the plain byte-at-a-time
/// answer at every position and length that the word-at-a-time and memchr paths split on.
@Suite("Body scans")
struct ScanTests {
    @Test("containsTag finds \"@blob\" wherever it is and nothing else")
    func containsTag() {
        let tag = "\"@blob\""
        for length in 0..<40 {
            for at in 0...max(0, length) {
                var filler = Array(String(repeating: "x", count: length))
                if at < length { filler[at] = "@" }
                let plain = String(filler)
                #expect(BlobReference.containsTag(plain) == plain.contains(tag), "\(plain)")
                let i = plain.index(plain.startIndex, offsetBy: min(at, plain.count))
                let with = String(plain[..<i]) + tag + String(plain[i...])
                #expect(BlobReference.containsTag(with), "\(with)")
            }
        }
        for near in ["\"@blo\"", "@blob\"", "\"@blob", "\"@@blob\"", "\"@Blob\"", "x\"@blob'", "@\"@blob\""] {
            #expect(BlobReference.containsTag(near) == near.contains(tag), "\(near)")
        }
    }

    @Test("strings with a quote, a backslash escape, a control character or non-ASCII at every offset parse as before")
    func stringsAtEveryOffset() throws {
        for length in 0..<34 {
            for at in 0..<max(1, length) {
                for special in ["\\\"", "\\\\", "\\n", "é", "\u{1F600}"] {
                    var chars = Array(String(repeating: "a", count: length)).map(String.init)
                    if at < length { chars[at] = special }
                    let text = chars.joined()
                    let json = "{\"k\":\"\(text)\",\"n\":1}"
                    #expect(try JSONValue.validate(json), "\(text)")
                    #expect(try JSONValue.parse(json)["n"] == .int(1), "\(text)")
                }
                var raw = Array(String(repeating: "a", count: length).utf8)
                if at < length { raw[at] = 0x01 }
                let bad = "{\"k\":\"" + String(decoding: raw, as: UTF8.self) + "\"}"
                if at < length {
                    #expect(throws: JSONError.self) { try JSONValue.validate(bad) }
                } else {
                    #expect(try JSONValue.validate(bad))
                }
            }
        }
    }
}
