import ShoalCore
import Testing

@Suite("Base64")
struct Base64Tests {
    @Test("RFC 4648 vectors encode and decode; random bytes round-trip")
    func vectors() {
        let cases = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")]
        for (plain, encoded) in cases {
            #expect(Base64.encode(Array(plain.utf8)) == encoded)
            #expect(Base64.decode(encoded) == Array(plain.utf8))
        }
        var random = SeededRandom(seed: 3)
        for n in 0..<200 {
            let bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
        }
    }

    @Test("malformed text is refused, not skipped: bad characters, length, misplaced padding", arguments: [
        "Zg=", "Zm9", "Zm 9v", "Zm9v\n", "Z===", "=Zm9", "Zg==Zm9v", "Zm-v", "Zm_v", "é===",
    ])
    func malformed(_ text: String) {
        #expect(Base64.decode(text) == nil)
    }
}
