import Foundation
import ShoalCore
import ShoalLinux
import ShoalTLS
import ShoalTesting
import Synchronization
import Testing
import ShoalThreads

func selfSigned(_ cn: String) throws -> Identity { try Identity.createSelfSigned(.init(commonName: cn)) }

/// Handshakes a client and a server over an in-memory pipe, each on its own thread.
func handshake(client: TLSContext, server: TLSContext, saved: TLSSavedSession? = nil)
    async -> (client: Result<TLSSession, TLSError>, server: Result<TLSSession, TLSError>, pipe: (MemoryPipeEnd, MemoryPipeEnd))
{
    let (a, b) = MemoryPipe.pair()
    async let s: Result<TLSSession, TLSError> = (try? await onThread("server") { () -> Result<TLSSession, TLSError> in
        do { return .success(try TLSSession.accept(over: b, context: server)) } catch let e as TLSError { return .failure(e) }
    }) ?? .failure(.io("thread"))
    async let c: Result<TLSSession, TLSError> = (try? await onThread("client") { () -> Result<TLSSession, TLSError> in
        do { return .success(try TLSSession.connect(over: a, context: client, resuming: saved)) } catch let e as TLSError { return .failure(e) }
    }) ?? .failure(.io("thread"))
    return (await c, await s, (a, b))
}

func failure<T>(_ r: Result<T, TLSError>) -> TLSError? { if case .failure(let e) = r { return e }; return nil }

@Suite("Mutual TLS sessions")
struct TLSSessionTests {
    @Test("self-signed identities on each other's allow-list handshake both ways and agree on peer ids")
    func selfSignedBothWays() async throws {
        let alice = try selfSigned("alice"), bob = try selfSigned("bob")
        for (cid, sid) in [(alice, bob), (bob, alice)] {
            let client = try TLSContext(role: .client, identity: cid, authenticator: .trust(allowedPeers: [sid.peerID]))
            let server = try TLSContext(role: .server, identity: sid, authenticator: .trust(allowedPeers: [cid.peerID]))
            let r = await handshake(client: client, server: server)
            let c = try r.client.get(), s = try r.server.get()
            #expect(c.peerID == sid.peerID)
            #expect(s.peerID == cid.peerID)
            // Application data both ways.
            try await onThread("c") { try c.write(Array("ping".utf8), timeoutMillis: 2000) }
            let got = try await onThread("s") { () -> [UInt8] in
                var buf = [UInt8](repeating: 0, count: 16)
                let n = try buf.withUnsafeMutableBytes { try s.read(into: $0, timeoutMillis: 2000) }
                return Array(buf.prefix(n))
            }
            #expect(got == Array("ping".utf8))
            c.close()
            let eof = try await onThread("s") { () -> Int in
                var buf = [UInt8](repeating: 0, count: 16)
                return try buf.withUnsafeMutableBytes { try s.read(into: $0, timeoutMillis: 2000) }
            }
            #expect(eof == 0)  // close_notify reads as end of stream
        }
    }

    @Test("credentials given a renewed certificate: the next handshake presents it, an open session carries on, another key is refused")
    func renewedCertificateHandover() async throws {
        let old = try Identity.createSelfSigned(.init(commonName: "gw", validDays: 2))
        let peer = try selfSigned("peer")
        let credentials = TLSCredentials(old)
        let server = try TLSContext(role: .server, credentials: credentials, authenticator: .trust(allowedPeers: [peer.peerID]))
        let client = try TLSContext(role: .client, identity: peer, authenticator: .trust(allowedPeers: [old.peerID]))
        let first = await handshake(client: client, server: server)
        let c1 = try first.client.get(), s1 = try first.server.get()
        #expect(c1.peerCertificate.notAfter == old.certificate.notAfter)

        let renewed = try old.renewed(validDays: 365)
        try credentials.present(renewed)
        #expect(credentials.identity === renewed)
        let second = await handshake(client: client, server: server)
        let c2 = try second.client.get()
        #expect(c2.peerID == old.peerID)
        #expect(c2.peerCertificate.notAfter == renewed.certificate.notAfter)
        #expect(c2.peerCertificate.der == renewed.certificate.der)

        // The first session still works on the configuration it started with.
        try await onThread("c1") { try c1.write(Array("still".utf8), timeoutMillis: 2000) }
        let got = try await onThread("s1") { () -> [UInt8] in
            var buf = [UInt8](repeating: 0, count: 16)
            let n = try buf.withUnsafeMutableBytes { try s1.read(into: $0, timeoutMillis: 2000) }
            return Array(buf.prefix(n))
        }
        #expect(got == Array("still".utf8))

        #expect(throws: TLSError.self) { try credentials.present(try selfSigned("gw")) }
        #expect(credentials.identity === renewed)
    }

    @Test("CA-signed identities handshake with the CA as root, both ways")
    func caSigned() async throws {
        let ca = try Identity.createCertificateAuthority(.init(commonName: "Fleet CA"))
        let a = try Identity.createSigned(.init(commonName: "gw-a"), caKey: ca.key, caCertificate: ca.certificate)
        let b = try Identity.createSigned(.init(commonName: "gw-b"), caKey: ca.key, caCertificate: ca.certificate)
        let auth = PeerAuthenticator.rootCertificates([ca.certificate])
        let r = await handshake(client: try TLSContext(role: .client, identity: a, authenticator: auth),
                                server: try TLSContext(role: .server, identity: b, authenticator: auth))
        #expect(try r.client.get().peerID == b.peerID)
        #expect(try r.server.get().peerID == a.peerID)
    }

    @Test("a callback authenticator sees the peer id and chain and decides")
    func callbackAuthenticator() async throws {
        let a = try selfSigned("a"), b = try selfSigned("b")
        let seen = Locked<[String]>([])
        let auth = PeerAuthenticator.callback { id, chain in
            seen.withLock { $0.append(id.description) }
            return chain.first?.subject == "CN=b, O=Shoal"
        }
        let r = await handshake(client: try TLSContext(role: .client, identity: a, authenticator: auth),
                                server: try TLSContext(role: .server, identity: b, authenticator: .callback { _, _ in false }))
        // a accepted b; b refused a, and a's handshake says so.
        #expect(failure(r.client) == .refusedByPeer(peer: b.peerID.description, alert: 49))
        #expect(seen.withLock { $0 } == [b.peerID.description])
        #expect(failure(r.server) == .rejectedByAuthenticator(peer: a.peerID.description))
    }

    struct Refusal: Sendable, CustomStringConvertible {
        let name: String
        /// The TLS alert the refused client reads (RFC 5246 numbers): how it learns why.
        let alert: UInt8
        let make: @Sendable () throws -> (client: Identity, serverAuth: PeerAuthenticator, expected: (PeerID) -> TLSError)
        var description: String { name }
    }

    static let refusalCases: [Refusal] = [
        Refusal(name: "expired", alert: 45) {
            let ca = try Identity.createCertificateAuthority(.init(commonName: "CA"))
            let old = try Identity.createSigned(.init(commonName: "old", notBefore: Identity.now() - 10 * 86_400, validDays: 2), caKey: ca.key, caCertificate: ca.certificate)
            return (old, .rootCertificates([ca.certificate]), { .expired(peer: $0.description) })
        },
        Refusal(name: "not yet valid", alert: 46) {
            let future = try Identity.createSelfSigned(.init(commonName: "future", notBefore: Identity.now() + 5 * 86_400, validDays: 30))
            return (future, .trust(allowedPeers: [future.peerID]), { .notYetValid(peer: $0.description) })
        },
        Refusal(name: "signed by another CA", alert: 48) {
            let ours = try Identity.createCertificateAuthority(.init(commonName: "Our CA"))
            let theirs = try Identity.createCertificateAuthority(.init(commonName: "Their CA"))
            let stranger = try Identity.createSigned(.init(commonName: "stranger"), caKey: theirs.key, caCertificate: theirs.certificate)
            return (stranger, .rootCertificates([ours.certificate]), { .unknownCA(peer: $0.description) })
        },
        Refusal(name: "missing clientAuth", alert: 43) {
            var req = Identity.Request(commonName: "server-only")
            req.extendedKeyUsages = [.serverAuth]
            let id = try Identity.createSelfSigned(req)
            return (id, .trust(allowedPeers: [id.peerID]), { .wrongKeyUsage(peer: $0.description, missing: "clientAuth") })
        },
        Refusal(name: "missing serverAuth", alert: 43) {
            var req = Identity.Request(commonName: "client-only")
            req.extendedKeyUsages = [.clientAuth]
            let id = try Identity.createSelfSigned(req)
            return (id, .trust(allowedPeers: [id.peerID]), { .wrongKeyUsage(peer: $0.description, missing: "serverAuth") })
        },
        Refusal(name: "self-signed, not on the allow-list", alert: 49) {
            let id = try selfSigned("unlisted")
            return (id, .trust(allowedPeers: [try selfSigned("someone-else").peerID]), { .notInAllowList(peer: $0.description) })
        },
    ]

    @Test("a peer is refused with the right error, no application data crosses, and the refused side learns why from the alert", arguments: refusalCases)
    func refusedPeer(_ refusal: Refusal) async throws {
        let (clientID, serverAuth, expected) = try refusal.make()
        let server = try selfSigned("server")
        let client = try TLSContext(role: .client, identity: clientID, authenticator: .trust(allowedPeers: [server.peerID]))
        let serverContext = try TLSContext(role: .server, identity: server, authenticator: serverAuth)
        let r = await handshake(client: client, server: serverContext)
        #expect(failure(r.server) == expected(clientID.peerID))
        // The server judges the client inside the handshake: the client's handshake fails with the
        // server's alert, typed, naming the server (its certificate came first). Before, the client's
        // handshake succeeded and it saw only a closed link.
        let refused = failure(r.client)
        #expect(refused == .refusedByPeer(peer: server.peerID.description, alert: refusal.alert), "client got \(String(describing: refused))")
        #expect(refused?.isRefusal == true)
        #expect(refused?.description.contains("refused us") == true)
    }

    @Test("the client refuses a server it does not trust, before sending anything")
    func clientRefusesServer() async throws {
        let client = try selfSigned("client"), server = try selfSigned("server")
        let r = await handshake(client: try TLSContext(role: .client, identity: client, authenticator: .trust(allowedPeers: [])),
                                server: try TLSContext(role: .server, identity: server, authenticator: .trust(allowedPeers: [client.peerID])))
        #expect(failure(r.client) == .notInAllowList(peer: server.peerID.description))
        // The server's handshake fails too, with the client's alert; it never saw the client's
        // certificate (the client refused before sending it), so it cannot say who.
        #expect(failure(r.server) == .refusedByPeer(peer: nil, alert: 49), "server got \(String(describing: failure(r.server)))")
    }

    @Test("a peer that never answers times out; one that closes mid-handshake is reported as such")
    func silentAndClosingPeers() async throws {
        let id = try selfSigned("x")
        let client = try TLSContext(role: .client, identity: id, authenticator: .trust(allowedPeers: []), handshakeTimeoutMillis: 300)
        let (a, b) = MemoryPipe.pair()
        let silent = try await onThread("c") { () -> TLSError? in
            do { _ = try TLSSession.connect(over: a, context: client); return nil } catch let e as TLSError { return e }
        }
        #expect(silent == .timeout)
        _ = b

        let (c, d) = MemoryPipe.pair()
        // The closing peer starts on a thread of its own, right here: started from the cooperative
        // pool, a busy test run could start it after the client's 300 ms handshake timeout.
        DetachedThread.start(name: "closer") {
            var buf = [UInt8](repeating: 0, count: 64)
            _ = try? buf.withUnsafeMutableBytes { try d.read(into: $0, timeoutMillis: 2000) }  // part of the ClientHello
            d.close()
        }
        let closed = try await onThread("c") { () -> TLSError? in
            do { _ = try TLSSession.connect(over: c, context: client); return nil } catch let e as TLSError { return e }
        }
        #expect(closed == .closedDuringHandshake)
    }

    @Test("garbage instead of a handshake is a protocol error, never a crash", arguments: 0..<40)
    func garbageHandshake(_ seed: Int) async throws {
        let id = try selfSigned("s")
        let server = try TLSContext(role: .server, identity: id, authenticator: .trust(allowedPeers: []), handshakeTimeoutMillis: 500)
        var rng = SeededRandom(seed: UInt64(seed))
        var junk = (0..<Int.random(in: 1...3000, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
        if seed % 2 == 0 { junk.replaceSubrange(0..<min(3, junk.count), with: [0x16, 0x03, 0x03].prefix(junk.count)) }  // looks like a TLS record
        let (a, b) = MemoryPipe.pair()
        try a.writeAll(junk, timeoutMillis: 1000)
        a.close()
        let error = try await onThread("s") { () -> TLSError? in
            do { _ = try TLSSession.accept(over: b, context: server); return nil } catch let e as TLSError { return e }
        }
        #expect(error != nil)
    }

    @Test("a client resumes a saved session, and the peer is verified again")
    func resumption() async throws {
        let a = try selfSigned("a"), b = try selfSigned("b")
        let client = try TLSContext(role: .client, identity: a, authenticator: .trust(allowedPeers: [b.peerID]))
        let server = try TLSContext(role: .server, identity: b, authenticator: .trust(allowedPeers: [a.peerID]))
        let first = await handshake(client: client, server: server)
        let c1 = try first.client.get()
        #expect(!c1.resumed)
        let saved = try #require(c1.save())
        c1.close()
        let second = await handshake(client: client, server: server, saved: saved)
        let c2 = try second.client.get()
        #expect(c2.resumed)
        #expect(c2.peerID == b.peerID)
        #expect(try second.server.get().peerID == a.peerID)
    }
}
