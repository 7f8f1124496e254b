import Glibc

/// A dedicated OS thread that runs blocking work (SQLite, file I/O) one job at a time, so that
/// async code can `await thread.run { … }` without ever blocking Swift's cooperative pool.
/// The queue is bounded: past `maxQueued` jobs, `run` fails fast instead of piling up.
public final class BlockingThread: @unchecked Sendable {  // the job queue only under `lock`
    public struct Overloaded: Error, CustomStringConvertible {
        public let name: String
        public var description: String { "the \(name) thread has too many queued jobs" }
    }

    public let name: String
    private let maxQueued: Int
    private let lock = ConditionLock()
    private var jobs: [() -> Void] = []
    private var stopping = false

    public init(name: String, maxQueued: Int = 4096) {
        self.name = name
        self.maxQueued = maxQueued
        // The thread keeps this object alive until shutdown() lets its loop end.
        let started = DetachedThread.start(name: name) { [self] in loop() }
        precondition(started, "cannot start the \(name) thread")
    }

    private func loop() {
        while true {
            let job: (() -> Void)? = lock.withLock {
                while jobs.isEmpty && !stopping { lock.wait() }
                if jobs.isEmpty { return nil }
                return jobs.removeFirst()
            }
            guard let job else { return }
            job()
        }
    }

    /// Stops taking jobs; queued jobs still run, then the thread ends.
    public func shutdown() {
        lock.withLock {
            stopping = true
            lock.broadcast()
        }
    }

    /// Runs `body` on this thread and returns its result to the awaiting task.
    /// The result crosses back through a pthread mutex as well as the continuation: ThreadSanitizer
    /// does not see a continuation resumed from a thread of ours as synchronising, and reported
    /// every object made here and read by the task as a race.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        let outcome = Locked<Result<T, any Error>?>(nil)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let accepted: Bool = lock.withLock {
                guard !stopping, jobs.count < maxQueued else { return false }
                jobs.append {
                    let result = Result { try body() }
                    outcome.withLock { $0 = result }
                    continuation.resume()
                }
                lock.broadcast()
                return true
            }
            if !accepted { continuation.resume(throwing: Overloaded(name: name)) }
        }
        return try outcome.withLock { $0! }.get()
    }
}
