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
        /// The fleet's trust as it is at each handshake (site file + the `_trust` entries): read
        /// afresh every time, so an entry that arrives changes the very next handshake.
        case fleet(@Sendable () -> FleetTrust)
    }
    /// Told of every refusal this authenticator makes (the peer, its certificate's subject, why,
    /// over which transport): where a gateway's pending-enrolment list comes from.
    public var onRefusal: (@Sendable (_ peer: PeerID, _ subject: String, _ reason: TLSError, _ transport: String) -> Void)?
    /// The transport these handshakes run over, as `onRefusal` is told it ("wifi", "bluetooth").
    public var transport = "wifi"
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

    public static func fleet(_ current: @escaping @Sendable () -> FleetTrust) -> PeerAuthenticator {
        PeerAuthenticator(kind: .fleet(current))
    }

    /// This authenticator, reporting its refusals as made over `transport`.
    public func over(_ transport: String) -> PeerAuthenticator {
        var copy = self
        copy.transport = transport
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
        do throws(TLSError) { try check(chain, now: now) } catch {
            onRefusal?(chain.peerID, chain.subject, error, transport)
            throw error
        }
    }

    func check(_ chain: Certificate, now: Int64?) throws(TLSError) {
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
            try PeerAuthenticator.verify(chain, peer, roots: roots, allowed: allowed, crl: nil)
        case .fleet(let current):
            let trust = current()
            if trust.revokedPeers.contains(peer) { throw .revoked(peer: p) }
            try PeerAuthenticator.verify(chain, peer, roots: trust.roots, allowed: trust.allowedPeers, crl: trust.revocationList)
        }
    }

    static func verify(_ chain: Certificate, _ peer: PeerID, roots: [Certificate], allowed: Set<PeerID>, crl: RevocationList?) throws(TLSError) {
        let p = peer.description
        if allowed.contains(peer) { return }
        guard !roots.isEmpty else { throw .notInAllowList(peer: p) }
        var lastError: TLSError = .unknownCA(peer: p)
        for root in roots {
            var flags: UInt32 = 0
            let rc = mbedtls_x509_crt_verify(chain.chain, root.chain, crl?.list, nil, &flags, nil, nil)
            if rc == 0 { return }
            lastError = PeerAuthenticator.reason(flags: flags, peer: p)
        }
        throw lastError
    }

    static func reason(flags: UInt32, peer: String) -> TLSError {
        if flags & UInt32(MBEDTLS_X509_BADCERT_REVOKED) != 0 { return .revoked(peer: peer) }
        if flags & UInt32(MBEDTLS_X509_BADCRL_EXPIRED | MBEDTLS_X509_BADCRL_NOT_TRUSTED | MBEDTLS_X509_BADCRL_FUTURE) != 0 {
            return .revocationListStale(peer: peer)
        }
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

/// What a fleet trusts at one moment: roots (site file's, plus those `_trust` adds, minus those it
/// removes), peer ids allowed (site file + `_trust`), peer ids revoked (`_trust`: refused whatever
/// else says yes) and the CRLs the site file names.
public struct FleetTrust: Sendable {
    public var roots: [Certificate]
    public var allowedPeers: Set<PeerID>
    public var revokedPeers: Set<PeerID>
    public var revocationList: RevocationList?

    public init(roots: [Certificate] = [], allowedPeers: Set<PeerID> = [], revokedPeers: Set<PeerID> = [], revocationList: RevocationList? = nil) {
        self.roots = roots
        self.allowedPeers = allowedPeers
        self.revokedPeers = revokedPeers
        self.revocationList = revocationList
    }
}
