import ShoalCore
import CMbedTLS

/// X.509 certificate revocation lists (PEM or DER, several in one), parsed once and handed to
/// mbedTLS's chain check: a certificate a CRL of its issuer lists is refused as revoked.
public final class RevocationList: @unchecked Sendable {  // an mbedTLS CRL chain, read-only after parsing
    let list = UnsafeMutablePointer<mbedtls_x509_crl>.allocate(capacity: 1)

    public init(parsing bytes: [UInt8]) throws(TLSError) {
        mbedtls_x509_crl_init(list)
        var input = bytes
        if String(decoding: bytes.prefix(64), as: UTF8.self).contains("-----BEGIN"), input.last != 0 { input.append(0) }
        let rc = input.withUnsafeBufferPointer { mbedtls_x509_crl_parse(list, $0.baseAddress, $0.count) }
        if rc != 0 { throw .badCertificate("not a CRL: \(MbedTLS.describe(rc))") }
    }

    deinit {
        mbedtls_x509_crl_free(list)
        list.deallocate()
    }

    /// The serial numbers (hex) each list revokes, with its issuer.
    public var entries: [(issuer: String, serials: [String])] {
        var out: [(String, [String])] = []
        var crl: UnsafeMutablePointer<mbedtls_x509_crl>? = list
        while let c = crl, c.pointee.version != 0 {
            var serials: [String] = []
            var entry: UnsafeMutablePointer<mbedtls_x509_crl_entry>? = withUnsafeMutablePointer(to: &c.pointee.entry) { $0 }
            while let e = entry, e.pointee.serial.len > 0 {
                serials.append(Digest.hex(UnsafeBufferPointer(start: e.pointee.serial.p, count: e.pointee.serial.len)))
                entry = e.pointee.next
            }
            out.append((Certificate.dn(&c.pointee.issuer), serials))
            crl = c.pointee.next
        }
        return out
    }
}
