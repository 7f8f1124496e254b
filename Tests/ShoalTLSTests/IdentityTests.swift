import Foundation
import ShoalCore
import ShoalTLS
import ShoalTesting
import Testing

let hasOpenSSL = FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")

func openssl(_ args: [String], stdin: Data? = nil) throws -> (status: Int32, out: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
    p.arguments = args
    let out = Pipe()
    p.standardOutput = out
    p.standardError = out
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self))
}

@Suite("Identities")
struct IdentityTests {
    @Test("a self-signed identity has both key usages, a matching key, and a peer id that is the SHA-256 of its public key")
    func selfSigned() throws {
        let id = try Identity.createSelfSigned(.init(commonName: "gw-1"))
        #expect(id.certificate.extendedKeyUsages == ["serverAuth", "clientAuth"])
        #expect(id.peerID.description.count == 64)
        #expect(id.peerID == PeerID(publicKeyDER: id.certificate.publicKeyDER))
        #expect(id.certificate.publicKeyDER == id.key.publicKeyDER)
        #expect(id.peerID != PeerID(bytes: Digest.sha256(id.certificate.der)))
        #expect(PeerID(hex: id.peerID.description) == id.peerID)
        #expect(id.certificate.subject == "CN=gw-1, O=Shoal")
        #expect(id.certificate.issuer == id.certificate.subject)
        #expect(!id.isExpired())
        let reparsed = try Certificate(parsing: Array(id.certificate.pem.utf8))
        #expect(reparsed.der == id.certificate.der)
        let key = try PrivateKey(parsing: Array(id.key.pem.utf8))
        _ = try Identity(key: key, certificate: reparsed)
    }

    @Test("a certificate renewed or re-issued over the same key keeps the peer id; a new key is a new peer id")
    func renewalKeepsThePeerID() throws {
        let start = Identity.now() - 2 * 86_400
        let old = try Identity.createSelfSigned(.init(commonName: "gw-3", organization: "Example Water", notBefore: start, validDays: 1))
        #expect(old.isExpired())
        let renewed = try old.renewed(validDays: 365)
        #expect(renewed.peerID == old.peerID)
        #expect(renewed.certificate.der != old.certificate.der)
        #expect(renewed.certificate.subject == "CN=gw-3, O=Example Water")
        #expect(renewed.certificate.issuer == renewed.certificate.subject)
        #expect(renewed.certificate.extendedKeyUsages == ["serverAuth", "clientAuth"])
        #expect(!renewed.isExpired())
        #expect(renewed.certificate.notAfter - Identity.now() > 364 * 86_400)
        #expect(renewed.isSelfSigned)

        // "now" is the caller's: a gateway whose clock is forced ahead renews from there.
        let later = Identity.now() + 400 * 86_400
        #expect(try old.renewed(validDays: 30, now: later).certificate.notAfter == later - 3600 + 30 * 86_400)

        let ca = try Identity.createCertificateAuthority(.init(commonName: "Site CA"))
        let signed = try old.reissued(.init(commonName: "gw-3b", validDays: 90), issuer: (ca.key, ca.certificate))
        #expect(signed.peerID == old.peerID)
        #expect(signed.certificate.issuer == "CN=Site CA, O=Shoal")
        #expect(signed.certificate.chainDER.count == 2)
        #expect(!signed.isSelfSigned)
        #expect(throws: TLSError.self) { try old.reissued(.init(commonName: "x"), issuer: (old.key, old.certificate)) }

        #expect(try Identity.createSelfSigned(.init(commonName: "gw-3")).peerID != old.peerID)
    }

    @Test("the simulator's seeded keys repeat from the same seed and differ across seeds; the product's keys never repeat")
    func seededKeys() throws {
        let request = Identity.Request(commonName: "sim-gateway-0")
        let a = try Identity.createSelfSigned(request, seed: Array("seed 1".utf8))
        let b = try Identity.createSelfSigned(request, seed: Array("seed 1".utf8))
        let c = try Identity.createSelfSigned(request, seed: Array("seed 2".utf8))
        #expect(a.peerID == b.peerID && a.peerID != c.peerID)
        #expect(a.key.pem == b.key.pem)
        #expect(try Identity.createSelfSigned(request).peerID != Identity.createSelfSigned(request).peerID)

        let k1 = try AdminSigningKey.generate(seed: Array("admin".utf8))
        let k2 = try AdminSigningKey.generate(seed: Array("admin".utf8))
        #expect(k1.publicKey.der == k2.publicKey.der)
        // Deterministic ECDSA: the same key and message give the same signature, which verifies.
        let message = Array("revoke peer-x".utf8)
        let signature = try k1.sign(message)
        #expect(try k2.sign(message) == signature && k1.publicKey.verifies(signature, of: message))
        #expect(try AdminSigningKey.generate(seed: Array("other".utf8)).publicKey.der != k1.publicKey.der)
        #expect(try AdminSigningKey.generate().publicKey.der != AdminSigningKey.generate().publicKey.der)
    }

    @Test("the peer id is what openssl gives for the certificate's public key", .enabled(if: hasOpenSSL, "openssl is not installed"))
    func peerIDMatchesOpenSSL() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let id = try Identity.createSelfSigned(.init(commonName: "gw-4"))
        try id.certificate.pem.write(toFile: dir.file("c.pem"), atomically: true, encoding: .utf8)
        _ = try openssl(["x509", "-in", dir.file("c.pem"), "-pubkey", "-noout", "-out", dir.file("pub.pem")])
        let r = try openssl(["pkey", "-pubin", "-in", dir.file("pub.pem"), "-outform", "DER", "-out", dir.file("pub.der")])
        #expect(r.status == 0, "\(r.out)")
        let digest = try openssl(["dgst", "-sha256", "-r", dir.file("pub.der")])
        #expect(digest.out.hasPrefix(id.peerID.description), "openssl: \(digest.out)")
    }

    @Test("a CA-signed identity names its CA as issuer and carries the CA in its chain")
    func caSigned() throws {
        let ca = try Identity.createCertificateAuthority(.init(commonName: "Site CA", organization: "Example Water"))
        let id = try Identity.createSigned(.init(commonName: "gw-2"), caKey: ca.key, caCertificate: ca.certificate)
        #expect(id.certificate.issuer == "CN=Site CA, O=Example Water")
        #expect(id.certificate.chainDER.count == 2)
        #expect(id.certificate.chainDER[1] == ca.certificate.der)
        #expect(throws: TLSError.self) { try Identity.createSigned(.init(commonName: "x"), caKey: id.key, caCertificate: id.certificate) }
        #expect(throws: TLSError.keyDoesNotMatchCertificate) { try Identity.createSigned(.init(commonName: "x"), caKey: id.key, caCertificate: ca.certificate) }
    }

    @Test("garbage is refused as a certificate or key with a typed error", arguments: [
        [UInt8](), Array("hello".utf8), Array("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".utf8), [0x30, 0x82, 0x01],
    ])
    func garbage(_ bytes: [UInt8]) {
        #expect(throws: TLSError.self) { try Certificate(parsing: bytes) }
        #expect(throws: TLSError.self) { try PrivateKey(parsing: bytes) }
    }

    @Test("random bytes and mutated certificates never crash the parser")
    func fuzzCertificates() throws {
        var rng = SeededRandom(seed: 7)
        let der = try Identity.createSelfSigned(.init(commonName: "fuzz")).certificate.der
        for i in 0..<3000 {
            var input: [UInt8]
            if i % 3 == 0 {
                input = (0..<Int.random(in: 0...600, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            } else {
                input = der
                for _ in 0..<Int.random(in: 1...8, using: &rng) {
                    input[Int.random(in: 0..<input.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                }
                if i % 3 == 2 { input = Array(input.prefix(Int.random(in: 0..<input.count, using: &rng))) }
            }
            if let c = try? Certificate(parsing: input) {
                _ = c.subject
                _ = c.extendedKeyUsages
                _ = c.notAfter
            }
        }
    }

    @Test("identities are stored under a label with a 0600 key, found again, and renewed when expired")
    func storeAndRenew() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = IdentityStore(directory: dir.file("identities"))
        #expect(try store.find("gw") == nil)
        let (first, created) = try store.loadOrCreate("gw") { () throws(TLSError) in try Identity.createSelfSigned(.init(commonName: "gw")) }
        #expect(created)
        var st = stat()
        stat(dir.file("identities/gw.key.pem"), &st)
        #expect(st.st_mode & 0o777 == 0o600)
        let again = try #require(try store.find("gw"))
        #expect(again.peerID == first.peerID)
        let (same, createdAgain) = try store.loadOrCreate("gw") { () throws(TLSError) in Issue.record("should not create"); return first }
        #expect(!createdAgain && same.peerID == first.peerID)
        // A year and a day later it has expired and is replaced.
        let later = Identity.now() + 367 * 86_400
        #expect(again.isExpired(now: later))
        let (renewed, wasRenewed) = try store.loadOrCreate("gw", now: later) { () throws(TLSError) in try Identity.createSelfSigned(.init(commonName: "gw")) }
        #expect(wasRenewed && renewed.peerID != first.peerID)
        #expect(try store.find("gw")?.peerID == renewed.peerID)
        #expect(try store.delete("gw"))
        #expect(try store.find("gw") == nil)
        #expect(throws: TLSError.self) { try store.find("../etc/passwd") }
    }

    @Test("openssl accepts Shoal's CA-signed certificate and shows both extended key usages",
          .enabled(if: hasOpenSSL, "openssl is not installed (CI installs it)"))
    func opensslAgrees() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let ca = try Identity.createCertificateAuthority(.init(commonName: "Interop CA"))
        let id = try Identity.createSigned(.init(commonName: "gw-interop"), caKey: ca.key, caCertificate: ca.certificate)
        try ca.certificate.pem.write(toFile: dir.file("ca.pem"), atomically: true, encoding: .utf8)
        let leafPEM = id.certificate.pem.components(separatedBy: "-----END CERTIFICATE-----\n")[0] + "-----END CERTIFICATE-----\n"
        try leafPEM.write(toFile: dir.file("leaf.pem"), atomically: true, encoding: .utf8)
        let verify = try openssl(["verify", "-CAfile", dir.file("ca.pem"), "-purpose", "sslserver", dir.file("leaf.pem")])
        #expect(verify.status == 0, "\(verify.out)")
        let client = try openssl(["verify", "-CAfile", dir.file("ca.pem"), "-purpose", "sslclient", dir.file("leaf.pem")])
        #expect(client.status == 0, "\(client.out)")
        let text = try openssl(["x509", "-in", dir.file("leaf.pem"), "-noout", "-text"])
        #expect(text.out.contains("TLS Web Server Authentication, TLS Web Client Authentication"), "\(text.out)")
        #expect(text.out.contains("Issuer: CN = Interop CA, O = Shoal"))
        #expect(text.out.contains("CA:FALSE"))
        try id.key.pem.write(toFile: dir.file("key.pem"), atomically: true, encoding: .utf8)
        let key = try openssl(["pkey", "-in", dir.file("key.pem"), "-noout", "-text"])
        #expect(key.out.contains("prime256v1") || key.out.contains("P-256"))
    }
}
