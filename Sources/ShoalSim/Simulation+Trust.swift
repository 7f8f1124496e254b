import ShoalCore
import ShoalGateway
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalTrust

/// Fleet trust in the simulation (`SimConfig.trust`): every node keeps a `TrustBook` over one site
/// admin key, its `_trust` collection replicates first with the book's filter in front, and user
/// collections refuse a revoked peer's later writes. An "operator" records a revoke entry for a
/// victim node on another node at a seeded time (and a second one, signed by a second admin key,
/// on a third node, during a partition if one is on); the checks: no node holds a link to a peer
/// its book revokes, and once healed every node but the victim holds the same entries.
public struct SimTrustPlan: Sendable {
    public var victim: Int
    /// (virtual ms, node) of the first revoke; the second is optional.
    public var first: (at: UInt64, node: Int)
    public var second: (at: UInt64, node: Int)?
    /// An allow entry (for a peer that is not the victim) and the second admin key, recorded early.
    public var allowAt: UInt64
    public var allowNode: Int
    /// The operator's steps not yet taken (0 allow, 1 first revoke, 2 second, 100… the victim's
    /// late writes): the run has not converged while any is left.
    public var pending: Set<Int> = []
}

/// What the trust scenario saw.
public struct SimTrustFigures: Sendable {
    public var victim: Int?
    /// Entries the operator recorded (taken and written), and those its node refused (older).
    public var recorded = 0
    public var refusedAtRecord = 0
    /// Virtual ms when the first revoke was recorded, and when the last non-victim node's book held it.
    public var revokedAtMillis: UInt64?
    /// The first revoke entry's signing time (s). A later revoke of the same peer replaces it in
    /// every ledger, and the ledger's revocation time moves to the later one.
    public var firstRevokeIssuedAt: Int64?
    public var allKnewAfterMillis: UInt64?
    /// Documents the pull filters refused (`_trust` entries not yet signable here, late writes).
    public var refusedByFilters = 0
    /// The victim's writes made at or after its revocation: held by some node (accepted before it
    /// knew), and held nowhere.
    public var lateDocsHeld = 0
    /// Documents (node/id) a node held a victim's late write of before it knew of the revocation:
    /// a later merge may keep that write as the latest, which is no new acceptance.
    var heldBeforeKnowing: Set<String> = []
    /// Links refused because a book revoked the other side (as the TLS authenticator would).
    public var linksRefused = 0
    /// Times a node's book revoked a peer it still held an open link to (must be 0).
    public var linkViolations: [String] = []
    /// A node that knew the revocation applied a document the victim wrote after it (must be 0).
    public var lateAccepted: [String] = []
    public init() {}
}

extension Simulation {
    /// The site every book starts from: the one admin key, every node allowed (the TLS path needs it).
    func trustSite() -> TrustBook.Site? {
        guard let key = adminKey else { return nil }
        return TrustBook.Site(adminKeys: [key.publicKey], allowedPeers: Set(nodes.map(\.peer)))
    }

    /// What a simulated key is made from: the run's seed and the key's role (never the run's random
    /// stream, whose draws would shift with the number of keys).
    func keySeed(_ role: String) -> [UInt8] { Array("shoal-sim \(config.seed) \(role)".utf8) }

    /// A node's virtual wall clock in seconds (what its book judges signing times by).
    func wallSeconds(_ n: SimNode) -> Int64 { (Int64(epoch + now) + n.skew) / 1000 }

    /// Builds a node's book from what its store holds and the collection policies around it
    /// (`_trust` first). Called at every boot.
    func trustPolicies(_ n: SimNode, store: DocumentStore) throws -> [CollectionPolicy] {
        guard let site = trustSite() else {
            var user = CollectionPolicy(name: collection)
            user.resolver = config.resolver
            return [user]
        }
        let reading = SimClockReading(self), epoch = self.epoch, skew = n.skew
        let book = TrustBook(site: site, clock: { (Int64(epoch + reading.read()) + skew) / 1000 })
        try store.createCollection(.trust)
        try book.load(from: store)
        n.book = book
        n.toldRevoked = []
        // As the runtime's CollectionPolicies.make(_:trust:) builds them.
        var trust = CollectionPolicy(name: .trust)
        trust.resolver = TrustBook.resolver
        let refusals = n.filterRefusals
        trust.pullFilter = { peer, doc in
            let ok = book.trustFilter(peer, doc)
            if !ok { refusals.add() }
            return ok
        }
        var user = CollectionPolicy(name: collection)
        user.resolver = config.resolver
        let writer = book.writerFilter(nil)
        user.pullFilter = { peer, doc in
            let ok = writer(peer, doc)
            if !ok { refusals.add() }
            return ok
        }
        if config.tls {
            tlsContexts[n.index] = (try TLSContext(role: .client, identity: identities[n.index], authenticator: book.authenticator),
                                    try TLSContext(role: .server, identity: identities[n.index], authenticator: book.authenticator))
        }
        return [trust, user]
    }

    /// Tells a node's core of peers its book revokes that it has not been told of yet.
    func syncRevoked(_ n: SimNode) {
        guard let book = n.book, n.up, n.core != nil else { return }
        let revoked = book.current().revokedPeers
        let fresh = revoked.subtracting(n.toldRevoked)
        guard !fresh.isEmpty else { return }
        n.toldRevoked.formUnion(fresh)
        note("node \(n.index): revokes \(fresh.compactMap { p in nodes.first { $0.peer == p }?.index }.sorted())")
        input(n, .peersRevoked(fresh))
        if let v = trustPlan?.victim, fresh.contains(nodes[v].peer) { noteKnew() }
    }

    func noteKnew() {
        guard let v = trustPlan?.victim, trustFigures.allKnewAfterMillis == nil, let at = trustFigures.revokedAtMillis else { return }
        let victim = nodes[v].peer
        if nodes.allSatisfy({ $0.index == v || $0.book?.revokedAt(victim) != nil }) { trustFigures.allKnewAfterMillis = now - at }
    }

    /// After a pull: `_trust` entries applied feed the core; user documents applied are checked
    /// against the revocation the node knew before this batch.
    func pulled(_ n: SimNode, _ items: [ReplicationEvent.Item], knewBefore: Set<PeerID>) {
        guard let book = n.book else { return }
        if items.contains(where: { $0.collection == CollectionName.trust.description }) { syncRevoked(n) }
        guard let v = trustPlan?.victim, n.index != v, let store = n.store else { return }
        let knew = knewBefore.contains(nodes[v].peer)
        let cutoff = (knew ? book.revokedAt(nodes[v].peer) : trustFigures.firstRevokeIssuedAt) ?? .max
        for item in items where item.collection == collection.description && item.error == nil {
            guard let id = try? DocumentID(item.id), let d = try? store.get(collection, id: id), let version = try? DocumentVersion(decoding: d.version),
                  let last = version.vector.current, last.peer == nodes[v].peer, Int64(last.timestamp.physicalMillis / 1000) >= cutoff else { continue }
            let key = "\(n.index)/\(item.id)"
            guard knew else { trustFigures.heldBeforeKnowing.insert(key); continue }
            if trustFigures.heldBeforeKnowing.contains(key) { continue }
            trustFigures.lateAccepted.append("node \(n.index) applied \(item.id), written by revoked node \(v) after its revocation, at \(now) ms")
        }
    }

    /// The operator's entries, as scheduled by the plan.
    func operatorAct(_ step: Int) {
        guard let plan = trustPlan, let key = adminKey else { return }
        let victim = nodes[plan.victim].peer.description
        switch step {
        case 0:
            // An allow entry for some other peer and the second admin key: entries that must
            // replicate like the rest (the second revoke is signed by that key).
            let other = nodes[(plan.victim + 1) % nodes.count].peer.description
            let n = nodes[plan.allowNode]
            guard n.up else { schedule(at: now + 1_000, .operatorTrust(0)); return }
            trustPlan?.pending.remove(0)
            if let second = secondAdminKey {
                record(n, [(.allow, other, 1, key), (.addAdminKey, Digest.hex(second.publicKey.der), 2, key)])
            }
        case 1:
            let n = nodes[plan.first.node]
            // The operator's gateway is down: they try again a second later.
            guard n.up else { schedule(at: now + 1_000, .operatorTrust(1)); return }
            trustPlan?.pending.remove(1)
            let before = trustFigures.revokedAtMillis
            if before == nil { trustFigures.revokedAtMillis = now }
            if record(n, [(.revoke, victim, 3, key)]) == 0 { trustFigures.revokedAtMillis = before; return }
            // The revoked node goes on writing for a while: its neighbours that have not heard yet
            // take those writes, and whoever knows must refuse them when they relay them.
            for k in 0..<10 {
                trustPlan?.pending.insert(100 + k)
                schedule(at: now + UInt64(k) * 500, .operatorTrust(100 + k))
            }
        case 100...:
            trustPlan?.pending.remove(step)
            _ = try? write(on: plan.victim, id: "late-\(step - 100)", body: #"{"late":\#(step - 100)}"#)
        default:
            guard let second = secondAdminKey, let s = plan.second else { return }
            // During a partition: on the side away from the first operator's node if one is on.
            var node = s.node
            if let side = medium.partition, side.contains(plan.first.node) == side.contains(node),
               let away = nodes.indices.first(where: { $0 != plan.victim && side.contains($0) != side.contains(plan.first.node) }) {
                node = away
            }
            guard nodes[node].up else { schedule(at: now + 1_000, .operatorTrust(2)); return }
            trustPlan?.pending.remove(2)
            // The operator imports the admin key entry with it (this node may not hold it yet).
            record(nodes[node], [(.addAdminKey, Digest.hex(second.publicKey.der), 2, key), (.revoke, victim, 1, second)])
        }
    }

    /// Signs and records entries on a node through its local write path; returns how many were
    /// taken.
    @discardableResult
    func record(_ n: SimNode, _ entries: [(TrustEntry.Kind, String, UInt64, AdminSigningKey)]) -> Int {
        guard n.up, let book = n.book, let writer = n.replicator?.writer else { return 0 }
        var taken = 0
        for (kind, subject, serial, key) in entries {
            // The keys come from the seed and mbedTLS signs deterministically (RFC 6979), so a
            // seed replays to the same signatures, so the same frame sizes.
            guard let entry = try? TrustEntry.signed(kind, subject: subject, note: "sim operator", serial: serial, issuedAt: wallSeconds(n), by: key) else { continue }
            do {
                let (verdict, _) = try book.record(entry) { id, body in
                    let change = try writer.put(.trust, id: DocumentID(id), body: body)
                    _ = change
                    committed(n)
                }
                if verdict == .accepted { taken += 1; trustFigures.recorded += 1 }
                if verdict == .accepted, kind == .revoke, trustFigures.firstRevokeIssuedAt == nil { trustFigures.firstRevokeIssuedAt = entry.issuedAt }
                note("operator: \(entry.summary) on node \(n.index): \(verdict)")
            } catch {
                trustFigures.refusedAtRecord += 1
                note("operator: \(entry.summary) on node \(n.index) refused: \(error)")
            }
        }
        syncRevoked(n)
        return taken
    }

    /// Property (a), after every event: no node holds an open link to a peer its book revokes.
    func checkRevokedLinks() {
        var found: [(id: Int, side: Int, other: Int)] = []
        for (id, c) in conns {
            for (side, other, open) in [(c.a, c.b, c.openA), (c.b, c.a, c.openB)] where open {
                guard let book = nodes[side].book, book.revokedAt(nodes[other].peer) != nil else { continue }
                found.append((id, side, other))
            }
        }
        // In link order, not the Dictionary's: the report must be the same in every process.
        for v in found.sorted(by: { ($0.id, $0.side) < ($1.id, $1.side) }) where trustFigures.linkViolations.count < 10 {
            trustFigures.linkViolations.append("node \(v.side) holds link \(v.id) to node \(v.other), which its book revokes, at \(now) ms")
        }
    }

    /// Whether a link between two nodes is refused by either's book (as the TLS authenticator
    /// refuses a revoked certificate). Without real TLS the simulation asks the books directly.
    func trustRefuses(_ a: SimNode, _ b: SimNode) -> (byDialler: Bool, byDialled: Bool) {
        (a.book?.revokedAt(b.peer) != nil, b.book?.revokedAt(a.peer) != nil)
    }

    /// Nodes the end checks compare: up and not revoked (the victim is cut off by design).
    public var checkedNodes: [Int] {
        guard let v = trustPlan?.victim else { return upNodes }
        return upNodes.filter { $0 != v }
    }

    /// The victim's revocation time (seconds): the first revoke entry the operator made for it
    /// (the ledgers keep only the newest, whose time may be later).
    var victimCutoff: Int64? { trustFigures.firstRevokeIssuedAt }

    /// Whether a held version is one of the victim's writes from its revocation on.
    func isLate(_ version: [UInt8], cutoff: Int64?) -> Bool {
        guard let v = trustPlan?.victim, let cutoff, let dv = try? DocumentVersion(decoding: version), let last = dv.vector.current else { return false }
        return last.peer == nodes[v].peer && Int64(last.timestamp.physicalMillis / 1000) >= cutoff
    }

    /// Property (b): every checked node holds the same `_trust` entries and revokes the same peers
    /// (the victim among them), in its book and in its core.
    public func trustDisagreements(readBack: Bool = true) -> [String] {
        guard let v = trustPlan?.victim else { return [] }
        let checked = checkedNodes
        guard let first = checked.first, let book0 = nodes[first].book else { return [] }
        let entries0 = book0.ledger.entries
        let revoked0 = book0.current().revokedPeers
        var out: [String] = []
        if trustFigures.revokedAtMillis != nil && !revoked0.contains(nodes[v].peer) { out.append("node \(first) does not revoke the victim \(v)") }
        for i in checked {
            guard let book = nodes[i].book else { continue }
            let e = book.ledger.entries
            if e != entries0 {
                let differing = Set(e.keys).union(entries0.keys).filter { e[$0] != entries0[$0] }.sorted()
                out.append("nodes \(first) and \(i) hold different _trust entries (\(differing.joined(separator: ", ")))")
            }
            if book.current().revokedPeers != revoked0 { out.append("nodes \(first) and \(i) revoke different peers") }
            if let core = nodes[i].core, !book.current().revokedPeers.isSubset(of: core.revoked) { out.append("node \(i)'s core was not told of every peer its book revokes") }
            // What the store holds must read back to the same ledger (what a restart loads).
            if readBack, let store = nodes[i].store {
                let fresh = TrustBook(site: book.site, clock: { Int64.max / 2 })
                if (try? fresh.load(from: store)) != nil, fresh.ledger.entries != e {
                    out.append("node \(i)'s _trust store reads back to other entries than its book holds")
                }
            }
        }
        return out
    }

    /// Trust documents every checked node holds the same of (a cheap convergence pre-check).
    var trustConverged: Bool {
        guard let plan = trustPlan else { return true }
        return plan.pending.isEmpty && trustDisagreements(readBack: false).isEmpty
    }
}

/// Counts filter refusals from inside the (Sendable) pull filters; the simulation runs on one thread.
final class SimCounter: @unchecked Sendable {
    var value = 0
    func add() { value += 1 }
}

extension Simulation {
    /// Draws the operator's plan from the seed and makes the admin keys (two key pairs per run).
    func planTrust() throws {
        adminKey = try AdminSigningKey.generate(seed: keySeed("admin 1"))
        secondAdminKey = try AdminSigningKey.generate(seed: keySeed("admin 2"))
        let count = config.nodes
        let victim = Int.random(in: 0..<count, using: &rng)
        func other(_ not: Set<Int>) -> Int {
            let choices = (0..<count).filter { !not.contains($0) }
            return choices[Int.random(in: 0..<choices.count, using: &rng)]
        }
        // Within the faults (or the first 40 s without them), after the mesh has had time to form;
        // and within the first three fifths of a short run.
        let run = config.runMillis
        let (fifth, twoFifths, threeFifths) = run == 0 ? (UInt64.max, UInt64.max, UInt64.max) : (run / 5, run * 2 / 5, run * 3 / 5)
        let start = min(10_000, fifth)
        let end = max(start, min(twoFifths, max(20_000, config.faultsUntilMillis > 0 ? config.faultsUntilMillis * 3 / 5 : 40_000)))
        let firstAt = UInt64.random(in: start...end, using: &rng)
        let firstNode = other([victim])
        var plan = SimTrustPlan(victim: victim, first: (firstAt, firstNode), second: nil,
                                allowAt: UInt64.random(in: min(2_000, firstAt)...firstAt, using: &rng), allowNode: other([victim]))
        plan.pending = [0, 1]
        if count >= 3 {
            let last = max(firstAt + 1, min(threeFifths, config.faultsUntilMillis > 0 ? config.faultsUntilMillis : firstAt + 20_000))
            plan.second = (UInt64.random(in: firstAt...last, using: &rng), other([victim, firstNode]))
            plan.pending.insert(2)
        }
        trustPlan = plan
        trustFigures.victim = victim
        schedule(at: plan.allowAt, .operatorTrust(0))
        schedule(at: plan.first.at, .operatorTrust(1))
        if let s = plan.second { schedule(at: s.at, .operatorTrust(2)) }
    }
}
