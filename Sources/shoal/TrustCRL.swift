import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalTLS

/// `shoal trust crl`: an X.509 CRL signed by the fleet's CA, revoking certificates it issued
/// (named by their PEM files or by serial number). Gateways read it through the site file's CRLs
/// and mbedTLS refuses the revoked certificates at the handshake; anything else that trusts the
/// CA (OpenSSL, browsers, brokers) reads the same file. Works offline: the CA key never needs to
/// be on a gateway.
enum TrustCRLCommand {
    static let command = "trust crl"
    static let usage = "trust crl --ca-key FILE --ca-cert FILE [--revoke CERT_FILE]... [--serial HEX]... [--days N] [--number N] [--out FILE]"

    static let help = """
        Usage: shoal \(usage)

        Writes an X.509 v2 CRL (PEM) signed by your CA's key (EC or RSA): the certificates given
        with --revoke (PEM or DER files; the first certificate of each, which the CA must have
        issued) and the serial numbers given with --serial (hex as `openssl x509 -serial` prints
        it) are revoked as of now. Both options repeat; a CRL with none revokes nothing. --days
        (default 30) sets its next update: reissue it before then, or peers refuse it as expired.
        --number is its crlNumber (default: the seconds since the epoch, so each new CRL has a
        higher one). Written to --out FILE, else to standard output.
        """

    static func run(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: command,
                                    valueOptions: ["--ca-key", "--ca-cert", "--revoke", "--serial", "--days", "--number", "--out"])
        if a.wantsHelp { out(help); return ExitCode.ok }
        try a.expectPositionals(0...0, command: command, usage: usage)
        guard let keyPath = a.values["--ca-key"], let certPath = a.values["--ca-cert"] else {
            throw UsageError(command: command, message: "--ca-key and --ca-cert are required: the CA's private key and certificate sign the CRL; usage: shoal \(usage)")
        }
        for option in ["--ca-key", "--ca-cert", "--days", "--number", "--out"] where (a.lists[option]?.count ?? 0) > 1 {
            throw UsageError(command: command, message: "\(option) is given more than once")
        }
        let days = try a.int("--days", command: command, default: 30, range: 1...3650)
        let now = Identity.now()
        var number = UInt64(max(0, now))
        if let text = a.values["--number"] {
            guard let n = UInt64(text) else { throw UsageError(command: command, message: "--number must be a whole number 0 or more, not \"\(text)\"") }
            number = n
        }

        let key = try parsed(keyPath, "--ca-key") { (bytes) throws(TLSError) in try PrivateKey(parsing: bytes) }
        let ca = try parsed(certPath, "--ca-cert") { (bytes) throws(TLSError) in try Certificate(parsing: bytes) }

        var revoked: [(serial: [UInt8], revokedAt: Int64)] = []
        for path in a.lists["--revoke"] ?? [] {
            let certificate = try parsed(path, "--revoke") { (bytes) throws(TLSError) in try Certificate(parsing: bytes) }
            if certificate.der == ca.der { throw Rejected(message: "--revoke \(path) is the CA's own certificate: a CRL revokes certificates the CA issued") }
            guard certificate.isIssued(by: ca) else {
                throw Rejected(message: "--revoke \(path): \(certificate.subject) was not issued by this CA (\(ca.subject)); its issuer is \(certificate.issuer): revoke it with a CRL of that CA")
            }
            revoked.append((certificate.serialNumber, now))
        }
        for text in a.lists["--serial"] ?? [] {
            guard let serial = CRLWriter.serial(hex: text) else {
                throw UsageError(command: command, message: "--serial \"\(text)\" is not a serial number: give it in hex (as `openssl x509 -serial` prints it), at most 20 bytes")
            }
            revoked.append((serial, now))
        }

        let written: Result<String, TLSError> = Result { () throws(TLSError) -> String in
            try CRLWriter.pem(caKey: key, caCertificate: ca, revoked: revoked, thisUpdate: now, nextUpdate: now + Int64(days) * 86_400, number: number)
        }
        let pem: String
        switch written {
        case .success(let text): pem = text
        case .failure(.keyDoesNotMatchCertificate): throw Rejected(message: "--ca-key \(keyPath) is not the key of --ca-cert \(certPath) (\(ca.subject))")
        case .failure(let e): throw Rejected(message: e.description)
        }
        guard let path = a.values["--out"] else {
            out(pem, newline: false)
            return ExitCode.ok
        }
        do { try Files.write(path, pem) } catch { throw Rejected(message: "--out \(path): cannot write it (\(error))") }
        let serials = revoked.map { Digest.hex($0.serial) }
        out("wrote CRL number \(number) of \(ca.subject) to \(path): \(serials.isEmpty ? "no certificate revoked" : "revokes \(serials.joined(separator: ", "))"); next update \(IdentityText.date(now + Int64(days) * 86_400))")
        return ExitCode.ok
    }

    /// A file's bytes made into a key or certificate; what is wrong with it names the option and the file.
    static func parsed<T>(_ path: String, _ option: String, _ make: ([UInt8]) throws(TLSError) -> T) throws -> T {
        let bytes = try read(path, option)
        switch Result(catching: { () throws(TLSError) -> T in try make(bytes) }) {
        case .success(let value): return value
        case .failure(let e): throw Rejected(message: "\(option) \(path): \(e)")
        }
    }

    static func read(_ path: String, _ option: String) throws -> [UInt8] {
        let bytes: [UInt8]?
        do { bytes = try Files.readBytes(path) } catch { throw Rejected(message: "\(option) \(path): cannot read it (\(error))") }
        guard let bytes else { throw Rejected(message: "\(option) \(path): no such file") }
        guard !bytes.isEmpty else { throw Rejected(message: "\(option) \(path) is empty") }
        return bytes
    }
}
