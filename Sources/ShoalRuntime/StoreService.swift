import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalStore
import ShoalSupervision

/// Opens the store (moving a corrupt one aside), makes the site's collections, provides the store
/// to the services started after it, and proves every few seconds that SQLite still answers. Every
/// SQLite call runs on the gateway's store thread.
struct StoreService: Service {
    let gateway: Gateway
    let provides: Provision<OpenedStore>

    func run(context: ServiceContext) async throws {
        let options = StoreOptions(path: gateway.storePath, durability: gateway.board.durability == .normal ? .normal : .full,
                                   maxBlobBytes: gateway.site.maxBlobBytes ?? BlobReference.maxLength)
        let logger = gateway.logger
        let collections = CollectionName.systemNames + gateway.site.collections.map(\.name)
        let indexes = gateway.site.collections.flatMap { c in c.indexes.map { (c.name, $0) } }
        let trust = gateway.trust
        let group = gateway.site.group
        let opened = try await gateway.storeThread.run { () throws -> OpenedStore in
            try Files.makeDirectories(Files.directory(of: options.path))
            let store = try DocumentStore.open(options, logger: logger)
            for c in collections { try store.createCollection(c) }
            // Which group the store belongs to: `shoal restore` refuses another group's backup.
            try store.setMetadata(DocumentStore.groupKey, group)
            // The site's indexes (checked when the site file was read); one made by the CLI stays.
            for (c, fields) in indexes {
                let paths = try fields.map { f throws(QueryError) in try FieldPath(parsing: f) }
                if try store.createIndex(on: c, fields: paths) { logger.info(.store, "created index \(c) (\(fields.joined(separator: ",")))") }
            }
            // The fleet's trust entries, before anything handshakes.
            try trust.load(from: store)
            return OpenedStore(store: store, clock: try NodeClock(store: store))
        }
        let store = opened.store
        provides.provide(opened)
        context.markReady()
        let retention = TombstoneRetention(maxAgeSeconds: gateway.board.mesh.txLogMaxAgeSeconds)
        let interval = Duration.seconds(TombstoneRetention.intervalSeconds)
        var lastPurge = ContinuousClock.now - interval
        // Expiration (local purges without tombstones): every minute, when the site sets a rule or
        // any document has a local expiry.
        let expiry = ExpiryRetention(site: gateway.site.collections)
        let expiryInterval = Duration.seconds(ExpiryRetention.intervalSeconds)
        var lastExpiry = ContinuousClock.now - expiryInterval
        // Blob GC, with the expiration pass.
        let blobs = BlobRetention(site: gateway.site)
        do {
            while await context.pause(for: .seconds(2)) {
                try await gateway.storeThread.run { try store.ping() }
                context.heartbeat()
                // Retention, hourly: tombstones older than txLogMaxAgeSeconds go; the purge horizon
                // they leave keeps replication from reviving them.
                if ContinuousClock.now - lastPurge >= interval {
                    lastPurge = ContinuousClock.now
                    _ = try await gateway.storeThread.run { try retention.purge(store, logger: logger) }
                }
                if ContinuousClock.now - lastExpiry >= expiryInterval {
                    lastExpiry = ContinuousClock.now
                    _ = try await gateway.storeThread.run { try expiry.purge(store, logger: logger) }
                    _ = try await gateway.storeThread.run { try blobs.collect(store) }
                }
            }
        } catch {
            provides.withdraw()
            _ = try? await gateway.storeThread.run { store.close() }
            throw error
        }
        provides.withdraw()
        _ = try? await gateway.storeThread.run { store.close() }
        logger.info(.store, "store closed")
    }
}
