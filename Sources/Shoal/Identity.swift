import ShoalCore
import ShoalTLS

/// Anything the library refuses or cannot do, with a sentence that says what and why.
public struct ShoalError: Error, Sendable, CustomStringConvertible, Equatable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A peer's identifier: the SHA-256 digest of its identity's public key (DER SubjectPublicKeyInfo),
/// shown as 64 hex digits. The seed's `PeerID` digests the whole certificate; Shoal digests the key
/// so a renewed certificate over the same key keeps the id other peers trust.
public struct PeerID: Sendable, Hashable, Comparable, CustomStringConvertible {
    let raw: ShoalCore.PeerID
    init(_ raw: ShoalCore.PeerID) { self.raw = raw }

    /// Parses 64 hex digits; nil for anything else.
    public init?(hex: String) {
        guard let p = ShoalCore.PeerID(hex: hex) else { return nil }
        raw = p
    }

    /// 64 hex digits.
    public var description: String { raw.description }
    /// The first 8 hex digits, for logs and tight displays.
    public var short: String { raw.short }
    public static func < (a: PeerID, b: PeerID) -> Bool { a.raw < b.raw }
}

/// An X.509 certificate (parsed by mbedTLS).
public struct TLSCertificate: Sendable {
    let raw: Certificate
    init(_ raw: Certificate) { self.raw = raw }

    /// Parses PEM (the first certificate of a chain) or DER.
    public init(pem bytes: [UInt8]) throws(ShoalError) {
        do { raw = try Certificate(parsing: bytes) } catch { throw ShoalError("not a certificate: \(error)") }
    }

    public var pem: String { raw.pem }
    public var der: [UInt8] { raw.der }
    public var subject: String { raw.subject }
    public var issuer: String { raw.issuer }
    /// Seconds since 1970.
    public var notBefore: Int64 { raw.notBefore }
    /// Seconds since 1970 (the seed's `expiration`).
    public var notAfter: Int64 { raw.notAfter }
    /// The peer id a gateway holding this certificate has.
    public var peerID: PeerID { PeerID(raw.peerID) }
}

/// A gateway's identity: a private key and its certificate (the seed's `TLSIdentity`). Identities
/// are stored by label as PEM files in a directory you choose (`<label>.key.pem`, mode 0600, and
/// `<label>.crt.pem`), not a keychain. Certificates always carry both the client- and the
/// server-authentication key usages, which multipeer replication needs.
public final class TLSIdentity: Sendable {
    let raw: Identity
    init(_ raw: Identity) { self.raw = raw }

    /// The certificate (leaf of the chain).
    public var certificate: TLSCertificate { TLSCertificate(raw.certificate) }
    /// The chain, leaf first (a CA-signed identity carries its issuer).
    public var certificateChainPEM: String { raw.certificate.pem }
    /// The private key, PEM. Keep it secret.
    public var privateKeyPEM: String { raw.key.pem }
    /// Seconds since 1970.
    public var expiration: Int64 { raw.certificate.notAfter }
    public var peerID: PeerID { PeerID(raw.peerID) }

    /// Makes a self-signed identity and, with a label, stores it in `directory`.
    public static func createIdentity(commonName: String, validDays: Int = 365, label: String? = nil, in directory: String? = nil) throws(ShoalError) -> TLSIdentity {
        let made: Identity
        do { made = try Identity.createSelfSigned(.init(commonName: commonName, validDays: validDays)) } catch { throw ShoalError("cannot create an identity: \(error)") }
        try save(made, label: label, in: directory)
        return TLSIdentity(made)
    }

    /// Makes an identity signed by a certificate authority (its key and certificate, PEM or DER)
    /// and, with a label, stores it in `directory`. The chain carries the CA's certificate.
    public static func createSignedIdentity(commonName: String, validDays: Int = 365, caKey: [UInt8], caCertificate: [UInt8],
                                            label: String? = nil, in directory: String? = nil) throws(ShoalError) -> TLSIdentity {
        let made: Identity
        do {
            made = try Identity.createSigned(.init(commonName: commonName, validDays: validDays),
                                             caKey: PrivateKey(parsing: caKey), caCertificate: Certificate(parsing: caCertificate))
        } catch { throw ShoalError("cannot create a CA-signed identity: \(error)") }
        try save(made, label: label, in: directory)
        return TLSIdentity(made)
    }

    /// Makes a certificate authority for a fleet (tests and small deployments; a real fleet's CA
    /// lives off the gateways). Its `privateKeyPEM` and `certificateChainPEM` sign identities.
    public static func createCertificateAuthority(commonName: String, validDays: Int = 3650) throws(ShoalError) -> TLSIdentity {
        do { return TLSIdentity(try Identity.createCertificateAuthority(.init(commonName: commonName, validDays: validDays))) } catch {
            throw ShoalError("cannot create a certificate authority: \(error)")
        }
    }

    /// A certificate over this identity's key, valid `validDays` from now: the same peer id, so
    /// peers that allow it by id keep accepting it. Self-signed with this certificate's subject, or
    /// signed by a CA (its key and certificate, PEM or DER). With a label, stored in `directory`
    /// (replacing the old certificate). A running replicator keeps presenting the certificate it
    /// was started with: stop it and start one with the renewed identity.
    public func renewed(validDays: Int = 365, caKey: [UInt8]? = nil, caCertificate: [UInt8]? = nil,
                        label: String? = nil, in directory: String? = nil) throws(ShoalError) -> TLSIdentity {
        let made: Identity
        do {
            if let caKey, let caCertificate {
                let cn = raw.certificate.subject.split(separator: ",").first { $0.hasPrefix("CN=") }.map { String($0.dropFirst(3)) } ?? "shoal"
                made = try raw.reissued(.init(commonName: cn, validDays: validDays),
                                        issuer: (try PrivateKey(parsing: caKey), try Certificate(parsing: caCertificate)))
            } else if caKey == nil && caCertificate == nil {
                made = try raw.renewed(validDays: validDays)
            } else {
                throw ShoalError("caKey and caCertificate go together")
            }
        } catch let e as ShoalError {
            throw e
        } catch { throw ShoalError("cannot renew identity \(peerID.short): \(error)") }
        try TLSIdentity.save(made, label: label, in: directory)
        return TLSIdentity(made)
    }

    /// The identity stored under `label` in `directory`, or nil.
    public static func identity(withLabel label: String, in directory: String) throws(ShoalError) -> TLSIdentity? {
        do { return try IdentityStore(directory: directory).find(label).map(TLSIdentity.init) } catch { throw ShoalError("cannot read identity \"\(label)\": \(error)") }
    }

    /// Deletes the identity stored under `label`; false if there was none.
    @discardableResult
    public static func deleteIdentity(withLabel label: String, in directory: String) throws(ShoalError) -> Bool {
        do { return try IdentityStore(directory: directory).delete(label) } catch { throw ShoalError("cannot delete identity \"\(label)\": \(error)") }
    }

    static func save(_ made: Identity, label: String?, in directory: String?) throws(ShoalError) {
        guard let label else { return }
        guard let directory else { throw ShoalError("a label needs a directory to store the identity in") }
        do { try IdentityStore(directory: directory).save(made, label: label) } catch { throw ShoalError("cannot store identity \"\(label)\": \(error)") }
    }
}

/// Decides which peers may replicate with this one (the seed's `MultipeerCertificateAuthenticator`).
/// Shoal checks validity dates and key usages on both sides first, then this, before any data.
public struct MultipeerCertificateAuthenticator: Sendable {
    let raw: PeerAuthenticator

    /// Calls `accept` with the peer's id and its certificate chain (leaf first).
    public init(_ accept: @escaping @Sendable (_ peerID: PeerID, _ certificates: [TLSCertificate]) -> Bool) {
        raw = .callback { peer, chain in accept(PeerID(peer), chain.map(TLSCertificate.init)) }
    }

    /// Accepts peers whose certificate one of `rootCertificates` signed.
    public init(rootCertificates: [TLSCertificate]) {
        raw = .rootCertificates(rootCertificates.map(\.raw))
    }

    /// Accepts these peers (self-signed fleets), and any a root signed.
    public init(allowedPeers: Set<PeerID>, rootCertificates: [TLSCertificate] = []) {
        raw = .trust(roots: rootCertificates.map(\.raw), allowedPeers: Set(allowedPeers.map(\.raw)))
    }
}
