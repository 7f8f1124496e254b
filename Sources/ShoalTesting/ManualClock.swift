/// ShoalTesting: test doubles and helpers — a clock that moves only when the test says so,
/// temporary directories, recorders. Used by the tests and, later, by `shoal sim`.
import ShoalCore
import Synchronization
import ShoalThreads

/// A clock that moves only when `advance(by:)` is called: sleepers wake in deadline order, so a
/// test can check exact timelines without waiting (swift-nio's EmbeddedEventLoop does the same).
public final class ManualClock: ShoalClock {
    private struct Sleeper {
        let id: Int
        let deadline: Duration
        let continuation: CheckedContinuation<Void, any Error>
    }
    private struct State {
        var now: Duration = .zero
        var nextID = 0
        var sleepers: [Sleeper] = []
        var cancelled: Set<Int> = []
    }
    private let state = Locked(State())

    public init() {}

    public var now: Duration { state.withLock { $0.now } }

    /// How many tasks are asleep on this clock (tests wait for this before advancing).
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    public func sleep(for duration: Duration) async throws {
        let id = state.withLock { s in s.nextID += 1; return s.nextID }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let immediate: Result<Void, any Error>? = state.withLock { s in
                    if s.cancelled.remove(id) != nil { return .failure(CancellationError()) }
                    if duration <= .zero { return .success(()) }
                    s.sleepers.append(Sleeper(id: id, deadline: s.now + duration, continuation: c))
                    return nil
                }
                if let immediate { c.resume(with: immediate) }
            }
        } onCancel: {
            let c: CheckedContinuation<Void, any Error>? = state.withLock { s in
                if let i = s.sleepers.firstIndex(where: { $0.id == id }) { return s.sleepers.remove(at: i).continuation }
                s.cancelled.insert(id)
                return nil
            }
            c?.resume(throwing: CancellationError())
        }
    }

    /// Moves time forward, waking every sleeper whose deadline has come, earliest first.
    public func advance(by duration: Duration) {
        let due: [Sleeper] = state.withLock { s in
            s.now += duration
            let now = s.now
            let due = s.sleepers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
            s.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for s in due { s.continuation.resume() }
    }
}
