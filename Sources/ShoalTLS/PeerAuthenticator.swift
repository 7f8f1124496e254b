import ShoalCore
import CMbedTLS

/// Decides whether a peer that completed the TLS handshake may talk to us, as the Couchbase seed's
/// authenticators do: a callback given the peer id and its chain, or a set of root certificates
/// (accept a chain signed by one of them). The site file can give roots and/or an allow-list of
/// peer ids: a peer passes if its chain verifies to one of the roots, or if its id is listed.
/// Whatever the kind, Shoal checks first, on both sides and every time, that the peer's leaf is
/// inside its validity period and names both clientAuth and serverAuth.
public struct PeerAuthenticator: Sendable {
    public enum Kind: Sendable {
        case callback(@Sendable (PeerID, [Certificate]) -> Bool)
        case trust(roots: [Certificate], allowedPeers: Set<PeerID>)
    }
    public let kind: Kind
    /// The wall clock (seconds since the epoch) that validity dates are checked against: the
    /// system's, or a test's forced ahead (`checkingDates(at:)`). mbedTLS's own chain check
    /// against roots still reads the system clock.
    public private(set) var clock: @Sendable () -> Int64 = { Identity.now() }

    init(kind: Kind) { self.kind = kind }

    /// This authenticator, checking validity dates against `clock` instead of the system's.
    public func checkingDates(at clock: @escaping @Sendable () -> Int64) -> PeerAuthenticator {
        var copy = self
        copy.clock = clock
        return copy
    }

    public static func callback(_ accept: @escaping @Sendable (PeerID, [Certificate]) -> Bool) -> PeerAuthenticator {
        PeerAuthenticator(kind: .callback(accept))
    }

    public static func rootCertificates(_ roots: [Certificate]) -> PeerAuthenticator {
        PeerAuthenticator(kind: .trust(roots: roots, allowedPeers: []))
    }

    public static func trust(roots: [Certificate] = [], allowedPeers: Set<PeerID> = []) -> PeerAuthenticator {
        PeerAuthenticator(kind: .trust(roots: roots, allowedPeers: allowedPeers))
    }

    /// Checks a peer's chain (leaf first). Throws the reason for a refusal.
    public func verify(_ chain: Certificate, now: Int64? = nil) throws(TLSError) {
        let now = now ?? clock()
        let peer = chain.peerID
        let p = peer.description
        if now < chain.notBefore { throw .notYetValid(peer: p) }
        if now >= chain.notAfter { throw .expired(peer: p) }
        if !chain.hasExtendedKeyUsage(KeyUsageOID.serverAuth) { throw .wrongKeyUsage(peer: p, missing: "serverAuth") }
        if !chain.hasExtendedKeyUsage(KeyUsageOID.clientAuth) { throw .wrongKeyUsage(peer: p, missing: "clientAuth") }
        switch kind {
        case .callback(let accept):
            let certificates = chain.chainDER.compactMap { try? Certificate(parsing: $0) }
            guard accept(peer, certificates) else { throw .rejectedByAuthenticator(peer: p) }
        case .trust(let roots, let allowed):
            if allowed.contains(peer) { return }
            guard !roots.isEmpty else { throw .notInAllowList(peer: p) }
            var lastError: TLSError = .unknownCA(peer: p)
            for root in roots {
                var flags: UInt32 = 0
                let rc = mbedtls_x509_crt_verify(chain.chain, root.chain, nil, nil, &flags, nil, nil)
                if rc == 0 { return }
                lastError = PeerAuthenticator.reason(flags: flags, peer: p)
            }
            throw lastError
        }
    }

    static func reason(flags: UInt32, peer: String) -> TLSError {
        if flags & UInt32(MBEDTLS_X509_BADCERT_EXPIRED) != 0 { return .expired(peer: peer) }
        if flags & UInt32(MBEDTLS_X509_BADCERT_FUTURE) != 0 { return .notYetValid(peer: peer) }
        if flags & UInt32(MBEDTLS_X509_BADCERT_EXT_KEY_USAGE | MBEDTLS_X509_BADCERT_KEY_USAGE) != 0 {
            return .wrongKeyUsage(peer: peer, missing: "a required key usage")
        }
        if flags & UInt32(MBEDTLS_X509_BADCERT_BAD_MD | MBEDTLS_X509_BADCERT_BAD_PK | MBEDTLS_X509_BADCERT_BAD_KEY) != 0 {
            return .badSignature(peer: peer)
        }
        return .unknownCA(peer: peer)
    }
}
