import ShoalCore
import ShoalTLS

/// The `_trust` entries a gateway holds, and what they add up to: which admin keys sign, which
/// peers are allowed or revoked, which roots are added or removed, the checkpoint. Pure: the same
/// entries give the same answer on every gateway, in any order they arrived.
public struct TrustLedger: Sendable {
    /// How far ahead of our clock an entry's signing time may be (clocks of boards differ).
    public static let skewSeconds: Int64 = 300

    public enum Verdict: Sendable, Equatable {
        /// New, or newer than what was held for its document: now held.
        case accepted
        /// The very entry held already (a redelivery).
        case unchanged
        case rejected(String)
    }

    public let siteKeys: [AdminPublicKey]
    /// The entries held, by document id.
    public private(set) var entries: [String: TrustEntry] = [:]

    public init(siteKeys: [AdminPublicKey]) {
        self.siteKeys = siteKeys
    }

    /// An admin key as the entries have it: it signs for the fleet from `addedAt` (the site
    /// file's keys, and keys whose adding entry this gateway lacks, from always) until `removedAt`.
    public struct KeyStanding: Sendable {
        public let key: AdminPublicKey
        public var addedAt: Int64
        public var removedAt: Int64?
        public let fromSiteFile: Bool

        func covers(_ t: Int64) -> Bool { addedAt <= t && (removedAt.map { t < $0 } ?? true) }
    }

    /// The admin keys: the site file's, then the add and remove entries in signing order, each
    /// counting only if its signer stood when it was signed. One pass over a fixed order, so the
    /// same entries give the same keys whatever order they arrived in.
    public var adminKeys: [String: KeyStanding] {
        var keys: [String: KeyStanding] = [:]
        for k in siteKeys { keys[k.fingerprint] = KeyStanding(key: k, addedAt: .min, removedAt: nil, fromSiteFile: true) }
        let adminEntries = entries.filter { $0.value.kind == .addAdminKey || $0.value.kind == .removeAdminKey }
            .sorted { TrustLedger.signedBefore($0, $1) }.map(\.value)
        for e in adminEntries where TrustLedger.signerStands(e, in: keys) {
            guard let key = try? AdminPublicKey(hex: e.subject) else { continue }
            var k = keys[key.fingerprint] ?? KeyStanding(key: key, addedAt: e.kind == .addAdminKey ? e.issuedAt : .min, removedAt: nil, fromSiteFile: false)
            if e.kind == .addAdminKey {
                k.addedAt = min(k.addedAt, e.issuedAt)
                k.removedAt = nil
            } else {
                k.removedAt = min(k.removedAt ?? .max, e.issuedAt)
            }
            keys[key.fingerprint] = k
        }
        return keys
    }

    /// Oldest signed first; ties by serial, signer, then document id (a total order).
    static func signedBefore(_ a: (key: String, value: TrustEntry), _ b: (key: String, value: TrustEntry)) -> Bool {
        (a.value.issuedAt, a.value.serial, a.value.signer, a.key) < (b.value.issuedAt, b.value.serial, b.value.signer, b.key)
    }

    /// Whether a held entry's signer was an admin key here when it signed it. The signature is not
    /// checked again: `consider` verified it before holding the entry, under the key its signer
    /// names (a fingerprint names one key), and ECDSA checks are what a ledger of many entries
    /// would spend its time on.
    static func signerStands(_ e: TrustEntry, in keys: [String: KeyStanding]) -> Bool {
        keys[e.signer]?.covers(e.issuedAt) ?? false
    }

    /// Every key this gateway can check a signature with: the site file's and every key an admin
    /// entry it holds names (standing or not).
    var knownKeys: [String: AdminPublicKey] {
        var out: [String: AdminPublicKey] = [:]
        for k in siteKeys { out[k.fingerprint] = k }
        for e in entries.values where e.kind == .addAdminKey || e.kind == .removeAdminKey {
            if let k = try? AdminPublicKey(hex: e.subject) { out[k.fingerprint] = k }
        }
        return out
    }

    /// Judges `entry`, arriving as document `documentID`, and holds it if it is good and newer.
    public mutating func consider(_ entry: TrustEntry, documentID: String, now: Int64) -> Verdict {
        guard entry.documentID == documentID else {
            return .rejected("kept as document \(documentID) but it is \(entry.documentID)")
        }
        if entry.issuedAt > now + TrustLedger.skewSeconds {
            return .rejected("signed in the future (\(entry.issuedAt - now) s ahead of our clock)")
        }
        guard let key = knownKeys[entry.signer] else { return .rejected("signed by \(entry.signer), not an admin key this gateway trusts") }
        guard entry.isSigned(by: key) else {
            return .rejected("its signature does not verify under admin key \(entry.signer)")
        }
        if let standing = adminKeys[entry.signer] {
            if let removed = standing.removedAt, entry.issuedAt >= removed {
                return .rejected("signed by admin key \(entry.signer) after that key was removed")
            }
            if entry.issuedAt < standing.addedAt {
                return .rejected("signed by admin key \(entry.signer) before that key was added")
            }
        }
        if let held = entries[documentID] {
            if held == entry { return .unchanged }
            if !TrustEntry.isNewer(entry, than: held) {
                return .rejected("older than the entry held as \(documentID) (serial \(held.serial), signed \(held.issuedAt))")
            }
        }
        if let other = entries.first(where: { $0.key != documentID && $0.value.signer == entry.signer && $0.value.serial == entry.serial }) {
            return .rejected("serial \(entry.serial) of admin key \(entry.signer) already signs \(other.key): a replayed serial")
        }
        entries[documentID] = entry
        return .accepted
    }

    /// Loads entries in any order: an entry signed by a key that another entry adds is taken once
    /// that one is. Returns the ones refused, with why.
    public mutating func load(_ documents: [(id: String, body: String)], now: Int64) -> [(id: String, reason: String)] {
        var pending: [(String, TrustEntry)] = []
        var refused: [(id: String, reason: String)] = []
        for (id, body) in documents {
            do { pending.append((id, try TrustEntry.decode(body))) } catch { refused.append((id, error.description)) }
        }
        // Oldest first; entries equal in (time, serial, signer) — one serial signing two documents —
        // by document id, so which of them is taken does not hang on the order they were listed in.
        pending.sort { TrustEntry.isNewer($1.1, than: $0.1) || (!TrustEntry.isNewer($0.1, than: $1.1) && $0.0 < $1.0) }
        var progress = true
        while progress && !pending.isEmpty {
            progress = false
            var rest: [(String, TrustEntry)] = []
            for (id, e) in pending {
                switch consider(e, documentID: id, now: now) {
                case .accepted, .unchanged: progress = true
                case .rejected: rest.append((id, e))
                }
            }
            pending = rest
        }
        for (id, e) in pending {
            if case .rejected(let why) = consider(e, documentID: id, now: now) { refused.append((id, why)) }
        }
        return refused
    }

    /// What counts for each subject (a peer, a root, an admin key, the checkpoint): of the entries
    /// about it whose signer stood when it signed, the newest, whichever admin key signed it.
    public var effective: [String: TrustEntry] {
        let keys = adminKeys
        var out: [String: TrustEntry] = [:]
        for e in entries.values where TrustLedger.signerStands(e, in: keys) {
            let subject = e.subjectKey
            if let held = out[subject], !TrustEntry.isNewer(e, than: held) { continue }
            out[subject] = e
        }
        return out
    }

    func standing(_ kinds: Set<TrustEntry.Kind>) -> [TrustEntry] {
        effective.values.filter { kinds.contains($0.kind) }
    }

    /// Peers an allow entry names (and no newer revoke).
    public var allowedPeers: Set<PeerID> { Set(standing([.allow]).compactMap(\.peer)) }

    /// Peers revoked, with when (the entry's signing time).
    public var revokedPeers: [PeerID: Int64] {
        var out: [PeerID: Int64] = [:]
        for e in standing([.revoke]) { if let p = e.peer { out[p] = e.issuedAt } }
        return out
    }

    /// Roots added (DER), and the SHA-256 fingerprints of roots removed.
    public var addedRoots: [[UInt8]] { standing([.addRoot]).compactMap { Hex.decode($0.subject) } }
    public var removedRoots: Set<String> { Set(standing([.removeRoot]).map { TrustEntry.rootFingerprint(hexDER: $0.subject) }) }

    public var checkpoint: TrustEntry? { standing([.checkpoint]).first }

    /// The highest serial each admin key has signed here (what `shoal trust` continues from).
    public var lastSerials: [String: UInt64] {
        var out: [String: UInt64] = [:]
        for e in entries.values { out[e.signer] = max(out[e.signer] ?? 0, e.serial) }
        return out
    }
}
