import Glibc
import ShoalBench
import ShoalCore
import ShoalStore
import ShoalTesting
import ShoalThreads
import Testing

/// Group commit (`DocumentStore.transaction`): transactions from other threads that arrive while
/// one commits share the next commit. The slow-storage VFS (named in the store's options, not the
/// process default) holds a commit on its fsync until the test releases it, so that the others
/// queue up behind it for certain, whatever the scheduler does. In the
/// slow-storage suite (serialized): the profile is the process's, one test at a time sets it.
extension SlowStorageTests {
    static func openSlow(_ dir: TemporaryDirectory, _ name: String = "shoal.db") throws -> DocumentStore {
        try DocumentStore.open(StoreOptions(path: dir.file(name), durability: .full, vfs: SlowStorage.vfsName), logger: quietLogger)
    }

    @Test("writes queued behind a stalled commit go in ONE commit; a write that fails in the group fails alone, the sequence has no gap, and all of it is there after reopening")
    func queuedWritesShareOneCommit() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try SlowStorage.install(SlowStorage.Profile(name: "test", syncMillis: 0), asDefault: false)
        defer { SlowStorage.uninstall() }
        let store = try Self.openSlow(dir)
        _ = try store.createCollection(readings)
        _ = try store.write([DocumentWrite(collection: readings, id: id("before"), body: "{}")])
        let start = store.lastSequence
        let countsBefore = store.commitCounts.withLock { $0 }
        let outcomes = Locked<[String: Result<Int64, any Error>]>([:])
        func spawn(_ name: String, _ body: @escaping @Sendable () throws -> Int64) {
            let ok = DetachedThread.start(name: "writer-\(name)") {
                let r = Result { try body() }
                outcomes.withLock { $0[name] = r }
            }
            #expect(ok)
        }
        SlowStorage.holdNextSync()
        spawn("a") { try store.write([DocumentWrite(collection: readings, id: id("a"), body: "{\"w\":\"a\"}")])[0].sequence }
        try #require(await eventually(within: 60, every: 0.001) { SlowStorage.isHolding })
        // a's commit is held on its fsync until released; these queue behind it.
        spawn("b") { try store.write([DocumentWrite(collection: readings, id: id("b"), body: "{\"w\":\"b\"}")])[0].sequence }
        try #require(await eventually(within: 60, every: 0.001) { !(store.commitsWaiting < 1) })
        spawn("c") {
            try store.transaction { (tx) throws(StoreError) -> Int64 in
                _ = try tx.write(DocumentWrite(collection: readings, id: id("c"), body: "{\"w\":\"c\"}"))
                throw .notFound(collection: "sensors.readings", id: "c-precondition")
            }
        }
        try #require(await eventually(within: 60, every: 0.001) { !(store.commitsWaiting < 2) })
        spawn("d") { try store.write([DocumentWrite(collection: readings, id: id("d"), body: "{\"w\":\"d\"}")])[0].sequence }
        try #require(await eventually(within: 60, every: 0.001) { !(store.commitsWaiting < 3) })
        #expect(SlowStorage.isHolding, "the three queued while a's commit was held")
        SlowStorage.releaseHeld()
        try #require(await eventually(within: 60, every: 0.001) { !(outcomes.withLock({ $0.count }) < 4) })
        let o = outcomes.withLock { $0 }
        #expect(try o["a"]?.get() == start + 1)
        let b = try #require(try? o["b"]?.get()), d = try #require(try? o["d"]?.get())
        // b and d were committed together; c's write was undone with its savepoint and used no number.
        #expect(Set([b, d]) == [start + 2, start + 3])
        guard case .failure(let e)? = o["c"], case .notFound? = e as? StoreError else { Issue.record("c: \(String(describing: o["c"]))"); return }
        let counts = store.commitCounts.withLock { $0 }
        #expect(counts.transactions - countsBefore.transactions == 2, "a alone, then b, c and d in one: \(counts)")
        #expect(counts.largestGroup >= 3)
        #expect(store.lastSequence == start + 3)
        #expect(try store.get(readings, id: id("c")) == nil)
        store.close()
        let again = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db")), logger: quietLogger)
        defer { again.close() }
        for w in ["a", "b", "d"] { #expect(try again.get(readings, id: id(w))?.body == "{\"w\":\"\(w)\"}") }
        #expect(try again.get(readings, id: id("c")) == nil)
    }

    @Test("a group whose commit fails: every write of it gets the error, no body runs twice, nothing of it is kept, and the store goes on")
    func failedCommitFailsTheGroupOnce() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try SlowStorage.install(SlowStorage.Profile(name: "test", syncMillis: 0), asDefault: false)
        defer { SlowStorage.uninstall() }
        let store = try Self.openSlow(dir)
        _ = try store.createCollection(readings)
        _ = try store.write([DocumentWrite(collection: readings, id: id("before"), body: "{}")])
        let start = store.lastSequence
        let runs = Locked<[String: Int]>([:])
        let outcomes = Locked<[String: Result<Int64, any Error>]>([:])
        func spawn(_ name: String) {
            let ok = DetachedThread.start(name: "writer-\(name)") {
                let r = Result { () throws -> Int64 in
                    try store.transaction { (tx) throws(StoreError) -> Int64 in
                        runs.withLock { $0[name, default: 0] += 1 }
                        return try tx.write(DocumentWrite(collection: readings, id: id(name), body: "{}")).sequence
                    }
                }
                outcomes.withLock { $0[name] = r }
            }
            #expect(ok)
        }
        SlowStorage.holdNextSync()
        spawn("a")
        try #require(await eventually(within: 60, every: 0.001) { SlowStorage.isHolding })
        for (i, name) in ["b", "c", "d"].enumerated() {
            spawn(name)
            try #require(await eventually(within: 60, every: 0.001) { !(store.commitsWaiting < i + 1) })
        }
        // a's commit is held; b, c and d wait for the next one, whose sync fails.
        SlowStorage.failNextSync()
        SlowStorage.releaseHeld()
        try #require(await eventually(within: 60, every: 0.001) { !(outcomes.withLock({ $0.count }) < 4) })
        let o = outcomes.withLock { $0 }
        #expect(try o["a"]?.get() == start + 1)
        for name in ["b", "c", "d"] {
            guard case .failure(let e)? = o[name], e is StoreError else { Issue.record("\(name): \(String(describing: o[name]))"); continue }
            #expect(try store.get(readings, id: id(name)) == nil, "\(name) was kept")
        }
        #expect(runs.withLock { $0 } == ["a": 1, "b": 1, "c": 1, "d": 1], "a body ran twice: \(runs.withLock { $0 })")
        #expect(store.lastSequence == start + 1)
        // The store goes on: the next write gets the next sequence and is kept.
        #expect(try store.write([DocumentWrite(collection: readings, id: id("after"), body: "{}")])[0].sequence == start + 2)
        store.close()
        let again = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db")), logger: quietLogger)
        defer { again.close() }
        #expect(try again.get(readings, id: id("after")) != nil && again.get(readings, id: id("a")) != nil)
        #expect(try again.get(readings, id: id("c")) == nil)
    }

    @Test("eight threads writing at once through 10 ms syncs: every write is there once, and they shared commits")
    func concurrentWritersShareCommits() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try SlowStorage.install(SlowStorage.Profile(name: "test", syncMillis: 10), asDefault: false)
        defer { SlowStorage.uninstall() }
        let store = try Self.openSlow(dir)
        _ = try store.createCollection(readings)
        let finished = Locked(0), failures = Locked<[String]>([])
        for t in 0..<8 {
            let ok = DetachedThread.start(name: "writer-\(t)") {
                for i in 0..<10 {
                    do { _ = try store.write([DocumentWrite(collection: readings, id: id("t\(t)-\(i)"), body: "{\"t\":\(t),\"i\":\(i)}")]) } catch {
                        failures.withLock { $0.append("\(t)/\(i): \(error)") }
                    }
                }
                finished.withLock { $0 += 1 }
            }
            #expect(ok)
        }
        try #require(await eventually(within: 60, every: 0.001) { !(finished.withLock({ $0 }) < 8) })
        #expect(failures.withLock { $0 }.isEmpty)
        #expect(try store.stats().documents == 80)
        let counts = store.commitCounts.withLock { $0 }
        #expect(counts.grouped > 0 && counts.largestGroup >= 2, "\(counts)")
        #expect(counts.transactions < 80 + 2, "\(counts)")
        store.close()
    }
}
