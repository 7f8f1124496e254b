import Foundation
import ShoalCore
import ShoalTLS
import ShoalTesting
import Testing

/// CRLs Shoal writes (`CRLWriter`, what `shoal trust crl` exports), read back by OpenSSL (a
/// verifier nobody here wrote), by `RevocationList`, and by mbedTLS inside a real handshake.
@Suite("CRLs Shoal writes", .serialized)
struct CRLWriterTests {
    /// A CA (Shoal's own, EC P-256, or one `openssl req -x509` made with an RSA key) and two
    /// gateways it signed: `revoked` is on the CRL, `kept` is not.
    struct Fleet {
        let dir = TemporaryDirectory(prefix: "shoal-crl")
        let caKey: PrivateKey
        let ca: Certificate
        let revoked: Identity
        let kept: Identity

        init(rsa: Bool = false) throws {
            if rsa {
                let r = try openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir.path + "/rsa-ca.key", "-out", dir.path + "/rsa-ca.pem",
                                     "-subj", "/CN=RSA Fleet CA/O=Test", "-days", "30", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
                guard r.status == 0 else { throw TLSError.invalidRequest("openssl req failed: \(r.out)") }
                caKey = try PrivateKey(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: dir.path + "/rsa-ca.key"))))
                ca = try Certificate(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: dir.path + "/rsa-ca.pem"))))
            } else {
                let authority = try Identity.createCertificateAuthority(.init(commonName: "Fleet CA"))
                caKey = authority.key
                ca = authority.certificate
            }
            revoked = try Identity.createSigned(.init(commonName: "gw-revoked"), caKey: caKey, caCertificate: ca)
            kept = try Identity.createSigned(.init(commonName: "gw-kept"), caKey: caKey, caCertificate: ca)
            try write("ca.pem", ca.pem)
            try write("revoked.pem", try Certificate(parsing: revoked.certificate.der).pem)  // the leaf alone
            try write("kept.pem", try Certificate(parsing: kept.certificate.der).pem)
        }

        func file(_ name: String) -> String { dir.path + "/" + name }
        func write(_ name: String, _ text: String) throws { try text.write(toFile: file(name), atomically: true, encoding: .utf8) }

        func crl(revoking: [Identity], thisUpdate: Int64 = Identity.now() - 60, days: Int64 = 30, number: UInt64 = 1) throws -> String {
            try CRLWriter.pem(caKey: caKey, caCertificate: ca, revoked: revoking.map { ($0.certificate.serialNumber, thisUpdate) },
                              thisUpdate: thisUpdate, nextUpdate: thisUpdate + days * 86_400, number: number)
        }
    }

    /// Exports a CRL revoking `revoked` and has openssl check it: its signature under the CA,
    /// then the revoked and the kept certificate with -crl_check. Returns openssl's outputs.
    static func opensslChecks(_ fleet: Fleet) throws -> (crl: String, revoked: String, kept: String, text: String) {
        try fleet.write("crl.pem", try fleet.crl(revoking: [fleet.revoked], number: 42))
        let crl = try openssl(["crl", "-in", fleet.file("crl.pem"), "-CAfile", fleet.file("ca.pem"), "-verify", "-noout"])
        #expect(crl.status == 0 && crl.out.contains("verify OK"), "\(crl.out)")
        let revoked = try openssl(["verify", "-crl_check", "-CRLfile", fleet.file("crl.pem"), "-CAfile", fleet.file("ca.pem"), fleet.file("revoked.pem")])
        #expect(revoked.status != 0 && revoked.out.contains("certificate revoked"), "\(revoked.out)")
        let kept = try openssl(["verify", "-crl_check", "-CRLfile", fleet.file("crl.pem"), "-CAfile", fleet.file("ca.pem"), fleet.file("kept.pem")])
        #expect(kept.status == 0 && kept.out.contains("kept.pem: OK"), "\(kept.out)")
        let text = try openssl(["crl", "-in", fleet.file("crl.pem"), "-noout", "-text"])
        #expect(text.out.contains("Version 2"), "\(text.out)")
        #expect(text.out.contains("X509v3 CRL Number") && text.out.contains("42"), "\(text.out)")
        #expect(text.out.contains("Serial Number: \(Digest.hex(fleet.revoked.certificate.serialNumber, uppercase: true))"), "\(text.out)")
        #expect(!text.out.contains("Serial Number: \(Digest.hex(fleet.kept.certificate.serialNumber, uppercase: true))"), "\(text.out)")
        return (crl.out, revoked.out, kept.out, text.out)
    }

    @Test("openssl verifies a CRL of an EC CA, refuses the certificate it revokes and passes the others",
          .enabled(if: hasOpenSSL, "openssl is not installed (CI installs it)"))
    func opensslAgreesEC() throws {
        let fleet = try Fleet()
        defer { fleet.dir.remove() }
        let out = try Self.opensslChecks(fleet)
        #expect(out.text.contains("Signature Algorithm: ecdsa-with-SHA256"), "\(out.text)")
        #expect(out.text.contains("X509v3 Authority Key Identifier"), "\(out.text)")
    }

    @Test("the same for a CA with an RSA key that openssl made (sha256WithRSAEncryption)",
          .enabled(if: hasOpenSSL, "openssl is not installed (CI installs it)"))
    func opensslAgreesRSA() throws {
        let fleet = try Fleet(rsa: true)
        defer { fleet.dir.remove() }
        let out = try Self.opensslChecks(fleet)
        #expect(out.text.contains("Signature Algorithm: sha256WithRSAEncryption"), "\(out.text)")
    }

    @Test("RevocationList reads back the issuer and the revoked serials, from PEM and DER; a CRL with none parses too")
    func readsBack() throws {
        let fleet = try Fleet()
        defer { fleet.dir.remove() }
        let list = try RevocationList(parsing: Array(try fleet.crl(revoking: [fleet.revoked, fleet.kept]).utf8))
        #expect(list.entries.count == 1)
        #expect(list.entries.first?.issuer == fleet.ca.subject)
        #expect(list.entries.first?.serials == [fleet.revoked, fleet.kept].map { Digest.hex($0.certificate.serialNumber) })
        let now = Identity.now()
        let der = try CRLWriter.der(caKey: fleet.caKey, caCertificate: fleet.ca, revoked: [(fleet.revoked.certificate.serialNumber, now)],
                                    thisUpdate: now, nextUpdate: now + 86_400, number: 3)
        #expect(der.first == 0x30)
        #expect(try RevocationList(parsing: der).entries.first?.serials == [Digest.hex(fleet.revoked.certificate.serialNumber)])
        let empty = try RevocationList(parsing: Array(try fleet.crl(revoking: []).utf8))
        #expect(empty.entries.count == 1 && empty.entries.first?.serials == [])
    }

    @Test("a CRL valid past 2049 carries GeneralizedTime, and both readers take it", .enabled(if: hasOpenSSL, "openssl is not installed (CI installs it)"))
    func generalizedTime() throws {
        let fleet = try Fleet()
        defer { fleet.dir.remove() }
        let now = Identity.now()
        let pem = try CRLWriter.pem(caKey: fleet.caKey, caCertificate: fleet.ca, revoked: [(fleet.revoked.certificate.serialNumber, now)],
                                    thisUpdate: now, nextUpdate: 2_600_000_000, number: UInt64.max)  // 2052
        try fleet.write("crl.pem", pem)
        #expect(try RevocationList(parsing: Array(pem.utf8)).entries.first?.serials.count == 1)
        let text = try openssl(["crl", "-in", fleet.file("crl.pem"), "-CAfile", fleet.file("ca.pem"), "-verify", "-noout", "-text"])
        #expect(text.status == 0 && text.out.contains("verify OK") && text.out.contains("2052 GMT"), "\(text.out)")
        #expect(text.out.contains("18446744073709551615"), "\(text.out)")  // the crlNumber, UInt64.max, positive
    }

    /// A server whose authenticator is the fleet's trust (the CA as root, the CRL) against a client.
    static func fleetHandshake(_ fleet: Fleet, client: Identity, crl: RevocationList) async throws -> (client: Result<TLSSession, TLSError>, server: Result<TLSSession, TLSError>) {
        let server = try Identity.createSigned(.init(commonName: "gw-server"), caKey: fleet.caKey, caCertificate: fleet.ca)
        let ca = fleet.ca
        let serverAuth = PeerAuthenticator.fleet { FleetTrust(roots: [ca], revocationList: crl) }
        let r = await handshake(client: try TLSContext(role: .client, identity: client, authenticator: .rootCertificates([ca])),
                                              server: try TLSContext(role: .server, identity: server, authenticator: serverAuth))
        return (r.client, r.server)
    }

    @Test("in a handshake, mbedTLS refuses the revoked gateway as revoked (alert certificate_revoked) and accepts the other", arguments: [false, true])
    func handshakeRefusesRevoked(rsa: Bool) async throws {
        if rsa && !hasOpenSSL { return }
        let fleet = try Fleet(rsa: rsa)
        defer { fleet.dir.remove() }
        let crl = try RevocationList(parsing: Array(try fleet.crl(revoking: [fleet.revoked]).utf8))
        let refused = try await Self.fleetHandshake(fleet, client: fleet.revoked, crl: crl)
        #expect(failure(refused.server) == .revoked(peer: fleet.revoked.peerID.description))
        guard case .refusedByPeer(_, let alert)? = failure(refused.client) else {
            Issue.record("the revoked client's handshake: \(refused.client)")
            return
        }
        #expect(alert == 44)  // certificate_revoked (RFC 5246)
        let accepted = try await Self.fleetHandshake(fleet, client: fleet.kept, crl: crl)
        #expect(try accepted.server.get().peerID == fleet.kept.peerID)
        #expect(failure(accepted.client) == nil)
    }

    @Test("bad inputs are refused with a reason: another CA's certificate, a key that is not the CA's, a CA that is not one, dates backwards, garbage")
    func badInputs() throws {
        let fleet = try Fleet()
        defer { fleet.dir.remove() }
        let other = try Identity.createCertificateAuthority(.init(commonName: "Other CA"))
        let stranger = try Identity.createSigned(.init(commonName: "stranger"), caKey: other.key, caCertificate: other.certificate)
        #expect(!stranger.certificate.isIssued(by: fleet.ca))
        #expect(fleet.revoked.certificate.isIssued(by: fleet.ca))
        #expect(!fleet.revoked.certificate.isIssued(by: other.certificate))
        // Same subject as our CA, another key: the name matches, the signature does not.
        let impostor = try Identity.createCertificateAuthority(.init(commonName: "Fleet CA"))
        #expect(!fleet.revoked.certificate.isIssued(by: impostor.certificate))

        let now = Identity.now()
        #expect(throws: TLSError.keyDoesNotMatchCertificate) {
            try CRLWriter.pem(caKey: other.key, caCertificate: fleet.ca, revoked: [], thisUpdate: now, nextUpdate: now + 60, number: 1)
        }
        #expect(Self.refusal { () throws(TLSError) in _ = try CRLWriter.pem(caKey: fleet.kept.key, caCertificate: fleet.kept.certificate, revoked: [], thisUpdate: now, nextUpdate: now + 60, number: 1) }.contains("is not a CA"))
        #expect(Self.refusal { () throws(TLSError) in _ = try CRLWriter.pem(caKey: fleet.caKey, caCertificate: fleet.ca, revoked: [], thisUpdate: now, nextUpdate: now, number: 1) }.contains("next update must come after"))
        #expect(Self.refusal { () throws(TLSError) in _ = try CRLWriter.pem(caKey: fleet.caKey, caCertificate: fleet.ca, revoked: [([], now)], thisUpdate: now, nextUpdate: now + 60, number: 1) }.contains("serial number is 1 to 32 bytes"))
        #expect(throws: TLSError.self) { try PrivateKey(parsing: Array("not a key at all\n".utf8)) }
        #expect(throws: TLSError.self) { try RevocationList(parsing: Array("-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n".utf8)) }
    }

    @Test("a CA whose keyUsage leaves out cRLSign is refused: its CRLs would not be trusted",
          .enabled(if: hasOpenSSL, "openssl is not installed (CI installs it)"))
    func caWithoutCRLSign() throws {
        let dir = TemporaryDirectory(prefix: "shoal-crl")
        defer { dir.remove() }
        let r = try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir.path + "/ca.key",
                             "-out", dir.path + "/ca.pem", "-subj", "/CN=No CRL CA", "-days", "5", "-addext", "keyUsage=critical,keyCertSign"])
        #expect(r.status == 0, "\(r.out)")
        let key = try PrivateKey(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: dir.path + "/ca.key"))))
        let ca = try Certificate(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: dir.path + "/ca.pem"))))
        let now = Identity.now()
        #expect(Self.refusal { () throws(TLSError) in _ = try CRLWriter.pem(caKey: key, caCertificate: ca, revoked: [], thisUpdate: now, nextUpdate: now + 60, number: 1) }.contains("without cRLSign"))
    }

    /// Why `body` threw, or "" when it did not.
    static func refusal(_ body: () throws(TLSError) -> Void) -> String {
        do { try body(); return "" } catch { return error.description }
    }

    @Test("serial numbers in hex become DER INTEGER contents: no redundant zeros, a zero before a set top bit")
    func serialsFromHex() {
        #expect(CRLWriter.serial(hex: "0abc") == [0x0A, 0xBC])
        #expect(CRLWriter.serial(hex: "ABC") == [0x0A, 0xBC])
        #expect(CRLWriter.serial(hex: "00:00:7f") == [0x7F])
        #expect(CRLWriter.serial(hex: "ff") == [0x00, 0xFF])
        #expect(CRLWriter.serial(hex: "0x80") == [0x00, 0x80])
        #expect(CRLWriter.serial(hex: "0") == [0x00])
        #expect(CRLWriter.serial(hex: "") == nil)
        #expect(CRLWriter.serial(hex: "xyz") == nil)
        #expect(CRLWriter.serial(hex: String(repeating: "7f", count: 21)) == nil)  // over 20 bytes
        #expect(CRLWriter.serial(hex: String(repeating: "ff", count: 20))?.count == 21)
    }
}
