import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalThreads

/// `shoal bench stall`: a gateway (the sim board, in this process, its store through a slow-storage
/// profile) while its storage stalls. Each round forces one stall (SlowStorage.stallNext) under a
/// document write from one control connection, and a second connection asks `status` every
/// 50 ms while the stall lasts: the figure is how long `status` takes during a stall, against
/// the same when nothing stalls.
public enum StallBenchmark {
    public struct Result: Sendable {
        public var profile: SlowStorage.Profile
        /// Per stall, the slowest `status` answered while it lasted (ms).
        public var worstPerStall: [Double]
        /// Every `status` during the stalls (ms), sorted.
        public var duringStalls: [Double]
        /// `status` with no stall (ms), sorted.
        public var quiet: [Double]
        /// The stalled writes' acknowledgement times (ms).
        public var writeMillis: [Double]
    }

    static func millis(since start: ContinuousClock.Instant) -> Double {
        let d = ContinuousClock.now - start
        return Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15
    }

    public static func run(directory: String, profile: SlowStorage.Profile, stalls: Int, progress: @escaping @Sendable (String) -> Void) throws -> Result {
        var profile = profile
        profile.stallEverySeconds = 0  // stalls only when this benchmark forces one
        if profile.stallMillis <= 0 { profile.stallMillis = 2000 }
        try SlowStorage.install(profile)
        var options = RuntimeOptions()
        options.board = "sim"
        options.dataDir = directory
        options.logLevel = LogLevel.none
        // Left running: the benchmark's process exits after it (the store is durable anyway).
        Task { _ = await GatewayRuntime.run(options) }
        let socket = directory + "/control.sock"
        var asker: ControlClient?
        for _ in 0..<400 where asker == nil {
            asker = try? ControlClient(path: socket)
            if asker == nil { usleep(50_000) }
        }
        guard let asker else { throw SlowStorageError("the gateway for the stall benchmark did not start (no control socket at \(socket))") }
        // Running: status says so once the store is open.
        for _ in 0..<400 {
            if case .object(let o) = try asker.call(["op": "status"]), o["state"]?.stringValue == "running" { break }
            usleep(50_000)
        }
        var quiet: [Double] = []
        for _ in 0..<40 {
            let t = ContinuousClock.now
            _ = try asker.call(["op": "status"])
            quiet.append(millis(since: t))
            usleep(50_000)
        }
        var worst: [Double] = [], during: [Double] = [], writes: [Double] = []
        let written = Locked<Double?>(nil)
        for round in 0..<stalls {
            written.withLock { $0 = nil }
            SlowStorage.stallNext()
            let before = SlowStorage.counters.stalls
            let started = DetachedThread.start(name: "bench-stall-write") {
                // A connection of its own per write (a client is not shared between threads).
                let writer = try? ControlClient(path: socket)
                let t = ContinuousClock.now
                _ = try? writer?.call(["op": "doc.put", "collection": "sensors.readings", "id": .string("stall-\(round)"), "body": ["round": .int(Int64(round))]])
                written.withLock { $0 = millis(since: t) }
            }
            guard started else { throw SlowStorageError("cannot start a thread") }
            // Wait for the stall to begin, then ask while it lasts.
            let begun = ContinuousClock.now
            while SlowStorage.counters.stalls == before && millis(since: begun) < 5000 { usleep(1000) }
            var slowest = 0.0
            while SlowStorage.isStalling {
                let t = ContinuousClock.now
                _ = try asker.call(["op": "status"])
                let m = millis(since: t)
                during.append(m)
                slowest = max(slowest, m)
                usleep(50_000)
            }
            while written.withLock({ $0 }) == nil { usleep(1000) }
            worst.append(slowest)
            writes.append(written.withLock { $0 } ?? 0)
            progress("stall \(round + 1)/\(stalls): write acknowledged after \(Int(writes.last ?? 0)) ms; slowest status during it \(Int(slowest)) ms")
        }
        SlowStorage.uninstall()
        return Result(profile: profile, worstPerStall: worst, duringStalls: during.sorted(), quiet: quiet.sorted(), writeMillis: writes)
    }
}
