import ShoalCore
import ShoalThreads

/// Threads that a part starts for blocking work (accept loops, diallers, one per link) and joins
/// when it stops: `join` waits for all of them until a deadline and names those still running,
/// which the caller logs as abandoned (they end on their own when their blocking call returns).
public final class WorkerGroup: Sendable {
    let running = Locked<[Int: String]>([:])
    let next = Locked(0)
    let changed = ConditionLock()

    public init() {}

    /// Starts a named thread; false if the system refused to make one.
    @discardableResult
    public func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
        let id = next.withLock { n in n += 1; return n }
        running.withLock { $0[id] = name }
        let started = DetachedThread.start(name: name) { [self] in
            body()
            changed.withLock {
                running.withLock { _ = $0.removeValue(forKey: id) }
                changed.broadcast()
            }
        }
        if !started { running.withLock { _ = $0.removeValue(forKey: id) } }
        return started
    }

    public var count: Int { running.withLock { $0.count } }

    /// Waits until every thread ended or `timeoutMillis` passed; returns the names of those still
    /// running (sorted, with counts: "repl-link ×2"), empty when all ended.
    public func join(timeoutMillis: Int) -> [String] {
        let deadline = monotonicMillis() + timeoutMillis
        changed.withLock {
            while running.withLock({ !$0.isEmpty }) {
                let left = deadline - monotonicMillis()
                if left <= 0 { break }
                changed.wait(timeoutMillis: left)
            }
        }
        var counts: [String: Int] = [:]
        for name in running.withLock({ Array($0.values) }) { counts[name, default: 0] += 1 }
        return counts.keys.sorted().map { counts[$0]! > 1 ? "\($0) ×\(counts[$0]!)" : $0 }
    }
}
