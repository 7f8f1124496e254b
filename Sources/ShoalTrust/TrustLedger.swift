import Synchronization
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
    /// Signatures found good, so each is checked once: the derived views (admin keys, revoked and
    /// allowed peers, roots) re-read every entry's standing on every change, and an ECDSA verify
    /// costs milliseconds (more on a board).
    let verified = VerifiedSignatures()

    public init(siteKeys: [AdminPublicKey]) {
        self.siteKeys = siteKeys
    }

    /// An admin key as the entries have it: usable for entries signed before `removedAt`.
    public struct KeyStanding: Sendable {
        public let key: AdminPublicKey
        public let removedAt: Int64?
        public let fromSiteFile: Bool
    }

    /// The admin keys: the site file's, plus those added by an entry a key already known signed,
    /// repeated until nothing changes; a remove entry ends a key's standing from its signing time.
    public var adminKeys: [String: KeyStanding] {
        var keys: [String: KeyStanding] = [:]
        for k in siteKeys { keys[k.fingerprint] = KeyStanding(key: k, removedAt: nil, fromSiteFile: true) }
        let adminEntries = entries.values.filter { $0.kind == .addAdminKey || $0.kind == .removeAdminKey }
            .sorted { TrustEntry.isNewer($1, than: $0) }
        var changed = true
        var rounds = 0
        while changed && rounds <= adminEntries.count {
            changed = false
            rounds += 1
            for e in adminEntries where signerStands(e, in: keys) {
                guard let key = try? AdminPublicKey(hex: e.subject) else { continue }
                let standing = KeyStanding(key: key, removedAt: e.kind == .removeAdminKey ? e.issuedAt : nil,
                                           fromSiteFile: keys[key.fingerprint]?.fromSiteFile ?? false)
                if keys[key.fingerprint]?.removedAt != standing.removedAt || keys[key.fingerprint] == nil {
                    keys[key.fingerprint] = standing
                    changed = true
                }
            }
        }
        return keys
    }

    func signerStands(_ e: TrustEntry, in keys: [String: KeyStanding]) -> Bool {
        guard let k = keys[e.signer] else { return false }
        if let removed = k.removedAt, e.issuedAt >= removed { return false }
        return verified.check(k.key, e)
    }

    /// Judges `entry`, arriving as document `documentID`, and holds it if it is good and newer.
    public mutating func consider(_ entry: TrustEntry, documentID: String, now: Int64) -> Verdict {
        guard entry.documentID == documentID else {
            return .rejected("kept as document \(documentID) but it is about \(entry.documentID)")
        }
        if entry.issuedAt > now + TrustLedger.skewSeconds {
            return .rejected("signed in the future (\(entry.issuedAt - now) s ahead of our clock)")
        }
        let keys = adminKeys
        guard let standing = keys[entry.signer] else { return .rejected("signed by \(entry.signer), not an admin key this gateway trusts") }
        if let removed = standing.removedAt, entry.issuedAt >= removed {
            return .rejected("signed by admin key \(entry.signer) after that key was removed")
        }
        guard verified.check(standing.key, entry) else {
            return .rejected("its signature does not verify under admin key \(entry.signer)")
        }
        if let held = entries[documentID] {
            if held == entry { return .unchanged }
            if !TrustEntry.isNewer(entry, than: held) {
                return .rejected("older than the entry held for \(documentID) (serial \(held.serial), signed \(held.issuedAt))")
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
        pending.sort { TrustEntry.isNewer($1.1, than: $0.1) }
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

    /// Entries whose signer still stands (a key removed later keeps what it signed before).
    func standing(_ kinds: Set<TrustEntry.Kind>) -> [TrustEntry] {
        let keys = adminKeys
        return entries.values.filter { kinds.contains($0.kind) && signerStands($0, in: keys) }
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

/// Remembers (key, signature, signed bytes) triples that verified; only good ones, so the set
/// holds no more than the genuine entries seen (a forger cannot grow it).
final class VerifiedSignatures: Sendable {
    let good = Mutex<Set<[UInt8]>>([])

    func check(_ key: AdminPublicKey, _ e: TrustEntry) -> Bool {
        let signed = e.signedBytes
        let id = Digest.sha256(key.der + [0] + e.signature + [0] + signed)
        if good.withLock({ $0.contains(id) }) { return true }
        guard key.verifies(e.signature, of: signed) else { return false }
        good.withLock { _ = $0.insert(id) }
        return true
    }
}
