import ShoalCore
import CMbedTLS
import Glibc

/// A gateway's identity: an EC P-256 private key and an X.509 certificate (with its issuing CA's
/// certificate when CA-signed) whose extended key usage holds both clientAuth and serverAuth,
/// because every gateway is a TLS client to some peers and a server to others. Its peer id is the
/// SHA-256 of the public key (DER SubjectPublicKeyInfo): a certificate renewed over the same key
/// (`renewed`, `reissued`) keeps the peer id that other gateways trust.
public final class Identity: @unchecked Sendable {  // mbedTLS key and certificate, read-only after loading
    public let key: PrivateKey
    public let certificate: Certificate

    public init(key: PrivateKey, certificate: Certificate) throws(TLSError) {
        guard key.matches(certificate) else { throw .keyDoesNotMatchCertificate }
        self.key = key
        self.certificate = certificate
    }

    public var peerID: PeerID { certificate.peerID }

    /// Whether the certificate's validity has ended at `now` (seconds since the epoch).
    public func isExpired(now: Int64 = Identity.now()) -> Bool { now >= certificate.notAfter }

    public static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec)
    }

    /// What goes into a new certificate.
    public struct Request: Sendable {
        public var commonName: String
        public var organization: String?
        /// Seconds since the epoch; defaults to one hour ago, so a peer whose clock is a little
        /// behind still accepts the certificate.
        public var notBefore: Int64
        public var validDays: Int
        /// Leave both: a gateway is a TLS client and a server. Tests drop one to check refusals.
        public var extendedKeyUsages: Set<ExtendedKeyUsage> = [.serverAuth, .clientAuth]

        public init(commonName: String, organization: String? = "Shoal", notBefore: Int64? = nil, validDays: Int = 365) {
            self.commonName = commonName
            self.organization = organization
            self.notBefore = notBefore ?? (Identity.now() - 3600)
            self.validDays = validDays
        }
    }

    public enum ExtendedKeyUsage: Sendable, Hashable {
        case serverAuth, clientAuth
        var oid: [UInt8] { self == .serverAuth ? KeyUsageOID.serverAuth : KeyUsageOID.clientAuth }
    }

    /// A new self-signed identity.
    public static func createSelfSigned(_ request: Request) throws(TLSError) -> Identity {
        try create(request, issuer: nil, isCA: false)
    }

    /// A self-signed identity whose key follows from `seed` (the same seed, the same key and peer
    /// id): for simulated gateways, whose runs must repeat exactly. Never a real gateway's key.
    package static func createSelfSigned(_ request: Request, seed: [UInt8]) throws(TLSError) -> Identity {
        let random: RandomSource
        do { random = try RandomSource(seed: seed, personalization: "shoal-sim-identity") } catch { throw .mbedTLS(error) }
        return try create(request, key: nil, keepingSubjectOf: nil, issuer: nil, isCA: false, random: random)
    }

    /// A new identity signed by an operator's CA (its key and certificate, PEM or DER).
    public static func createSigned(_ request: Request, caKey: PrivateKey, caCertificate: Certificate) throws(TLSError) -> Identity {
        guard caKey.matches(caCertificate) else { throw .keyDoesNotMatchCertificate }
        guard caCertificate.isCA else { throw .invalidRequest("the CA certificate (\(caCertificate.subject)) is not a CA (basicConstraints CA:FALSE)") }
        return try create(request, issuer: (caKey, caCertificate), isCA: false)
    }

    /// A new self-signed CA, for tests and small sites without a PKI.
    public static func createCertificateAuthority(_ request: Request) throws(TLSError) -> Identity {
        try create(request, issuer: nil, isCA: true)
    }

    /// A new certificate over this identity's key, so the same peer id: self-signed, or signed by
    /// `issuer` (a CA's key and certificate). The request gives the subject and the validity.
    public func reissued(_ request: Request, issuer: (key: PrivateKey, certificate: Certificate)? = nil) throws(TLSError) -> Identity {
        if let issuer {
            guard issuer.key.matches(issuer.certificate) else { throw .keyDoesNotMatchCertificate }
            guard issuer.certificate.isCA else { throw .invalidRequest("the CA certificate (\(issuer.certificate.subject)) is not a CA (basicConstraints CA:FALSE)") }
        }
        return try Identity.create(request, key: key, keepingSubjectOf: nil, issuer: issuer, isCA: false)
    }

    /// A self-signed certificate over this identity's key with its subject, valid `validDays` from
    /// an hour before `now`: what a gateway does to its own self-signed identity near expiry.
    /// The peer id does not change.
    public func renewed(validDays: Int, now: Int64 = Identity.now()) throws(TLSError) -> Identity {
        let request = Request(commonName: "renewed", organization: nil, notBefore: now - 3600, validDays: validDays)
        return try Identity.create(request, key: key, keepingSubjectOf: certificate, issuer: nil, isCA: false)
    }

    /// Whether the leaf names itself as its issuer (so the gateway can renew it by itself).
    public var isSelfSigned: Bool { certificate.issuer == certificate.subject }

    static func checkName(_ text: String, _ what: String) throws(TLSError) {
        guard !text.isEmpty, text.utf8.count <= 64,
              text.unicodeScalars.allSatisfy({ $0.properties.isAlphabetic || ("0"..."9").contains($0) || " ._-@".unicodeScalars.contains($0) })
        else { throw .invalidRequest("\(what) \"\(text)\" must be 1–64 letters, digits, spaces or . _ - @") }
    }

    static func create(_ request: Request, issuer: (key: PrivateKey, certificate: Certificate)?, isCA: Bool) throws(TLSError) -> Identity {
        try create(request, key: nil, keepingSubjectOf: nil, issuer: issuer, isCA: isCA)
    }

    /// A certificate over `key` (a new key when nil), with the request's subject or the one of
    /// `keepingSubjectOf`.
    static func create(_ request: Request, key given: PrivateKey?, keepingSubjectOf previous: Certificate?,
                       issuer: (key: PrivateKey, certificate: Certificate)?, isCA: Bool, random seeded: RandomSource? = nil) throws(TLSError) -> Identity {
        if previous == nil {
            try checkName(request.commonName, "common name")
            if let o = request.organization { try checkName(o, "organization") }
        }
        guard request.validDays >= 1 && request.validDays <= 36500 else { throw .invalidRequest("validity must be 1 to 36500 days") }
        do {
            let random = try seeded ?? RandomSource(personalization: "shoal-identity")
            let key = try given ?? PrivateKey.generateP256(random: random)
            let der = try writeCertificate(request, subjectKey: key, subjectOf: previous, issuer: issuer, isCA: isCA, random: random)
            let cert = Certificate()  // leaf first, then the CA that signed it
            try MbedTLS.check(der.withUnsafeBufferPointer { mbedtls_x509_crt_parse_der(cert.chain, $0.baseAddress, $0.count) }, "mbedtls_x509_crt_parse_der")
            if let issuer {
                let ca = issuer.certificate.der
                try MbedTLS.check(ca.withUnsafeBufferPointer { mbedtls_x509_crt_parse_der(cert.chain, $0.baseAddress, $0.count) }, "mbedtls_x509_crt_parse_der(CA)")
            }
            return try Identity(key: key, certificate: cert)
        } catch let e as MbedTLSError {
            throw .mbedTLS(e)
        } catch let e as TLSError {
            throw e
        } catch {
            throw .invalidRequest("\(error)")
        }
    }

    /// "YYYYMMDDhhmmss" in UTC, as mbedtls_x509write_crt_set_validity wants.
    static func x509Time(_ epoch: Int64) -> String {
        var t = time_t(epoch)
        var tm = Glibc.tm()
        gmtime_r(&t, &tm)
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(tm.tm_year + 1900)\(two(tm.tm_mon + 1))\(two(tm.tm_mday))\(two(tm.tm_hour))\(two(tm.tm_min))\(two(tm.tm_sec))"
    }

    /// Copies a parsed name attribute by attribute into a writer's name list (no string round trip
    /// that could mangle escaped characters; the string type — UTF8String, PrintableString… — kept).
    static func copyName(_ from: UnsafeMutablePointer<mbedtls_x509_name>, into list: UnsafeMutablePointer<UnsafeMutablePointer<mbedtls_asn1_named_data>?>) throws(MbedTLSError) {
        var name: UnsafeMutablePointer<mbedtls_x509_name>? = from
        while let n = name, n.pointee.oid.len > 0 {
            let stored = n.pointee.oid.p.withMemoryRebound(to: CChar.self, capacity: n.pointee.oid.len) { oid in
                mbedtls_asn1_store_named_data(list, oid, n.pointee.oid.len, n.pointee.val.p, n.pointee.val.len)
            }
            guard let stored else { throw MbedTLSError(call: "mbedtls_asn1_store_named_data", code: MBEDTLS_ERR_X509_ALLOC_FAILED) }
            stored.pointee.val.tag = n.pointee.val.tag
            name = n.pointee.next
        }
    }

    static func writeCertificate(_ request: Request, subjectKey: PrivateKey, subjectOf previous: Certificate? = nil,
                                 issuer: (key: PrivateKey, certificate: Certificate)?, isCA: Bool, random: RandomSource) throws(MbedTLSError) -> [UInt8] {
        let crt = UnsafeMutablePointer<mbedtls_x509write_cert>.allocate(capacity: 1)
        mbedtls_x509write_crt_init(crt)
        let serial = UnsafeMutablePointer<mbedtls_mpi>.allocate(capacity: 1)
        mbedtls_mpi_init(serial)
        defer {
            mbedtls_x509write_crt_free(crt)
            mbedtls_mpi_free(serial)
            crt.deallocate()
            serial.deallocate()
        }
        mbedtls_x509write_crt_set_version(crt, MBEDTLS_X509_CRT_VERSION_3)
        mbedtls_x509write_crt_set_md_alg(crt, MBEDTLS_MD_SHA256)
        mbedtls_x509write_crt_set_subject_key(crt, subjectKey.context)
        mbedtls_x509write_crt_set_issuer_key(crt, issuer?.key.context ?? subjectKey.context)

        var subject = "CN=\(request.commonName)"
        if let o = request.organization { subject += ",O=\(o)" }
        if let previous {
            try copyName(&previous.chain.pointee.subject, into: &crt.pointee.subject)
        } else {
            try MbedTLS.check(mbedtls_x509write_crt_set_subject_name(crt, subject), "mbedtls_x509write_crt_set_subject_name")
        }
        if let issuer {
            try copyName(&issuer.certificate.chain.pointee.subject, into: &crt.pointee.issuer)
        } else if let previous {
            try copyName(&previous.chain.pointee.subject, into: &crt.pointee.issuer)  // self-signed: issuer = subject
        } else {
            try MbedTLS.check(mbedtls_x509write_crt_set_issuer_name(crt, subject), "mbedtls_x509write_crt_set_issuer_name")
        }

        var serialBytes = try random.bytes(16)
        serialBytes[0] &= 0x7F  // positive
        serialBytes[0] |= 0x01  // and never zero-length
        try MbedTLS.check(mbedtls_mpi_read_binary(serial, serialBytes, serialBytes.count), "mbedtls_mpi_read_binary")
        try MbedTLS.check(mbedtls_x509write_crt_set_serial(crt, serial), "mbedtls_x509write_crt_set_serial")
        let notAfter = request.notBefore + Int64(request.validDays) * 86_400
        try MbedTLS.check(mbedtls_x509write_crt_set_validity(crt, x509Time(request.notBefore), x509Time(notAfter)), "mbedtls_x509write_crt_set_validity")
        try MbedTLS.check(mbedtls_x509write_crt_set_basic_constraints(crt, isCA ? 1 : 0, isCA ? 0 : -1), "mbedtls_x509write_crt_set_basic_constraints")
        let usage = isCA ? UInt32(MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN | MBEDTLS_X509_KU_DIGITAL_SIGNATURE)
                         : UInt32(MBEDTLS_X509_KU_DIGITAL_SIGNATURE)
        try MbedTLS.check(mbedtls_x509write_crt_set_key_usage(crt, UInt32(usage)), "mbedtls_x509write_crt_set_key_usage")
        try MbedTLS.check(mbedtls_x509write_crt_set_subject_key_identifier(crt), "mbedtls_x509write_crt_set_subject_key_identifier")
        try MbedTLS.check(mbedtls_x509write_crt_set_authority_key_identifier(crt), "mbedtls_x509write_crt_set_authority_key_identifier")
        if !isCA {
            // mbedTLS 2.28 has no setter for extended key usage: encode SEQUENCE OF OID with its
            // ASN.1 writers (which write backwards, from the end of the buffer) and add it.
            let eku = try encodeExtendedKeyUsage([ExtendedKeyUsage.serverAuth, .clientAuth].filter(request.extendedKeyUsages.contains).map(\.oid))
            let oid = KeyUsageOID.extendedKeyUsageExtension
            let rc = oid.withUnsafeBufferPointer { o in
                o.withMemoryRebound(to: CChar.self) { oc in
                    eku.withUnsafeBufferPointer { v in mbedtls_x509write_crt_set_extension(crt, oc.baseAddress, oc.count, 0, v.baseAddress, v.count) }
                }
            }
            try MbedTLS.check(rc, "mbedtls_x509write_crt_set_extension(extKeyUsage)")
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = mbedtls_x509write_crt_der(crt, &buffer, buffer.count, mbedtls_ctr_drbg_random, random.drbg)
        try MbedTLS.check(n, "mbedtls_x509write_crt_der")
        return Array(buffer.suffix(Int(n)))  // the DER is written at the end of the buffer
    }

    static func encodeExtendedKeyUsage(_ oids: [[UInt8]]) throws(MbedTLSError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 128)
        let count: Int = try buffer.withUnsafeMutableBufferPointer { (buf) throws(MbedTLSError) -> Int in
            let start = buf.baseAddress!
            var p: UnsafeMutablePointer<UInt8>? = start + buf.count
            var length = 0
            for oid in oids.reversed() {
                let rc = oid.withUnsafeBufferPointer { o in
                    o.withMemoryRebound(to: CChar.self) { mbedtls_asn1_write_oid(&p, start, $0.baseAddress, $0.count) }
                }
                try MbedTLS.check(rc, "mbedtls_asn1_write_oid")
                length += Int(rc)
            }
            let l = mbedtls_asn1_write_len(&p, start, length)
            try MbedTLS.check(l, "mbedtls_asn1_write_len")
            let t = mbedtls_asn1_write_tag(&p, start, UInt8(MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE))
            try MbedTLS.check(t, "mbedtls_asn1_write_tag")
            return length + Int(l) + Int(t)
        }
        return Array(buffer.suffix(count))
    }
}
