import ShoalConfig
import ShoalCore
import ShoalStore

/// The gateway's blob GC, run with the expiration pass (every `ExpiryRetention.intervalSeconds`):
/// garbage first (unreferenced blobs, unwanted partials, abandoned uploads, each after the grace
/// period), then, over `storage.blobBudget`, blobs only on-demand collections refer to, least
/// recently used first (see `DocumentStore.collectBlobGarbage`).
package struct BlobRetention: Sendable {
    package let policy: BlobGCPolicy

    package init(policy: BlobGCPolicy) { self.policy = policy }

    /// The site file's `storage.blobBudget` and the collections with `blobs: onDemand`.
    package init(site: SiteConfig) {
        let onDemand = site.collections.filter { $0.blobs == .onDemand }.map(\.name.description)
        self.init(policy: BlobGCPolicy(budgetBytes: site.blobBudgetBytes, onDemandCollections: Set(onDemand)))
    }

    /// One pass now (a store call: from a thread of your own).
    @discardableResult
    package func collect(_ store: DocumentStore) throws(StoreError) -> BlobGCReport {
        try store.collectBlobGarbage(policy)
    }

    /// The figures `shoal status` shows (and `/metrics`, as gauges and counters).
    package static func figures(_ store: DocumentStore, budget: Int64?) -> [String: Int64]? {
        guard let stats = try? store.blobStats() else { return nil }
        let c = store.blobCounts.withLock { $0 }
        var out: [String: Int64] = ["count": stats.count, "bytes": stats.bytes, "partialBytes": stats.partialBytes,
                                    "gcDropped": c.dropped, "gcDroppedBytes": c.droppedBytes, "gcOverBudget": c.overBudget]
        if let budget { out["budget"] = budget }
        return out
    }
}
