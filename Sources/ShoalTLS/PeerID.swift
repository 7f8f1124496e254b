import ShoalCore

extension PeerID {
    /// The peer id of a certificate: SHA-256 of its DER, as in the Couchbase seed.
    public init(certificateDER: [UInt8]) { self.init(bytes: Digest.sha256(certificateDER)) }
}
