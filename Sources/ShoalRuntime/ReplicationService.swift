import ShoalConfig
import ShoalCore
import ShoalGateway
import ShoalMesh
import ShoalReplication
import ShoalSupervision
import ShoalTLS
import Glibc

/// Replication between gateways: waits for the store and the identity, builds the replication node
/// from the site's collections and the mesh options, and drives it over TCP + TLS to the site's
/// static peers and from its listen address. Discovery (Wi-Fi, BLE) will add links to the same node.
struct ReplicationService: Service {
    let gateway: Gateway
    let config: LoadedConfig

    func run(context: ServiceContext) async throws {
        // The store and the identity come first; wait for both.
        var identity: Identity?
        while true {
            context.heartbeat()
            if let id = gateway.identity, gateway.store != nil, gateway.clock != nil { identity = id; break }
            if !(await context.pause(for: .milliseconds(200))) { return }
        }
        guard let identity, let store = gateway.store, let clock = gateway.clock else { return }
        let site = gateway.site
        let policies = CollectionPolicies.make(site.collections)
        var settings = ReplicationSettings()
        let mesh = gateway.board.mesh
        settings.batchSizeBytes = Int(mesh.txLogBatchSizeKb) * 1024
        settings.batchMaxCount = Int(mesh.txLogBatchMaxCount)
        settings.requestTimeoutMillis = UInt64(mesh.requestTimeoutMillis)

        var roots = config.trustedRoots
        if roots.isEmpty && config.allowedPeers.isEmpty, identity.certificate.chainDER.count > 1,
           let ca = try? Certificate(parsing: identity.certificate.chainDER[1]) {
            roots = [ca]  // a CA-signed gateway with no authenticator trusts its own CA
        }
        // Wi-Fi discovery runs where the site syncs over Wi-Fi and the board names a Wi-Fi interface.
        let wifi: ReplicationDriver.WifiDiscovery? = site.transports.contains(.wifi) && gateway.board.wifiInterface != nil
            ? .init(serviceType: GroupID(site.group).serviceType, serviceName: "shoal-\(identity.peerID.short)", interface: gateway.board.wifiInterface)
            : nil
        // Bluetooth LE where the site syncs over it and the board names an adapter.
        let bluetooth: ReplicationDriver.BluetoothDiscovery? = site.transports.contains(.bluetooth)
            ? gateway.board.bluetoothAdapter.map { .init(adapter: $0, serviceUUID: GroupID(site.group).bleServiceUUID) }
            : nil
        if roots.isEmpty && config.allowedPeers.isEmpty && (site.listenAddress != nil || !site.staticPeers.isEmpty || wifi != nil || bluetooth != nil) {
            gateway.logger.warning(.tls, "no authenticator in \(site.source): every peer will be refused; add authenticator.allowedPeers or rootCertificates")
        }
        let authenticator = PeerAuthenticator.trust(roots: roots, allowedPeers: config.allowedPeers)
        let gw = gateway
        let report = gateway.report, path = context.path
        // Seeding the TLS random generators can wait for kernel entropy on a freshly booted board,
        // and stopping waits for threads: both happen on a thread of their own, never on the pool.
        let collections = policies, limits = settings
        let driver = try await gateway.storeThread.run { () throws -> ReplicationDriver in
            let wall = NodeClock.systemWallMillis()
            let transports = Set(site.transports.map { t -> MeshTransport in t == .wifi ? .wifi : .bluetooth })
            let core = GatewayCore(peer: identity.peerID, group: site.group, store: store, clock: clock, collections: collections,
                                   replication: limits, mesh: MeshSettings(mesh, transports: transports), sequenceBase: wall,
                                   fallbackSeed: wall ^ UInt64(getpid()))
            let driver = try ReplicationDriver(
                core: core, host: gw,
                serverTLS: try TLSContext(role: .server, identity: identity, authenticator: authenticator),
                clientTLS: try TLSContext(role: .client, identity: identity, authenticator: authenticator),
                children: (report, path))
            try driver.start(listen: site.listenAddress, peers: site.staticPeers, wifi: wifi, bluetooth: bluetooth)
            return driver
        }
        gateway.retryRadiosHook.withLock { $0 = { driver.retryNetworks() } }
        gateway.radioHook.withLock { $0 = { driver.radiosChanged($0) } }
        if let now = gateway.radios.withLock({ $0 }) { driver.radiosChanged(now) }
        defer {
            gateway.retryRadiosHook.withLock { $0 = nil }
            gateway.radioHook.withLock { $0 = nil }
        }
        let statics = site.staticPeers.map(\.description).joined(separator: ", ")
        let discovery = [wifi.map { "DNS-SD \($0.serviceType) on \($0.interface ?? "any interface")" }, bluetooth.map { "BLE on \($0.adapter)" }].compactMap { $0 }
        gateway.logger.info(.replication, "replicating \(collections.count) collections as \(identity.peerID.short); static peers: \(statics.isEmpty ? "none" : statics); discovery: \(discovery.isEmpty ? "none" : discovery.joined(separator: ", "))")
        context.markReady()
        while await context.pause(for: .seconds(1)) {
            // The node thread beats every 100 ms; one that stopped beating is hung.
            let beat = driver.nodeBeat.load(ordering: .relaxed)
            if monotonicMillis() - beat < 10_000 { context.heartbeat() }
        }
        _ = try? await gateway.storeThread.run { driver.stop() }
    }
}
