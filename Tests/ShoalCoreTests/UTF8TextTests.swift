import ShoalCore
import Testing

@Suite("Text from wire bytes, and versions read in place")
struct UTF8TextTests {
    @Test("UTF8Text accepts what String(validating:) accepts and refuses what it refuses, at every length and position")
    func sameAsValidating() {
        var rng = SeededRandom(seed: 42)
        let samples: [[UInt8]] = [
            [], Array("doc-1".utf8), Array("sensors.readings/ümlaut-√-😀".utf8),
            [0xC3], [0xFF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, 0x82],
        ]
        var cases = samples
        // A high-bit byte (valid or not) at each position of ids 1-40 bytes long: the 8-byte
        // stride and the tail both see it.
        for length in 1...40 {
            for position in 0..<length {
                var bytes = (0..<length).map { _ in UInt8(0x21 + rng.next() % 90) }
                bytes[position] = [0x80, 0xC3, 0xFF][Int(rng.next() % 3)]
                cases.append(bytes)
            }
        }
        for bytes in cases {
            let expected = bytes.withUnsafeBufferPointer { String(validating: $0, as: UTF8.self) }
            #expect(UTF8Text.string(bytes) == expected, "\(bytes)")
            #expect(bytes.withUnsafeBufferPointer { UTF8Text.isASCII($0) } == bytes.allSatisfy { $0 < 0x80 }, "\(bytes)")
        }
    }

    @Test("a version's newest timestamp read in place is the decoded vector's current one; empty or malformed gives nil")
    func newestTimestamp() throws {
        var rng = SeededRandom(seed: 7)
        for _ in 0..<200 {
            let n = Int(rng.next() % 6) + 1
            let entries = (0..<n).map { _ in
                VersionVector.Entry(peer: PeerID(bytes: (0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) }),
                                    timestamp: HLCTimestamp(rawValue: rng.next() >> 1))
            }
            let version = DocumentVersion(vector: try VersionVector(entries: entries), bodyDigest: rng.next() | 1)
            #expect(DocumentVersion.newestTimestamp(encoded: version.encoded) == version.vector.current?.timestamp)
        }
        #expect(DocumentVersion.newestTimestamp(encoded: []) == nil)
        let one = DocumentVersion(vector: try VersionVector(entries: [.init(peer: PeerID(bytes: Array(repeating: 1, count: 32)), timestamp: HLCTimestamp(rawValue: 99))]), bodyDigest: 5).encoded
        #expect(DocumentVersion.newestTimestamp(encoded: Array(one.dropLast())) == nil)
        #expect(DocumentVersion.newestTimestamp(encoded: [2] + one.dropFirst()) == nil)
    }
}
