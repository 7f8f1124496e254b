import Shoal
import ShoalTesting
import Testing

@Suite("import Shoal: document expiration")
struct ExpiryLibraryTests {
    @Test("a document expired on one replicator is purged there only: the other keeps it, and nothing comes back or is deleted")
    func expiresOnOneReplicator() async throws {
        let medium = SimulatedMedium()
        let ids = Guarded<Set<PeerID>>([])
        let a = try Peer.make("exp-a", medium: medium, allowed: { ids.withLock { $0 } })
        let b = try Peer.make("exp-b", medium: medium, allowed: { ids.withLock { $0 } })
        defer { a.close(); b.close() }
        ids.withLock { $0 = [a.id, b.id] }
        try a.replicator.start()
        try b.replicator.start()
        let ra = try a.database.collection("fleet.readings"), rb = try b.database.collection("fleet.readings")
        try ra.put("x", json: #"{"v":1}"#)
        try ra.put("y", json: #"{"v":1}"#)
        #expect(await timeUntil { (try? rb.get("x")) != nil && (try? rb.get("y")) != nil } != nil, "b never got x and y")
        let nowMillis = wallMillis()
        #expect(try rb.setDocumentExpiration("x", atMillis: nowMillis - 1))
        #expect(try rb.documentExpiration("x") == nowMillis - 1)
        #expect(try !rb.setDocumentExpiration("missing", atMillis: nowMillis))
        #expect(try b.database.purgeExpiredDocuments() == 1)
        #expect(try rb.get("x") == nil)
        try ra.put("z", json: #"{"v":1}"#)
        #expect(await timeUntil { (try? rb.get("z")) != nil } != nil, "b never got z")
        #expect(try ra.get("x")?.json == #"{"v":1}"#, "a lost x")
        #expect(try rb.get("x") == nil, "x came back to b")
        #expect(try ra.tombstoneCount() == 0 && rb.tombstoneCount() == 0)
    }

    @Test("a ttl or budget below 1 is refused with the collection named")
    func badRules() throws {
        let medium = SimulatedMedium()
        for bad in [{ (c: inout MultipeerCollectionConfiguration) in c.ttlSeconds = 0 }, { $0.maxDocuments = -1 }, { $0.maxBytes = 0 }] {
            #expect(throws: ShoalError.self) {
                _ = try Peer.make("exp-bad", medium: medium, allowed: { [] }, collections: { db in
                    var c = MultipeerCollectionConfiguration(collection: try db.collection("fleet.readings"))
                    bad(&c)
                    return [c]
                })
            }
        }
    }
}
