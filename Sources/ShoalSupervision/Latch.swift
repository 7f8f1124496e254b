import ShoalCore
import Synchronization
import ShoalThreads

/// A gate that opens once and stays open. Tasks wait for it with an optional timeout; waiting never
/// blocks a thread. The supervisor uses latches for "child is ready", "child has exited" and
/// "shutdown was requested", because a hung child's task can never simply be awaited.
public final class Latch: Sendable {
    private struct State {
        var open = false
        var nextID = 0
        var waiters: [Int: CheckedContinuation<Bool, Never>] = [:]
        /// Waiters whose timeout or cancellation came before they were registered.
        var expired: Set<Int> = []
    }
    private let state = Locked(State())

    public init() {}

    public var isOpen: Bool { state.withLock { $0.open } }

    /// Opens the gate and wakes every waiter with `true`.
    public func open() {
        let waiters: [CheckedContinuation<Bool, Never>] = state.withLock { s in
            guard !s.open else { return [] }
            s.open = true
            let w = Array(s.waiters.values)
            s.waiters.removeAll()
            return w
        }
        for w in waiters { w.resume(returning: true) }
    }

    /// Waits until open (true), or until `timeout` passes or the task is cancelled (false).
    public func wait(timeout: Duration? = nil, clock: any ShoalClock = SystemClock()) async -> Bool {
        let id: Int? = state.withLock { s in
            if s.open { return nil }
            s.nextID += 1
            return s.nextID
        }
        guard let id else { return true }
        // The timer holds the latch strongly until it fires or is cancelled (below, when the wait
        // ends): a weak capture cost a side table per wait, which LeakSanitizer reported whenever
        // the process exited with a timer still asleep.
        let timer: Task<Void, Never>? = timeout.map { timeout in
            Task {
                try? await clock.sleep(for: timeout)
                if !Task.isCancelled { self.resume(id, with: false) }
            }
        }
        defer { timer?.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                let resumeNow: Bool? = state.withLock { s in
                    if s.open { return true }
                    if s.expired.remove(id) != nil { return false }
                    s.waiters[id] = c
                    return nil
                }
                if let resumeNow { c.resume(returning: resumeNow) }
            }
        } onCancel: {
            self.resume(id, with: false)
        }
    }

    private func resume(_ id: Int, with value: Bool) {
        let waiter: CheckedContinuation<Bool, Never>? = state.withLock { s in
            if let w = s.waiters.removeValue(forKey: id) { return w }
            if !s.open { s.expired.insert(id) }
            return nil
        }
        waiter?.resume(returning: value)
    }
}
