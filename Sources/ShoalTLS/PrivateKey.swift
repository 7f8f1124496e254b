import ShoalCore
import CMbedTLS

/// A private key (Shoal makes EC P-256 ones). The PEM it writes is what goes, mode 0600, on disk.
public final class PrivateKey: @unchecked Sendable {  // an mbedTLS key context, read-only after parsing
    let context = UnsafeMutablePointer<mbedtls_pk_context>.allocate(capacity: 1)

    init() { mbedtls_pk_init(context) }

    deinit {
        mbedtls_pk_free(context)
        context.deallocate()
    }

    /// A new EC P-256 key from the kernel's entropy.
    static func generateP256(random: RandomSource) throws(MbedTLSError) -> PrivateKey {
        let key = PrivateKey()
        try MbedTLS.check(mbedtls_pk_setup(key.context, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)), "mbedtls_pk_setup")
        try MbedTLS.check(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key.context.pointee), mbedtls_ctr_drbg_random, random.drbg),
                          "mbedtls_ecp_gen_key(P-256)")
        return key
    }

    /// Parses a PEM or DER private key (unencrypted).
    public convenience init(parsing bytes: [UInt8]) throws(TLSError) {
        self.init()
        var input = bytes
        if String(decoding: bytes.prefix(64), as: UTF8.self).contains("-----BEGIN"), input.last != 0 { input.append(0) }
        let rc = input.withUnsafeBufferPointer { mbedtls_pk_parse_key(context, $0.baseAddress, $0.count, nil, 0) }
        if rc != 0 { throw .badKey(MbedTLS.describe(rc)) }
    }

    public var pem: String {
        var buffer = [UInt8](repeating: 0, count: 4096)
        guard mbedtls_pk_write_key_pem(context, &buffer, buffer.count) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self)
    }

    /// The public half, DER SubjectPublicKeyInfo; its SHA-256 is the peer id of any certificate
    /// over this key.
    public var publicKeyDER: [UInt8] { PublicKeyDER.of(context) ?? [] }

    /// Whether this key is the private half of `certificate`'s public key.
    func matches(_ certificate: Certificate) -> Bool {
        mbedtls_pk_check_pair(&certificate.chain.pointee.pk, context) == 0
    }
}
