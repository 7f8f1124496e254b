import ShoalCore
import CMbedTLS
import Glibc

/// A parsed X.509 certificate chain (leaf first). Owns its mbedTLS structure.
public final class Certificate: @unchecked Sendable {  // an mbedTLS certificate chain, read-only after parsing
    let chain = UnsafeMutablePointer<mbedtls_x509_crt>.allocate(capacity: 1)

    init() { mbedtls_x509_crt_init(chain) }

    deinit {
        mbedtls_x509_crt_free(chain)
        chain.deallocate()
    }

    /// Parses PEM (one or more certificates) or DER. Anything else is `badCertificate`.
    public convenience init(parsing bytes: [UInt8]) throws(TLSError) {
        self.init()
        guard !bytes.isEmpty else { throw .badCertificate("empty input") }
        var input = bytes
        let isPEM = bytes.starts(with: Array("-----BEGIN".utf8)) || String(decoding: bytes.prefix(4096), as: UTF8.self).contains("-----BEGIN CERTIFICATE-----")
        if isPEM && input.last != 0 { input.append(0) }  // mbedTLS wants PEM NUL-terminated
        let rc = input.withUnsafeBufferPointer { mbedtls_x509_crt_parse(chain, $0.baseAddress, $0.count) }
        if rc != 0 {
            throw .badCertificate(rc < 0 ? MbedTLS.describe(rc) : "\(rc.counted("certificate")) in the input could not be parsed")
        }
    }

    /// Wraps a copy of the chain that starts at `crt` (for peer chains owned by an SSL context).
    convenience init(copying crt: UnsafePointer<mbedtls_x509_crt>) throws(TLSError) {
        self.init()
        var cur: UnsafePointer<mbedtls_x509_crt>? = crt
        while let c = cur, c.pointee.raw.len > 0 {
            let rc = mbedtls_x509_crt_parse_der(chain, c.pointee.raw.p, c.pointee.raw.len)
            if rc != 0 { throw .badCertificate(MbedTLS.describe(rc)) }
            cur = UnsafePointer(c.pointee.next)
        }
    }

    /// The leaf certificate's DER.
    public var der: [UInt8] { Array(UnsafeBufferPointer(start: chain.pointee.raw.p, count: chain.pointee.raw.len)) }

    /// DER of every certificate in the chain, leaf first.
    public var chainDER: [[UInt8]] {
        var out: [[UInt8]] = []
        var cur: UnsafeMutablePointer<mbedtls_x509_crt>? = chain
        while let c = cur, c.pointee.raw.len > 0 {
            out.append(Array(UnsafeBufferPointer(start: c.pointee.raw.p, count: c.pointee.raw.len)))
            cur = c.pointee.next
        }
        return out
    }

    /// The leaf's public key, DER SubjectPublicKeyInfo (what the peer id digests).
    public var publicKeyDER: [UInt8] {
        // A parsed certificate's key always re-encodes; the raw bytes it was parsed from are the fallback.
        PublicKeyDER.of(&chain.pointee.pk) ?? Array(UnsafeBufferPointer(start: chain.pointee.pk_raw.p, count: chain.pointee.pk_raw.len))
    }

    /// The peer id of whoever holds this certificate's key: the SHA-256 of its public key, so it
    /// stays the same when the certificate is renewed over the same key.
    public var peerID: PeerID { PeerID(publicKeyDER: publicKeyDER) }

    public var subject: String { Certificate.dn(&chain.pointee.subject) }
    public var issuer: String { Certificate.dn(&chain.pointee.issuer) }

    static func dn(_ name: UnsafeMutablePointer<mbedtls_x509_name>) -> String {
        var buffer = [CChar](repeating: 0, count: 1024)
        let n = mbedtls_x509_dn_gets(&buffer, buffer.count, name)
        guard n >= 0 else { return "?" }
        return String(decoding: buffer.prefix(Int(n)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Validity bounds, seconds since the Unix epoch (UTC).
    public var notBefore: Int64 { Certificate.epoch(chain.pointee.valid_from) }
    public var notAfter: Int64 { Certificate.epoch(chain.pointee.valid_to) }

    static func epoch(_ t: mbedtls_x509_time) -> Int64 {
        var tm = Glibc.tm()
        tm.tm_year = Int32(t.year - 1900)
        tm.tm_mon = Int32(t.mon - 1)
        tm.tm_mday = Int32(t.day)
        tm.tm_hour = Int32(t.hour)
        tm.tm_min = Int32(t.min)
        tm.tm_sec = Int32(t.sec)
        return Int64(timegm(&tm))
    }

    public var isCA: Bool { chain.pointee.ca_istrue != 0 }

    /// The leaf's serial number: the content octets of its DER INTEGER, as a CRL lists it.
    public var serialNumber: [UInt8] { Array(UnsafeBufferPointer(start: chain.pointee.serial.p, count: chain.pointee.serial.len)) }

    /// The leaf's subject Name, DER as in the certificate (a CRL's issuer is these bytes).
    var subjectDER: [UInt8] { Array(UnsafeBufferPointer(start: chain.pointee.subject_raw.p, count: chain.pointee.subject_raw.len)) }

    /// Whether `ca`'s certificate issued this leaf: it names `ca`'s subject as issuer and `ca`'s
    /// key verifies its signature. Dates are not looked at (an expired certificate can be revoked).
    public func isIssued(by ca: Certificate) -> Bool {
        let leaf = chain.pointee
        let issuer = Array(UnsafeBufferPointer(start: leaf.issuer_raw.p, count: leaf.issuer_raw.len))
        guard !issuer.isEmpty, issuer == ca.subjectDER, let md = mbedtls_md_info_from_type(leaf.sig_md) else { return false }
        var hash = [UInt8](repeating: 0, count: Int(mbedtls_md_get_size(md)))
        guard mbedtls_md(md, leaf.tbs.p, leaf.tbs.len, &hash) == 0 else { return false }
        return mbedtls_pk_verify_ext(leaf.sig_pk, leaf.sig_opts, &ca.chain.pointee.pk, leaf.sig_md, hash, hash.count, leaf.sig.p, leaf.sig.len) == 0
    }

    /// The extended key usages this leaf names ("serverAuth", "clientAuth", or the dotted OID).
    public var extendedKeyUsages: [String] {
        var out: [String] = []
        guard chain.pointee.ext_types & Int32(MBEDTLS_X509_EXT_EXTENDED_KEY_USAGE) != 0 else { return out }
        var seq: UnsafeMutablePointer<mbedtls_x509_sequence>? = withUnsafeMutablePointer(to: &chain.pointee.ext_key_usage) { $0 }
        while let s = seq, s.pointee.buf.len > 0 {
            let oid = Array(UnsafeBufferPointer(start: s.pointee.buf.p, count: s.pointee.buf.len))
            switch oid {
            case KeyUsageOID.serverAuth: out.append("serverAuth")
            case KeyUsageOID.clientAuth: out.append("clientAuth")
            default: out.append(Digest.hex(oid))
            }
            seq = s.pointee.next
        }
        return out
    }

    /// Whether the leaf's extended key usage names `oid`. A certificate with no extension at all
    /// does not count: Shoal requires the usage to be stated.
    func hasExtendedKeyUsage(_ oid: [UInt8]) -> Bool {
        guard chain.pointee.ext_types & Int32(MBEDTLS_X509_EXT_EXTENDED_KEY_USAGE) != 0 else { return false }
        return oid.withUnsafeBufferPointer { p in
            p.withMemoryRebound(to: CChar.self) { mbedtls_x509_crt_check_extended_key_usage(chain, $0.baseAddress, $0.count) == 0 }
        }
    }

    /// PEM text of the whole chain.
    public var pem: String {
        chainDER.map { Certificate.pem($0, label: "CERTIFICATE") }.joined()
    }

    static func pem(_ der: [UInt8], label: String) -> String {
        var out = [UInt8](repeating: 0, count: der.count * 2 + 200)
        var written = 0
        let header = "-----BEGIN \(label)-----\n", footer = "-----END \(label)-----\n"
        let rc = der.withUnsafeBufferPointer { d in
            mbedtls_pem_write_buffer(header, footer, d.baseAddress, d.count, &out, out.count, &written)
        }
        guard rc == 0 else { return "" }
        return String(decoding: out.prefix(max(0, written - 1)), as: UTF8.self)  // written counts the NUL
    }
}

/// OIDs of the extended key usages (RFC 5280 id-kp-serverAuth / id-kp-clientAuth).
enum KeyUsageOID {
    static let serverAuth: [UInt8] = [0x2B, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01]  // 1.3.6.1.5.5.7.3.1
    static let clientAuth: [UInt8] = [0x2B, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02]  // 1.3.6.1.5.5.7.3.2
    static let extendedKeyUsageExtension: [UInt8] = [0x55, 0x1D, 0x25]                 // 2.5.29.37
}
