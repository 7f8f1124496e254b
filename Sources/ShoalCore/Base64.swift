/// Standard Base64 (RFC 4648 §4, with `=` padding), for blob pieces in control-socket messages.
/// Decoding is strict: characters outside the alphabet, a wrong length or misplaced padding are
/// refused (nil), never skipped.
public enum Base64 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    static let values: [UInt8] = {
        var v = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { v[Int(c)] = UInt8(i) }
        return v
    }()

    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var it = bytes.makeIterator()
        while let a = it.next() {
            let b = it.next(), c = it.next()
            let n = UInt32(a) << 16 | UInt32(b ?? 0) << 8 | UInt32(c ?? 0)
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(b == nil ? UInt8(ascii: "=") : alphabet[Int(n >> 6 & 63)])
            out.append(c == nil ? UInt8(ascii: "=") : alphabet[Int(n & 63)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    public static func decode(_ text: String) -> [UInt8]? {
        let s = Array(text.utf8)
        guard s.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(s.count / 4 * 3)
        var i = 0
        while i < s.count {
            let last = i + 4 == s.count
            let pad = last ? (s[i + 3] == UInt8(ascii: "=") ? (s[i + 2] == UInt8(ascii: "=") ? 2 : 1) : 0) : 0
            var n: UInt32 = 0
            for j in 0..<(4 - pad) {
                let v = values[Int(s[i + j])]
                guard v != 0xFF else { return nil }
                n |= UInt32(v) << UInt32(18 - 6 * j)
            }
            out.append(UInt8(truncatingIfNeeded: n >> 16))
            if pad < 2 { out.append(UInt8(truncatingIfNeeded: n >> 8)) }
            if pad < 1 { out.append(UInt8(truncatingIfNeeded: n)) }
            i += 4
        }
        return out
    }
}
