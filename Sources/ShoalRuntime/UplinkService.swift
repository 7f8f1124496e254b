import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalSupervision
import ShoalThreads
import ShoalUplink

/// The site's `uplink:` (`root/uplink`): runs the `UplinkBridge` on a thread of its own and stops
/// it on shutdown. A hub that is down, unreachable or refusing is not a crash: the bridge
/// reconnects with backoff and shows why in `shoal uplink status`, and the mesh goes on; only a
/// store that is gone ends the child (the supervisor restarts it with backoff).
struct UplinkService: Service {
    let gateway: Gateway
    let opened: OpenedStore
    let settings: UplinkSettings

    func run(context: ServiceContext) async throws {
        guard let peer = gateway.identity?.peerID else { throw UplinkError.noIdentity }
        let writer = LocalWriter(peer: peer, store: opened.store, clock: opened.clock)
        let bridge = UplinkBridge(settings: settings, group: gateway.site.group, site: gateway.site.collections, writer: writer,
                                  options: clientOptions(peer: peer), logger: gateway.logger, board: gateway.uplink, events: gateway.meshEvents)
        // The thread sees `stop` within a round, unless it waits on the hub (a connect: the 2 s
        // connect timeout per server; a publish: up to the 10 s request timeout): then it is
        // abandoned after 4 s (within the supervisor's 5 s) and stops when that call returns.
        try await LoopThread(name: "uplink", what: "uplink", domain: .uplink, stopWithin: .seconds(4),
                             lastBeat: { bridge.lastBeat }, loop: { bridge.run() }, stop: { bridge.stop() })
            .run(context: context, gateway: gateway)
    }

    /// The client's settings from the site file (the password file is read at each connection).
    func clientOptions(peer: PeerID) -> NATSClient.Options {
        var o = NATSClient.Options(servers: settings.servers, name: "shoal-\(peer.description.prefix(12))-\(gateway.site.identityLabel)")
        o.maxPayloadHint = opened.store.options.maxBodyBytes
        o.domain = settings.domain
        o.username = settings.username
        o.credentialsFile = settings.credentialsFile
        o.nkeyPublic = settings.nkey
        o.nkeySeedFile = settings.nkeySeedFile
        if let tls = settings.tls {
            o.secure = true
            o.caFile = tls.caFile
            if tls.identity {
                (o.certFile, o.keyFile) = gateway.identityPEMFiles
            } else {
                o.certFile = tls.certFile
                o.keyFile = tls.keyFile
            }
        }
        return o
    }
}
