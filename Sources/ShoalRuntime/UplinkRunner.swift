import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalStore
import ShoalUplink

/// The uplink's bridge over a given store, on a thread of its own, outside a gateway and its
/// supervisor: `shoal bench uplink` runs two of them against a nats-server of its own. The bridge
/// is the one `root/uplink` runs (`UplinkBridge`, unchanged); this only builds its settings for a
/// plain server (no TLS, no credentials), every collection pushed (and pulled unless `pull` is
/// false), each with the default resolver.
public final class UplinkRunner: Sendable {
    /// What the bridge has done (`published`, `applied`, …), as `shoal uplink status` shows it.
    public let board = UplinkBoard()
    private let bridge: UplinkBridge
    private let workers = WorkerGroup()

    /// `writer` is the gateway's (its peer id goes into `Shoal-Origin`); `group` names the streams
    /// (`SHOAL_<G>_…`); `name` is the connection's name on the server (its /connz).
    public init(writer: LocalWriter, group: String, servers: [String], collections: [CollectionName], name: String, pull: Bool = true,
                logger: Logger) {
        var settings = UplinkSettings()
        settings.servers = servers
        settings.reconnectMinMillis = 100
        settings.reconnectMaxMillis = 1000
        settings.collections = collections.map { name in
            var c = UplinkCollection(name: name)
            c.pull = pull
            return c
        }
        var options = NATSClient.Options(servers: servers, name: name)
        options.maxPayloadHint = writer.store.options.maxBodyBytes
        bridge = UplinkBridge(settings: settings, group: group, site: collections.map { SiteConfig.CollectionSettings(name: $0) }, writer: writer,
                              options: options, logger: logger, board: board, events: MeshEventLog())
    }

    /// Starts the bridge's thread (`uplink`); it connects, creates the streams it misses and syncs
    /// until `stop`.
    public func start() throws {
        let bridge = self.bridge
        guard workers.spawn("uplink", { bridge.run() }) else { throw SystemError(call: "pthread_create(uplink)", code: 11) }
    }

    /// Asks the bridge to stop and waits for its thread; false if it still runs after
    /// `timeoutMillis` (it waits on the hub: a connect or a publish's acknowledgements).
    @discardableResult
    public func stop(timeoutMillis: Int = 20_000) -> Bool {
        bridge.stop()
        return workers.join(timeoutMillis: timeoutMillis).isEmpty
    }
}
