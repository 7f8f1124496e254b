import Synchronization
import ShoalCore
import ShoalReplication
import ShoalTLS
import ShoalTrust
import Testing

/// Signed `_trust` entries and what they add up to: the admin keys' signatures, every way an entry
/// is refused (with the reason an operator reads), key rotation, order independence, and the live
/// book's pending list and writer filter.
@Suite("Trust ledger")
struct TrustLedgerTests {
    static let now: Int64 = 1_800_000_000
    static let t0: Int64 = 1_799_000_000

    static func peer(_ n: Int) -> PeerID {
        var bytes = [UInt8](repeating: 0, count: 32)
        bytes[0] = 0x5A
        bytes[30] = UInt8(n >> 8 & 0xFF)
        bytes[31] = UInt8(n & 0xFF)
        return PeerID(bytes: bytes)
    }

    static func held(_ l: inout TrustLedger, _ entries: TrustEntry...) {
        for e in entries { #expect(l.consider(e, documentID: e.documentID, now: now) == .accepted, "\(e.summary)") }
    }

    // MARK: signing and reading

    @Test("a signed entry verifies under its key and no other, and names its key as signer")
    func signAndVerify() throws {
        let k1 = try AdminSigningKey.generate(), k2 = try AdminSigningKey.generate()
        let e = try TrustEntry.signed(.allow, subject: Self.peer(1).description, note: "gw-1", serial: 1, issuedAt: Self.t0, by: k1)
        #expect(e.signer == k1.publicKey.fingerprint)
        #expect(k1.publicKey.verifies(e.signature, of: e.signedBytes))
        #expect(!k2.publicKey.verifies(e.signature, of: e.signedBytes))
        var other = e
        other.note = "gw-2"
        #expect(!k1.publicKey.verifies(other.signature, of: other.signedBytes))
        // The public key survives its hex and PEM forms, fingerprint and all.
        #expect(try AdminPublicKey(hex: k1.publicKey.hex) == k1.publicKey)
        #expect(try AdminPublicKey(parsing: Array(k1.publicKey.pem.utf8)) == k1.publicKey)
        let again = try AdminSigningKey(parsing: Array(k1.pem.utf8))
        #expect(again.publicKey == k1.publicKey)
        #expect(k1.publicKey.verifies(try again.sign([1, 2, 3]), of: [1, 2, 3]))
    }

    @Test("every kind's body decodes to the same entry", arguments: TrustEntry.Kind.allCases)
    func bodyRoundTrip(_ kind: TrustEntry.Kind) throws {
        let k1 = try AdminSigningKey.generate(), k2 = try AdminSigningKey.generate()
        let subject: String
        switch kind {
        case .allow, .revoke: subject = Self.peer(7).description
        case .addRoot, .removeRoot: subject = Digest.hex(try Identity.createSelfSigned(.init(commonName: "root")).certificate.der)
        case .addAdminKey, .removeAdminKey: subject = k2.publicKey.hex
        case .checkpoint: subject = ""
        }
        let e = try TrustEntry.signed(kind, subject: subject, note: kind == .checkpoint ? "" : "ünïcode \"quoted\" \\ note", serial: 42,
                                      issuedAt: Self.t0, nextUpdate: kind == .checkpoint ? Self.t0 + 86_400 : nil, by: k1)
        let decoded = try TrustEntry.decode(e.body)
        #expect(decoded == e)
        #expect(decoded.body == e.body)
        var l = TrustLedger(siteKeys: [k1.publicKey])
        #expect(l.consider(decoded, documentID: e.documentID, now: Self.now) == .accepted)
    }

    @Test("a body that is not an entry is refused with what is wrong")
    func malformedBodies() throws {
        let k1 = try AdminSigningKey.generate()
        let good = try TrustEntry.signed(.allow, subject: Self.peer(1).description, note: "boiler room", serial: 3, issuedAt: Self.t0, by: k1).body
        func reason(_ body: String) -> String? {
            do { _ = try TrustEntry.decode(body); return nil } catch { return error.description }
        }
        #expect(reason(String(good.prefix(good.count / 2)))?.hasPrefix("not JSON") == true)
        #expect(reason(good.replacingOccurrences(of: "\"serial\":3", with: "\"serial\":99999999999999999999999")) == "serial must be a whole number")
        #expect(reason(good.replacingOccurrences(of: "\"serial\":3", with: "\"serial\":-3")) == "serial must be a whole number")
        #expect(reason(good.replacingOccurrences(of: "\"signature\":\"", with: "\"signature\":\"zz")) == "signature must be a DER ECDSA signature in hex")
        #expect(reason(good.replacingOccurrences(of: "{", with: "{\"extra\":1,")) == "unknown field \"extra\"")
        #expect(reason(good.replacingOccurrences(of: "\"allow\"", with: "\"permit\""))?.hasPrefix("kind must be one of allow, revoke") == true)
        #expect(reason(good.replacingOccurrences(of: "\"v\":1", with: "\"v\":2")) == "unsupported entry format (v must be 1)")
        #expect(reason(good + String(repeating: " ", count: 9000 - good.utf8.count)) == "entry too large: 9000 bytes, at most 8192")
        #expect(reason(good.replacingOccurrences(of: "boiler room", with: "boiler\\nroom")) == "note holds a line break")
        #expect(reason(good.replacingOccurrences(of: "boiler room", with: "boiler\\rroom")) == "note holds a line break")
        // "\r\n" is one Swift Character (neither "\n" nor "\r"): it must be caught all the same.
        #expect(reason(good.replacingOccurrences(of: "boiler room", with: "boiler\\r\\nroom")) == "note holds a line break")
        #expect(reason(good.replacingOccurrences(of: "boiler room", with: String(repeating: "x", count: 257))) == "note longer than 256 bytes")
        #expect(reason(good.replacingOccurrences(of: Self.peer(1).description, with: Self.peer(1).description.uppercased()))?.contains("64 lower-case hex digits") == true)
        #expect(reason("[" + good + "]") == "an entry is a JSON object")
        #expect(throws: TrustError.self) { try TrustEntry.signed(.allow, subject: "a\r\nb", serial: 1, issuedAt: Self.t0, by: k1) }
        #expect(throws: TrustError.self) { try TrustEntry.signed(.allow, subject: Self.peer(1).description, note: "a\r\nb", serial: 1, issuedAt: Self.t0, by: k1) }
        #expect(throws: TrustError.self) { try TrustEntry.signed(.checkpoint, subject: "", serial: 1, issuedAt: Self.t0, by: k1) }
        #expect(throws: TrustError.self) { try TrustEntry.signed(.allow, subject: Self.peer(1).description, serial: 1, issuedAt: Self.t0, nextUpdate: Self.t0 + 1, by: k1) }
    }

    // MARK: refusals

    @Test("each refusal says why")
    func rejections() throws {
        let k1 = try AdminSigningKey.generate(), stranger = try AdminSigningKey.generate()
        var l = TrustLedger(siteKeys: [k1.publicKey])
        let p1 = Self.peer(1).description, p2 = Self.peer(2).description
        let allow = try TrustEntry.signed(.allow, subject: p1, serial: 5, issuedAt: Self.t0, by: k1)
        Self.held(&l, allow)
        #expect(l.consider(allow, documentID: allow.documentID, now: Self.now) == .unchanged)

        // A flipped byte of the signature.
        var flipped = try TrustEntry.signed(.allow, subject: p2, serial: 6, issuedAt: Self.t0, by: k1)
        flipped.signature[flipped.signature.count - 3] ^= 0x40
        #expect(l.consider(flipped, documentID: flipped.documentID, now: Self.now)
                == .rejected("its signature does not verify under admin key \(k1.publicKey.fingerprint)"))
        // A field changed after signing.
        var moved = try TrustEntry.signed(.allow, subject: p2, serial: 6, issuedAt: Self.t0, by: k1)
        moved.serial = 7
        #expect(l.consider(moved, documentID: moved.documentID, now: Self.now)
                == .rejected("its signature does not verify under admin key \(k1.publicKey.fingerprint)"))

        let unknown = try TrustEntry.signed(.allow, subject: p2, serial: 1, issuedAt: Self.t0, by: stranger)
        #expect(l.consider(unknown, documentID: unknown.documentID, now: Self.now)
                == .rejected("signed by \(stranger.publicKey.fingerprint), not an admin key this gateway trusts"))

        let elsewhere = try TrustEntry.signed(.allow, subject: p2, serial: 8, issuedAt: Self.t0, by: k1)
        #expect(l.consider(elsewhere, documentID: "peer-\(p1)@\(k1.publicKey.fingerprint)", now: Self.now)
                == .rejected("kept as document peer-\(p1)@\(k1.publicKey.fingerprint) but it is peer-\(p2)@\(k1.publicKey.fingerprint)"))
        #expect(l.consider(elsewhere, documentID: "checkpoint", now: Self.now)
                == .rejected("kept as document checkpoint but it is peer-\(p2)@\(k1.publicKey.fingerprint)"))

        let edge = try TrustEntry.signed(.allow, subject: Self.peer(3).description, serial: 9, issuedAt: Self.now + 300, by: k1)
        #expect(l.consider(edge, documentID: edge.documentID, now: Self.now) == .accepted)
        let future = try TrustEntry.signed(.allow, subject: Self.peer(4).description, serial: 10, issuedAt: Self.now + 301, by: k1)
        #expect(l.consider(future, documentID: future.documentID, now: Self.now) == .rejected("signed in the future (301 s ahead of our clock)"))

        let older = try TrustEntry.signed(.revoke, subject: p1, serial: 11, issuedAt: Self.t0 - 1, by: k1)
        #expect(l.consider(older, documentID: older.documentID, now: Self.now)
                == .rejected("older than the entry held as peer-\(p1)@\(k1.publicKey.fingerprint) (serial 5, signed \(Self.t0))"))

        // Serial 5 of k1 signs peer-p1 already: the same serial for another document is a replay.
        let replayed = try TrustEntry.signed(.allow, subject: Self.peer(5).description, serial: 5, issuedAt: Self.t0 + 10, by: k1)
        #expect(l.consider(replayed, documentID: replayed.documentID, now: Self.now)
                == .rejected("serial 5 of admin key \(k1.publicKey.fingerprint) already signs peer-\(p1)@\(k1.publicKey.fingerprint): a replayed serial"))

        #expect(l.allowedPeers == [Self.peer(1), Self.peer(3)])
        #expect(l.lastSerials == [k1.publicKey.fingerprint: 9])
    }

    @Test("the book refuses a tombstone, an oversize body and a bad one, and counts them")
    func bookRefusals() throws {
        let k1 = try AdminSigningKey.generate()
        let lines = Shared<[String]>([])
        let book = TrustBook(site: .init(adminKeys: [k1.publicKey]), clock: { Self.now }, log: { l in lines.value.withLock { $0.append(l) } })
        let e = try TrustEntry.signed(.revoke, subject: Self.peer(1).description, serial: 1, issuedAt: Self.t0, by: k1)
        #expect(book.take(id: e.documentID, body: nil).0 == .rejected("a deletion: trust entries are replaced by newer entries, never deleted"))
        let big = e.body + String(repeating: " ", count: 9000 - e.body.utf8.count)
        #expect(book.take(id: e.documentID, body: big).0 == .rejected("entry too large: 9000 bytes, at most 8192"))
        #expect(book.take(id: e.documentID, body: "{}").0 == .rejected("unsupported entry format (v must be 1)"))
        #expect(book.rejectedCount == 3)
        #expect(lines.value.withLock { $0.count } == 3)
        let (verdict, change) = book.take(id: e.documentID, body: e.body)
        #expect(verdict == .accepted)
        #expect(change.revoked == [Self.peer(1)])
        let again = book.take(id: e.documentID, body: e.body)
        #expect(again.0 == .unchanged && again.1.isEmpty)
        #expect(book.current().revokedPeers == [Self.peer(1)])
        #expect(book.revokedAt(Self.peer(1)) == Self.t0)
    }

    // MARK: keys and order

    @Test("admin key rotation: K1 adds K2, K2 signs, K2 removes K1; K1's earlier entries stay, later ones are refused")
    func rotation() throws {
        let k1 = try AdminSigningKey.generate(), k2 = try AdminSigningKey.generate()
        var l = TrustLedger(siteKeys: [k1.publicKey])
        let byK2Early = try TrustEntry.signed(.allow, subject: Self.peer(1).description, serial: 1, issuedAt: Self.t0 + 5, by: k2)
        #expect(l.consider(byK2Early, documentID: byK2Early.documentID, now: Self.now)
                == .rejected("signed by \(k2.publicKey.fingerprint), not an admin key this gateway trusts"))
        let addK2 = try TrustEntry.signed(.addAdminKey, subject: k2.publicKey.hex, serial: 1, issuedAt: Self.t0, by: k1)
        #expect(addK2.documentID == "admin-\(k2.publicKey.fingerprint)@\(k1.publicKey.fingerprint)")
        Self.held(&l, addK2, byK2Early)
        let byK1 = try TrustEntry.signed(.allow, subject: Self.peer(2).description, serial: 2, issuedAt: Self.t0 + 10, by: k1)
        Self.held(&l, byK1)
        #expect(Set(l.adminKeys.keys) == [k1.publicKey.fingerprint, k2.publicKey.fingerprint])

        let removeK1 = try TrustEntry.signed(.removeAdminKey, subject: k1.publicKey.hex, note: "rotated", serial: 2, issuedAt: Self.t0 + 20, by: k2)
        Self.held(&l, removeK1)
        #expect(l.adminKeys[k1.publicKey.fingerprint]?.removedAt == Self.t0 + 20)
        #expect(l.adminKeys[k1.publicKey.fingerprint]?.fromSiteFile == true)
        #expect(l.adminKeys[k2.publicKey.fingerprint]?.removedAt == nil)

        let byK1After = try TrustEntry.signed(.allow, subject: Self.peer(3).description, serial: 3, issuedAt: Self.t0 + 30, by: k1)
        #expect(l.consider(byK1After, documentID: byK1After.documentID, now: Self.now)
                == .rejected("signed by admin key \(k1.publicKey.fingerprint) after that key was removed"))
        // K1 cannot take back its removal, nor add a new key, once removed.
        let k3 = try AdminSigningKey.generate()
        let addK3 = try TrustEntry.signed(.addAdminKey, subject: k3.publicKey.hex, serial: 4, issuedAt: Self.t0 + 40, by: k1)
        #expect(l.consider(addK3, documentID: addK3.documentID, now: Self.now)
                == .rejected("signed by admin key \(k1.publicKey.fingerprint) after that key was removed"))
        // K2, added by K1 before the removal, still stands; so does what K1 signed before.
        #expect(l.allowedPeers == [Self.peer(1), Self.peer(2)])
        let byK2Later = try TrustEntry.signed(.revoke, subject: Self.peer(2).description, serial: 3, issuedAt: Self.t0 + 50, by: k2)
        Self.held(&l, byK2Later)
        #expect(l.allowedPeers == [Self.peer(1)])
        #expect(l.revokedPeers == [Self.peer(2): Self.t0 + 50])
    }

    @Test("revoke after allow is revoked; allow after revoke is allowed again")
    func revokeThenAllow() throws {
        let k1 = try AdminSigningKey.generate()
        var l = TrustLedger(siteKeys: [k1.publicKey])
        let p = Self.peer(9)
        Self.held(&l, try TrustEntry.signed(.allow, subject: p.description, serial: 1, issuedAt: Self.t0, by: k1))
        #expect(l.allowedPeers == [p] && l.revokedPeers.isEmpty)
        Self.held(&l, try TrustEntry.signed(.revoke, subject: p.description, serial: 2, issuedAt: Self.t0 + 1, by: k1))
        #expect(l.allowedPeers.isEmpty && l.revokedPeers == [p: Self.t0 + 1])
        Self.held(&l, try TrustEntry.signed(.allow, subject: p.description, serial: 3, issuedAt: Self.t0 + 2, by: k1))
        #expect(l.allowedPeers == [p] && l.revokedPeers.isEmpty)
        // Same second: the higher serial is the newer.
        Self.held(&l, try TrustEntry.signed(.revoke, subject: p.description, serial: 4, issuedAt: Self.t0 + 2, by: k1))
        #expect(l.allowedPeers.isEmpty && l.revokedPeers == [p: Self.t0 + 2])
    }

    @Test("about 30 entries loaded in 50 orders give the same keys, allowed and revoked peers")
    func orderIndependence() throws {
        let k1 = try AdminSigningKey.generate(), k2 = try AdminSigningKey.generate(), k3 = try AdminSigningKey.generate()
        let t = Self.t0
        var entries: [TrustEntry] = [
            try .signed(.addAdminKey, subject: k2.publicKey.hex, serial: 1, issuedAt: t, by: k1),
            try .signed(.addAdminKey, subject: k3.publicKey.hex, serial: 1, issuedAt: t + 1, by: k2),  // chained: K1 → K2 → K3
        ]
        var serials = [k1.publicKey.fingerprint: UInt64(1), k2.publicKey.fingerprint: 1, k3.publicKey.fingerprint: 1]
        func next(_ k: AdminSigningKey) -> UInt64 {
            serials[k.publicKey.fingerprint]! += 1
            return serials[k.publicKey.fingerprint]!
        }
        let keys = [k1, k2, k3]
        for i in 0..<20 {
            let k = keys[i % 3]
            entries.append(try .signed(i % 4 == 3 ? .revoke : .allow, subject: Self.peer(100 + i).description, serial: next(k), issuedAt: t + 10 + Int64(i), by: k))
        }
        // Superseded versions of some documents (an older allow under a newer revoke and back).
        entries.append(try .signed(.allow, subject: Self.peer(103).description, serial: next(k1), issuedAt: t + 5, by: k1))
        entries.append(try .signed(.revoke, subject: Self.peer(104).description, serial: next(k2), issuedAt: t + 100, by: k2))
        entries.append(try .signed(.allow, subject: Self.peer(104).description, serial: next(k3), issuedAt: t + 101, by: k3))
        let root = Digest.hex(try Identity.createSelfSigned(.init(commonName: "fleet-root")).certificate.der)
        entries.append(try .signed(.addRoot, subject: root, serial: next(k3), issuedAt: t + 40, by: k3))
        entries.append(try .signed(.checkpoint, subject: "", serial: next(k1), issuedAt: t + 45, nextUpdate: t + 86_400, by: k1))
        // K3 removes K1 at t+50: K1's earlier entries stand, this later one does not.
        entries.append(try .signed(.removeAdminKey, subject: k1.publicKey.hex, serial: next(k3), issuedAt: t + 50, by: k3))
        entries.append(try .signed(.allow, subject: Self.peer(200).description, serial: next(k1), issuedAt: t + 60, by: k1))
        // A stranger's entry and one signed for another document.
        entries.append(try .signed(.allow, subject: Self.peer(201).description, serial: 1, issuedAt: t + 61, by: try AdminSigningKey.generate()))
        #expect(entries.count >= 30)
        let docs = entries.map { (id: $0.documentID, body: $0.body) } + [(id: "peer-\(Self.peer(202).description)", body: entries[2].body)]

        struct Outcome: Equatable {
            var keys: [String: Int64?]
            var allowed: Set<PeerID>
            var revoked: [PeerID: Int64]
            var roots: [[UInt8]]
            var checkpoint: TrustEntry?
            var refused: Set<String>
        }
        func outcome(_ docs: [(id: String, body: String)]) -> Outcome {
            var l = TrustLedger(siteKeys: [k1.publicKey])
            let refused = l.load(docs, now: Self.now)
            return Outcome(keys: l.adminKeys.mapValues(\.removedAt), allowed: l.allowedPeers, revoked: l.revokedPeers,
                           roots: l.addedRoots, checkpoint: l.checkpoint, refused: Set(refused.map { "\($0.id): \($0.reason)" }))
        }
        let expected = outcome(docs)
        #expect(expected.keys == [k1.publicKey.fingerprint: t + 50, k2.publicKey.fingerprint: nil, k3.publicKey.fingerprint: nil])
        #expect(expected.allowed.contains(Self.peer(104)) && expected.revoked[Self.peer(103)] == t + 13)
        #expect(!expected.allowed.contains(Self.peer(200)) && !expected.allowed.contains(Self.peer(201)) && !expected.allowed.contains(Self.peer(202)))
        #expect(expected.allowed.count + expected.revoked.count == 20)
        #expect(expected.roots.count == 1 && expected.checkpoint != nil)
        // Refused: 200 (K1's, after its removal), the stranger's, and the one kept under 202's id. The
        // superseded versions are no refusal: taken oldest first, each is replaced by the newer.
        #expect(expected.refused.count == 3, "\(expected.refused)")
        var rng = SeededRandom(seed: 23)
        for round in 0..<50 {
            let got = outcome(docs.shuffled(using: &rng))
            #expect(got == expected, "order \(round)")
        }
    }

    /// Two orders of arrival that once ended in different ledgers (found writing these tests): a key
    /// acts only from its adding entry's time, and each signer keeps its own entry about a subject
    /// (the newest entry of a signer that stood counts), so both orders agree.
    @Test("a removal backdated before its signer was added, and a removed key's newer entry, give the same trust in any arrival order")
    func orderDependentArrivals() throws {
        let k = try AdminSigningKey.generate(), k2 = try AdminSigningKey.generate(), z = try AdminSigningKey.generate()
        let t = Self.t0
        func run(_ es: [TrustEntry]) -> TrustLedger {
            var l = TrustLedger(siteKeys: [k.publicKey])
            for e in es { _ = l.consider(e, documentID: e.documentID, now: Self.now) }
            return l
        }
        // 1. K adds K2 at t+10; K2 removes K "at t+3"; K adds Z at t+5. Z is an admin key if Z's entry
        //    came before the removal (adminKeys never retracts a key added by an entry that stops
        //    standing), and not if it came after (refused: K removed at t+3).
        let addK2 = try TrustEntry.signed(.addAdminKey, subject: k2.publicKey.hex, serial: 1, issuedAt: t + 10, by: k)
        let removeK = try TrustEntry.signed(.removeAdminKey, subject: k.publicKey.hex, serial: 1, issuedAt: t + 3, by: k2)
        let addZ = try TrustEntry.signed(.addAdminKey, subject: z.publicKey.hex, serial: 2, issuedAt: t + 5, by: k)
        let a = run([addK2, removeK, addZ]).adminKeys, b = run([addZ, addK2, removeK]).adminKeys
        #expect((a[z.publicKey.fingerprint] != nil) == (b[z.publicKey.fingerprint] != nil))
        #expect(a[z.publicKey.fingerprint] != nil, "the backdated removal does not count: K2 was not a key at t+3")
        // 2. K2 allows X at t+12; K2 removes K at t+15; K revokes X at t+20. If the revoke came before
        //    the removal it replaced the allow (one entry per document) and then stopped standing: X is
        //    neither allowed nor revoked. If it came after, it was refused and X stays allowed.
        let x = Self.peer(77).description
        let allowX = try TrustEntry.signed(.allow, subject: x, serial: 2, issuedAt: t + 12, by: k2)
        let removeK15 = try TrustEntry.signed(.removeAdminKey, subject: k.publicKey.hex, serial: 3, issuedAt: t + 15, by: k2)
        let revokeX = try TrustEntry.signed(.revoke, subject: x, serial: 3, issuedAt: t + 20, by: k)
        let c = run([addK2, allowX, removeK15, revokeX]), d = run([addK2, allowX, revokeX, removeK15])
        #expect(c.allowedPeers == d.allowedPeers)
        #expect(c.allowedPeers.contains(Self.peer(77)) && c.revokedPeers.isEmpty, "K's revoke, signed after its removal, does not count")
    }

    // MARK: the live book

    @Test("a flood of 1,000 refused unknown peers keeps at most 64 pending, the most recently seen")
    func pendingBounded() throws {
        let tick = Shared<Int64>(Self.now)
        let book = TrustBook(site: .init(), clock: { tick.value.withLock { $0 += 1; return $0 } })
        let auth = book.authenticator
        let refuse = try #require(auth.onRefusal)
        for i in 0..<1000 {
            let p = Self.peer(i)
            refuse(p, "CN=flood-\(i)", i % 2 == 0 ? .notInAllowList(peer: p.description) : .unknownCA(peer: p.description), "wifi")
        }
        #expect(book.pending.count == TrustBook.pendingCapacity)
        #expect(Set(book.pending.map(\.peer)) == Set((936..<1000).map(Self.peer)))
        // A refusal for another reason (a bad certificate) is no request to join.
        refuse(Self.peer(5000), "CN=expired", .expired(peer: ""), "wifi")
        #expect(!book.pending.contains { $0.peer == Self.peer(5000) })
        // Seen again: counted, not added twice.
        refuse(Self.peer(999), "CN=flood-999", .notInAllowList(peer: ""), "bluetooth")
        let p = try #require(book.pending.first { $0.peer == Self.peer(999) })
        #expect(p.attempts == 2 && p.transports == ["wifi", "bluetooth"])
        #expect(book.pending.count == TrustBook.pendingCapacity)
    }

    @Test("an allowed peer leaves the pending list; a revoked one never joins it")
    func pendingAllowedRevoked() throws {
        let k1 = try AdminSigningKey.generate()
        let book = TrustBook(site: .init(adminKeys: [k1.publicKey]), clock: { Self.now })
        let refuse = try #require(book.authenticator.onRefusal)
        refuse(Self.peer(1), "CN=a", .notInAllowList(peer: ""), "wifi")
        #expect(book.pending.map(\.peer) == [Self.peer(1)])
        let allow = try TrustEntry.signed(.allow, subject: Self.peer(1).description, serial: 1, issuedAt: Self.t0, by: k1)
        #expect(book.take(id: allow.documentID, body: allow.body).1.allowed == [Self.peer(1)])
        #expect(book.pending.isEmpty)
        let revoke = try TrustEntry.signed(.revoke, subject: Self.peer(2).description, serial: 2, issuedAt: Self.t0, by: k1)
        #expect(book.take(id: revoke.documentID, body: revoke.body).0 == .accepted)
        refuse(Self.peer(2), "CN=b", .notInAllowList(peer: ""), "wifi")
        #expect(book.pending.isEmpty)
    }

    @Test("the writer filter refuses a revoked peer's writes made after its revocation, whoever relays them")
    func writerFilter() throws {
        let k1 = try AdminSigningKey.generate()
        let book = TrustBook(site: .init(adminKeys: [k1.publicKey]), clock: { Self.now })
        let revoked = Self.peer(1), relay = Self.peer(2), other = Self.peer(3)
        let revokedAt = Self.t0
        let e = try TrustEntry.signed(.revoke, subject: revoked.description, serial: 1, issuedAt: revokedAt, by: k1)
        #expect(book.take(id: e.documentID, body: e.body).0 == .accepted)
        let collection = try CollectionName(parsing: "sensors.readings")
        func doc(_ writes: [(PeerID, Int64)]) throws -> ReplicatedDocument {
            let vector = try VersionVector(entries: writes.map { .init(peer: $0.0, timestamp: HLCTimestamp(physicalMillis: UInt64($0.1), logical: 0)) })
            return ReplicatedDocument(collection: collection, id: "boiler-1", body: #"{"t":1}"#,
                                      version: DocumentVersion(vector: vector, bodyDigest: DocumentVersion.digest(of: #"{"t":1}"#)))
        }
        let innerCalls = Shared<Int>(0)
        let filter = book.writerFilter { _, _ in innerCalls.value.withLock { $0 += 1 }; return true }
        let ms = revokedAt * 1000
        // Latest write the revoked peer's, after (or at) the revocation: refused.
        #expect(!filter(relay, try doc([(revoked, ms + 1_000)])))
        #expect(!filter(relay, try doc([(revoked, ms)])))
        #expect(!filter(relay, try doc([(other, ms - 5_000), (revoked, ms + 10_000)])))
        // Written before the revocation: accepted (relayed by a good peer).
        #expect(filter(relay, try doc([(revoked, ms - 1_000)])))
        // A later write by someone else on top of the revoked peer's old one: accepted.
        #expect(filter(relay, try doc([(revoked, ms - 1_000), (other, ms + 50_000)])))
        // Anything the revoked peer itself relays: refused.
        #expect(!filter(revoked, try doc([(other, ms - 1_000)])))
        #expect(innerCalls.value.withLock { $0 } == 2)
        // The inner filter still decides the rest.
        let strict = book.writerFilter { _, _ in false }
        #expect(!strict(relay, try doc([(other, ms)])))
        #expect(book.writerFilter(nil)(relay, try doc([(other, ms)])))
    }
}

/// A lock a test's @Sendable closures share.
final class Shared<T: Sendable>: Sendable {
    let value: Mutex<T>
    init(_ v: T) { value = Mutex(v) }
}
