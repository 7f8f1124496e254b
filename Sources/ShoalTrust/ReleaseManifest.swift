import ShoalCore
import ShoalTLS

/// A release of Shoal itself, as kept in the `_system._releases` collection: which version, for
/// which machine, the binary as a blob reference (size and SHA-256), the oldest version that may
/// update to it, which gateways take it (the rollout), signed by an operator's release key (an
/// ECDSA P-256 key of the same kind as admin keys, trusted through the site file's
/// `updates.releaseKeys`).
///
/// What a reader gets wrong: the signature covers the canonical form (`SignedForm`), not the JSON,
/// and the manifest's size and digest must equal its blob reference's (a decoder refuses a
/// manifest where they differ, so no check later can pick the wrong one of the two).
public struct ReleaseManifest: Sendable, Equatable, SignedDocument {
    public static let formatVersion = 1
    public static let maxBytes = 16384
    public static let maxNotesBytes = 1024
    /// A rollout names at most this many peers.
    public static let maxPeers = 256

    /// Which gateways take a release.
    public enum Rollout: Sendable, Equatable {
        case all
        /// The gateways whose stable bucket (0–99, from the SHA-256 of the peer id) is below this:
        /// raising the percentage adds gateways, it never swaps them.
        case percent(Int)
        case peers([PeerID])

        public func includes(_ peer: PeerID) -> Bool {
            switch self {
            case .all: true
            case .percent(let p): ReleaseManifest.bucket(of: peer) < p
            case .peers(let list): list.contains(peer)
            }
        }

        /// The rollout's line in the canonical form, and its text in the CLI.
        public var text: String {
            switch self {
            case .all: "all"
            case .percent(let p): "\(p)%"
            case .peers(let list): "peers " + list.map(\.description).joined(separator: ",")
            }
        }

        var json: JSONValue {
            switch self {
            case .all: .object(["all": .bool(true)])
            case .percent(let p): .object(["percent": .int(Int64(p))])
            case .peers(let list): .object(["peers": .array(list.map { .string($0.description) })])
            }
        }

        static func decode(_ v: JSONValue?) throws(TrustError) -> Rollout {
            guard let o = v?.objectValue, o.count == 1, let (key, value) = o.first else {
                throw TrustError("rollout is one of {\"all\": true}, {\"percent\": 1-100}, {\"peers\": [peer ids]}")
            }
            switch key {
            case "all":
                guard value == .bool(true) else { throw TrustError("rollout.all must be true") }
                return .all
            case "percent":
                guard let p = SignedForm.integer(value), (1...100).contains(p) else { throw TrustError("rollout.percent must be a whole number from 1 to 100") }
                return .percent(Int(p))
            case "peers":
                guard case .array(let items) = value, (1...ReleaseManifest.maxPeers).contains(items.count) else {
                    throw TrustError("rollout.peers must list 1 to \(ReleaseManifest.maxPeers) peer ids")
                }
                var peers: [PeerID] = []
                for item in items {
                    guard let s = item.stringValue, s.utf8.count == 64, SignedForm.isHex(s), let p = PeerID(hex: s) else {
                        throw TrustError("rollout.peers holds something other than a peer id (64 lower-case hex digits)")
                    }
                    peers.append(p)
                }
                return .peers(peers)
            default:
                throw TrustError("rollout is one of {\"all\": true}, {\"percent\": 1-100}, {\"peers\": [peer ids]}, not \"\(key)\"")
            }
        }
    }

    public var version: ReleaseVersion
    public var architecture: ReleaseArchitecture
    /// The binary, as a blob: its digest is the release's SHA-256, its length the release's size.
    public var blob: BlobReference
    /// Gateways running an older version than this may not take the release.
    public var minVersion: ReleaseVersion?
    public var rollout: Rollout
    public var notes: String
    public var issuedAt: Int64
    public var signer: String
    public var serial: UInt64
    public var signature: [UInt8]

    public var size: Int64 { blob.length }
    public var digest: BlobDigest { blob.digest }

    public init(version: ReleaseVersion, architecture: ReleaseArchitecture, blob: BlobReference, minVersion: ReleaseVersion? = nil,
                rollout: Rollout = .all, notes: String = "", issuedAt: Int64, signer: String, serial: UInt64, signature: [UInt8] = []) {
        self.version = version
        self.architecture = architecture
        self.blob = blob
        self.minVersion = minVersion
        self.rollout = rollout
        self.notes = notes
        self.issuedAt = issuedAt
        self.signer = signer
        self.serial = serial
        self.signature = signature
    }

    /// Signs a new manifest for `binary` with `key`.
    public static func signed(binary: [UInt8], version: ReleaseVersion, minVersion: ReleaseVersion? = nil, rollout: Rollout = .all,
                              notes: String = "", serial: UInt64, issuedAt: Int64, by key: AdminSigningKey) throws(TrustError) -> ReleaseManifest {
        let architecture = try ReleaseArchitecture.ofELF(Array(binary.prefix(64)))
        let blob = BlobReference(digest: BlobDigest.of(binary), length: Int64(binary.count), contentType: "application/x-executable")
        var m = ReleaseManifest(version: version, architecture: architecture, blob: blob, minVersion: minVersion, rollout: rollout,
                                notes: notes, issuedAt: issuedAt, signer: key.publicKey.fingerprint, serial: serial)
        try m.checkFields()
        m.signature = try SignedForm.sign(m, with: key)
        return m
    }

    /// The document id: one per version, architecture and signer (a signer's newer manifest for
    /// the same release, such as a wider rollout, replaces its older one).
    public var documentID: String { "release-\(version)-\(architecture.rawValue)@\(signer)" }

    public var signedBytes: [UInt8] {
        SignedForm.bytes(header: "shoal-release \(ReleaseManifest.formatVersion)",
                         fields: [version.text, architecture.rawValue, String(size), digest.description, blob.contentType ?? "",
                                  minVersion?.text ?? "", rollout.text, notes, String(issuedAt), signer, String(serial)])
    }

    public var body: String {
        var o: [String: JSONValue] = [
            "v": .int(Int64(ReleaseManifest.formatVersion)), "version": .string(version.text), "architecture": .string(architecture.rawValue),
            "size": .int(size), "sha256": .string(digest.description), "blob": blob.json, "rollout": rollout.json,
            "issuedAt": .int(issuedAt), "signer": .string(signer), "serial": .number(String(serial)), "signature": .string(Digest.hex(signature)),
        ]
        if let minVersion { o["minVersion"] = .string(minVersion.text) }
        if !notes.isEmpty { o["notes"] = .string(notes) }
        return JSONValue.object(o).compactText
    }

    /// Reads a document body strictly: every field present and well-formed, nothing unknown, size
    /// and digest equal to the blob reference's. The signature is not checked here (`verify`).
    public static func decode(_ body: String) throws(TrustError) -> ReleaseManifest {
        let known: Set<String> = ["v", "version", "architecture", "size", "sha256", "blob", "minVersion", "rollout", "notes", "issuedAt", "signer", "serial", "signature"]
        let o = try SignedForm.object(body, maxBytes: maxBytes, known: known, what: "manifest")
        try SignedForm.formatVersion(o, formatVersion)
        guard let vt = o["version"]?.stringValue, let version = ReleaseVersion(vt) else { throw TrustError("version must be dotted whole numbers (0.2.0)") }
        guard let at = o["architecture"]?.stringValue, let architecture = ReleaseArchitecture(rawValue: at) else {
            throw TrustError("architecture must be one of \(ReleaseArchitecture.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let size = SignedForm.integer(o["size"]), size > 0 else { throw TrustError("size must be a positive whole number of bytes") }
        guard let dt = o["sha256"]?.stringValue, let digest = BlobDigest(dt) else { throw TrustError("sha256 must be sha256-<64 hex digits>") }
        let blob: BlobReference
        do {
            guard let b = o["blob"], let r = try BlobReference(b) else { throw TrustError("blob must be a blob reference {\"@blob\": …, \"length\": …}") }
            blob = r
        } catch let e as TrustError { throw e } catch { throw TrustError("blob: \(error)") }
        guard blob.digest == digest else { throw TrustError("sha256 \(digest) differs from the blob reference's \(blob.digest)") }
        guard blob.length == size else { throw TrustError("size \(size) differs from the blob reference's length \(blob.length)") }
        var minVersion: ReleaseVersion?
        if let m = o["minVersion"] {
            guard let s = m.stringValue, let v = ReleaseVersion(s) else { throw TrustError("minVersion must be dotted whole numbers (0.1.0)") }
            minVersion = v
        }
        let rollout = try Rollout.decode(o["rollout"])
        var notes = ""
        if let n = o["notes"] {
            guard let s = n.stringValue else { throw TrustError("notes must be a string") }
            notes = s
        }
        guard let issuedAt = SignedForm.integer(o["issuedAt"]) else { throw TrustError("issuedAt must be whole seconds since 1970") }
        guard let signer = o["signer"]?.stringValue else { throw TrustError("signer missing") }
        let serial = try SignedForm.serial(o["serial"])
        let signature = try SignedForm.signature(o["signature"])
        let m = ReleaseManifest(version: version, architecture: architecture, blob: blob, minVersion: minVersion, rollout: rollout,
                                notes: notes, issuedAt: issuedAt, signer: signer, serial: serial, signature: signature)
        try m.checkFields()
        return m
    }

    func checkFields() throws(TrustError) {
        try SignedForm.checkSigner(signer)
        try SignedForm.checkLine(notes, "notes", maxBytes: ReleaseManifest.maxNotesBytes)
        try SignedForm.checkLine(blob.contentType ?? "", "the blob's content type", maxBytes: BlobReference.maxContentTypeBytes)
        guard issuedAt > 0 else { throw TrustError("issuedAt must be after 1970") }
        if let minVersion, minVersion > version { throw TrustError("minVersion \(minVersion) is after the release's own version \(version)") }
    }

    /// Whether this manifest is signed by one of `keys` (the site file's release keys); nil when it
    /// is, else why not.
    public func verify(keys: [AdminPublicKey]) -> String? {
        guard let key = keys.first(where: { $0.fingerprint == signer }) else { return "signed by \(signer), not a release key this gateway trusts" }
        return isSigned(by: key) ? nil : "its signature does not verify under release key \(signer)"
    }

    /// A peer's stable bucket, 0–99: the SHA-256 of its id, first two bytes, modulo 100.
    public static func bucket(of peer: PeerID) -> Int {
        let h = Digest.sha256(peer.bytes)
        return (Int(h[0]) << 8 | Int(h[1])) % 100
    }

    /// Why a gateway (`peer`, running `running` on `architecture`) must not take this release, or
    /// nil when it may. The signature is checked first: nothing else in an unsigned manifest counts.
    public func refusal(keys: [AdminPublicKey], peer: PeerID, running: ReleaseVersion, architecture: ReleaseArchitecture) -> Refusal? {
        if let why = verify(keys: keys) { return .badSignature(why) }
        guard self.architecture == architecture else { return .otherArchitecture("built for \(self.architecture.rawValue), this gateway is \(architecture.rawValue)") }
        guard version > running else { return .notNewer("version \(version) is not newer than the running \(running)") }
        if let minVersion, running < minVersion { return .belowMinimum("needs at least \(minVersion) running first, this gateway runs \(running)") }
        guard rollout.includes(peer) else { return .notInRollout("the rollout (\(rollout.text)) does not include this gateway") }
        return nil
    }

    /// Why a release is not taken: a refusal (an operator should see it) or not-for-us (quietly).
    public enum Refusal: Sendable, Equatable, CustomStringConvertible {
        case badSignature(String), otherArchitecture(String), notNewer(String), belowMinimum(String), notInRollout(String)
        case sizeMismatch(String), digestMismatch(String)

        /// Whether the release was simply not meant for this gateway (an older version, another
        /// machine, outside the rollout): nothing to report.
        public var isQuiet: Bool {
            switch self {
            case .notNewer, .notInRollout, .otherArchitecture: true
            default: false
            }
        }

        public var description: String {
            switch self {
            case .badSignature(let s), .otherArchitecture(let s), .notNewer(let s), .belowMinimum(let s), .notInRollout(let s),
                 .sizeMismatch(let s), .digestMismatch(let s): s
            }
        }
    }

    /// Checks a fetched binary against this manifest: size, SHA-256, and the ELF header's machine.
    public func check(binary: [UInt8]) -> Refusal? {
        guard Int64(binary.count) == size else { return .sizeMismatch("the binary has \(binary.count) bytes, the release says \(size)") }
        let d = BlobDigest.of(binary)
        guard d == digest else { return .digestMismatch("the binary's SHA-256 is \(d), the release says \(digest)") }
        do {
            let arch = try ReleaseArchitecture.ofELF(Array(binary.prefix(64)))
            guard arch == architecture else { return .otherArchitecture("the binary is for \(arch.rawValue), the release says \(architecture.rawValue)") }
        } catch { return .otherArchitecture("the binary: \(error.description)") }
        return nil
    }

    /// Which of two manifests for one document is newer (the same total order as trust entries).
    public static func isNewer(_ a: ReleaseManifest, than b: ReleaseManifest) -> Bool {
        (a.issuedAt, a.serial, a.signer) > (b.issuedAt, b.serial, b.signer)
    }

    public var summary: String { "release \(version) for \(architecture.rawValue) (\(size) bytes, \(digest.short)…), rollout \(rollout.text), serial \(serial) of release key \(signer)" }
}
