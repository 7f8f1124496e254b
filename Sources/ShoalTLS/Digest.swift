/// ShoalTLS: the one importer of mbedTLS 2.28. Peer identities (EC P-256 keys and X.509
/// certificates with clientAuth + serverAuth), their store on disk, authenticators, and mutual-TLS
/// sessions over any `ByteStream`. Every mbedTLS call goes through `MbedTLS.check`, so no error
/// code passes silently. All of it blocks: call it from threads, not the cooperative pool.
import ShoalCore
import CMbedTLS

public enum Digest {
    /// SHA-256 of `bytes`.
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let rc = bytes.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { output in
                mbedtls_sha256_ret(input.baseAddress, input.count, output.baseAddress, 0)
            }
        }
        // mbedtls_sha256_ret fails only on a hardware-accelerator fault; nothing sane to fall back to.
        precondition(rc == 0, "mbedtls_sha256_ret failed: \(rc)")
        return out
    }

    public static func hex(_ bytes: some Sequence<UInt8>, uppercase: Bool = false) -> String { SHA256.hex(bytes, uppercase: uppercase) }
}

public enum MbedTLSLibrary {
    public static var version: String {
        var buffer = [CChar](repeating: 0, count: 32)
        mbedtls_version_get_string(&buffer)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
