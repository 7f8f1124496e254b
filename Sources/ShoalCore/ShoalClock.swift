import Glibc

/// Time comes through this seam, so tests and the simulator can move it by hand.
/// `now` is a monotonic reading (a duration since an arbitrary origin), never wall time.
public protocol ShoalClock: Sendable {
    var now: Duration { get }
    func sleep(for duration: Duration) async throws
}

/// The real monotonic clock.
public struct SystemClock: ShoalClock {
    private static let origin = ContinuousClock.now
    public init() {}
    public var now: Duration { ContinuousClock.now - SystemClock.origin }
    public func sleep(for duration: Duration) async throws {
        try await ContinuousClock().sleep(for: duration)
    }
}

extension Duration {
    /// Whole milliseconds, rounded down.
    public var millis: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
    public var secondsDouble: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}

/// Milliseconds on CLOCK_MONOTONIC (since boot; never stepped by NTP or the user): deadlines and
/// timeouts on the runtime's own threads, which cannot use the async `ShoalClock`.
public func monotonicMillis() -> Int {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}
