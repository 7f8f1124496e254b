import Glibc
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalStore

extension Gateway {
    /// The figures `/metrics` shows now. Reads the store (counts per collection): call it from a
    /// thread, not the cooperative pool. A closed store (restarting) leaves its figures out.
    public func metrics(store: DocumentStore?) -> GatewayMetrics {
        var state = self.state
        if state == .running && !report.isHealthy { state = .degraded }
        let identity = self.identity
        let uptime = Double(uptimeSeconds)
        let wallSeconds = Double(NodeClock.systemWallMillis()) / 1000
        var m = GatewayMetrics(
            state: state, version: ShoalVersion.current, board: board.id, group: site.group,
            counters: counters.withLock { $0 }, mesh: meshView.withLock { $0 }, children: report.snapshot,
            ledPattern: ledPattern.withLock { $0 }, peerID: identity?.peerID.description, identityLabel: site.identityLabel,
            identityNotAfterSeconds: identity?.certificate.notAfter, collections: Gateway.collectionCounts(store),
            lastSequence: store?.lastSequence,
            storeBytes: Files.size(storePath).map { $0 + (Files.size(storePath + "-wal") ?? 0) },
            uptimeSeconds: uptime, startTimeSeconds: (wallSeconds - uptime).rounded(), residentBytes: Gateway.residentBytes(),
            nowMillis: monotonicMillis())
        m.expiry = store?.expiryCounts.withLock { $0 }
        m.blobs = store.flatMap { BlobRetention.figures($0, budget: site.blobBudgetBytes) }
        m.mqtt = mqtt.snapshot
        m.uplink = uplink.snapshot
        let current = trust.current()
        m.trust.entries = trust.ledger.entries.count
        m.trust.allowed = current.allowedPeers.count
        m.trust.revoked = current.revokedPeers.count
        m.trust.pending = trust.pending.count
        m.trust.rejected = trust.rejectedCount
        m.trust.nextUpdateSeconds = trust.nextUpdate
        return m
    }

    /// Live documents and tombstones of each collection; nil when the store cannot be read now.
    static func collectionCounts(_ store: DocumentStore?) -> [GatewayMetrics.Collection]? {
        guard let store, let names = try? store.collections() else { return nil }
        var out: [GatewayMetrics.Collection] = []
        for name in names {
            guard let live = try? store.count(name, deleted: false), let dead = try? store.count(name, deleted: true) else { return nil }
            out.append(GatewayMetrics.Collection(name: name.description, documents: live, tombstones: dead))
        }
        return out
    }

    /// This process's resident memory (`/proc/self/statm`'s second field, in pages); nil where
    /// that cannot be read.
    static func residentBytes() -> Int? {
        guard let statm = try? Files.read("/proc/self/statm", max: 4096) else { return nil }
        let fields = statm.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
