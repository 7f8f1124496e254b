import CSQLite
import Glibc
import ShoalCore
import ShoalStore
import ShoalTesting
import Testing
import ShoalThreads

let quietLogger = Logger(sink: MemoryLogSink(), level: .none)
let readings = try! CollectionName(parsing: "sensors.readings")

func withStore(durability: Durability = .full, _ body: (DocumentStore, TemporaryDirectory) throws -> Void) throws {
    let dir = TemporaryDirectory()
    defer { dir.remove() }
    let store = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db"), durability: durability), logger: quietLogger)
    defer { store.close() }
    try body(store, dir)
}

func id(_ s: String) -> DocumentID { try! DocumentID(s) }

@Suite("Document store")
struct DocumentStoreTests {
    @Test("the open line counts collections in the right number: 1 collection, 2 collections")
    func openLineCountsCollections() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let first = MemoryLogSink()
        let store = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db")), logger: Logger(sink: first))
        _ = try store.createCollection(readings)
        store.close()
        #expect(first.contains(", 1 collection, last sequence"), "\(first.all.map(\.message))")
        let second = MemoryLogSink()
        let again = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db")), logger: Logger(sink: second))
        again.close()
        #expect(second.contains(", 2 collections, last sequence"), "\(second.all.map(\.message))")
    }

    @Test("_default._default always exists and other collections are created on demand")
    func collections() throws {
        try withStore { (store, _) throws in
            #expect(try store.collections() == [.default])
            #expect(try store.createCollection(readings))
            #expect(try !store.createCollection(readings))
            #expect(try store.collections() == [.default, readings])
            #expect(throws: StoreError.unknownCollection("other._default")) {
                try store.put(CollectionName(scope: "other", name: "_default"), id: id("x"), body: "{}")
            }
        }
    }

    @Test("put, get, replace and delete a document; a delete leaves a tombstone")
    func crud() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            let c1 = try store.put(readings, id: id("r1"), body: #"{"t":21}"#)
            #expect(c1.sequence == 1 && c1.revision == 1 && !c1.deleted)
            #expect(try store.get(readings, id: id("r1"))?.body == #"{"t":21}"#)
            let c2 = try store.put(readings, id: id("r1"), body: #"{"t":22}"#, version: [1, 2, 3])
            #expect(c2.sequence == 2 && c2.revision == 2)
            #expect(try store.get(readings, id: id("r1"))?.version == [1, 2, 3])
            let c3 = try store.delete(readings, id: id("r1"))
            #expect(c3.deleted && c3.revision == 3 && c3.sequence == 3)
            let tomb = try #require(try store.get(readings, id: id("r1")))
            #expect(tomb.isDeleted && tomb.body == nil)
            #expect(throws: StoreError.notFound(collection: "sensors.readings", id: "r1")) { try store.delete(readings, id: id("r1")) }
            #expect(try store.get(readings, id: id("never")) == nil)
            #expect(try store.list(readings).isEmpty)
            #expect(try store.list(readings, includeDeleted: true).map(\.id) == ["r1"])
            let stats = try store.stats()
            #expect(stats.documents == 0 && stats.tombstones == 1 && stats.lastSequence == 3)
        }
    }

    @Test("insertIfAbsent: a new id goes in at the next sequence with revision 1; a held id writes nothing and uses no sequence")
    func insertIfAbsent() throws {
        try withStore(durability: .normal) { (store, _) throws in
            try store.createCollection(readings)
            let first = try store.transaction { (tx) throws(StoreError) in
                try tx.insertIfAbsent(DocumentWrite(collection: readings, id: try! DocumentID("r1"), body: #"{"t":1}"#, version: [9]))
            }
            #expect(first?.sequence == 1 && first?.revision == 1 && first?.deleted == false)
            let again = try store.transaction { (tx) throws(StoreError) in
                try tx.insertIfAbsent(DocumentWrite(collection: readings, id: try! DocumentID("r1"), body: #"{"t":2}"#, version: [8]))
            }
            #expect(again == nil)
            #expect(try store.get(readings, id: id("r1"))?.body == #"{"t":1}"#)
            #expect(try store.get(readings, id: id("r1"))?.version == [9])
            let next = try store.put(readings, id: id("r2"), body: #"{"t":3}"#)
            #expect(next.sequence == 2)
            let stats = try store.stats()
            #expect(stats.documents == 2 && stats.tombstones == 0 && stats.lastSequence == 2)
        }
    }

    @Test("count: live documents or tombstones of one collection, by one COUNT; an unknown collection is an error")
    func count() throws {
        try withStore(durability: .normal) { (store, _) throws in
            let other = try CollectionName(parsing: "sensors.other")
            try store.createCollection(readings)
            try store.createCollection(other)
            #expect(try store.count(readings) == 0 && store.count(readings, deleted: true) == 0)
            try store.write((0..<250).map { DocumentWrite(collection: readings, id: id("r\($0)"), body: "{}") })
            try store.put(other, id: id("o"), body: "{}")
            for i in 0..<3 { try store.delete(readings, id: id("r\(i)")) }
            #expect(try store.count(readings) == 247)
            #expect(try store.count(readings, deleted: true) == 3)
            #expect(try store.count(other) == 1 && store.count(other, deleted: true) == 0)
            #expect(try store.count(readings) == Int64(store.list(readings, limit: 1000).count))
            #expect(throws: StoreError.unknownCollection("sensors.none")) { try store.count(CollectionName(parsing: "sensors.none")) }
        }
    }

    @Test("count reads indexes only: SQLite's plan visits no document row")
    func countPlan() throws {
        try withStore { (store, dir) throws in
            store.close()
            var db: OpaquePointer?
            #expect(sqlite3_open(dir.file("shoal.db"), &db) == SQLITE_OK)
            defer { sqlite3_close(db) }
            for sql in [DocumentStore.countLiveSQL, DocumentStore.countTombstonesSQL] {
                var s: OpaquePointer?
                #expect(sqlite3_prepare_v2(db, "EXPLAIN QUERY PLAN " + sql, -1, &s, nil) == SQLITE_OK)
                var plan: [String] = []
                while sqlite3_step(s) == SQLITE_ROW { plan.append(String(cString: sqlite3_column_text(s, 3))) }
                sqlite3_finalize(s)
                // Every step searches an index: the covering one of (collection, sequence), or the
                // partial one of tombstones, whose rows are all tombstones.
                let searches = plan.filter { $0.contains(" documents") }
                #expect(!searches.isEmpty)
                for step in searches {
                    #expect(step.contains("COVERING INDEX") || step.contains("INDEX documents_tombstones"), "\(sql): \(plan)")
                }
            }
        }
    }

    @Test("a body must be a JSON object within the size limit", arguments: ["[1]", "1", "\"x\"", "{", "{\"a\":1,\"a\":2}", "null"])
    func rejectsBadBodies(_ body: String) throws {
        try withStore { (store, _) throws in
            #expect(throws: StoreError.self) { try store.put(.default, id: id("x"), body: body) }
            #expect(store.lastSequence == 0)
        }
    }

    @Test("a body over the limit is refused")
    func sizeLimit() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore.open(StoreOptions(path: dir.file("s.db"), maxBodyBytes: 64), logger: quietLogger)
        defer { store.close() }
        #expect(throws: StoreError.self) { try store.put(.default, id: id("big"), body: "{\"a\":\"\(String(repeating: "x", count: 100))\"}") }
    }

    @Test("a batch is one transaction: one bad write and nothing of the batch is stored")
    func batchAtomicity() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            let good = DocumentWrite(collection: readings, id: id("a"), body: "{}")
            let unknown = DocumentWrite(collection: try CollectionName(parsing: "nope"), id: id("b"), body: "{}")
            #expect(throws: StoreError.self) { try store.write([good, unknown]) }
            #expect(try store.get(readings, id: id("a")) == nil)
            #expect(store.lastSequence == 0)
            let changes = try store.write([good, DocumentWrite(collection: readings, id: id("b"), body: "{}")])
            #expect(changes.map(\.sequence) == [1, 2])
        }
    }

    @Test("the change feed lists each document's latest change in sequence order, resumable from any point")
    func changeFeed() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            try store.put(readings, id: id("a"), body: "{}")      // 1
            try store.put(.default, id: id("b"), body: "{}")      // 2
            try store.put(readings, id: id("a"), body: "{\"v\":2}") // 3 replaces a's change
            try store.delete(.default, id: id("b"))              // 4 replaces b's change
            try store.put(readings, id: id("c"), body: "{}")      // 5
            let all = try store.changes(since: 0)
            #expect(all.map(\.sequence) == [3, 4, 5])
            #expect(all.map(\.id) == ["a", "b", "c"])
            #expect(all.map(\.deleted) == [false, true, false])
            #expect(try store.changes(since: 3).map(\.id) == ["b", "c"])
            #expect(try store.changes(since: 0, limit: 1).map(\.id) == ["a"])
            #expect(try store.changes(since: 5).isEmpty)
        }
    }

    @Test("sequences and documents survive closing and reopening")
    func reopen() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("s.db")
        do {
            let store = try DocumentStore.open(StoreOptions(path: path), logger: quietLogger)
            try store.createCollection(readings)
            for i in 0..<10 { try store.put(readings, id: id("d\(i)"), body: "{\"i\":\(i)}") }
            store.close()
        }
        let store = try DocumentStore.open(StoreOptions(path: path, durability: .normal), logger: quietLogger)
        defer { store.close() }
        #expect(store.lastSequence == 10)
        #expect(try store.put(readings, id: id("d0"), body: "{}").sequence == 11)
        #expect(try store.list(readings, limit: 3).map(\.id) == ["d0", "d1", "d2"])
        #expect(try store.list(readings, after: "d8").map(\.id) == ["d9"])
    }

    @Test("checkpoints are kept per peer, collection and direction; metadata is a key-value table")
    func checkpointsAndMetadata() throws {
        try withStore { (store, _) throws in
            try store.createCollection(readings)
            #expect(try store.checkpoint(peer: "p1", collection: readings, direction: .pull) == 0)
            try store.setCheckpoint(peer: "p1", collection: readings, direction: .pull, sequence: 42)
            try store.setCheckpoint(peer: "p1", collection: readings, direction: .push, sequence: 7)
            try store.setCheckpoint(peer: "p2", collection: readings, direction: .pull, sequence: 1)
            try store.setCheckpoint(peer: "p1", collection: readings, direction: .pull, sequence: 43)
            #expect(try store.checkpoint(peer: "p1", collection: readings, direction: .pull) == 43)
            #expect(try store.checkpoint(peer: "p1", collection: readings, direction: .push) == 7)
            #expect(try store.checkpoint(peer: "p2", collection: readings, direction: .pull) == 1)
            #expect(try store.metadata("hlc") == nil)
            try store.setMetadata("hlc", "123")
            try store.setMetadata("hlc", "124")
            #expect(try store.metadata("hlc") == "124")
        }
    }

    @Test("a store of schema version 1 is migrated to the latest with its data intact")
    func migratesFromVersion1() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("old.db")
        // Build a version-1 file by hand, as the first release of the schema wrote it.
        var db: OpaquePointer?
        #expect(sqlite3_open(path, &db) == SQLITE_OK)
        let v1 = """
            CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE collections(id INTEGER PRIMARY KEY, scope TEXT NOT NULL, name TEXT NOT NULL, created_at INTEGER NOT NULL, UNIQUE(scope, name));
            INSERT INTO collections VALUES (1, '_default', '_default', 0);
            CREATE TABLE documents(collection_id INTEGER NOT NULL REFERENCES collections(id), doc_id TEXT NOT NULL, body TEXT,
                deleted INTEGER NOT NULL DEFAULT 0, revision INTEGER NOT NULL, version BLOB NOT NULL DEFAULT x'',
                sequence INTEGER NOT NULL, updated_at INTEGER NOT NULL, UNIQUE(collection_id, doc_id));
            INSERT INTO documents VALUES (1, 'old', '{"kept":true}', 0, 4, x'', 9, 0);
            PRAGMA user_version=1;
            """
        #expect(sqlite3_exec(db, v1, nil, nil, nil) == SQLITE_OK)
        sqlite3_close(db)

        let log = MemoryLogSink()
        let store = try DocumentStore.open(StoreOptions(path: path), logger: Logger(sink: log))
        defer { store.close() }
        #expect(store.openReport.schemaVersionFound == 1)
        #expect(store.openReport.schemaVersion == 9)
        #expect(log.contains("migrated schema to version 2") && log.contains("migrated schema to version 3") && log.contains("migrated schema to version 4") && log.contains("migrated schema to version 5"))
        #expect(try store.get(.default, id: id("old"))?.body == #"{"kept":true}"#)
        #expect(store.lastSequence == 9)
        try store.setCheckpoint(peer: "p", collection: .default, direction: .pull, sequence: 1)  // a v2 table
        #expect(try store.integrityProblems(full: true).isEmpty)
    }

    @Test("the conflict log keeps both bodies, pages newest first, and is bounded by entries and by body bytes")
    func conflictLog() throws {
        try withStore { (store, _) throws in
            _ = try store.createCollection(readings)
            func record(_ n: Int, bodyBytes: Int = 0) -> ConflictRecord {
                let pad = String(repeating: "x", count: bodyBytes)
                return ConflictRecord(collection: readings, id: "doc-\(n)", localVersion: [1], remoteVersion: [2], peer: "p", resolver: "lastWriteWins",
                                      outcome: "remote", atMillis: Int64(n), localBody: #"{"side":"local","n":\#(n),"pad":"\#(pad)"}"#,
                                      remoteBody: n % 2 == 0 ? nil : #"{"side":"remote"}"#)
            }
            try store.transaction { (tx) throws(StoreError) in try tx.logConflicts((1...5).map { record($0) }) }
            let newest = try store.conflicts(limit: 2)
            #expect(newest.map(\.id) == ["doc-5", "doc-4"])
            #expect(newest[0].localBody == #"{"side":"local","n":5,"pad":""}"# && newest[0].remoteBody == #"{"side":"remote"}"#)
            #expect(newest[1].remoteBody == nil)
            #expect(try store.conflicts(limit: 10, before: newest[1].number).map(\.id) == ["doc-3", "doc-2", "doc-1"])

            // Bounded by count: the newest conflictLogMaxEntries stay.
            let max = DocumentStore.conflictLogMaxEntries
            try store.transaction { (tx) throws(StoreError) in try tx.logConflicts((6...(max + 10)).map { record($0) }) }
            let all = try store.conflicts(limit: max + 100)
            #expect(all.count == max)
            #expect(all.first?.id == "doc-\(max + 10)" && all.last?.id == "doc-11")

            // Bounded by body bytes: 1 MiB bodies push the oldest out once they pass the cap.
            let big = Int(DocumentStore.conflictLogMaxBodyBytes >> 20) + 8
            for n in 0..<big {
                try store.transaction { (tx) throws(StoreError) in try tx.logConflict(record(100_000 + n, bodyBytes: 1 << 20)) }
            }
            let kept = try store.conflicts(limit: max)
            let bytes = kept.reduce(0) { $0 + ($1.localBody?.utf8.count ?? 0) + ($1.remoteBody?.utf8.count ?? 0) }
            #expect(Int64(bytes) <= DocumentStore.conflictLogMaxBodyBytes)
            #expect(kept.first?.id == "doc-\(100_000 + big - 1)")
            #expect(kept.count < 100)
        }
    }

    @Test("a store from a newer shoal is refused, not touched")
    func refusesNewerSchema() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("new.db")
        var db: OpaquePointer?
        sqlite3_open(path, &db)
        sqlite3_exec(db, "CREATE TABLE x(y); PRAGMA user_version=99;", nil, nil, nil)
        sqlite3_close(db)
        #expect(throws: StoreError.schemaTooNew(found: 99, supported: 9, path: path)) {
            try DocumentStore.open(StoreOptions(path: path), logger: quietLogger)
        }
        #expect(access(path, F_OK) == 0)
    }

    @Test("the store's epoch: kept across clean stops, and across crashes with durability full; new for a new file and after a crash with durability normal")
    func epoch() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        for durability in [Durability.full, .normal] {
            let path = dir.file("epoch-\(durability.rawValue).db")
            let first = try DocumentStore.open(StoreOptions(path: path, durability: durability), logger: quietLogger)
            let e = first.epoch
            #expect(e != 0)
            first.close()
            let clean = try DocumentStore.open(StoreOptions(path: path, durability: durability), logger: quietLogger)
            #expect(clean.epoch == e, "a clean stop keeps the epoch")
            // Not closed: a second open sees the store as it would after a crash.
            let log = MemoryLogSink()
            let crashed = try DocumentStore.open(StoreOptions(path: path, durability: durability), logger: Logger(sink: log))
            if durability == .full {
                #expect(crashed.epoch == e, "with durability full no commit is lost: same epoch")
            } else {
                #expect(crashed.epoch != e && crashed.epoch != 0, "with durability normal commits may be lost: a new epoch")
                #expect(log.contains("was not closed cleanly"))
            }
            crashed.close()
            clean.close()
        }
        let other = try DocumentStore.open(StoreOptions(path: dir.file("other.db")), logger: quietLogger)
        defer { other.close() }
        let again = try DocumentStore.open(StoreOptions(path: dir.file("epoch-full.db")), logger: quietLogger)
        defer { again.close() }
        #expect(other.epoch != again.epoch)
    }

    @Test("a corrupt file is moved aside with a clear log line and the store starts empty", arguments: ["garbage", "damaged pages"])
    func corruptMovedAside(_ kind: String) throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("shoal.db")
        if kind == "garbage" {
            let fd = open(path, O_WRONLY | O_CREAT, 0o600)
            let junk = Array(repeating: UInt8(0x5A), count: 8192)
            _ = junk.withUnsafeBytes { write(fd, $0.baseAddress, junk.count) }
            close(fd)
        } else {
            let store = try DocumentStore.open(StoreOptions(path: path), logger: quietLogger)
            for i in 0..<2000 { try store.put(.default, id: id("d\(i)"), body: "{\"pad\":\"\(String(repeating: "x", count: 200))\"}") }
            store.close()
            // Checkpoint the WAL into the main file, then overwrite pages in the middle of it.
            var db: OpaquePointer?
            sqlite3_open(path, &db)
            sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nil, nil, nil)
            sqlite3_close(db)
            let fd = open(path, O_WRONLY)
            let junk = Array(repeating: UInt8(0xA5), count: 4096 * 4)
            _ = junk.withUnsafeBytes { pwrite(fd, $0.baseAddress, junk.count, 4096 * 3) }
            close(fd)
        }
        let log = MemoryLogSink()
        let store = try DocumentStore.open(StoreOptions(path: path), logger: Logger(sink: log))
        defer { store.close() }
        let moved = try #require(store.openReport.movedAsideTo)
        #expect(moved.hasPrefix(path + ".corrupt-"))
        #expect(access(moved, F_OK) == 0)
        #expect(log.contains("is corrupt"))
        #expect(log.contains("moved it aside to \(moved)"))
        #expect(try store.stats().documents == 0)
        try store.put(.default, id: id("fresh"), body: "{}")
        #expect(try store.integrityProblems(full: true).isEmpty)
    }

    @Test("waitForChange wakes a waiting thread when a write commits")
    func waitForChange() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore.open(StoreOptions(path: dir.file("s.db")), logger: quietLogger)
        defer { store.close() }
        let thread = BlockingThread(name: "waiter")
        defer { thread.shutdown() }
        let waiter = Task { try await thread.run { store.waitForChange(after: 0, timeoutMillis: 20_000) } }
        try await Task.sleep(for: .milliseconds(20))
        try store.put(.default, id: id("x"), body: "{}")
        #expect(try await waiter.value == 1)
    }
}
