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
}
