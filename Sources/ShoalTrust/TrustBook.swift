import ShoalThreads
import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalTLS

/// A gateway's live trust: the site file's roots, allowed peers, CRLs and admin keys, plus the
/// `_trust` entries it holds (a `TrustLedger`), read by every handshake (`authenticator`), every
/// incoming `_trust` document (`trustFilter`) and every incoming user document (`writerFilter`: a
/// revoked peer's later writes are refused whoever relays them). Also the pending list: peers
/// refused because nothing trusts them yet, for an operator to allow.
public final class TrustBook: Sendable {
    public struct Site: Sendable {
        public var adminKeys: [AdminPublicKey]
        public var roots: [Certificate]
        public var allowedPeers: Set<PeerID>
        public var revocationList: RevocationList?
        public init(adminKeys: [AdminPublicKey] = [], roots: [Certificate] = [], allowedPeers: Set<PeerID> = [], revocationList: RevocationList? = nil) {
            self.adminKeys = adminKeys
            self.roots = roots
            self.allowedPeers = allowedPeers
            self.revocationList = revocationList
        }
    }

    /// A peer refused because nothing trusts it yet (not a bad certificate: an unknown one).
    public struct Pending: Sendable, Equatable {
        public let peer: PeerID
        public var subject: String
        public var transports: Set<String>
        public var firstSeen: Int64
        public var lastSeen: Int64
        public var attempts: Int
    }

    /// What changed when entries were taken: peers newly revoked (close their links now) and
    /// newly allowed (dial them again now).
    public struct Change: Sendable, Equatable {
        public var revoked: Set<PeerID> = []
        public var allowed: Set<PeerID> = []
        public var isEmpty: Bool { revoked.isEmpty && allowed.isEmpty }
    }

    /// At most this many pending peers are kept (the oldest-seen forgotten first), so a flood of
    /// made-up identities costs a bounded table.
    public static let pendingCapacity = 64

    struct State {
        var site: Site
        var ledger: TrustLedger
        var trust: FleetTrust
        var revoked: [PeerID: Int64]
        var pending: [PeerID: Pending] = [:]
        var rejected = 0
    }

    let state: Locked<State>
    /// Every non-empty change, as it is taken (the replication service closes revoked peers'
    /// links and redials allowed ones from it).
    public let changes = Broadcaster<Change>()
    let clock: @Sendable () -> Int64
    /// Told of every entry refused (why) and every change taken.
    let log: @Sendable (String) -> Void

    public init(site: Site, clock: @escaping @Sendable () -> Int64 = { Identity.now() }, log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.clock = clock
        self.log = log
        let ledger = TrustLedger(siteKeys: site.adminKeys)
        state = Locked(State(site: site, ledger: ledger, trust: TrustBook.derive(site, ledger), revoked: [:]))
    }

    static func derive(_ site: Site, _ ledger: TrustLedger) -> FleetTrust {
        let removed = ledger.removedRoots
        var roots = site.roots.filter { !removed.contains(Digest.hex(Digest.sha256($0.der))) }
        for der in ledger.addedRoots where !removed.contains(Digest.hex(Digest.sha256(der))) {
            if let c = try? Certificate(parsing: der) { roots.append(c) }
        }
        let revoked = Set(ledger.revokedPeers.keys)
        return FleetTrust(roots: roots, allowedPeers: site.allowedPeers.union(ledger.allowedPeers).subtracting(revoked),
                          revokedPeers: revoked, revocationList: site.revocationList)
    }

    public var site: Site { state.withLock { $0.site } }

    /// Roots to use when the site file names none (a CA-signed gateway trusts its own CA).
    public func setSiteRoots(_ roots: [Certificate]) {
        state.withLock { s in
            s.site.roots = roots
            _ = TrustBook.rederive(&s)
        }
    }

    /// The trust every handshake reads now.
    public func current() -> FleetTrust { state.withLock { $0.trust } }

    /// An authenticator over this book: refuses revoked peers, accepts allowed ones and chains
    /// to the roots; notes unknown peers as pending.
    public var authenticator: PeerAuthenticator {
        var a = PeerAuthenticator.fleet { [self] in current() }
        a.onRefusal = { [self] peer, subject, reason, transport in
            switch reason {
            case .notInAllowList, .unknownCA: notePending(peer, subject: subject, transport: transport)
            default: break
            }
        }
        return a
    }

    // MARK: entries

    /// Judges one `_trust` document (as it arrives from a peer, or is imported) and takes it if
    /// good: a tombstone, a body that is no entry, a bad signature, an unknown signer, an older or
    /// replayed entry are refused and logged.
    public func take(id: String, body: String?) -> (TrustLedger.Verdict, Change) {
        guard let body else {
            return refuse(id, "a deletion: trust entries are replaced by newer entries, never deleted")
        }
        let entry: TrustEntry
        do { entry = try TrustEntry.decode(body) } catch { return refuse(id, error.description) }
        let now = clock()
        let (verdict, change) = state.withLock { s -> (TrustLedger.Verdict, Change) in
            let v = s.ledger.consider(entry, documentID: id, now: now)
            guard v == .accepted else {
                if case .rejected = v { s.rejected += 1 }
                return (v, Change())
            }
            return (v, TrustBook.rederive(&s))
        }
        if !change.isEmpty { changes.send(change) }
        switch verdict {
        case .accepted: log("trust entry taken: \(entry.summary)")
        case .rejected(let why): log("trust entry \(id) refused: \(why)")
        case .unchanged: break
        }
        return (verdict, change)
    }

    /// Records an entry made or imported here (`shoal trust allow`, `import`): judged exactly as
    /// one from a peer, then written to `_trust` through `write(id, body)` (the gateway's local
    /// write path, which versions it) so it replicates. An entry already held writes nothing.
    public func record(_ entry: TrustEntry, write: (String, String) throws -> Void) throws(TrustError) -> (TrustLedger.Verdict, Change) {
        let id = entry.documentID
        let (verdict, change) = take(id: id, body: entry.body)
        switch verdict {
        case .rejected(let why): throw TrustError(why)
        case .unchanged: return (verdict, change)
        case .accepted:
            do { try write(id, entry.body) } catch { throw TrustError("taken, but not written to the store: \(error)") }
            return (verdict, change)
        }
    }

    func refuse(_ id: String, _ why: String) -> (TrustLedger.Verdict, Change) {
        state.withLock { $0.rejected += 1 }
        log("trust entry \(id) refused: \(why)")
        return (.rejected(why), Change())
    }

    static func rederive(_ s: inout State) -> Change {
        let before = s.trust
        s.trust = derive(s.site, s.ledger)
        s.revoked = s.ledger.revokedPeers
        for p in s.trust.allowedPeers { s.pending[p] = nil }
        return Change(revoked: s.trust.revokedPeers.subtracting(before.revokedPeers),
                      allowed: s.trust.allowedPeers.subtracting(before.allowedPeers))
    }

    /// Reads every entry the store holds (at start, or after a batch came in).
    @discardableResult
    public func load(from store: DocumentStore) throws(StoreError) -> Change {
        var docs: [(id: String, body: String)] = []
        var after: String?
        while true {
            let page = try store.list(.trust, after: after, limit: 500)
            for d in page { if let b = d.body { docs.append((d.id, b)) } }
            guard page.count == 500, let last = page.last else { break }
            after = last.id
        }
        var ledger = TrustLedger(siteKeys: site.adminKeys)
        let refused = ledger.load(docs, now: clock())
        for r in refused { log("trust entry \(r.id) in the store refused: \(r.reason)") }
        let change = state.withLock { s in
            s.ledger = ledger
            return TrustBook.rederive(&s)
        }
        if !change.isEmpty { changes.send(change) }
        return change
    }

    /// The pull filter of the `_trust` collection: takes good entries, refuses the rest.
    public var trustFilter: @Sendable (PeerID, ReplicatedDocument) -> Bool {
        { [self] _, doc in
            switch take(id: doc.id, body: doc.body).0 {
            case .accepted, .unchanged: true
            case .rejected: false
            }
        }
    }

    /// The `_trust` collection's resolver: of two concurrent versions of one entry's document, the
    /// newer entry wins (not the later write), so every gateway keeps the same one.
    public static let resolver = ConflictResolver(name: "newestTrustEntry") { _, local, remote in
        guard let r = remote.body.flatMap({ try? TrustEntry.decode($0) }) else { return .keepLocal }
        guard let l = local.body.flatMap({ try? TrustEntry.decode($0) }) else { return .takeRemote }
        return TrustEntry.isNewer(r, than: l) ? .takeRemote : .keepLocal
    }

    /// A user collection's pull filter with the revocation rule in front: a document whose latest
    /// write is a revoked peer's, made after its revocation, is refused (whoever relays it).
    public func writerFilter(_ inner: (@Sendable (PeerID, ReplicatedDocument) -> Bool)?) -> @Sendable (PeerID, ReplicatedDocument) -> Bool {
        { [self] peer, doc in
            if let last = doc.version.vector.current, let at = revokedAt(last.peer), last.timestamp.physicalMillis / 1000 >= UInt64(max(0, at)) {
                return false
            }
            if revokedAt(peer) != nil { return false }
            return inner?(peer, doc) ?? true
        }
    }

    /// When `peer` was revoked (the entry's signing time), or nil.
    public func revokedAt(_ peer: PeerID) -> Int64? { state.withLock { $0.revoked[peer] } }

    public var ledger: TrustLedger { state.withLock { $0.ledger } }
    public var rejectedCount: Int { state.withLock { $0.rejected } }

    // MARK: pending

    func notePending(_ peer: PeerID, subject: String, transport: String) {
        let now = clock()
        let isNew = state.withLock { s -> Bool in
            if s.trust.revokedPeers.contains(peer) { return false }
            if var p = s.pending[peer] {
                p.lastSeen = now
                p.attempts += 1
                p.transports.insert(transport)
                p.subject = String(subject.prefix(200))
                s.pending[peer] = p
                return false
            }
            if s.pending.count >= TrustBook.pendingCapacity, let oldest = s.pending.values.min(by: { $0.lastSeen < $1.lastSeen }) {
                s.pending[oldest.peer] = nil
            }
            s.pending[peer] = Pending(peer: peer, subject: String(subject.prefix(200)), transports: [transport], firstSeen: now, lastSeen: now, attempts: 1)
            return true
        }
        if isNew { log("peer \(peer) (\(subject.prefix(80))) asks to join over \(transport): pending; allow it with `shoal trust allow \(peer) --admin-key FILE`") }
    }

    /// Peers waiting for approval, first seen first.
    public var pending: [Pending] { state.withLock { Array($0.pending.values) }.sorted { ($0.firstSeen, $0.peer.description) < ($1.firstSeen, $1.peer.description) } }

    /// The trust checkpoint's deadline, if a checkpoint is held.
    public var nextUpdate: Int64? { state.withLock { $0.ledger.checkpoint?.nextUpdate } }
}
