import ShoalCore
import CMbedTLS

/// An operator's public key (ECDSA P-256): what gateways trust, through the site file's
/// `trust.adminKeys`, to sign the fleet's trust entries. Named by its fingerprint, the first 16
/// bytes of the SHA-256 of its DER SubjectPublicKeyInfo in hex.
public struct AdminPublicKey: Sendable, Hashable, CustomStringConvertible {
    /// DER SubjectPublicKeyInfo, re-encoded by mbedTLS (one key, one encoding, one fingerprint).
    public let der: [UInt8]
    public let fingerprint: String

    /// Parses a public key as PEM (`-----BEGIN PUBLIC KEY-----`) or DER; only EC P-256 keys.
    public init(parsing bytes: [UInt8]) throws(TLSError) {
        var input = bytes
        if String(decoding: bytes.prefix(64), as: UTF8.self).contains("-----BEGIN"), input.last != 0 { input.append(0) }
        var pk = mbedtls_pk_context()
        mbedtls_pk_init(&pk)
        defer { mbedtls_pk_free(&pk) }
        let rc = input.withUnsafeBufferPointer { mbedtls_pk_parse_public_key(&pk, $0.baseAddress, $0.count) }
        guard rc == 0 else { throw .badKey("not a public key: \(MbedTLS.describe(rc))") }
        guard mbedtls_pk_get_type(&pk) == MBEDTLS_PK_ECKEY, let ec = mbedtls_pk_ec(pk), ec.pointee.grp.id == MBEDTLS_ECP_DP_SECP256R1 else {
            throw .badKey("an admin key is an EC P-256 key")
        }
        guard let der = PublicKeyDER.of(&pk) else { throw .badKey("mbedTLS cannot encode the key") }
        self.der = der
        fingerprint = Digest.hex(Digest.sha256(der).prefix(16))
    }

    /// The key as hex of its DER: how `shoal trust keygen` prints it for a site file.
    public init(hex: String) throws(TLSError) {
        guard let bytes = Hex.decode(hex), !bytes.isEmpty else { throw .badKey("not hex: an admin key is written as the hex `shoal trust keygen` printed, or as a PEM file") }
        try self.init(parsing: bytes)
    }

    public var hex: String { Digest.hex(der) }
    public var pem: String { Certificate.pem(der, label: "PUBLIC KEY") }
    public var description: String { fingerprint }

    /// Whether `signature` (DER ECDSA) signs `message` (SHA-256 of it) under this key.
    public func verifies(_ signature: [UInt8], of message: [UInt8]) -> Bool {
        guard !signature.isEmpty, signature.count <= 80 else { return false }
        var pk = mbedtls_pk_context()
        mbedtls_pk_init(&pk)
        defer { mbedtls_pk_free(&pk) }
        let parsed = der.withUnsafeBufferPointer { mbedtls_pk_parse_public_key(&pk, $0.baseAddress, $0.count) }
        guard parsed == 0 else { return false }
        let hash = Digest.sha256(message)
        return hash.withUnsafeBufferPointer { h in
            signature.withUnsafeBufferPointer { s in
                mbedtls_pk_verify(&pk, MBEDTLS_MD_SHA256, h.baseAddress, h.count, s.baseAddress, s.count)
            }
        } == 0
    }
}

/// The private half of an admin key: it signs trust entries, and it need never be on a gateway.
public final class AdminSigningKey: @unchecked Sendable {  // an mbedTLS key context, read-only after creation
    let key: PrivateKey
    let random: RandomSource
    public let publicKey: AdminPublicKey

    init(key: PrivateKey, random: RandomSource) throws(TLSError) {
        self.key = key
        self.random = random
        guard mbedtls_pk_get_type(key.context) == MBEDTLS_PK_ECKEY else { throw .badKey("an admin key is an EC P-256 key") }
        publicKey = try AdminPublicKey(parsing: key.publicKeyDER)
    }

    /// A new key from the kernel's entropy.
    public static func generate() throws(TLSError) -> AdminSigningKey {
        try generate { () throws(MbedTLSError) in try RandomSource(personalization: "shoal-admin-key") }
    }

    /// A key that follows from `seed`, for the simulator's operator (its runs must repeat exactly).
    /// Never a real site's key.
    package static func generate(seed: [UInt8]) throws(TLSError) -> AdminSigningKey {
        try generate { () throws(MbedTLSError) in try RandomSource(seed: seed, personalization: "shoal-sim-admin-key") }
    }

    private static func generate(_ source: () throws(MbedTLSError) -> RandomSource) throws(TLSError) -> AdminSigningKey {
        do {
            let random = try source()
            return try AdminSigningKey(key: try PrivateKey.generateP256(random: random), random: random)
        } catch let e as MbedTLSError { throw .mbedTLS(e) } catch let e as TLSError { throw e } catch { throw .badKey("\(error)") }
    }

    /// Reads a private key (PEM or DER, unencrypted) as `shoal trust keygen` wrote it.
    public convenience init(parsing bytes: [UInt8]) throws(TLSError) {
        let random: RandomSource
        do { random = try RandomSource(personalization: "shoal-admin-key") } catch { throw .mbedTLS(error) }
        try self.init(key: try PrivateKey(parsing: bytes), random: random)
    }

    public var pem: String { key.pem }

    /// A DER ECDSA signature over the SHA-256 of `message`.
    public func sign(_ message: [UInt8]) throws(TLSError) -> [UInt8] {
        let hash = Digest.sha256(message)
        var signature = [UInt8](repeating: 0, count: 160)  // MBEDTLS_ECDSA_MAX_LEN for P-256 is 72; the macro does not import
        var length = 0
        let rc = hash.withUnsafeBufferPointer { h in
            mbedtls_pk_sign(key.context, MBEDTLS_MD_SHA256, h.baseAddress, h.count, &signature, &length, mbedtls_ctr_drbg_random, random.drbg)
        }
        guard rc == 0 else { throw .mbedTLS(MbedTLSError(call: "mbedtls_pk_sign", code: rc)) }
        return Array(signature.prefix(length))
    }
}

/// Lower-case hex, both ways.
public enum Hex {
    public static func decode(_ text: String) -> [UInt8]? {
        let bytes = Array(text.utf8)
        guard bytes.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count / 2)
        var i = 0
        while i < bytes.count {
            guard let hi = nibble(bytes[i]), let lo = nibble(bytes[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x61...0x66: c - 0x61 + 10
        case 0x41...0x46: c - 0x41 + 10
        default: nil
        }
    }
}
