import Glibc
import ShoalConfig
import ShoalCore
import ShoalGateway
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalSupervision
import ShoalTLS

/// One replicating gateway, put together in one place: the gateway core (mesh manager +
/// replicator over the store), its TLS contexts, the driver and its transports. `shoal run`'s
/// replication service, `import Shoal`'s `MultipeerReplicator` and `shoal bench` all start their
/// driver through `start`; the simulator builds the same `GatewayCore` through `makeCore` and swaps
/// only the I/O and the clock.
package struct ReplicationAssembly: Sendable {
    /// How the gateway reaches its peers.
    package enum Links: Sendable {
        /// TCP (listening, static peers, DNS-SD with `wifi`) and, with `bluetooth`, Bluetooth LE.
        case network(listen: HostPort?, peers: [HostPort], wifi: TCPTransport.WifiDiscovery?, bluetooth: ReplicationDriver.BluetoothDiscovery?)
        /// Transports made by the caller over the assembly's TLS contexts (server, client): the
        /// in-process medium, a test's double. A new transport needs no change here or in the driver.
        case transports(@Sendable (_ server: TLSContext, _ client: TLSContext) -> [any Transport])
    }

    /// The identity its TLS contexts present; a certificate renewed over the same key is handed to
    /// the running driver through them (`TLSCredentials.present`).
    package var credentials: TLSCredentials
    package var identity: Identity { credentials.identity }
    package var group: String
    package var store: DocumentStore
    package var clock: NodeClock
    package var collections: [CollectionPolicy]
    package var replication: ReplicationSettings
    package var mesh: MeshSettings
    package var authenticator: PeerAuthenticator
    package var links: Links
    /// Mixed into the fallback seed (jitter and tie-breaks when `mesh.randomSeed` is 0), so two
    /// replicators of one process differ.
    package var salt: UInt64 = 0

    package init(identity: Identity, group: String, store: DocumentStore, clock: NodeClock, collections: [CollectionPolicy],
                 replication: ReplicationSettings, mesh: MeshSettings, authenticator: PeerAuthenticator, links: Links) {
        self.init(credentials: TLSCredentials(identity), group: group, store: store, clock: clock, collections: collections,
                  replication: replication, mesh: mesh, authenticator: authenticator, links: links)
    }

    package init(credentials: TLSCredentials, group: String, store: DocumentStore, clock: NodeClock, collections: [CollectionPolicy],
                 replication: ReplicationSettings, mesh: MeshSettings, authenticator: PeerAuthenticator, links: Links) {
        self.credentials = credentials
        self.group = group
        self.store = store
        self.clock = clock
        self.collections = collections
        self.replication = replication
        self.mesh = mesh
        self.authenticator = authenticator
        self.links = links
    }

    /// Why a gateway could not start replicating.
    package enum Failure: Error, CustomStringConvertible {
        /// mbedTLS refused the identity or could not seed its generator.
        case tls(TLSError)
        /// The system refused a thread.
        case system(SystemError)
        /// A transport could not start (a listen address in use, an adapter missing).
        case transport(any Error)

        package var description: String {
            switch self {
            case .tls(let e): "cannot set up TLS: \(e)"
            case .system(let e): "\(e)"
            case .transport(let e): "\(e)"
            }
        }
    }

    /// The core every gateway runs (also the simulator's, through `GatewayCore.init`).
    package func makeCore() -> GatewayCore {
        let wall = NodeClock.systemWallMillis()
        return GatewayCore(peer: credentials.peerID, group: group, store: store, clock: clock, collections: collections,
                           replication: replication, mesh: mesh, sequenceBase: wall, fallbackSeed: wall ^ UInt64(getpid()) ^ salt,
                           blobs: store)
    }

    /// Builds the driver and starts its transports. Seeding the TLS generators can wait for kernel
    /// entropy on a freshly booted board: call it from a thread of your own, never the pool.
    /// `children`: where the links appear in the supervision tree.
    package func start(host: any ReplicationHost, children: (report: SupervisionReport, path: String)? = nil) throws(Failure) -> ReplicationDriver {
        let driver = try makeDriver(host: host, children: children)
        try startLinks(driver)
        return driver
    }

    /// The driver over a fresh core, with the TLS contexts made, not started.
    package func makeDriver(host: any ReplicationHost, children: (report: SupervisionReport, path: String)? = nil) throws(Failure) -> ReplicationDriver {
        let server: TLSContext, client: TLSContext
        do {
            server = try TLSContext(role: .server, credentials: credentials, authenticator: authenticator)
            client = try TLSContext(role: .client, credentials: credentials, authenticator: authenticator)
        } catch { throw .tls(error) }
        do { return try ReplicationDriver(core: makeCore(), host: host, serverTLS: server, clientTLS: client, children: children) } catch { throw .system(error) }
    }

    /// Starts the driver's transports (listening, dialling, discovery) and its core.
    package func startLinks(_ driver: ReplicationDriver) throws(Failure) {
        do {
            switch links {
            case .network(let listen, let peers, let wifi, let bluetooth):
                try driver.start(listen: listen, peers: peers, wifi: wifi, bluetooth: bluetooth, backoffMillis: Int(clamping: mesh.backoffMillis))
            case .transports(let make):
                try driver.start(transports: make(driver.serverTLS, driver.clientTLS), missing: [:])
            }
        } catch { throw .transport(error) }
    }
}

extension ReplicationSettings {
    /// The replicator's limits from the mesh options a board or site file gives.
    package init(_ mesh: ShoalConfig.MeshOptions) {
        self.init()
        batchSizeBytes = Int(mesh.txLogBatchSizeKb) * 1024
        batchMaxCount = Int(mesh.txLogBatchMaxCount)
        requestTimeoutMillis = UInt64(mesh.requestTimeoutMillis)
    }
}
