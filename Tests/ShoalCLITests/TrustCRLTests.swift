import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// `shoal trust crl`: a CRL of the fleet's CA (made here by openssl, EC and RSA) revoking a
    /// gateway `shoal identity create --ca-key --ca-cert` made, checked by openssl itself.
    @Suite("shoal trust crl", .serialized, .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl"), "openssl is not installed (CI installs it)"))
    struct TrustCRLTests {
        static func openssl(_ args: [String]) throws -> (status: Int32, out: String) {
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

        /// A CA (`openssl req -x509`, EC P-256 or RSA 2048) and two gateways it signed, in `dir`.
        static func fleet(_ dir: TemporaryDirectory, keyType: String) throws {
            let newkey = keyType == "rsa" ? ["-newkey", "rsa:2048"] : ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
            let ca = try openssl(["req", "-x509"] + newkey + ["-nodes", "-keyout", dir.path + "/ca.key", "-out", dir.path + "/ca.pem",
                                  "-subj", "/CN=Fleet CA \(keyType)", "-days", "30", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
            try #require(ca.status == 0, "\(ca.out)")
            for name in ["gw-1", "gw-2"] {
                let r = try Shoal.run(["identity", "create", "--dir", dir.path + "/\(name)", "--label", "gw", "--cn", name,
                                       "--ca-key", dir.path + "/ca.key", "--ca-cert", dir.path + "/ca.pem"])
                try #require(r.status == 0, "\(r.stderr)")
                // The identity's PEM holds the leaf and the CA: openssl verify wants the leaf alone.
                let leaf = try openssl(["x509", "-in", dir.path + "/\(name)/gw.crt.pem", "-out", dir.path + "/\(name).pem"])
                try #require(leaf.status == 0, "\(leaf.out)")
            }
        }

        @Test("a CRL revoking gw-1 (by file) and a serial: openssl verifies it, refuses gw-1 as revoked, passes gw-2", arguments: ["ec", "rsa"])
        func exportAndVerify(keyType: String) throws {
            let dir = TemporaryDirectory(prefix: "shoal-trust-crl")
            defer { dir.remove() }
            try Self.fleet(dir, keyType: keyType)
            let serial = try Self.openssl(["x509", "-in", dir.path + "/gw-1.pem", "-noout", "-serial"]).out
                .trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "serial=", with: "")
            let r = try Shoal.run(["trust", "crl", "--ca-key", dir.path + "/ca.key", "--ca-cert", dir.path + "/ca.pem",
                                   "--revoke", dir.path + "/gw-1/gw.crt.pem", "--serial", "01:23", "--days", "7", "--number", "9",
                                   "--out", dir.path + "/crl.pem"])
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.stdout.contains("wrote CRL number 9 of CN=Fleet CA \(keyType) to \(dir.path)/crl.pem: revokes \(serial.lowercased()), 0123"), "\(r.stdout)")

            let crl = try Self.openssl(["crl", "-in", dir.path + "/crl.pem", "-CAfile", dir.path + "/ca.pem", "-verify", "-noout"])
            #expect(crl.status == 0 && crl.out.contains("verify OK"), "\(crl.out)")
            let revoked = try Self.openssl(["verify", "-crl_check", "-CRLfile", dir.path + "/crl.pem", "-CAfile", dir.path + "/ca.pem", dir.path + "/gw-1.pem"])
            #expect(revoked.status != 0 && revoked.out.contains("certificate revoked"), "\(revoked.out)")
            let kept = try Self.openssl(["verify", "-crl_check", "-CRLfile", dir.path + "/crl.pem", "-CAfile", dir.path + "/ca.pem", dir.path + "/gw-2.pem"])
            #expect(kept.status == 0 && kept.out.contains("gw-2.pem: OK"), "\(kept.out)")
            let text = try Self.openssl(["crl", "-in", dir.path + "/crl.pem", "-noout", "-text"])
            #expect(text.out.contains("Serial Number: \(serial)") && text.out.contains("Serial Number: 0123"), "\(text.out)")
            #expect(text.out.contains(keyType == "rsa" ? "sha256WithRSAEncryption" : "ecdsa-with-SHA256"), "\(text.out)")

            // Without --out the PEM goes to standard output, and nothing else does.
            let piped = try Shoal.run(["trust", "crl", "--ca-key", dir.path + "/ca.key", "--ca-cert", dir.path + "/ca.pem"])
            #expect(piped.status == 0 && piped.stdout.hasPrefix("-----BEGIN X509 CRL-----\n") && piped.stdout.hasSuffix("-----END X509 CRL-----\n"), "\(piped)")
        }

        @Test("bad inputs: another CA's certificate, a garbage or mismatched key, missing files and options, a bad serial")
        func badInputs() throws {
            let dir = TemporaryDirectory(prefix: "shoal-trust-crl")
            defer { dir.remove() }
            try Self.fleet(dir, keyType: "ec")
            let other = try Self.openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                                          "-keyout", dir.path + "/other.key", "-out", dir.path + "/other.pem", "-subj", "/CN=Other CA", "-days", "5"])
            try #require(other.status == 0, "\(other.out)")
            let stranger = try Shoal.run(["identity", "create", "--dir", dir.path + "/stranger", "--label", "gw", "--cn", "stranger",
                                          "--ca-key", dir.path + "/other.key", "--ca-cert", dir.path + "/other.pem"])
            try #require(stranger.status == 0, "\(stranger.stderr)")
            try "this is not a key\n".write(toFile: dir.path + "/garbage.key", atomically: true, encoding: .utf8)
            let ca = ["--ca-key", dir.path + "/ca.key", "--ca-cert", dir.path + "/ca.pem"]

            func refused(_ args: [String], status: Int32, saying text: String) throws {
                let r = try Shoal.run(["trust", "crl"] + args)
                #expect(r.status == status && r.stderr.contains(text), "exit \(r.status): \(r.stderr)")
                #expect(r.stdout.isEmpty, "\(r.stdout)")
            }
            try refused(ca + ["--revoke", dir.path + "/stranger/gw.crt.pem"], status: 6,
                        saying: "shoal trust crl: --revoke \(dir.path)/stranger/gw.crt.pem: CN=stranger, O=Shoal was not issued by this CA (CN=Fleet CA ec); its issuer is CN=Other CA")
            try refused(["--ca-key", dir.path + "/garbage.key", "--ca-cert", dir.path + "/ca.pem"], status: 6,
                        saying: "shoal trust crl: --ca-key \(dir.path)/garbage.key: not a valid private key")
            try refused(["--ca-key", dir.path + "/other.key", "--ca-cert", dir.path + "/ca.pem"], status: 6,
                        saying: "--ca-key \(dir.path)/other.key is not the key of --ca-cert \(dir.path)/ca.pem")
            try refused(["--ca-key", dir.path + "/ca.key", "--ca-cert", dir.path + "/garbage.key"], status: 6,
                        saying: "--ca-cert \(dir.path)/garbage.key: not a valid certificate")
            try refused(ca + ["--revoke", dir.path + "/missing.pem"], status: 6, saying: "--revoke \(dir.path)/missing.pem: no such file")
            try refused(ca + ["--revoke", dir.path + "/ca.pem"], status: 6, saying: "is the CA's own certificate")
            try refused(["--ca-cert", dir.path + "/ca.pem"], status: 2, saying: "--ca-key and --ca-cert are required")
            try refused(ca + ["--serial", "12zz"], status: 2, saying: "--serial \"12zz\" is not a serial number")
            try refused(ca + ["--days", "0"], status: 2, saying: "--days must be a whole number from 1 to 3650")
            try refused(ca + ["--number", "-1"], status: 2, saying: "--number must be a whole number")
            try refused(ca + ["--out", dir.path + "/no/such/dir/crl.pem"], status: 6, saying: "--out \(dir.path)/no/such/dir/crl.pem: cannot write it")
            // A non-CA certificate as the CA: a gateway's own identity.
            try refused(["--ca-key", dir.path + "/gw-1/gw.key.pem", "--ca-cert", dir.path + "/gw-1.pem"], status: 6, saying: "is not a CA")
        }
    }
}
