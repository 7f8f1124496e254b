import ShoalCore
import Synchronization
import ShoalThreads

/// What a running service gets from its supervisor: its name and path in the tree, a logger, the
/// clock, a heartbeat to prove it is alive, a way to say it is ready, and the graceful-shutdown
/// request. Graceful shutdown is not cancellation: a service asked to stop finishes what it is
/// doing (commits, closes sockets) and returns; only if it overruns its shutdown timeout is its
/// task cancelled.
public final class ServiceContext: Sendable {
    public let name: String
    public let path: String
    public let logger: Logger
    public let clock: any ShoalClock
    let shutdownLatch = Latch()
    let readyLatch = Latch()
    let exitLatch = Latch()
    private let lastBeat: Locked<Duration>

    public init(name: String, path: String, logger: Logger, clock: any ShoalClock) {
        self.name = name
        self.path = path
        self.logger = logger
        self.clock = clock
        self.lastBeat = Locked(clock.now)
    }

    /// Proves the service is alive. Call it more often than the child's heartbeat timeout.
    public func heartbeat() { lastBeat.withLock { $0 = clock.now } }

    public var lastHeartbeat: Duration { lastBeat.withLock { $0 } }

    /// Tells the supervisor the service is up, so the next sibling may start.
    public func markReady() { readyLatch.open() }

    /// Waits until the service said it is ready (for a supervisor: all its children started).
    public func waitUntilReady(timeout: Duration? = nil) async -> Bool {
        await readyLatch.wait(timeout: timeout, clock: clock)
    }

    public var isShuttingDown: Bool { shutdownLatch.isOpen }

    /// Asks the service to stop gracefully.
    public func requestShutdown() { shutdownLatch.open() }

    /// Returns when a graceful shutdown is requested or the task is cancelled.
    public func waitForShutdown() async { _ = await shutdownLatch.wait() }

    /// Sleeps for `duration`; returns `false` early if shutdown was requested (or the task cancelled).
    /// The idiom for a service loop: `while await context.pause(for: .seconds(1)) { … }`.
    public func pause(for duration: Duration) async -> Bool {
        let stopped = await shutdownLatch.wait(timeout: duration, clock: clock)
        return !stopped && !Task.isCancelled
    }
}
