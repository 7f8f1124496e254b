import ShoalCore
import ShoalTLS

/// One signed fact about the fleet's trust, as it is kept in the `_trust` system collection: a
/// document whose id names what it is about and who signed it (`peer-<id>@<signer>`,
/// `root-<sha256>@…`, `admin-<fingerprint>@…`, `checkpoint@…`), so a signer's newer entry about one
/// thing replaces its older one as any document does, and the ledger picks which signer's counts.
///
/// The signature (ECDSA P-256 over SHA-256) covers a canonical encoding, not the JSON: one line
/// per field in a fixed order after a `shoal-trust 1` header; no field may hold a line break.
public struct TrustEntry: Sendable, Equatable, SignedDocument {
    public enum Kind: String, Sendable, CaseIterable {
        case allow, revoke
        case addRoot = "add-root", removeRoot = "remove-root"
        case addAdminKey = "add-admin-key", removeAdminKey = "remove-admin-key"
        case checkpoint
    }

    /// Largest document body an entry may be (a root certificate in hex is most of it).
    public static let maxBytes = 8192
    /// Largest note (the operator's reason) in bytes.
    public static let maxNoteBytes = 256
    public static let formatVersion = 1

    public var kind: Kind
    /// allow/revoke: the peer id (64 hex); add/remove-root: the root certificate's DER in hex;
    /// add/remove-admin-key: the key's DER in hex; checkpoint: empty.
    public var subject: String
    /// The signing admin key's fingerprint.
    public var signer: String
    /// Per signer, one more than the last it signed.
    public var serial: UInt64
    /// When it was signed (seconds since the epoch, the signer's clock).
    public var issuedAt: Int64
    /// A checkpoint's promise: a new one comes before this time (seconds since the epoch).
    public var nextUpdate: Int64?
    public var note: String
    public var signature: [UInt8]

    public init(kind: Kind, subject: String, signer: String, serial: UInt64, issuedAt: Int64, nextUpdate: Int64? = nil, note: String = "", signature: [UInt8] = []) {
        self.kind = kind
        self.subject = subject
        self.signer = signer
        self.serial = serial
        self.issuedAt = issuedAt
        self.nextUpdate = nextUpdate
        self.note = note
        self.signature = signature
    }

    /// Signs a new entry with `key`.
    public static func signed(_ kind: Kind, subject: String, note: String = "", serial: UInt64, issuedAt: Int64,
                              nextUpdate: Int64? = nil, by key: AdminSigningKey) throws(TrustError) -> TrustEntry {
        var e = TrustEntry(kind: kind, subject: subject, signer: key.publicKey.fingerprint, serial: serial, issuedAt: issuedAt,
                           nextUpdate: nextUpdate, note: note)
        try e.checkFields()
        e.signature = try SignedForm.sign(e, with: key)
        return e
    }

    /// The document id this entry is kept under: what it is about and who signed it. Each admin
    /// key's newest entry about a subject is kept; which of them counts is the ledger's to say.
    public var documentID: String { "\(subjectKey)@\(signer)" }

    /// What the entry is about: `peer-<id>`, `root-<sha256>`, `admin-<fingerprint>`, `checkpoint`.
    public var subjectKey: String {
        switch kind {
        case .allow, .revoke: "peer-\(subject.lowercased())"
        case .addRoot, .removeRoot: "root-\(TrustEntry.rootFingerprint(hexDER: subject))"
        case .addAdminKey, .removeAdminKey: "admin-\((try? AdminPublicKey(hex: subject))?.fingerprint ?? "invalid")"
        case .checkpoint: "checkpoint"
        }
    }

    /// A root certificate's name in `_trust`: the SHA-256 of its DER, in hex.
    public static func rootFingerprint(hexDER: String) -> String {
        guard let der = Hex.decode(hexDER) else { return "invalid" }
        return Digest.hex(Digest.sha256(der))
    }

    /// The peer an allow or revoke entry is about.
    public var peer: PeerID? { kind == .allow || kind == .revoke ? PeerID(hex: subject) : nil }

    /// What the signature covers.
    public var signedBytes: [UInt8] {
        SignedForm.bytes(header: "shoal-trust \(TrustEntry.formatVersion)",
                         fields: [kind.rawValue, subject, signer, String(serial), String(issuedAt), nextUpdate.map { String($0) } ?? "", note])
    }

    /// The document body.
    public var body: String {
        var o: [String: JSONValue] = [
            "v": .number(String(TrustEntry.formatVersion)), "kind": .string(kind.rawValue), "subject": .string(subject),
            "signer": .string(signer), "serial": .number(String(serial)), "issuedAt": .number(String(issuedAt)),
            "signature": .string(Digest.hex(signature)),
        ]
        if let nextUpdate { o["nextUpdate"] = .number(String(nextUpdate)) }
        if !note.isEmpty { o["note"] = .string(note) }
        return JSONValue.object(o).compactText
    }

    /// Reads a document body strictly: every field present and well-formed, nothing unknown, the
    /// subject what its kind needs. The signature is not checked here (`TrustLedger` does that,
    /// against the keys it trusts).
    public static func decode(_ body: String) throws(TrustError) -> TrustEntry {
        let known: Set<String> = ["v", "kind", "subject", "signer", "serial", "issuedAt", "nextUpdate", "note", "signature"]
        let o = try SignedForm.object(body, maxBytes: maxBytes, known: known, what: "entry")
        do { try SignedForm.formatVersion(o, formatVersion) } catch { throw TrustError("unsupported entry format (v must be \(formatVersion))") }
        guard let k = o["kind"]?.stringValue, let kind = Kind(rawValue: k) else {
            throw TrustError("kind must be one of \(Kind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let subject = o["subject"]?.stringValue else { throw TrustError("subject missing") }
        guard let signer = o["signer"]?.stringValue else { throw TrustError("signer missing") }
        let serial = try SignedForm.serial(o["serial"])
        guard let issuedAt = integer(o["issuedAt"]) else { throw TrustError("issuedAt must be whole seconds since 1970") }
        var nextUpdate: Int64?
        if let n = o["nextUpdate"] {
            guard let t = integer(n) else { throw TrustError("nextUpdate must be whole seconds since 1970") }
            nextUpdate = t
        }
        var note = ""
        if let n = o["note"] {
            guard let s = n.stringValue else { throw TrustError("note must be a string") }
            note = s
        }
        let signature = try SignedForm.signature(o["signature"])
        let e = TrustEntry(kind: kind, subject: subject, signer: signer, serial: serial, issuedAt: issuedAt, nextUpdate: nextUpdate, note: note, signature: signature)
        try e.checkFields()
        return e
    }

    static func integer(_ v: JSONValue?) -> Int64? { SignedForm.integer(v) }

    func checkFields() throws(TrustError) {
        let hex = SignedForm.isHex
        guard signer.utf8.count == 32, hex(signer) else { throw TrustError("signer must be an admin key fingerprint (32 lower-case hex digits)") }
        try SignedForm.checkLine(note, "note", maxBytes: TrustEntry.maxNoteBytes)
        guard issuedAt > 0 else { throw TrustError("issuedAt must be after 1970") }
        switch kind {
        case .allow, .revoke:
            guard subject.utf8.count == 64, hex(subject) else { throw TrustError("an \(kind.rawValue) entry's subject is a peer id (64 lower-case hex digits)") }
        case .addRoot, .removeRoot:
            guard hex(subject), let der = Hex.decode(subject), (try? Certificate(parsing: der)) != nil else {
                throw TrustError("an \(kind.rawValue) entry's subject is a certificate's DER in lower-case hex")
            }
        case .addAdminKey, .removeAdminKey:
            guard hex(subject), (try? AdminPublicKey(hex: subject)) != nil else {
                throw TrustError("an \(kind.rawValue) entry's subject is an EC P-256 public key's DER in lower-case hex")
            }
        case .checkpoint:
            guard subject.isEmpty else { throw TrustError("a checkpoint's subject is empty") }
            guard let n = nextUpdate, n > issuedAt else { throw TrustError("a checkpoint needs a nextUpdate after its issuedAt") }
        }
        if kind != .checkpoint && nextUpdate != nil { throw TrustError("only a checkpoint has a nextUpdate") }
    }

    /// Which of two entries for one document is newer: later signing time, then higher serial,
    /// then signer (a total order, so every gateway picks the same one).
    public static func isNewer(_ a: TrustEntry, than b: TrustEntry) -> Bool {
        (a.issuedAt, a.serial, a.signer) > (b.issuedAt, b.serial, b.signer)
    }

    /// One line for logs and the CLI.
    public var summary: String {
        let what: String
        switch kind {
        case .allow, .revoke: what = "\(kind.rawValue) peer \(subject.prefix(16))…"
        case .addRoot, .removeRoot: what = "\(kind.rawValue) \(TrustEntry.rootFingerprint(hexDER: subject).prefix(16))…"
        case .addAdminKey, .removeAdminKey: what = "\(kind.rawValue) \((try? AdminPublicKey(hex: subject))?.fingerprint ?? "?")"
        case .checkpoint: what = "checkpoint (next update by \(nextUpdate ?? 0))"
        }
        return "\(what), serial \(serial) of admin key \(signer)"
    }
}

/// Why an entry was refused or could not be made.
public struct TrustError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
