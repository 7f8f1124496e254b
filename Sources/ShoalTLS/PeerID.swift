import ShoalCore
import CMbedTLS

extension PeerID {
    /// The peer id of a public key: SHA-256 of its DER SubjectPublicKeyInfo. Every certificate over
    /// one key gives one peer id, so renewing a certificate (same key) keeps the id that other
    /// gateways' allow-lists name. The same digest as
    /// `openssl x509 -in crt.pem -pubkey -noout | openssl pkey -pubin -outform der | sha256sum`.
    public init(publicKeyDER: [UInt8]) { self.init(bytes: Digest.sha256(publicKeyDER)) }
}

enum PublicKeyDER {
    /// The DER SubjectPublicKeyInfo of `pk`, re-encoded by mbedTLS (so two encodings of one key in
    /// two certificates give one id). Nil only if mbedTLS cannot encode the key.
    static func of(_ pk: UnsafeMutablePointer<mbedtls_pk_context>) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 1024)
        let n = mbedtls_pk_write_pubkey_der(pk, &buffer, buffer.count)
        guard n > 0 else { return nil }
        return Array(buffer.suffix(Int(n)))  // written at the end of the buffer
    }
}
