import Glibc
import ShoalBench
import ShoalCore
import ShoalStore
import ShoalTesting
import ShoalThreads
import Testing

/// The benchmarks' SD-card profile (a SQLite VFS over the default one). The stores here name it in
/// their options; it is not made the default, so the other suites of this process are untouched.
/// Serialized: the profile is the process's, one test at a time changes it.
@Suite("Slow storage (the SD-card profile)", .serialized)
struct SlowStorageTests {
    static func elapsedMillis(_ body: () throws -> Void) rethrows -> Double {
        let start = ContinuousClock.now
        try body()
        let d = ContinuousClock.now - start
        return Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15
    }

    @Test("a commit with durability full waits the profile's sync time, one with durability normal does not sync; a forced stall holds the next write; everything reads back after reopening")
    func profileAppliesAndLosesNothing() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try SlowStorage.install(SlowStorage.Profile(name: "test", syncMillis: 40, stallMillis: 300), asDefault: false)
        let full = StoreOptions(path: dir.file("full.db"), durability: .full, vfs: SlowStorage.vfsName)
        let store = try DocumentStore.open(full, logger: quietLogger)
        let before = SlowStorage.counters
        let oneCommit = try Self.elapsedMillis {
            _ = try store.write((0..<50).map { DocumentWrite(collection: .default, id: id("d\($0)"), body: "{\"n\":\($0)}") })
        }
        let after = SlowStorage.counters
        // A WAL commit with synchronous=FULL syncs the WAL once: the profile waits before it.
        #expect(after.syncs - before.syncs >= 1)
        #expect(after.writes > before.writes)
        #expect(oneCommit >= 40, "a durable commit took \(oneCommit) ms, less than the profile's sync")

        SlowStorage.stallNext()
        let stalled = try Self.elapsedMillis {
            _ = try store.write([DocumentWrite(collection: .default, id: id("stalled"), body: "{\"s\":1}")])
        }
        #expect(SlowStorage.counters.stalls == 1)
        #expect(stalled >= 300, "the stalled commit took \(stalled) ms")
        store.close()

        let normal = try DocumentStore.open(StoreOptions(path: dir.file("normal.db"), durability: .normal, vfs: SlowStorage.vfsName), logger: quietLogger)
        let beforeNormal = SlowStorage.counters
        for i in 0..<20 { _ = try normal.write([DocumentWrite(collection: .default, id: id("n\(i)"), body: "{}")]) }
        // WAL with synchronous=NORMAL syncs only at checkpoints; 20 small commits make none.
        #expect(SlowStorage.counters.syncs == beforeNormal.syncs)
        normal.close()

        // Opened again without the profile: every acknowledged write is there.
        let again = try DocumentStore.open(StoreOptions(path: dir.file("full.db")), logger: quietLogger)
        defer { again.close() }
        #expect(try again.get(.default, id: id("d49"))?.body == "{\"n\":49}")
        #expect(try again.get(.default, id: id("stalled"))?.body == "{\"s\":1}")
        SlowStorage.uninstall()
    }

    @Test("while a commit is held on its fsync, the status figures (stats, blob stats, collections, last sequence) are read without waiting for it")
    func statusFiguresDoNotWaitForAStalledCommit() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try SlowStorage.install(SlowStorage.Profile(name: "test", syncMillis: 0), asDefault: false)
        defer { SlowStorage.uninstall() }
        let store = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db"), durability: .full, vfs: SlowStorage.vfsName), logger: quietLogger)
        defer { store.close() }
        _ = try store.createCollection(readings)
        _ = try store.write([DocumentWrite(collection: readings, id: id("first"), body: "{}")])
        let done = Locked(false)
        // Held until released, however long the scheduler keeps this test from running.
        SlowStorage.holdNextSync()
        let started = DetachedThread.start(name: "held-write") {
            _ = try? store.write([DocumentWrite(collection: readings, id: id("held"), body: "{}")])
            done.withLock { $0 = true }
        }
        #expect(started)
        try #require(await eventually(within: 60, every: 0.001) { SlowStorage.isHolding })
        // The write is inside its commit's fsync now, holding the store's lock.
        let stats = try store.stats()
        let blobs = try store.blobStats()
        let collections = try store.collections()
        let sequence = store.lastSequence
        #expect(SlowStorage.isHolding && !done.withLock { $0 }, "the reads waited for the held commit")
        #expect(stats.documents == 1 && stats.lastSequence == 1 && sequence == 1, "\(stats)")
        #expect(blobs.count == 0)
        #expect(collections == [.default, readings])
        SlowStorage.releaseHeld()
        try #require(await eventually(within: 60, every: 0.001) { done.withLock { $0 } })
        #expect(store.lastSequence == 2)
        #expect(try store.stats().documents == 2)
    }

    @Test("profiles: sd-card, sync=MS,stall=MS,every=S; bad ones refused")
    func parse() {
        #expect(SlowStorage.Profile.parse("sd-card") == .sdCard)
        let p = SlowStorage.Profile.parse("sync=5,stall=1000,every=10")
        #expect(p?.syncMillis == 5 && p?.stallMillis == 1000 && p?.stallEverySeconds == 10)
        for bad in ["", "sync", "sync=-1", "sync=x", "fast", "sync=5,color=red", "every=-2"] {
            #expect(SlowStorage.Profile.parse(bad) == nil, "\(bad)")
        }
    }
}
