import CMbedTLS

/// Why an identity could not be made or loaded, or why a peer was refused. Each case says what the
/// operator can do next.
public enum TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    case expired(peer: String)
    case notYetValid(peer: String)
    case unknownCA(peer: String)
    case wrongKeyUsage(peer: String, missing: String)
    case badSignature(peer: String)
    case notInAllowList(peer: String)
    case rejectedByAuthenticator(peer: String)
    /// The fleet's trust list (`_trust`) revokes this peer, or a CRL lists its certificate.
    case revoked(peer: String)
    /// The CRL for the peer's CA is past its nextUpdate (or not signed by that CA): mbedTLS then
    /// refuses every certificate of that CA.
    case revocationListStale(peer: String)
    /// The peer's authenticator refused us during the handshake and said so with a TLS alert
    /// (`alert`: its code). `peer`: who refused, when its certificate came before the alert (a
    /// server refused by the client it accepted does not learn who that was).
    case refusedByPeer(peer: String?, alert: UInt8)
    case noPeerCertificate
    case badCertificate(String)
    case badKey(String)
    case keyDoesNotMatchCertificate
    case protocolError(String)
    case timeout
    case closedDuringHandshake
    case closed
    case io(String)
    case mbedTLS(MbedTLSError)
    case invalidRequest(String)

    public var description: String {
        switch self {
        case .expired(let p): "peer \(p): its certificate has expired; it must renew its identity"
        case .notYetValid(let p): "peer \(p): its certificate is not valid yet; check both gateways' clocks"
        case .unknownCA(let p): "peer \(p): its certificate is not signed by a trusted root; add its CA to rootCertificates or its id to allowedPeers"
        case .wrongKeyUsage(let p, let missing): "peer \(p): its certificate lacks the \(missing) extended key usage; recreate it with `shoal identity create`"
        case .badSignature(let p): "peer \(p): a signature in its certificate chain does not verify"
        case .notInAllowList(let p): "peer \(p) is not in allowedPeers"
        case .rejectedByAuthenticator(let p): "peer \(p) was rejected by the authenticator"
        case .revocationListStale(let p): "peer \(p): the CRL for its CA (trust.crlFiles) is past its next update or not signed by that CA, so every certificate of that CA is refused; export a fresh one (`shoal trust crl`)"
        case .revoked(let p): "peer \(p) is revoked (by a signed trust entry or a CRL): it is refused on every transport"
        case .refusedByPeer(let p, let alert): "\(p.map { "peer \($0)" } ?? "the peer") refused us: \(TLSError.refusal(alert))"
        case .noPeerCertificate: "the peer sent no certificate (mutual TLS is required)"
        case .badCertificate(let why): "not a valid certificate: \(why)"
        case .badKey(let why): "not a valid private key: \(why)"
        case .keyDoesNotMatchCertificate: "the private key does not belong to the certificate"
        case .protocolError(let why): "TLS protocol error: \(why)"
        case .timeout: "TLS handshake timed out"
        case .closedDuringHandshake: "the peer closed the connection during the TLS handshake"
        case .closed: "the TLS session is closed"
        case .io(let why): "I/O error under TLS: \(why)"
        case .mbedTLS(let e): e.description
        case .invalidRequest(let why): why
        }
    }

    /// What the refusing side's alert tells the refused side, and what to do about it there.
    static func refusal(_ alert: UInt8) -> String {
        switch Int32(alert) {
        case MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED:
            "its authenticator does not accept us (our peer id is not in its allowedPeers, nor is our certificate signed by a root it trusts); add our peer id to its allowedPeers"
        case MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA: "our certificate is not signed by a root it trusts; add our CA to its rootCertificates or our id to its allowedPeers"
        case MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED: "our certificate has expired by its clock; renew our identity, or check both clocks"
        case MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN: "our certificate is not valid yet by its clock; check both clocks"
        case MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT: "our certificate lacks a key usage it requires (clientAuth and serverAuth); recreate it with `shoal identity create`"
        case MBEDTLS_SSL_ALERT_MSG_CERT_REVOKED: "it holds our certificate or peer id as revoked; an operator must allow us again (`shoal trust allow`)"
        case MBEDTLS_SSL_ALERT_MSG_BAD_CERT: "a signature in our certificate chain does not verify for it"
        case MBEDTLS_SSL_ALERT_MSG_NO_CERT: "it got no certificate from us"
        default: "TLS alert \(alert) during the handshake; see its log"
        }
    }

    /// The peer a refusal names (ours or theirs), for throttling and reporting.
    public var peer: String? {
        switch self {
        case .expired(let p), .notYetValid(let p), .unknownCA(let p), .wrongKeyUsage(let p, _), .badSignature(let p),
             .notInAllowList(let p), .rejectedByAuthenticator(let p), .revoked(let p), .revocationListStale(let p): p
        case .refusedByPeer(let p, _): p
        default: nil
        }
    }

    /// True when one side's authenticator refused the other (ours refused them, or theirs us): a
    /// peer that answers, as opposed to a connection that failed.
    public var isRefusal: Bool {
        switch self {
        case .expired, .notYetValid, .unknownCA, .wrongKeyUsage, .badSignature, .notInAllowList, .rejectedByAuthenticator, .revoked, .revocationListStale, .refusedByPeer, .noPeerCertificate: true
        default: false
        }
    }
}
