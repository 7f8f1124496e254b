/// The few DER encodings a CRL needs (X.690), and a reader of one TLV.
enum DER {
    static let integerTag: UInt8 = 0x02
    static let null: [UInt8] = [0x05, 0x00]

    static func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] { [tag] + length(content.count) + content }

    static func length(_ n: Int) -> [UInt8] {
        if n < 0x80 { return [UInt8(n)] }
        var octets: [UInt8] = []
        var v = n
        while v > 0 { octets.insert(UInt8(v & 0xFF), at: 0); v >>= 8 }
        return [0x80 | UInt8(octets.count)] + octets
    }

    static func sequence(_ parts: [UInt8]...) -> [UInt8] { tlv(0x30, parts.flatMap { $0 }) }
    static func octetString(_ content: [UInt8]) -> [UInt8] { tlv(0x04, content) }

    /// A non-negative INTEGER, in the fewest octets (a leading zero when the top bit is set).
    static func integer(_ value: UInt64) -> [UInt8] {
        var octets: [UInt8] = []
        var v = value
        repeat { octets.insert(UInt8(v & 0xFF), at: 0); v >>= 8 } while v > 0
        if octets[0] & 0x80 != 0 { octets.insert(0, at: 0) }
        return tlv(integerTag, octets)
    }

    /// The content octets of an OBJECT IDENTIFIER written dotted ("1.2.840.10045.4.3.2").
    static func oidContent(_ dotted: String) -> [UInt8] {
        let arcs = dotted.split(separator: ".").map { UInt64($0)! }
        var out: [UInt8] = []
        for arc in [arcs[0] * 40 + arcs[1]] + arcs.dropFirst(2) {
            var groups: [UInt8] = [UInt8(arc & 0x7F)]
            var v = arc >> 7
            while v > 0 { groups.insert(UInt8(v & 0x7F) | 0x80, at: 0); v >>= 7 }
            out += groups
        }
        return out
    }

    static func oid(_ dotted: String) -> [UInt8] { tlv(0x06, oidContent(dotted)) }

    /// UTCTime for 1950 through 2049, GeneralizedTime otherwise (RFC 5280 §5.1.2.4), always UTC
    /// with seconds and "Z".
    static func time(_ epoch: Int64) throws(TLSError) -> [UInt8] {
        let full = Identity.x509Time(epoch)  // YYYYMMDDhhmmss
        guard full.count == 14, let year = Int(full.prefix(4)) else { throw .invalidRequest("a date out of range: \(epoch)") }
        if (1950...2049).contains(year) { return tlv(0x17, Array((full.dropFirst(2) + "Z").utf8)) }
        return tlv(0x18, Array((full + "Z").utf8))
    }

    /// One TLV at `at`: its tag, the range of its content and where the next one starts. Nil if
    /// the bytes there are not a whole DER TLV (single-octet tags, lengths up to 4 octets).
    static func read(_ bytes: [UInt8], at: Int) -> (tag: UInt8, content: Range<Int>, end: Int)? {
        guard at >= 0, at + 2 <= bytes.count else { return nil }
        let tag = bytes[at]
        var i = at + 1
        var n = Int(bytes[i])
        i += 1
        if n & 0x80 != 0 {
            let count = n & 0x7F
            guard (1...4).contains(count), i + count <= bytes.count else { return nil }
            n = 0
            for _ in 0..<count { n = n << 8 | Int(bytes[i]); i += 1 }
        }
        guard n <= bytes.count - i else { return nil }
        return (tag, i..<(i + n), i + n)
    }
}
