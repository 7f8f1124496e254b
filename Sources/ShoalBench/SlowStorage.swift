import CSQLite
import Glibc
import ShoalThreads

/// Storage as slow as a gateway's: a SQLite VFS over the default one ("unix") that waits before
/// every sync and now and then stalls a write or a sync for seconds, as an SD card does. For
/// benchmarks and tests only (`shoal bench … --storage sd-card`): the runtime never installs it.
///
/// How it wraps: its files are the default VFS's files with room for one pointer after them. Its
/// xOpen lets the default VFS open the file, keeps the file's method table in that slot and puts a
/// copy of the table in its place in which xSync and xWrite wait first, then call the original.
/// Every other method is the original's, called on the same file, so nothing else changes.
public enum SlowStorage {
    /// What the storage adds to the disk under it.
    public struct Profile: Sendable, Equatable {
        public var name: String
        /// Added before every sync (fsync/fdatasync of the database, its WAL or its directory).
        public var syncMillis: Int
        /// A stall: one write or sync held this long…
        public var stallMillis: Int
        /// …after a random interval averaging this many seconds (0: no stalls but forced ones).
        public var stallEverySeconds: Double
        public var seed: UInt64

        public init(name: String, syncMillis: Int, stallMillis: Int = 0, stallEverySeconds: Double = 0, seed: UInt64 = 1) {
            self.name = name
            self.syncMillis = syncMillis
            self.stallMillis = stallMillis
            self.stallEverySeconds = stallEverySeconds
            self.seed = seed
        }

        /// A class-10 SD card as measured on Raspberry Pis: about 20 ms per fsync, and a card
        /// that stops answering for about 2 s now and then while it erases (Raspberry Pi kernel
        /// issue 412). One stall every 30 s on average.
        public static let sdCard = Profile(name: "sd-card", syncMillis: 20, stallMillis: 2000, stallEverySeconds: 30)

        /// `sd-card`, or `sync=MS[,stall=MS][,every=S]` (say `sync=20,stall=2000,every=10`).
        public static func parse(_ text: String) -> Profile? {
            if text == "sd-card" { return .sdCard }
            guard !text.isEmpty else { return nil }
            var p = Profile(name: text, syncMillis: 0)
            for part in text.split(separator: ",") {
                let kv = part.split(separator: "=", maxSplits: 1)
                guard kv.count == 2 else { return nil }
                switch kv[0] {
                case "sync": guard let v = Int(kv[1]), (0...10_000).contains(v) else { return nil }; p.syncMillis = v
                case "stall": guard let v = Int(kv[1]), (0...60_000).contains(v) else { return nil }; p.stallMillis = v
                case "every": guard let v = Double(kv[1]), v >= 0, v <= 86_400 else { return nil }; p.stallEverySeconds = v
                default: return nil
                }
            }
            return p
        }

        public var summary: String {
            var s = "\(name): +\(syncMillis) ms per sync"
            if stallMillis > 0 { s += stallEverySeconds > 0 ? ", a \(stallMillis) ms stall every ~\(Int(stallEverySeconds)) s" : ", \(stallMillis) ms stalls when forced" }
            return s
        }
    }

    /// What the storage did since it was installed.
    public struct Counters: Sendable, Equatable {
        public var syncs = 0
        public var writes = 0
        public var stalls = 0
        /// Time spent waiting in syncs and stalls, in milliseconds.
        public var waitedMillis = 0
    }

    struct State {
        var profile: Profile?
        var counters = Counters()
        var nextStall: Int64 = .max
        var forced = false
        /// A stall is being waited out right now.
        var stalling = false
        /// The next sync fails with SQLITE_IOERR_FSYNC (a test's failing disk).
        var failSync = false
        /// The next sync waits until released (`holdNextSync`): a test's commit held for as long
        /// as the test needs, whatever the scheduler does meanwhile.
        var holdNext = false
        var holding = false
        var random: UInt64 = 1
        /// One method table per original table (the default VFS has a handful), made once.
        var tables: [UnsafeRawPointer: UnsafeMutablePointer<sqlite3_io_methods>] = [:]
        var vfs: UnsafeMutablePointer<sqlite3_vfs>?
        var inner: UnsafeMutablePointer<sqlite3_vfs>?
    }

    static let state = Locked(State())

    public static let vfsName = "shoal-slow"

    /// Registers the slow storage (as `vfsName`) with `profile`, or changes its profile. With
    /// `asDefault` (a benchmark's process) every connection opened after goes through it; without
    /// (a test beside others in one process) only stores opened with `StoreOptions.vfs = vfsName`.
    /// Connections opened before keep the VFS they had.
    public static func install(_ profile: Profile, asDefault: Bool = true) throws(SlowStorageError) {
        // Finding the default VFS initializes SQLite: the process-wide settings the store makes
        // before its first connection (memory statistics off) must come first.
        _ = shoal_sqlite_disable_memstatus()
        try state.withLock { s throws(SlowStorageError) in
            if s.vfs == nil {
                guard let inner = sqlite3_vfs_find(nil) else { throw SlowStorageError("SQLite has no default VFS") }
                let vfs = UnsafeMutablePointer<sqlite3_vfs>.allocate(capacity: 1)
                vfs.initialize(to: inner.pointee)
                vfs.pointee.pNext = nil
                vfs.pointee.zName = UnsafePointer(strdup(vfsName))
                vfs.pointee.szOsFile = slotOffset(inner) + Int32(MemoryLayout<UnsafeRawPointer>.stride)
                vfs.pointee.pAppData = UnsafeMutableRawPointer(inner)
                vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in
                    guard let vfs, let file, let inner = vfs.pointee.pAppData?.assumingMemoryBound(to: sqlite3_vfs.self) else { return SQLITE_MISUSE }
                    let rc = inner.pointee.xOpen(inner, name, file, flags, outFlags)
                    guard let original = file.pointee.pMethods else { return rc }
                    (UnsafeMutableRawPointer(file) + Int(SlowStorage.slotOffset(inner))).storeBytes(of: UnsafeRawPointer(original), as: UnsafeRawPointer.self)
                    file.pointee.pMethods = UnsafePointer(SlowStorage.table(for: original))
                    return rc
                }
                // Methods that take the VFS are given the default one (they may read its fields).
                vfs.pointee.xDelete = { vfs, name, syncDir in
                    let inner = vfs!.pointee.pAppData!.assumingMemoryBound(to: sqlite3_vfs.self)
                    if syncDir != 0 { SlowStorage.wait(sync: true) }
                    return inner.pointee.xDelete(inner, name, syncDir)
                }
                vfs.pointee.xAccess = { vfs, name, flags, out in
                    let inner = vfs!.pointee.pAppData!.assumingMemoryBound(to: sqlite3_vfs.self)
                    return inner.pointee.xAccess(inner, name, flags, out)
                }
                vfs.pointee.xFullPathname = { vfs, name, n, out in
                    let inner = vfs!.pointee.pAppData!.assumingMemoryBound(to: sqlite3_vfs.self)
                    return inner.pointee.xFullPathname(inner, name, n, out)
                }
                guard sqlite3_vfs_register(vfs, asDefault ? 1 : 0) == SQLITE_OK else { throw SlowStorageError("sqlite3_vfs_register failed") }
                s.vfs = vfs
                s.inner = inner
            } else if let vfs = s.vfs, asDefault {
                guard sqlite3_vfs_register(vfs, 1) == SQLITE_OK else { throw SlowStorageError("sqlite3_vfs_register failed") }
            }
            s.profile = profile
            s.counters = Counters()
            s.random = profile.seed | 1
            s.forced = false
            s.nextStall = nextStall(after: now(), &s)
        }
    }

    /// Makes the disk's own VFS the default again (the slow one stays registered, unused by new
    /// connections: SQLite may still hold files opened through it).
    public static func uninstall() {
        state.withLock { s in
            if let inner = s.inner { sqlite3_vfs_register(inner, 1) }
            s.profile = nil
        }
    }

    /// The next sync stalls for the profile's stallMillis (a test's or a benchmark's stall: a
    /// durable commit's flush, where a card's erase holds it up).
    public static func stallNext() { state.withLock { $0.forced = true } }

    /// The next sync fails (SQLITE_IOERR_FSYNC) without reaching the disk: a failing commit.
    public static func failNextSync() { state.withLock { $0.failSync = true } }

    /// The next sync waits (after the profile's own wait) until `releaseHeld()`.
    public static func holdNextSync() { state.withLock { $0.holdNext = true } }
    /// True while a sync is held by `holdNextSync`.
    public static var isHolding: Bool { state.withLock { $0.holding } }
    public static func releaseHeld() { state.withLock { $0.holding = false } }

    public static var counters: Counters { state.withLock { $0.counters } }
    /// True while a write or sync is held by a stall.
    public static var isStalling: Bool { state.withLock { $0.stalling } }
    public static var profile: Profile? { state.withLock { $0.profile } }

    // MARK: inside

    static func slotOffset(_ inner: UnsafeMutablePointer<sqlite3_vfs>) -> Int32 {
        let align = Int32(MemoryLayout<UnsafeRawPointer>.alignment)
        return (inner.pointee.szOsFile + align - 1) / align * align
    }

    static func original(_ file: UnsafeMutablePointer<sqlite3_file>) -> UnsafePointer<sqlite3_io_methods> {
        let offset = state.withLock { s in s.inner.map { slotOffset($0) } ?? 0 }
        return (UnsafeRawPointer(file) + Int(offset)).load(as: UnsafeRawPointer.self).assumingMemoryBound(to: sqlite3_io_methods.self)
    }

    static func table(for original: UnsafePointer<sqlite3_io_methods>) -> UnsafeMutablePointer<sqlite3_io_methods> {
        state.withLock { s in
            if let t = s.tables[UnsafeRawPointer(original)] { return t }
            let t = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)
            t.initialize(to: original.pointee)
            t.pointee.xSync = { file, flags in
                // Whether this sync fails is settled as it begins (a sync already waiting out a
                // stall when a test asks for a failure is not the one that fails).
                let fail = SlowStorage.state.withLock { s in
                    defer { s.failSync = false }
                    return s.failSync
                }
                SlowStorage.wait(sync: true)
                let hold = SlowStorage.state.withLock { s in
                    guard s.holdNext else { return false }
                    s.holdNext = false
                    s.holding = true
                    return true
                }
                // A test's hold: this thread (SQLite's caller, never the cooperative pool) polls.
                while hold && SlowStorage.isHolding { usleep(1000) }
                if fail { return SQLITE_IOERR | (4 << 8) }  // SQLITE_IOERR_FSYNC
                return SlowStorage.original(file!).pointee.xSync(file, flags)
            }
            t.pointee.xWrite = { file, data, amount, offset in
                SlowStorage.wait(sync: false)
                return SlowStorage.original(file!).pointee.xWrite(file, data, amount, offset)
            }
            s.tables[UnsafeRawPointer(original)] = t
            return t
        }
    }

    static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// A uniform random interval in [0.5, 1.5] × the profile's mean (splitmix64, seeded).
    static func nextStall(after t: Int64, _ s: inout State) -> Int64 {
        guard let p = s.profile, p.stallMillis > 0, p.stallEverySeconds > 0 else { return .max }
        s.random &+= 0x9E37_79B9_7F4A_7C15
        var z = s.random
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        let fraction = 0.5 + Double(z >> 11) / Double(1 << 53)
        return t + Int64(fraction * p.stallEverySeconds * 1000)
    }

    /// Waits as the profile says, before a sync (`sync`) or a write. Sleeps outside the lock.
    static func wait(sync: Bool) {
        let t = now()
        let (millis, stall): (Int, Bool) = state.withLock { s in
            guard let p = s.profile else { return (0, false) }
            if sync { s.counters.syncs += 1 } else { s.counters.writes += 1 }
            var m = sync ? p.syncMillis : 0
            if p.stallMillis > 0 && ((sync && s.forced) || t >= s.nextStall) {
                if sync { s.forced = false }
                s.counters.stalls += 1
                s.nextStall = nextStall(after: t + Int64(p.stallMillis), &s)
                s.stalling = true
                s.counters.waitedMillis += m + p.stallMillis
                return (m + p.stallMillis, true)
            }
            s.counters.waitedMillis += m
            return (m, false)
        }
        if millis > 0 {
            var left = timespec(tv_sec: millis / 1000, tv_nsec: (millis % 1000) * 1_000_000)
            var rest = timespec()
            while nanosleep(&left, &rest) != 0 && errno == EINTR { left = rest }
        }
        if stall { state.withLock { $0.stalling = false } }
    }
}

public struct SlowStorageError: Error, CustomStringConvertible {
    public let description: String
    init(_ d: String) { description = d }
}
