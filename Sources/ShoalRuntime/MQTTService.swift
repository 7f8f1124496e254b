import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMQTT
import ShoalReplication
import ShoalSupervision
import ShoalThreads

/// One broker of the site's `mqtt:` section (`root/mqtt/<name>`): runs its `MQTTBridge` on a
/// thread of its own and stops it on shutdown. A broker that is down or refuses us is not a crash:
/// the bridge reconnects with backoff and shows why in `shoal mqtt status`; only a store that is
/// gone ends the child.
struct MQTTService: Service {
    let gateway: Gateway
    let opened: OpenedStore
    let broker: MQTTBroker

    /// The supervisor of the brokers: one_for_one, each broker its own child.
    static func supervisor(gateway: Gateway, settings: MQTTSettings, store: @escaping @Sendable () throws -> OpenedStore) -> Supervisor {
        Supervisor(
            name: "mqtt", strategy: .oneForOne,
            intensity: RestartIntensity(maxRestarts: 5, within: .seconds(60), backoffInitial: .milliseconds(500), backoffMax: .seconds(30)),
            children: settings.brokers.map { broker in
                ChildSpec(name: broker.name, heartbeatTimeout: .seconds(30), readyTimeout: .seconds(30)) {
                    MQTTService(gateway: gateway, opened: try store(), broker: broker)
                }
            },
            report: gateway.report)
    }

    func run(context: ServiceContext) async throws {
        let options = try clientOptions()
        guard let peer = gateway.identity?.peerID else { throw MQTTServiceError.noIdentity }
        let writer = LocalWriter(peer: peer, store: opened.store, clock: opened.clock)
        let bridge = MQTTBridge(broker: broker, writer: writer, clientOptions: options, logger: gateway.logger, board: gateway.mqtt, events: gateway.meshEvents)
        // The thread sees `stop` within a round (≤ 100 ms), unless it is inside a blocking
        // connect to a host that does not answer (the kernel gives up after ~2 min).
        try await LoopThread(name: "mqtt-\(broker.name)", what: "mqtt \(broker.name) (\(broker.host):\(broker.port))", domain: .mqtt,
                             stopWithin: .seconds(3), lastBeat: { bridge.lastBeat }, loop: { bridge.run() }, stop: { bridge.stop() })
            .run(context: context, gateway: gateway)
    }

    /// The client's settings from the site file: the password read from its file, the identity's
    /// PEM files for `tls.identity`, the client id made from the peer id when none is given.
    func clientOptions() throws -> MQTTClient.Options {
        guard let peer = gateway.identity?.peerID else { throw MQTTServiceError.noIdentity }
        var o = MQTTClient.Options(host: broker.host, port: Int(broker.port), clientID: broker.clientID(peerIDHex: peer.description))
        o.protocolVersion = broker.protocolVersion == .v5 ? 5 : 4
        o.keepaliveSeconds = Int(broker.keepaliveSeconds)
        o.cleanSession = broker.cleanSession
        // What the rules could take at all (4 × the store's body limit, as they measure it): a
        // larger payload is dropped as too_large without being copied.
        o.maxPayloadBytes = opened.store.options.maxBodyBytes * MQTTInboundRule.payloadSlack
        o.username = broker.username
        if let file = broker.passwordFile {
            guard let text = try Files.read(file, max: 4096) else { throw MQTTServiceError.passwordFile(file) }
            o.password = MQTTBroker.password(fromFile: text)
        }
        if broker.useTLS || broker.tls != nil {
            o.useTLS = true
            let tls = broker.tls ?? MQTTTLSSettings()
            o.caFile = tls.caFile
            o.insecure = tls.insecure
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

enum MQTTServiceError: Error, CustomStringConvertible {
    case noIdentity
    case passwordFile(String)

    var description: String {
        switch self {
        case .noIdentity: "the gateway has no identity yet (the MQTT bridge writes documents as this gateway's peer)"
        case .passwordFile(let f): "mqtt passwordFile \(f) does not exist"
        }
    }
}
