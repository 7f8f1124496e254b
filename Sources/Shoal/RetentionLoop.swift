import ShoalCore
import ShoalRuntime
import ShoalStore
import ShoalThreads

/// A running replicator's retention: the gateway's hourly tombstone purge
/// (`TombstoneRetention`) and its expiration pass every minute (`ExpiryRetention`: local
/// expiries, the collections' TTLs and budgets) followed by the blob GC (`BlobRetention`), on a
/// thread of its own, all first at start.
/// Ends when stopped; a purge in progress finishes first (closing the database waits for it).
final class RetentionLoop: Sendable {
    let retention: TombstoneRetention
    let expiry: ExpiryRetention
    let blobs: BlobRetention
    let store: DocumentStore
    let logger: Logger
    let stopped = DoneFlag()
    let wake = ConditionLock()

    init(maxAgeSeconds: Int64, expiryRules: [ExpiryRule] = [], blobPolicy: BlobGCPolicy = BlobGCPolicy(), store: DocumentStore, logger: Logger) {
        retention = TombstoneRetention(maxAgeSeconds: maxAgeSeconds)
        expiry = ExpiryRetention(rules: expiryRules)
        blobs = BlobRetention(policy: blobPolicy)
        self.store = store
        self.logger = logger
    }

    func start() -> Bool {
        DetachedThread.start(name: "shoal-retention") { [self] in
            let interval = Duration.seconds(ExpiryRetention.intervalSeconds)
            let tombstoneEvery = max(1, Int(TombstoneRetention.intervalSeconds / ExpiryRetention.intervalSeconds))
            var round = 0
            while !stopped.isSet {
                if round % tombstoneEvery == 0 {
                    do { try retention.purge(store, logger: logger) } catch {
                        logger.warning(.store, "retention: cannot purge tombstones: \(error); trying again in an hour")
                    }
                }
                round += 1
                do { try expiry.purge(store, logger: logger) } catch {
                    logger.warning(.store, "expiration: cannot purge expired documents: \(error); trying again in a minute")
                }
                do { try blobs.collect(store) } catch {
                    logger.warning(.store, "blob GC: \(error); trying again in a minute")
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
