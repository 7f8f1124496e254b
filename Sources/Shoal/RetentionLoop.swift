import ShoalCore
import ShoalRuntime
import ShoalStore
import ShoalThreads

/// A running replicator's retention: the gateway's hourly tombstone purge
/// (`TombstoneRetention`), on a thread of its own, first at start. Ends when stopped; a purge in
/// progress finishes first (closing the database waits for it).
final class RetentionLoop: Sendable {
    let retention: TombstoneRetention
    let store: DocumentStore
    let logger: Logger
    let stopped = DoneFlag()
    let wake = ConditionLock()

    init(maxAgeSeconds: Int64, store: DocumentStore, logger: Logger) {
        retention = TombstoneRetention(maxAgeSeconds: maxAgeSeconds)
        self.store = store
        self.logger = logger
    }

    func start() -> Bool {
        DetachedThread.start(name: "shoal-retention") { [self] in
            let interval = Duration.seconds(TombstoneRetention.intervalSeconds)
            while !stopped.isSet {
                do { try retention.purge(store, logger: logger) } catch {
                    logger.warning(.store, "retention: cannot purge tombstones: \(error); trying again in an hour")
                }
                let next = ContinuousClock.now + interval
                wake.withLock {
                    while !stopped.isSet, ContinuousClock.now < next {
                        let left = next - ContinuousClock.now
                        wake.wait(timeoutMillis: Int(left.components.seconds) * 1000 + 1)
                    }
                }
            }
        }
    }

    func stop() {
        stopped.set()
        wake.withLock { wake.broadcast() }
    }
}
