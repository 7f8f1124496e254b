/// SHA-256 (FIPS 180-4) in plain Swift, for names derived from text (the group's DNS-SD service
/// type and BLE service UUID, `GroupID`) and for blobs (`Hasher`, incremental, chunk by chunk).
/// Pure modules use it; identities and TLS use mbedTLS's (ShoalTLS.Digest), and a test checks the
/// two agree.
public enum SHA256 {
    static let k: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ]

    /// The 32-byte digest of `bytes` (one-shot on `Hasher`).
    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var hasher = Hasher()
        hasher.update(bytes)
        return hasher.finalize()
    }

    /// An incremental SHA-256: feed it pieces with `update`, then `finalize` once. Blobs are hashed
    /// so, chunk by chunk, without holding the whole in memory. Blocks are compressed straight from
    /// the caller's buffer; only a partial block (under 64 bytes) is copied aside.
    public struct Hasher: Sendable {
        var state: [UInt32] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]
        var pending: [UInt8] = []
        var byteCount: UInt64 = 0

        public init() { pending.reserveCapacity(64) }

        /// Resumes a hash from its chaining value after `byteCount` bytes, a multiple of 64 (see
        /// `chainingValue`). Nil when either is malformed.
        public init?(chainingValue: [UInt8], byteCount: UInt64) {
            guard chainingValue.count == 32, byteCount % 64 == 0 else { return nil }
            self.init()
            for i in 0..<8 {
                state[i] = UInt32(chainingValue[i * 4]) << 24 | UInt32(chainingValue[i * 4 + 1]) << 16
                    | UInt32(chainingValue[i * 4 + 2]) << 8 | UInt32(chainingValue[i * 4 + 3])
            }
            self.byteCount = byteCount
        }

        /// The internal state after the bytes given so far, when they fill whole 64-byte blocks
        /// (nil otherwise): with the byte count, enough to resume the hash later. Blob manifests
        /// list it at every chunk boundary, so each chunk is checked on its own in one pass.
        public var chainingValue: [UInt8]? {
            guard pending.isEmpty else { return nil }
            var out: [UInt8] = []
            out.reserveCapacity(32)
            for word in state { for shift in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: word >> UInt32(shift))) } }
            return out
        }

        public mutating func update(_ bytes: [UInt8]) { bytes.withUnsafeBytes { update($0) } }
        public mutating func update(_ bytes: ArraySlice<UInt8>) { bytes.withUnsafeBytes { update($0) } }

        public mutating func update(_ bytes: UnsafeRawBufferPointer) {
            guard let base = bytes.baseAddress, bytes.count > 0 else { return }
            byteCount &+= UInt64(bytes.count)
            var offset = 0
            if !pending.isEmpty {
                let take = min(64 - pending.count, bytes.count)
                pending.append(contentsOf: UnsafeRawBufferPointer(start: base, count: take))
                offset = take
                guard pending.count == 64 else { return }
                pending.withUnsafeBytes { p in compress(p.baseAddress!, blocks: 1) }
                pending.removeAll(keepingCapacity: true)
            }
            let blocks = (bytes.count - offset) / 64
            if blocks > 0 { compress(base + offset, blocks: blocks) }
            offset += blocks * 64
            if offset < bytes.count { pending.append(contentsOf: UnsafeRawBufferPointer(start: base + offset, count: bytes.count - offset)) }
        }

        /// The digest of everything given. The hasher is spent: start a new one for another message.
        public mutating func finalize() -> [UInt8] {
            // Padding: a 1 bit, zeros to 56 mod 64, then the length in bits, big-endian.
            let bits = byteCount &* 8
            var tail: [UInt8] = [0x80]
            let zeros = (55 - pending.count + 64) % 64
            tail.append(contentsOf: repeatElement(0, count: zeros))
            for shift in stride(from: 56, through: 0, by: -8) { tail.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
            update(tail)
            precondition(pending.isEmpty, "SHA-256 padding left a partial block")
            var out: [UInt8] = []
            out.reserveCapacity(32)
            for word in state { for shift in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: word >> UInt32(shift))) } }
            return out
        }

        /// Compresses `blocks` whole 64-byte blocks starting at `p` into the state.
        private mutating func compress(_ p: UnsafeRawPointer, blocks: Int) {
            state.withUnsafeMutableBufferPointer { h in
                SHA256.k.withUnsafeBufferPointer { k in
                    withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
                        var (a0, b0, c0, d0, e0, f0, g0, h0) = (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7])
                        for block in 0..<blocks {
                            let q = p + block * 64
                            for i in 0..<16 {
                                w[i] = UInt32(bigEndian: q.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self))
                            }
                            for i in 16..<64 {
                                let x = w[i - 15], y = w[i - 2]
                                let s0 = rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3)
                                let s1 = rotr(y, 17) ^ rotr(y, 19) ^ (y >> 10)
                                w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
                            }
                            var (a, b, c, d, e, f, g, hh) = (a0, b0, c0, d0, e0, f0, g0, h0)
                            for i in 0..<64 {
                                let s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)
                                let choice = (e & f) ^ (~e & g)
                                let t1 = hh &+ s1 &+ choice &+ k[i] &+ w[i]
                                let s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)
                                let majority = (a & b) ^ (a & c) ^ (b & c)
                                let t2 = s0 &+ majority
                                (hh, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
                            }
                            a0 &+= a; b0 &+= b; c0 &+= c; d0 &+= d
                            e0 &+= e; f0 &+= f; g0 &+= g; h0 &+= hh
                        }
                        (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]) = (a0, b0, c0, d0, e0, f0, g0, h0)
                    }
                }
            }
        }
    }

    @inline(__always)
    static func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { (x >> n) | (x << (32 - n)) }

    /// Bytes as hex digits.
    public static func hex(_ bytes: some Sequence<UInt8>, uppercase: Bool = false) -> String {
        let digits = Array((uppercase ? "0123456789ABCDEF" : "0123456789abcdef").utf8)
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
