import ShoalCore
import ShoalReplication
import ShoalStore

/// The gateway's retention rule, one place for `shoal run`'s store service and `import Shoal`'s
/// replicator: every hour, tombstones older than `txLogMaxAgeSeconds` are purged and the purge
/// horizon raised to their age, so replication refuses to bring a purged delete back.
package struct TombstoneRetention: Sendable {
    /// How often it runs.
    package static let intervalSeconds: Int64 = 3600
    package let maxAgeSeconds: Int64

    package init(maxAgeSeconds: Int64) { self.maxAgeSeconds = maxAgeSeconds }

    /// Purges now (a store call: from a thread of your own); returns how many tombstones went.
    @discardableResult
    package func purge(_ store: DocumentStore, logger: Logger) throws(StoreError) -> Int {
        let cutoff = Int64(NodeClock.systemWallMillis()) - maxAgeSeconds * 1000
        let removed = try store.purgeTombstones(olderThan: cutoff).count
        if removed > 0 { logger.info(.store, "retention: purged \(removed) tombstones older than \(maxAgeSeconds) s") }
        return removed
    }
}
