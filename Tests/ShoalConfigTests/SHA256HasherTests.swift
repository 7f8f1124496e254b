import ShoalConfig
@testable import ShoalCore
import ShoalTLS
import Testing

/// The incremental SHA-256 (`SHA256.Hasher`): FIPS 180-4 vectors, any split of the input, the
/// straightforward implementation it replaced, and mbedTLS.
@Suite struct SHA256HasherTests {
    static let vectors: [(String, String)] = [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        ("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
    ]

    @Test("the hasher gives the FIPS 180-4 digests, one-shot and fed a byte at a time")
    func fipsVectors() {
        for (message, digest) in Self.vectors {
            #expect(SHA256.hex(SHA256.hash(Array(message.utf8))) == digest, "\(message)")
            var h = SHA256.Hasher()
            for b in message.utf8 { h.update([b]) }
            #expect(SHA256.hex(h.finalize()) == digest, "\(message) byte by byte")
        }
    }

    @Test("a million a's, fed in uneven pieces, give the FIPS digest")
    func millionA() {
        var h = SHA256.Hasher()
        let piece = [UInt8](repeating: UInt8(ascii: "a"), count: 999)
        var left = 1_000_000
        while left > 0 {
            let n = min(left, piece.count)
            h.update(piece[0..<n])
            left -= n
        }
        #expect(SHA256.hex(h.finalize()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test("on random inputs split at random points the hasher agrees with the old implementation and with mbedTLS")
    func randomInputs() {
        var random = SeededRandom(seed: 25)
        for round in 0..<200 {
            let length = round < 130 ? round : Int(random.next() % 5000)
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            var h = SHA256.Hasher()
            var at = 0
            while at < bytes.count {
                let n = min(bytes.count - at, Int(random.next() % 150))
                h.update(bytes[at..<(at + n)])
                at += n
            }
            let digest = h.finalize()
            #expect(digest == Self.reference(bytes), "length \(length)")
            #expect(digest == Digest.sha256(bytes), "length \(length)")
            #expect(SHA256.hash(bytes) == digest, "length \(length)")
        }
    }

    /// The implementation `Hasher` replaced (one array per message, one per block), kept as an
    /// independent reference.
    static func reference(_ bytes: [UInt8]) -> [UInt8] {
        let k = SHA256.k  // the constants; everything else here is independent of Hasher
        func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { (x >> n) | (x << (32 - n)) }
        var h: [UInt32] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]
        var message = bytes
        message.append(0x80)
        while message.count % 64 != 56 { message.append(0) }
        let bits = UInt64(bytes.count) &* 8
        for shift in stride(from: 56, through: 0, by: -8) { message.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        var w = [UInt32](repeating: 0, count: 64)
        for block in stride(from: 0, to: message.count, by: 64) {
            for i in 0..<16 {
                let j = block + i * 4
                w[i] = UInt32(message[j]) << 24 | UInt32(message[j + 1]) << 16 | UInt32(message[j + 2]) << 8 | UInt32(message[j + 3])
            }
            for i in 16..<64 {
                let s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3)
                let s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10)
                w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
            }
            var (a, b, c, d, e, f, g, hh) = (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7])
            for i in 0..<64 {
                let t1 = hh &+ (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) &+ ((e & f) ^ (~e & g)) &+ k[i] &+ w[i]
                let t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) &+ ((a & b) ^ (a & c) ^ (b & c))
                (hh, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
            }
            h[0] &+= a; h[1] &+= b; h[2] &+= c; h[3] &+= d
            h[4] &+= e; h[5] &+= f; h[6] &+= g; h[7] &+= hh
        }
        return h.flatMap { word in stride(from: 24, through: 0, by: -8).map { UInt8(truncatingIfNeeded: word >> UInt32($0)) } }
    }
}
