import Glibc
import ShoalCore
import ShoalStore
import ShoalThreads

/// `shoal bench storage`: this machine's disk against a slow-storage profile. The disk's own
/// fdatasync latency (4 KiB appended, then fdatasync, as `fio --rw=write --bs=4k --fdatasync=1`
/// measures it), then durable one-row commits and the store benchmark's batched writes, first on
/// the disk as it is and then through the profile, in the same run.
public enum StorageBenchmark {
    public struct Result: Sendable {
        public var profile: SlowStorage.Profile
        /// Milliseconds per 4 KiB write + fdatasync, sorted.
        public var diskSyncMillis: [Double]
        public var commitMillisDisk: Double
        public var commitMillisProfile: Double
        /// Syncs the profile saw per one-row durable commit.
        public var syncsPerCommit: Double
        public var storeDisk: Double
        public var storeProfile: Double
        public var baselineProfile: Double
        /// `writers` threads each committing one-document writes through the profile: writes
        /// per second and syncs, one commit per write (baseline) and with group commit.
        public var writers: Int
        public var alone: (rate: Double, syncs: Int)
        public var grouped: (rate: Double, syncs: Int)

        public var diskSyncMedian: Double { diskSyncMillis.isEmpty ? 0 : diskSyncMillis[diskSyncMillis.count / 2] }
        public var diskSyncP99: Double { diskSyncMillis.isEmpty ? 0 : diskSyncMillis[min(diskSyncMillis.count - 1, diskSyncMillis.count * 99 / 100)] }
    }

    public static func run(directory: String, profile: SlowStorage.Profile, samples: Int = 200, commits: Int = 100, documents: Int = 5000,
                           logger: Logger) throws -> Result {
        precondition(SlowStorage.profile == nil, "the storage benchmark compares the disk with the profile: run it without --storage installed")
        let sync = try diskSync(path: directory + "/fsync.dat", samples: samples)
        let ids = try (0..<max(commits, documents)).map { i throws -> DocumentID in try DocumentID("doc-\(i)") }
        let bodies = ids.indices.map { StoreBenchmark.body($0) }
        func commitMillis(_ name: String) throws -> Double {
            defer { for s in ["", "-wal", "-shm"] { unlink(directory + "/\(name).db" + s) } }
            let rate = try SQLiteBaseline.write(path: directory + "/\(name).db", ids: Array(ids.prefix(commits)), bodies: Array(bodies.prefix(commits)),
                                                batch: 1, durability: .full)
            return 1000 / rate
        }
        func store(_ name: String) throws -> Double {
            defer { for s in ["", "-wal", "-shm"] { unlink(directory + "/\(name).db" + s) } }
            return try StoreBenchmark.viaStore(path: directory + "/\(name).db", ids: Array(ids.prefix(documents)), bodies: Array(bodies.prefix(documents)),
                                               batch: 100, durability: .full, logger: logger)
        }
        let commitDisk = try commitMillis("commit-disk")
        let storeDisk = try store("store-disk")
        try SlowStorage.install(profile)
        defer { SlowStorage.uninstall() }
        let before = SlowStorage.counters
        let commitProfile = try commitMillis("commit-profile")
        let syncs = Double(SlowStorage.counters.syncs - before.syncs) / Double(commits)
        let storeProfile = try store("store-profile")
        let baselineProfile: Double = try {
            defer { for s in ["", "-wal", "-shm"] { unlink(directory + "/baseline-profile.db" + s) } }
            return try SQLiteBaseline.write(path: directory + "/baseline-profile.db", ids: Array(ids.prefix(documents)), bodies: Array(bodies.prefix(documents)),
                                            batch: 100, durability: .full)
        }()
        let writers = 8
        let alone = try concurrent(directory + "/alone.db", writers: writers, each: 25, groupCommit: false, logger: logger)
        let grouped = try concurrent(directory + "/grouped.db", writers: writers, each: 25, groupCommit: true, logger: logger)
        return Result(profile: profile, diskSyncMillis: sync, commitMillisDisk: commitDisk, commitMillisProfile: commitProfile, syncsPerCommit: syncs,
                      storeDisk: storeDisk, storeProfile: storeProfile, baselineProfile: baselineProfile,
                      writers: writers, alone: alone, grouped: grouped)
    }

    /// `writers` threads, `each` one-document durable writes apiece, at once: writes/s and syncs.
    static func concurrent(_ path: String, writers: Int, each: Int, groupCommit: Bool, logger: Logger) throws -> (rate: Double, syncs: Int) {
        var options = StoreOptions(path: path, durability: .full)
        options.groupCommit = groupCommit
        let store = try DocumentStore.open(options, logger: logger)
        defer {
            store.close()
            for s in ["", "-wal", "-shm"] { unlink(path + s) }
        }
        let finished = Locked(0), failed = Locked(0)
        let syncs = SlowStorage.counters.syncs
        let start = ContinuousClock.now
        for w in 0..<writers {
            let ok = DetachedThread.start(name: "bench-writer") {
                for i in 0..<each {
                    let write = DocumentWrite(collection: .default, id: try! DocumentID("w\(w)-\(i)"), body: StoreBenchmark.body(i))
                    if (try? store.write([write])) == nil { failed.withLock { $0 += 1 } }
                }
                finished.withLock { $0 += 1 }
            }
            guard ok else { throw SlowStorageError("cannot start a writer thread") }
        }
        while finished.withLock({ $0 }) < writers { usleep(1000) }
        let seconds = (ContinuousClock.now - start).secondsDouble
        guard failed.withLock({ $0 }) == 0 else { throw SlowStorageError("\(failed.withLock { $0 }) concurrent writes failed") }
        return (Double(writers * each) / seconds, SlowStorage.counters.syncs - syncs)
    }

    /// `samples` × (append 4 KiB, fdatasync), each timed; sorted milliseconds.
    static func diskSync(path: String, samples: Int) throws -> [Double] {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw SlowStorageError("cannot create \(path): errno \(errno)") }
        defer { close(fd); unlink(path) }
        var block = [UInt8](repeating: 0x5A, count: 4096)
        var out: [Double] = []
        for i in 0..<samples {
            block[0] = UInt8(truncatingIfNeeded: i)
            let start = ContinuousClock.now
            let n = block.withUnsafeBytes { pwrite(fd, $0.baseAddress, 4096, off_t(i) * 4096) }
            guard n == 4096, fdatasync(fd) == 0 else { throw SlowStorageError("write + fdatasync on \(path) failed: errno \(errno)") }
            out.append((ContinuousClock.now - start).secondsDouble * 1000)
        }
        return out.sorted()
    }
}
