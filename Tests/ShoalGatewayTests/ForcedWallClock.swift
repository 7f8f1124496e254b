import Synchronization

/// A wall clock a test sets (seconds since the epoch).
final class ForcedWallClock: Sendable {
    private let seconds: Mutex<Int64>
    init(_ start: Int64) { seconds = Mutex(start) }
    var now: Int64 { seconds.withLock { $0 } }
    func set(_ value: Int64) { seconds.withLock { $0 = value } }
}
