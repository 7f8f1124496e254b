/// A peer's id: the SHA-256 digest of its DER certificate, as in the Couchbase seed. Its one text
/// form everywhere (logs, CLI, status, advertisements) is 64 lower-case hex digits; `short` (the
/// first 8) is for the LED console line and other tight places, never for deciding trust.
public struct PeerID: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The 32 digest bytes as four big-endian words: a plain value (copying an id retains
    /// nothing; the mesh copies, compares and hashes ids constantly). `prefix` orders and hashes
    /// ids: a digest's bytes are uniform, so its first 8 bytes hash as well as all 32.
    let prefix: UInt64
    let word1: UInt64, word2: UInt64, word3: UInt64

    /// The 32 digest bytes. (ShoalTLS makes them from a certificate.)
    public init(bytes: [UInt8]) {
        precondition(bytes.count == 32, "a peer id is 32 bytes")
        func word(_ at: Int) -> UInt64 { bytes[at..<at + 8].reduce(0) { $0 << 8 | UInt64($1) } }
        prefix = word(0)
        word1 = word(8)
        word2 = word(16)
        word3 = word(24)
    }

    /// The 32 digest bytes (a new array: writers that only append use `append(to:)`).
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(32)
        append(to: &out)
        return out
    }

    /// Appends the 32 digest bytes.
    public func append(to out: inout [UInt8]) {
        out.appendBigEndian(prefix)
        out.appendBigEndian(word1)
        out.appendBigEndian(word2)
        out.appendBigEndian(word3)
    }

    /// The first 8 bytes as a number (for deterministic weights and quick comparisons).
    public var prefix64: UInt64 { prefix }

    public static func == (a: PeerID, b: PeerID) -> Bool {
        a.prefix == b.prefix && a.word1 == b.word1 && a.word2 == b.word2 && a.word3 == b.word3
    }
    public func hash(into h: inout Hasher) { h.combine(prefix) }

    /// Parses the 64-hex-digit form (either case).
    public init?(hex: String) {
        let chars = Array(hex.lowercased().utf8)
        guard chars.count == 64 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(32)
        var i = 0
        while i < 64 {
            guard let hi = PeerID.nibble(chars[i]), let lo = PeerID.nibble(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        self.init(bytes: out)
    }

    static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
    }

    public var description: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(64)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }
    public var short: String { String(description.prefix(8)) }
    public static func < (a: PeerID, b: PeerID) -> Bool {
        (a.prefix, a.word1, a.word2, a.word3) < (b.prefix, b.word1, b.word2, b.word3)
    }
}
