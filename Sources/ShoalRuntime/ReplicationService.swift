import ShoalConfig
import ShoalCore
import ShoalGateway
import ShoalMesh
import ShoalReplication
import ShoalSupervision
import ShoalTLS
import ShoalTrust

/// Replication between gateways. Made by the supervisor once the store and the identity service
/// are ready, with the open store and the identity (nil: the gateway has none it can use, and this
/// service waits, heartbeating, until the identity service provides one and restarts it). Builds
/// the gateway's replication through `ReplicationAssembly` from the site's collections, the mesh
/// options and the authenticator, and drives it over TCP + TLS (listen address, static peers,
/// DNS-SD) and Bluetooth LE; radio changes and retry requests come to it as messages.
struct ReplicationService: Service {
    let gateway: Gateway
    let config: LoadedConfig
    let opened: OpenedStore
    let credentials: TLSCredentials?

    func run(context: ServiceContext) async throws {
        guard let credentials else {
            gateway.logger.warning(.replication, "not replicating: \(gateway.identityProblem ?? "the gateway has no usable identity"); waiting for one")
            context.markReady()
            while await context.pause(for: .seconds(1)) { context.heartbeat() }
            return
        }
        let assembly = plan(credentials)
        let gw = gateway, report = gateway.report, path = context.path
        let driver: ReplicationDriver
        do {
            driver = try await gateway.workThread.run { () throws -> ReplicationDriver in
                try assembly.start(host: gw, children: (report, path))
            }
        }
        // Radio changes and retry requests, as messages from the radio manager and the control socket.
        let (radios, radiosFeed) = gateway.radioChanges.subscribe()
        let (retries, retriesFeed) = gateway.retryRequests.subscribe()
        // Trust changes: a revoked peer's links close at once; a newly allowed one is dialled again.
        let (trustTask, trustFeed) = driver.follow(gateway.trust)
        let listeners = [
            Task { for await snapshot in radios { driver.radiosChanged(snapshot) } },
            Task { for await _ in retries { driver.retryNetworks() } },
            trustTask,
        ]
        if let now = gateway.radios.withLock({ $0 }) { driver.radiosChanged(now) }
        log(assembly)
        context.markReady()
        while await context.pause(for: .seconds(1)) {
            // The driver's thread beats every 100 ms; one that stopped beating is hung.
            let beat = driver.nodeBeat.load(ordering: .relaxed)
            if monotonicMillis() - beat < 10_000 { context.heartbeat() }
        }
        // Unsubscribe (the streams end, so do their listeners), then stop the driver.
        radiosFeed.finish()
        retriesFeed.finish()
        trustFeed.finish()
        for l in listeners { await l.value }
        _ = try? await gateway.workThread.run { driver.stop() }
    }

    /// The site's replication: collections, limits, mesh options, authenticator, transports.
    func plan(_ credentials: TLSCredentials) -> ReplicationAssembly {
        let identity = credentials.identity
        let site = gateway.site, board = gateway.board
        var roots = config.trustedRoots
        if roots.isEmpty && config.allowedPeers.isEmpty, identity.certificate.chainDER.count > 1,
           let ca = try? Certificate(parsing: identity.certificate.chainDER[1]) {
            roots = [ca]  // a CA-signed gateway with no authenticator trusts its own CA
            gateway.trust.setSiteRoots(roots)
        }
        // Wi-Fi discovery runs where the site syncs over Wi-Fi and the board names a Wi-Fi interface.
        let wifi: ReplicationDriver.WifiDiscovery? = site.transports.contains(.wifi) && board.wifiInterface != nil
            ? .init(serviceType: GroupID(site.group).serviceType, serviceName: "shoal-\(identity.peerID.short)", interface: board.wifiInterface)
            : nil
        // Bluetooth LE where the site syncs over it and the board names an adapter.
        let bluetooth: ReplicationDriver.BluetoothDiscovery? = site.transports.contains(.bluetooth)
            ? board.bluetoothAdapter.map { .init(adapter: $0, serviceUUID: GroupID(site.group).bleServiceUUID) }
            : nil
        if roots.isEmpty && config.allowedPeers.isEmpty && config.adminKeys.isEmpty && (site.listenAddress != nil || !site.staticPeers.isEmpty || wifi != nil || bluetooth != nil) {
            gateway.logger.warning(.tls, "no authenticator in \(site.source): every peer will be refused; add authenticator.allowedPeers or rootCertificates")
        }
        let transports = Set(site.transports.map { t -> MeshTransport in t == .wifi ? .wifi : .bluetooth })
        return ReplicationAssembly(
            credentials: credentials, group: site.group, store: opened.store, clock: opened.clock,
            collections: CollectionPolicies.make(site.collections, trust: gateway.trust, releaseKeys: config.releaseKeys,
                                                 log: { [logger = gateway.logger] in logger.warning(.replication, $0) }), replication: ReplicationSettings(board.mesh),
            mesh: MeshSettings(board.mesh, transports: transports),
            authenticator: gateway.trust.authenticator,
            links: .network(listen: site.listenAddress, peers: site.staticPeers, wifi: wifi, bluetooth: bluetooth))
    }

    func log(_ a: ReplicationAssembly) {
        guard case .network(_, let peers, let wifi, let bluetooth) = a.links else { return }
        let statics = peers.map(\.description).joined(separator: ", ")
        let discovery = [wifi.map { "DNS-SD \($0.serviceType) on \($0.interface ?? "any interface")" }, bluetooth.map { "BLE on \($0.adapter)" }].compactMap { $0 }
        gateway.logger.info(.replication, "replicating \(a.collections.count.counted("collection")) as \(a.identity.peerID.short); static peers: \(statics.isEmpty ? "none" : statics); discovery: \(discovery.isEmpty ? "none" : discovery.joined(separator: ", "))")
    }
}
