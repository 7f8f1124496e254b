import Foundation
import ShoalCore
import ShoalLinux
import ShoalTLS
import ShoalTesting
import Testing

/// Shoal's TLS against a TLS implementation nobody here wrote: OpenSSL's s_server and s_client,
/// with client certificates, in both roles. The peer's certificate is made by `openssl` itself
/// and signed by a CA that Shoal made, so each side verifies certificates the other produced.
@Suite("OpenSSL interop", .serialized, .enabled(if: hasOpenSSL, "openssl is not installed (CI installs it)"))
struct OpenSSLInteropTests {
    struct Setup {
        let dir: TemporaryDirectory
        let ca: Identity
        let shoal: Identity
        var caPEM: String { dir.file("ca.pem") }
        var opensslCert: String { dir.file("peer.pem") }
        var opensslKey: String { dir.file("peer.key") }

        init() throws {
            dir = TemporaryDirectory(prefix: "shoal-interop")
            ca = try Identity.createCertificateAuthority(.init(commonName: "Interop CA"))
            shoal = try Identity.createSigned(.init(commonName: "shoal-gw"), caKey: ca.key, caCertificate: ca.certificate)
            try ca.certificate.pem.write(toFile: dir.file("ca.pem"), atomically: true, encoding: .utf8)
            try ca.key.pem.write(toFile: dir.file("ca.key"), atomically: true, encoding: .utf8)
            try "extendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                .write(toFile: dir.file("ext.cnf"), atomically: true, encoding: .utf8)
            let steps: [[String]] = [
                ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", dir.file("peer.key")],
                ["req", "-new", "-key", dir.file("peer.key"), "-subj", "/CN=openssl-peer", "-out", dir.file("peer.csr")],
                ["x509", "-req", "-in", dir.file("peer.csr"), "-CA", dir.file("ca.pem"), "-CAkey", dir.file("ca.key"),
                 "-CAcreateserial", "-days", "30", "-sha256", "-extfile", dir.file("ext.cnf"), "-out", dir.file("peer.pem")],
            ]
            for step in steps {
                let r = try openssl(step)
                guard r.status == 0 else { throw TLSError.invalidRequest("openssl \(step[0]) failed: \(r.out)") }
            }
        }
    }

    static func freePort() throws -> UInt16 {
        let l = try TCPListener(port: 0)
        defer { l.close() }
        return l.port
    }

    @Test("Shoal as client against openssl s_server with client certificates")
    func shoalClient() async throws {
        let s = try Setup()
        defer { s.dir.remove() }
        let port = try Self.freePort()
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        server.arguments = ["s_server", "-accept", "127.0.0.1:\(port)", "-cert", s.opensslCert, "-key", s.opensslKey,
                            "-CAfile", s.caPEM, "-Verify", "1", "-verify_return_error", "-tls1_2", "-rev", "-naccept", "1"]
        let out = Pipe()
        server.standardOutput = out
        server.standardError = out
        try server.run()
        defer { if server.isRunning { server.terminate() } }
        let context = try TLSContext(role: .client, identity: s.shoal, authenticator: .rootCertificates([s.ca.certificate]))
        let reply = try await onThread("client") { () -> String in
            var stream: TCPStream?
            for _ in 0..<100 {
                stream = try? TCPStream.connect(ipv4: "127.0.0.1", port: port, timeoutMillis: 1000)
                if stream != nil { break }
                usleep(50_000)
            }
            guard let stream else { throw TLSError.io("s_server did not start") }
            let session = try TLSSession.connect(over: stream, context: context)
            #expect(session.peerCertificate.subject == "CN=openssl-peer")
            try session.write(Array("hello shoal\n".utf8), timeoutMillis: 5000)
            var received: [UInt8] = []
            var buf = [UInt8](repeating: 0, count: 256)
            while !received.contains(0x0A) {
                let n = try buf.withUnsafeMutableBytes { try session.read(into: $0, timeoutMillis: 5000) }
                if n == 0 { break }
                received += buf.prefix(n)
            }
            session.close()
            return String(decoding: received, as: UTF8.self)
        }
        #expect(reply == "laohs olleh\n")
    }

    @Test("Shoal as server against openssl s_client with a client certificate")
    func shoalServer() async throws {
        let s = try Setup()
        defer { s.dir.remove() }
        let listener = try TCPListener(port: 0)
        defer { listener.close() }
        let context = try TLSContext(role: .server, identity: s.shoal, authenticator: .rootCertificates([s.ca.certificate]))
        let serverTask = Task.detached { () -> (String, String) in
            try await onThread("server") { () -> (String, String) in
                guard let stream = try listener.accept(timeoutMillis: 15_000) else { throw TLSError.timeout }
                let session = try TLSSession.accept(over: stream, context: context)
                var buf = [UInt8](repeating: 0, count: 256)
                var received: [UInt8] = []
                while !received.contains(0x0A) {
                    let n = try buf.withUnsafeMutableBytes { try session.read(into: $0, timeoutMillis: 5000) }
                    if n == 0 { break }
                    received += buf.prefix(n)
                }
                try session.write(Array("hello openssl\n".utf8), timeoutMillis: 5000)
                session.close()
                return (session.peerCertificate.subject, String(decoding: received, as: UTF8.self))
            }
        }
        let client = Process()
        client.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        client.arguments = ["s_client", "-connect", "127.0.0.1:\(listener.port)", "-cert", s.opensslCert, "-key", s.opensslKey,
                            "-CAfile", s.caPEM, "-verify_return_error", "-tls1_2", "-quiet", "-ign_eof"]
        let input = Pipe(), out = Pipe()
        client.standardInput = input
        client.standardOutput = out
        client.standardError = FileHandle.nullDevice
        try client.run()
        input.fileHandleForWriting.write("hi from openssl\n".data(using: .utf8)!)
        let (peerSubject, received) = try await serverTask.value
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        client.waitUntilExit()
        #expect(peerSubject == "CN=openssl-peer")
        #expect(received == "hi from openssl\n")
        #expect(printed.contains("hello openssl"))
    }
}
