import Glibc
import ShoalCore
import ShoalThreads

/// A serial executor that is one dedicated OS thread. An actor whose `unownedExecutor` is this
/// runs every job on that thread, so its state is isolated by the compiler and it may block in C
/// (SQLite, mbedTLS, sockets) without stalling Swift's cooperative pool — as swift-nio's event
/// loops are serial executors. Plain closures (`execute`) and timers (`at`) run on the same thread,
/// in order with the actor's jobs, so a thread of ours can hand work to the actor without a Task.
///
/// What a reader gets wrong: a job that blocks holds up every later one (that is the point: one
/// thread, one order); keep blocking work short or on a worker thread of its own.
public final class ThreadExecutor: SerialExecutor, @unchecked Sendable {  // queue and timers under `lock`
    enum Work {
        case job(UnownedJob)
        case closure(() -> Void)
    }

    public let name: String
    let lock = ConditionLock()
    var queue: [Work] = []
    /// Timers by due time (monotonic ms); few at once, kept sorted.
    var timers: [(at: Int, body: () -> Void)] = []
    var stopping = false
    var finished = false
    var thread = pthread_t()

    /// Starts the thread; nil if the system refused to make one.
    public init?(name: String) {
        self.name = name
        let started = DetachedThread.start(name: name) { [self] in
            lock.withLock { thread = pthread_self(); lock.broadcast() }
            loop()
        }
        guard started else { return nil }
        // The thread records itself before any work can be queued for it to run.
        lock.withLock { while pthread_equal(thread, pthread_t()) != 0 { lock.wait(timeoutMillis: 1) } }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let work = Work.job(UnownedJob(job))
        lock.withLock {
            queue.append(work)
            lock.broadcast()
        }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

    /// Swift asks this when it cannot tell by itself whether code runs on this executor (as in
    /// `assumeIsolated` from a closure run here).
    public func checkIsolated() {
        precondition(isCurrent, "expected to run on the \(name) thread")
    }

    /// Whether the calling thread is this executor's.
    public var isCurrent: Bool { pthread_equal(pthread_self(), lock.withLock { thread }) != 0 }

    /// Runs `body` on this thread, after what is queued. Dropped once the executor stopped.
    public func execute(_ body: @escaping @Sendable () -> Void) {
        lock.withLock {
            guard !stopping else { return }
            queue.append(.closure(body))
            lock.broadcast()
        }
    }

    /// Runs `body` on this thread once the monotonic clock reaches `atMillis`.
    public func at(_ atMillis: Int, _ body: @escaping @Sendable () -> Void) {
        lock.withLock {
            guard !stopping else { return }
            let i = timers.firstIndex { $0.at > atMillis } ?? timers.count
            timers.insert((atMillis, body), at: i)
            lock.broadcast()
        }
    }

    /// Stops taking work: what is queued still runs (timers do not), then the thread ends. `join`
    /// waits for that. An actor job enqueued after the thread ended never runs, so an `await` on
    /// the actor then never returns: stop calling into an actor before shutting its executor down.
    public func shutdown() {
        lock.withLock {
            stopping = true
            timers = []
            lock.broadcast()
        }
    }

    /// Waits until the thread ended, at most `timeoutMillis`; false if it did not (it is then
    /// abandoned: it ends whenever its current job returns).
    public func join(timeoutMillis: Int) -> Bool {
        let deadline = monotonicMillis() + timeoutMillis
        return lock.withLock {
            while !finished {
                let left = deadline - monotonicMillis()
                if left <= 0 { return false }
                lock.wait(timeoutMillis: left)
            }
            return true
        }
    }

    func loop() {
        while true {
            let batch: [Work]? = lock.withLock {
                while true {
                    let now = monotonicMillis()
                    var due: [Work] = queue
                    queue.removeAll(keepingCapacity: true)
                    while let first = timers.first, first.at <= now {
                        timers.removeFirst()
                        due.append(.closure(first.body))
                    }
                    if !due.isEmpty { return due }
                    if stopping { return nil }
                    if let next = timers.first { lock.wait(timeoutMillis: max(1, next.at - now)) } else { lock.wait() }
                }
            }
            guard let batch else { break }
            for work in batch {
                switch work {
                case .job(let job): job.runSynchronously(on: asUnownedSerialExecutor())
                case .closure(let body): body()
                }
            }
        }
        lock.withLock {
            finished = true
            lock.broadcast()
        }
    }
}
