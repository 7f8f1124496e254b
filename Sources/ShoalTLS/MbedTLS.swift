import ShoalCore
import CMbedTLS

/// An mbedTLS call that failed: which call, its code and mbedTLS's own words for it.
public struct MbedTLSError: Error, Sendable, Equatable, CustomStringConvertible {
    public let call: String
    public let code: Int32
    public var message: String { MbedTLS.describe(code) }
    public var description: String { "\(call) failed: \(message) (-0x\(String(-code, radix: 16)))" }
}

/// The choke point for mbedTLS return codes.
enum MbedTLS {
    static func check(_ rc: Int32, _ call: @autoclosure () -> String) throws(MbedTLSError) {
        if rc < 0 { throw MbedTLSError(call: call(), code: rc) }
    }

    static func describe(_ code: Int32) -> String {
        var buffer = [CChar](repeating: 0, count: 200)
        mbedtls_strerror(code, &buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A CTR-DRBG seeded from the kernel's entropy (getrandom / /dev/urandom through mbedTLS's
/// platform source): every key, serial number and handshake random of the product comes from here.
/// The one exception is `init(seed:personalization:)`, for the simulator alone (package access).
final class RandomSource: @unchecked Sendable {  // an mbedTLS DRBG, which locks itself (Debian builds MBEDTLS_THREADING_PTHREAD)
    let entropy = UnsafeMutablePointer<mbedtls_entropy_context>.allocate(capacity: 1)
    let drbg = UnsafeMutablePointer<mbedtls_ctr_drbg_context>.allocate(capacity: 1)
    /// The fixed "entropy" of a seeded source (kept alive while the DRBG may reseed from it).
    private let seeded: SeededEntropy?

    init(personalization: String = "shoal") throws(MbedTLSError) {
        seeded = nil
        try seed(personalization) { drbg, entropy, custom in
            mbedtls_ctr_drbg_seed(drbg, mbedtls_entropy_func, entropy, custom.baseAddress, custom.count)
        }
    }

    /// A source whose every output follows from `seed`: the same seed gives the same keys. Only for
    /// simulated gateways, whose runs must repeat exactly; never for a real key.
    init(seed: [UInt8], personalization: String) throws(MbedTLSError) {
        let state = SeededEntropy(seed: seed)
        seeded = state
        let context = Unmanaged.passUnretained(state).toOpaque()
        try self.seed(personalization) { drbg, _, custom in
            mbedtls_ctr_drbg_seed(drbg, { context, output, length in
                guard let context, let output else { return -1 }
                Unmanaged<SeededEntropy>.fromOpaque(context).takeUnretainedValue().fill(output, length)
                return 0
            }, context, custom.baseAddress, custom.count)
        }
    }

    private func seed(_ personalization: String,
                      _ call: (UnsafeMutablePointer<mbedtls_ctr_drbg_context>, UnsafeMutablePointer<mbedtls_entropy_context>, UnsafeBufferPointer<UInt8>) -> Int32) throws(MbedTLSError) {
        mbedtls_entropy_init(entropy)
        mbedtls_ctr_drbg_init(drbg)
        let custom = Array(personalization.utf8)
        let rc = custom.withUnsafeBufferPointer { call(drbg, entropy, $0) }
        // Every stored property is set by now, so a throw runs deinit, which frees both contexts.
        if rc != 0 { throw MbedTLSError(call: "mbedtls_ctr_drbg_seed", code: rc) }
    }

    deinit {
        mbedtls_ctr_drbg_free(drbg)
        mbedtls_entropy_free(entropy)
        drbg.deallocate()
        entropy.deallocate()
    }

    func bytes(_ count: Int) throws(MbedTLSError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        try MbedTLS.check(out.withUnsafeMutableBufferPointer { mbedtls_ctr_drbg_random(drbg, $0.baseAddress, count) }, "mbedtls_ctr_drbg_random")
        return out
    }
}

/// The entropy callback of a seeded `RandomSource`: SHA-256 of the seed and a counter, block after
/// block, so the bytes it hands out depend on the seed and on how many were asked for before.
private final class SeededEntropy {
    let seed: [UInt8]
    var counter: UInt64 = 0
    init(seed: [UInt8]) { self.seed = seed }

    func fill(_ output: UnsafeMutablePointer<UInt8>, _ length: Int) {
        var done = 0
        while done < length {
            counter += 1
            let block = Digest.sha256(seed + withUnsafeBytes(of: counter.littleEndian) { Array($0) })
            let n = min(block.count, length - done)
            for i in 0..<n { output[done + i] = block[i] }
            done += n
        }
    }
}
