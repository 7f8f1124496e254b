import ShoalCore
import Testing

@Suite("Field-level versions")
struct FieldMergeTests {
    let p = PeerID(bytes: Array(repeating: 1, count: 32)), q = PeerID(bytes: Array(repeating: 2, count: 32))
    func ts(_ ms: UInt64) -> HLCTimestamp { HLCTimestamp(physicalMillis: ms, logical: 0) }

    /// A local write as LocalWriter makes it: the vector moves, the stamps follow the bodies.
    func write(_ before: (body: String?, version: DocumentVersion)?, _ body: String, by peer: PeerID, at ms: UInt64) -> (body: String?, version: DocumentVersion) {
        let fields = FieldMerge.stampsAfterWrite(previous: before?.version, previousBody: before?.body, body: body, writer: peer, at: ts(ms))
        let vector = (before?.version.vector ?? VersionVector()).setting(peer, to: ts(ms))
        return (body, DocumentVersion(vector: vector, bodyDigest: DocumentVersion.digest(of: body), fields: fields))
    }

    @Test("the issue's case: A sets a, B sets b and c while apart; both edits survive, and both orders give the same body and version")
    func differentFieldsSurvive() throws {
        let base = write(nil, #"{"a":1,"b":1}"#, by: p, at: 10)
        let a = write(base, #"{"a":2,"b":1}"#, by: p, at: 20)
        let b = write(base, #"{"a":1,"b":3,"c":9}"#, by: q, at: 15)
        let ab = try #require(FieldMerge.join(a, b)), ba = try #require(FieldMerge.join(b, a))
        #expect(ab.body == #"{"a":2,"b":3,"c":9}"#)
        #expect(ab.body == ba.body)
        #expect(ab.version == ba.version)
        #expect(ab.version.encoded == ba.version.encoded)
        #expect(ab.version.vector == a.version.vector.merged(with: b.version.vector), "no new version minted")
        // Joined again with either side, nothing changes (the join is idempotent).
        let again = try #require(FieldMerge.join(ab, a))
        #expect(again.body == ab.body && again.version == ab.version)
    }

    @Test("the same field takes the newer write; a removal is a write; a version without stamps counts as its newest write")
    func sameFieldNewestWins() throws {
        let base = write(nil, #"{"a":1,"b":1,"c":1}"#, by: p, at: 10)
        let a = write(base, #"{"a":5,"b":1,"c":1}"#, by: p, at: 30)
        let b = write(base, #"{"a":7,"b":1}"#, by: q, at: 20)  // a older than p's; c removed
        let j = try #require(FieldMerge.join(a, b))
        #expect(j.body == #"{"a":5,"b":1}"#)
        #expect(j.version.fields["c"]?.removed == true)
        // The same pair with q's stamps stripped (a format-1 version from an old gateway): every
        // field of q's body counts as set at 20, so b (set at 10 by p) comes from q too, c stays.
        let stripped = (b.body, try DocumentVersion(decoding: DocumentVersion.documentLevel(b.version.encoded)))
        #expect(stripped.1.fields.isEmpty)
        let k = try #require(FieldMerge.join(a, stripped))
        #expect(k.body == #"{"a":5,"b":1,"c":1}"#)
        #expect(FieldMerge.join(a, (nil, b.version)) == nil, "a tombstone is not joined")
        #expect(FieldMerge.join(a, ("[1]", b.version)) == nil, "nor a body that is not an object")
    }

    @Test("format 2 encodes the stamps canonically and round-trips; without stamps it stays format 1")
    func encoding() throws {
        let base = write(nil, #"{"x":1,"y":2}"#, by: p, at: 10)
        #expect(base.version.encoded.first == 1)
        let next = write(base, #"{"x":1,"z":3}"#, by: q, at: 11)
        let bytes = next.version.encoded
        #expect(bytes.first == 2)
        let back = try DocumentVersion(decoding: bytes)
        #expect(back == next.version)
        #expect(back.fields["x"] == FieldStamp(peer: p, timestamp: ts(10)))
        #expect(back.fields["y"] == FieldStamp(peer: q, timestamp: ts(11), removed: true))
        #expect(back.fields["z"] == nil, "set by the newest write: implicit")
        #expect(DocumentVersion.newestTimestamp(encoded: bytes) == ts(11))
        let v1 = DocumentVersion.documentLevel(bytes)
        #expect(v1.first == 1)
        #expect(try DocumentVersion(decoding: v1).vector == next.version.vector)
        #expect(DocumentVersion.documentLevel(v1) == v1)
    }

    @Test("malformed stamps are refused with a reason", arguments: ["cut", "trailing", "writer index", "flags", "newer than its writer"])
    func malformed(_ what: String) throws {
        let base = write(nil, #"{"x":1,"y":2}"#, by: p, at: 10)
        var bytes = write(base, #"{"y":3}"#, by: q, at: 11).version.encoded
        // The last stamp ends [flags][writer][timestamp u64].
        switch what {
        case "cut": bytes.removeLast()
        case "trailing": bytes.append(0)
        case "writer index": bytes[bytes.count - 9] = 9
        case "flags": bytes[bytes.count - 10] = 4
        default: bytes[bytes.count - 8] = 0xFF
        }
        #expect(throws: VersionError.self, "\(what)") { try DocumentVersion(decoding: bytes) }
    }

    @Test("a version keeps at most maxFieldStamps stamps, the newest; it still encodes and decodes")
    func bounded() throws {
        let n = DocumentVersion.maxFieldStamps + 10
        let fields = (0..<n).map { "k\($0)" }
        // Each field set by its own write, then one more write that changes none of them.
        var doc = write(nil, "{}", by: p, at: 1)
        for (k, f) in fields.enumerated() {
            var o = try #require(try JSONValue.parse(doc.body!).objectValue)
            o[f] = .int(k)
            doc = write(doc, JSONValue.object(o).compactText, by: k % 2 == 0 ? p : q, at: UInt64(10 + k))
        }
        var o = try #require(try JSONValue.parse(doc.body!).objectValue)
        o["other"] = .int(1)
        doc = write(doc, JSONValue.object(o).compactText, by: p, at: 100_000)
        #expect(doc.version.fields.count == DocumentVersion.maxFieldStamps)
        #expect(doc.version.fields["k\(n - 1)"] != nil, "the newest stays")
        let back = try DocumentVersion(decoding: doc.version.encoded)
        #expect(back == doc.version)
    }

    @Test("stamps out of name order are refused (equal versions must encode alike)")
    func outOfOrder() throws {
        let base = write(nil, #"{"a":1,"b":1}"#, by: p, at: 10)
        let v = write(base, #"{}"#, by: q, at: 11).version  // two removals, a then b
        var bytes = v.encoded
        let start = 10 + 2 * 40  // the stamp count (u16), then the first stamp
        // Swap the names of the two (equal-length) stamps.
        (bytes[start + 3], bytes[start + 15]) = (bytes[start + 15], bytes[start + 3])
        #expect(throws: VersionError.self) { try DocumentVersion(decoding: bytes) }
    }
}
