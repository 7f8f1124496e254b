import ShoalCore
import CMbedTLS

/// Writes X.509 v2 certificate revocation lists (RFC 5280 §5) signed by an operator's CA: what
/// `shoal trust crl` exports, for gateways (mbedTLS checks it at each handshake through
/// `FleetTrust.revocationList`) and for anything else that trusts the CA. mbedTLS 2.28 reads CRLs
/// but cannot write them, so the DER is encoded here and only the signature is mbedTLS's.
public enum CRLWriter {
    /// The CRL as DER. `revoked` gives each certificate's serial (the content octets of its DER
    /// INTEGER, as `Certificate.serialNumber` has them) and when it was revoked; `number` is the
    /// crlNumber extension, which must grow from one CRL of this CA to the next. Times are
    /// seconds since the epoch. The CA key is EC (ecdsa-with-SHA256) or RSA (sha256WithRSAEncryption).
    public static func der(caKey: PrivateKey, caCertificate: Certificate, revoked: [(serial: [UInt8], revokedAt: Int64)],
                           thisUpdate: Int64, nextUpdate: Int64, number: UInt64) throws(TLSError) -> [UInt8] {
        guard caKey.matches(caCertificate) else { throw .keyDoesNotMatchCertificate }
        guard caCertificate.isCA else {
            throw .invalidRequest("the CA certificate (\(caCertificate.subject)) is not a CA (basicConstraints CA:FALSE): it cannot sign a CRL")
        }
        // A CA whose keyUsage leaves out cRLSign signs CRLs nobody accepts (mbedTLS and OpenSSL both refuse them).
        if mbedtls_x509_crt_check_key_usage(caCertificate.chain, UInt32(MBEDTLS_X509_KU_CRL_SIGN)) != 0 {
            throw .invalidRequest("the CA certificate (\(caCertificate.subject)) has a keyUsage without cRLSign: CRLs it signs would be refused")
        }
        guard nextUpdate > thisUpdate else { throw .invalidRequest("the CRL's next update must come after this update") }
        let algorithm: [UInt8]
        switch mbedtls_pk_get_type(caKey.context) {
        case MBEDTLS_PK_ECKEY, MBEDTLS_PK_ECDSA: algorithm = DER.sequence(DER.oid("1.2.840.10045.4.3.2"))            // ecdsa-with-SHA256
        case MBEDTLS_PK_RSA: algorithm = DER.sequence(DER.oid("1.2.840.113549.1.1.11"), DER.null)                   // sha256WithRSAEncryption
        default: throw .badKey("a CA key that signs CRLs is EC or RSA")
        }

        var entries: [[UInt8]] = []
        var seen: Set<[UInt8]> = []
        for item in revoked {
            guard !item.serial.isEmpty, item.serial.count <= 32 else {
                throw .invalidRequest("a certificate serial number is 1 to 32 bytes, not \(item.serial.count)")
            }
            guard seen.insert(item.serial).inserted else { continue }  // listed once is enough
            entries.append(DER.sequence(DER.tlv(DER.integerTag, item.serial), try DER.time(item.revokedAt)))
        }

        var extensions = [DER.sequence(DER.oid("2.5.29.20"), DER.octetString(DER.integer(number)))]  // cRLNumber
        if let keyID = subjectKeyIdentifier(of: caCertificate) {
            // authorityKeyIdentifier { [0] keyIdentifier }: how OpenSSL matches the CRL to the CA's key.
            extensions.append(DER.sequence(DER.oid("2.5.29.35"), DER.octetString(DER.sequence(DER.tlv(0x80, keyID)))))
        }
        var tbs = DER.integer(1)  // v2
        tbs += algorithm
        tbs += caCertificate.subjectDER  // issuer: the CA's subject, byte for byte (mbedTLS compares them raw)
        tbs += try DER.time(thisUpdate)
        tbs += try DER.time(nextUpdate)
        if !entries.isEmpty { tbs += DER.sequence(entries.flatMap { $0 }) }  // absent, not empty, when none (RFC 5280 §5.1.2.6)
        tbs += DER.tlv(0xA0, DER.sequence(extensions.flatMap { $0 }))
        let tbsCertList = DER.sequence(tbs)

        let signature = try sign(tbsCertList, with: caKey)
        return DER.sequence(tbsCertList, algorithm, DER.tlv(0x03, [0] + signature))
    }

    /// The CRL as PEM (`-----BEGIN X509 CRL-----`), as `openssl crl` and mbedTLS read it.
    public static func pem(caKey: PrivateKey, caCertificate: Certificate, revoked: [(serial: [UInt8], revokedAt: Int64)],
                           thisUpdate: Int64, nextUpdate: Int64, number: UInt64) throws(TLSError) -> String {
        Certificate.pem(try der(caKey: caKey, caCertificate: caCertificate, revoked: revoked,
                                thisUpdate: thisUpdate, nextUpdate: nextUpdate, number: number), label: "X509 CRL")
    }

    /// A serial number written in hex (as `openssl x509 -serial` prints it; colons allowed) as the
    /// content octets of its DER INTEGER: no redundant leading zeros, a zero in front when the top
    /// bit is set (serials are positive). Nil if it is not hex or longer than 20 bytes.
    public static func serial(hex text: String) -> [UInt8]? {
        var digits = text.filter { $0 != ":" }
        if digits.hasPrefix("0x") || digits.hasPrefix("0X") { digits.removeFirst(2) }
        if digits.count % 2 == 1 { digits = "0" + digits }
        guard !digits.isEmpty, var bytes = Hex.decode(digits) else { return nil }
        while bytes.count > 1, bytes[0] == 0 { bytes.removeFirst() }
        guard bytes.count <= 20 else { return nil }  // RFC 5280: at most 20 octets
        if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return bytes
    }

    static func sign(_ tbs: [UInt8], with key: PrivateKey) throws(TLSError) -> [UInt8] {
        let random: RandomSource
        do { random = try RandomSource(personalization: "shoal-crl") } catch { throw .mbedTLS(error) }
        let hash = Digest.sha256(tbs)
        var signature = [UInt8](repeating: 0, count: 1024)  // MBEDTLS_PK_SIGNATURE_MAX_SIZE (MBEDTLS_MPI_MAX_SIZE); the macro does not import
        var length = 0
        let rc = hash.withUnsafeBufferPointer { h in
            mbedtls_pk_sign(key.context, MBEDTLS_MD_SHA256, h.baseAddress, h.count, &signature, &length, mbedtls_ctr_drbg_random, random.drbg)
        }
        guard rc == 0 else { throw .mbedTLS(MbedTLSError(call: "mbedtls_pk_sign", code: rc)) }
        return Array(signature.prefix(length))
    }

    /// The keyIdentifier of the certificate's subjectKeyIdentifier extension (2.5.29.14), if it has one.
    static func subjectKeyIdentifier(of certificate: Certificate) -> [UInt8]? {
        let ext = certificate.chain.pointee.v3_ext
        guard ext.len > 0, let p = ext.p else { return nil }
        var bytes = Array(UnsafeBufferPointer(start: p, count: ext.len))
        if bytes.first == 0xA3, let outer = DER.read(bytes, at: 0) { bytes = Array(bytes[outer.content]) }  // the [3] wrapper, if kept
        guard let list = DER.read(bytes, at: 0), list.tag == 0x30 else { return nil }
        var at = list.content.lowerBound
        while at < list.content.upperBound, let ext = DER.read(bytes, at: at) {
            at = ext.end
            guard ext.tag == 0x30, let id = DER.read(bytes, at: ext.content.lowerBound), id.tag == 0x06,
                  Array(bytes[id.content]) == DER.oidContent("2.5.29.14") else { continue }
            var next = DER.read(bytes, at: id.end)
            if next?.tag == 0x01, let critical = next { next = DER.read(bytes, at: critical.end) }
            guard let value = next, value.tag == 0x04, let keyID = DER.read(bytes, at: value.content.lowerBound), keyID.tag == 0x04 else { return nil }
            return Array(bytes[keyID.content])
        }
        return nil
    }
}
