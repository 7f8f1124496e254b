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
/// platform source). No fixed seeds: every key, serial number and handshake random comes from here.
final class RandomSource: @unchecked Sendable {  // an mbedTLS DRBG, which locks itself (Debian builds MBEDTLS_THREADING_PTHREAD)
    let entropy = UnsafeMutablePointer<mbedtls_entropy_context>.allocate(capacity: 1)
    let drbg = UnsafeMutablePointer<mbedtls_ctr_drbg_context>.allocate(capacity: 1)

    init(personalization: String = "shoal") throws(MbedTLSError) {
        mbedtls_entropy_init(entropy)
        mbedtls_ctr_drbg_init(drbg)
        let custom = Array(personalization.utf8)
        let rc = custom.withUnsafeBufferPointer { p in
            mbedtls_ctr_drbg_seed(drbg, mbedtls_entropy_func, entropy, p.baseAddress, p.count)
        }
        if rc != 0 {
            mbedtls_ctr_drbg_free(drbg)
            mbedtls_entropy_free(entropy)
            drbg.deallocate()
            entropy.deallocate()
            throw MbedTLSError(call: "mbedtls_ctr_drbg_seed", code: rc)
        }
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
