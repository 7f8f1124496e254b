import CSQLite
import ShoalCore
import ShoalStore
import ShoalTesting
import Testing

/// A version whose only (newest) write was at `millis` (HLC physical time), by a fixed peer.
func version(at millis: Int64, body: String = "{}") -> [UInt8] {
    let peer = PeerID(bytes: [UInt8](repeating: 7, count: 32))
    let vector = VersionVector().setting(peer, to: HLCTimestamp(physicalMillis: UInt64(millis), logical: 0))
    return DocumentVersion(vector: vector, bodyDigest: DocumentVersion.digest(of: body)).encoded
}

@Suite("Expiration")
struct ExpiryTests {
    let now: Int64 = 1_900_000_000_000

    @Test("a local expiry purges the document: no row, no tombstone, no change, and the sequence is not reused")
    func localExpiryPurges() throws {
        try withStore { (store, dir) throws in
            try store.createCollection(readings)
            try store.put(readings, id: id("a"), body: #"{"v":1}"#, version: version(at: now - 1000))
            try store.put(readings, id: id("b"), body: #"{"v":2}"#, version: version(at: now - 1000))
            #expect(try store.setExpiration(readings, id: id("b"), atMillis: now - 1))
            #expect(try !store.setExpiration(readings, id: id("nope"), atMillis: now))
            #expect(try store.expiration(readings, id: id("b")) == now - 1)
            let last = store.lastSequence
            let done = try store.purgeExpired([], nowMillis: now)
            #expect(done.expired == 1)
            #expect(try store.get(readings, id: id("b")) == nil)  // not even a tombstone
            #expect(try store.get(readings, id: id("a"))?.body == #"{"v":1}"#)
            #expect(try store.changes(since: 0).map(\.id) == ["a"])
            #expect(store.lastSequence == last)
            #expect(store.expiryCounts.withLock { $0 }.expired == 1)
            #expect(try store.purgeRecordCount() == 1)
            // Reopened: the next write does not take the purged document's sequence again.
            store.close()
            let again = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db")), logger: quietLogger)
            defer { again.close() }
            #expect(again.lastSequence == last)
            #expect(try again.put(readings, id: id("c"), body: "{}").sequence == last + 1)
        }
    }

    @Test("an expiry in the future, cleared, or on a document that is deleted, purges nothing; a delete keeps its tombstone")
    func futureClearedAndDeleted() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            try store.put(readings, id: id("a"), body: "{}", version: version(at: now))
            try store.put(readings, id: id("b"), body: "{}", version: version(at: now))
            try store.put(readings, id: id("c"), body: "{}", version: version(at: now))
            try store.setExpiration(readings, id: id("a"), atMillis: now + 60_000)
            try store.setExpiration(readings, id: id("b"), atMillis: now - 1)
            try store.setExpiration(readings, id: id("b"), atMillis: nil)
            try store.setExpiration(readings, id: id("c"), atMillis: now - 1)
            try store.delete(readings, id: id("c"), version: version(at: now + 1))
            #expect(try store.purgeExpired([], nowMillis: now).expired == 0)
            #expect(try store.get(readings, id: id("c"))?.isDeleted == true)
            #expect(try store.purgeExpired([], nowMillis: now + 60_000).expired == 1)
            #expect(try store.get(readings, id: id("a")) == nil)
        }
    }

    @Test("an update keeps the local expiry")
    func updateKeepsExpiry() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            try store.put(readings, id: id("a"), body: "{}", version: version(at: now))
            try store.setExpiration(readings, id: id("a"), atMillis: now + 5)
            try store.put(readings, id: id("a"), body: #"{"x":1}"#, version: version(at: now + 1))
            #expect(try store.expiration(readings, id: id("a")) == now + 5)
        }
    }

    @Test("a TTL purges by the last write's HLC time (not the arrival time), and leaves no purge record")
    func ttlByWriteTime() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            let day: Int64 = 86_400_000
            // Both arrive now; one was written 8 days ago elsewhere.
            try store.put(readings, id: id("old"), body: "{}", version: version(at: now - 8 * day))
            try store.put(readings, id: id("new"), body: "{}", version: version(at: now - day))
            let rule = ExpiryRule(collection: readings, ttlMillis: 7 * day)
            let done = try store.purgeExpired([rule], nowMillis: now)
            #expect(done.ttl == 1)
            #expect(try store.list(readings, includeDeleted: true).map(\.id) == ["new"])
            #expect(try store.purgeRecordCount() == 0)
            #expect(try store.purgeExpired([rule], nowMillis: now + 6 * day).ttl == 1)
            #expect(try store.count(readings, deleted: true) == 0)
        }
    }

    @Test("budgets purge the oldest writes first, by count and by bytes")
    func budgetsOldestFirst() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            // Written in an order unlike their ids: r3 is oldest.
            let order = ["r3", "r1", "r5", "r2", "r4"]
            for (k, name) in order.enumerated() {
                try store.put(readings, id: id(name), body: #"{"pad":"0123456789"}"#, version: version(at: now - 1000 + Int64(k)))
            }
            let byCount = ExpiryRule(collection: readings, maxDocuments: 3)
            #expect(try store.purgeExpired([byCount], nowMillis: now).budget == 2)
            #expect(Set(try store.list(readings).map(\.id)) == ["r5", "r2", "r4"])
            let size = Int64(#"{"pad":"0123456789"}"#.utf8.count)
            let byBytes = ExpiryRule(collection: readings, maxBytes: size * 2 - 1)  // room for one
            #expect(try store.purgeExpired([byBytes], nowMillis: now).budget == 2)
            #expect(try store.list(readings).map(\.id) == ["r4"])
            #expect(try store.count(readings, deleted: true) == 0)
            #expect(try store.purgeRecordCount() == 4)
            #expect(store.expiryCounts.withLock { $0 }.budget == 4)
        }
    }

    @Test("a budget larger than the store purges nothing; many documents go in bounded batches")
    func budgetBatches() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            let writes = (0..<1_300).map { k in
                DocumentWrite(collection: readings, id: id("d" + String(repeating: "0", count: 5 - String(k).count) + String(k)), body: "{}", version: version(at: now - 10_000 + Int64(k)))
            }
            _ = try store.write(writes)
            #expect(try store.purgeExpired([ExpiryRule(collection: readings, maxDocuments: 5_000)], nowMillis: now).budget == 0)
            #expect(try store.purgeExpired([ExpiryRule(collection: readings, maxDocuments: 100)], nowMillis: now).budget == 1_200)
            #expect(try store.list(readings, limit: 1).first?.id == "d01200")
        }
    }

    @Test("refusal on receive: expired by the TTL, or the version purged here (or older); a newer write is taken")
    func refusalRule() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            let day: Int64 = 86_400_000
            let v1 = version(at: now - 1000)
            try store.put(readings, id: id("a"), body: "{}", version: v1)
            try store.setExpiration(readings, id: id("a"), atMillis: now)
            try store.purgeExpired([], nowMillis: now)
            let answers = try store.transaction { (tx) throws(StoreError) -> [Bool] in
                [try tx.expiryRefusal(readings, id: "a", version: v1, ttlMillis: nil, nowMillis: now, holdsLocal: false) != nil,
                 try tx.expiryRefusal(readings, id: "a", version: version(at: now - 2000), ttlMillis: nil, nowMillis: now, holdsLocal: false) != nil,
                 try tx.expiryRefusal(readings, id: "a", version: version(at: now + 5), ttlMillis: nil, nowMillis: now, holdsLocal: false) == nil,
                 try tx.expiryRefusal(readings, id: "b", version: version(at: now - 8 * day), ttlMillis: 7 * day, nowMillis: now, holdsLocal: false) != nil,
                 try tx.expiryRefusal(readings, id: "b", version: version(at: now - 6 * day), ttlMillis: 7 * day, nowMillis: now, holdsLocal: false) == nil]
            }
            #expect(answers == [true, true, true, true, true])
        }
    }

    @Test("a purge record is still refused after the store reopens (the store knows it holds purge records without a write)")
    func refusalAfterReopen() throws {
        try withStore { (store, dir) throws in
            try store.createCollection(readings)
            let v1 = version(at: now - 1000)
            let empty = try store.transaction { (tx) throws(StoreError) -> Bool in tx.purgeRecordsMayExist }
            #expect(!empty)
            try store.put(readings, id: id("a"), body: "{}", version: v1)
            try store.setExpiration(readings, id: id("a"), atMillis: now)
            try store.purgeExpired([], nowMillis: now)
            store.close()
            let again = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db")), logger: quietLogger)
            defer { again.close() }
            let refused = try again.transaction { (tx) throws(StoreError) -> (Bool, Bool) in
                (tx.purgeRecordsMayExist, try tx.expiryRefusal(readings, id: "a", version: v1, ttlMillis: nil, nowMillis: now, holdsLocal: false) != nil)
            }
            #expect(refused == (true, true))
        }
    }

    @Test("a store of schema 7 is migrated: write times come from the versions, body sizes from the bodies")
    func migrationBackfills() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("shoal.db")
        let day: Int64 = 86_400_000
        do {
            let store = try DocumentStore.open(StoreOptions(path: path), logger: quietLogger)
            try store.createCollection(readings)
            try store.put(readings, id: id("old"), body: #"{"v":1}"#, version: version(at: now - 8 * day))
            try store.put(readings, id: id("new"), body: #"{"v":1}"#, version: version(at: now))
            store.close()
        }
        var db: OpaquePointer?
        sqlite3_open(path, &db)
        let back = """
            DROP TABLE blob_chunks; DROP TABLE blob_refs; DROP TABLE blob_wants; DROP TABLE blobs;
            DROP INDEX documents_expiring; DROP INDEX documents_by_written_at; DROP TABLE purged_documents;
            ALTER TABLE documents DROP COLUMN expires_at; ALTER TABLE documents DROP COLUMN written_at;
            ALTER TABLE documents DROP COLUMN body_bytes; PRAGMA user_version=7;
            """
        #expect(sqlite3_exec(db, back, nil, nil, nil) == SQLITE_OK)
        sqlite3_close(db)
        let store = try DocumentStore.open(StoreOptions(path: path), logger: quietLogger)
        defer { store.close() }
        #expect(store.openReport.schemaVersionFound == 7)
        #expect(try store.purgeExpired([ExpiryRule(collection: readings, ttlMillis: 7 * day)], nowMillis: now).ttl == 1)
        #expect(try store.list(readings).map(\.id) == ["new"])
        let size = Int64(#"{"v":1}"#.utf8.count)
        #expect(try store.purgeExpired([ExpiryRule(collection: readings, maxBytes: size - 1)], nowMillis: now).budget == 1)
    }
}
