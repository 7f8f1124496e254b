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

/// A group id (Couchbase's peerGroupID, ObjectBox's meshId) and what is derived from it.
public struct GroupID: Sendable, Equatable, CustomStringConvertible {
    public let rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// The DNS-SD service type: `_` + the first 6 bytes of SHA-256(group id) in upper-case hex +
    /// `._tcp`, as in the ObjectBox seed (`com.example.myapp.mesh` gives `_C17B206CE9F6._tcp`).
    public var serviceType: String {
        "_" + Digest.hex(Digest.sha256(Array(rawValue.utf8)).prefix(6), uppercase: true) + "._tcp"
    }

    /// The Bluetooth LE service UUID (16 bytes, as printed): bytes 6–21 of SHA-256(group id), with
    /// the version-4 and variant bits set, so it reads as a random UUID and differs from the DNS-SD
    /// type's bytes.
    public var bleServiceUUID: [UInt8] {
        var u = Array(Digest.sha256(Array(rawValue.utf8))[6..<22])
        u[6] = (u[6] & 0x0F) | 0x40
        u[8] = (u[8] & 0x3F) | 0x80
        return u
    }

    /// `bleServiceUUID` as text (8-4-4-4-12 hex digits).
    public var bleServiceUUIDText: String {
        let h = Digest.hex(bleServiceUUID, uppercase: true)
        let c = Array(h)
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(c[$0]) }.joined(separator: "-")
    }
}

public enum MbedTLSLibrary {
    public static var version: String {
        var buffer = [CChar](repeating: 0, count: 32)
        mbedtls_version_get_string(&buffer)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
