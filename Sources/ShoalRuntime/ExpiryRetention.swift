import ShoalConfig
import ShoalCore
import ShoalReplication
import ShoalStore

/// The gateway's expiration pass, one place for `shoal run`'s store service and `import Shoal`'s
/// replicator: every `intervalSeconds`, documents whose local expiry passed, those past their
/// collection's TTL (by their last write's HLC time) and the oldest past a collection's budget are
/// purged — locally, without tombstones (see `DocumentStore+Expiry`).
package struct ExpiryRetention: Sendable {
    /// How often it runs: a document outlives its expiry by at most this (plus the pass itself).
    package static let intervalSeconds: Int64 = 60
    package let rules: [ExpiryRule]

    package init(rules: [ExpiryRule]) { self.rules = rules.filter { !$0.isEmpty } }

    /// The site file's `ttl`, `maxDocuments` and `maxBytes` per collection.
    package init(site collections: [SiteConfig.CollectionSettings]) {
        self.init(rules: collections.map {
            ExpiryRule(collection: $0.name, ttlMillis: $0.ttlSeconds.map { $0 * 1000 }, maxDocuments: $0.maxDocuments, maxBytes: $0.maxBytes)
        })
    }

    /// Purges now (a store call: from a thread of your own); returns what went.
    @discardableResult
    package func purge(_ store: DocumentStore, logger: Logger, nowMillis: Int64 = Int64(NodeClock.systemWallMillis())) throws(StoreError) -> ExpiryCounts {
        let done = try store.purgeExpired(rules, nowMillis: nowMillis)
        if done.expired + done.ttl + done.budget > 0 {
            logger.info(.store, "expiration: purged \(done.expired) expired, \(done.ttl) past their ttl, \(done.budget) over budget (no tombstones)")
        }
        return done
    }
}
