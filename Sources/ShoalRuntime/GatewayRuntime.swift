import Dispatch
import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalSupervision
import ShoalTLS
import ShoalTrust
import Synchronization

/// `shoal run`: loads the configuration, builds the supervision tree and runs it until SIGTERM or
/// SIGINT (graceful: children stop in reverse order) or until the root supervisor gives up (exit 1,
/// and systemd restarts the process). Talks to systemd when run by it: READY=1 once every child
/// started, STATUS= lines, WATCHDOG=1 only while the tree is healthy.
public enum GatewayRuntime {
    public enum ExitCode {
        public static let ok: Int32 = 0
        public static let failure: Int32 = 1
        public static let usage: Int32 = 2
        public static let config: Int32 = 3
        public static let notFound: Int32 = 4
        /// Another `shoal run` holds the data directory's lock.
        public static let dataDirectoryInUse: Int32 = 7
    }

    /// Where the store service sits in the tree (its state drives the LED's store error).
    public static let storeChildPath = "root/store"

    /// The tree under the root. rest_for_one: if the store restarts, everything started after it
    /// (which holds the store) restarts too; a crash of a later child leaves the store alone. Each
    /// child is made once the children before it are ready, with what they provide: the open store
    /// (control, replication, status) and the identity (replication).
    public static func tree(for gateway: Gateway, config: LoadedConfig) -> Supervisor {
        let provided = Provided()
        return Supervisor(
            name: "root", strategy: .restForOne,
            intensity: RestartIntensity(maxRestarts: 5, within: .seconds(60), backoffInitial: .milliseconds(200), backoffMax: .seconds(10)),
            children: [
                ChildSpec(name: "store", heartbeatTimeout: .seconds(30), readyTimeout: .seconds(120)) {
                    StoreService(gateway: gateway, provides: provided.store)
                },
                ChildSpec(name: "control", heartbeatTimeout: .seconds(10), readyTimeout: .seconds(10)) {
                    ControlService(gateway: gateway, opened: try provided.store.value())
                },
                ChildSpec(name: "identity", heartbeatTimeout: .seconds(180), readyTimeout: .seconds(60)) {
                    IdentityService(gateway: gateway, provides: provided.identity)
                },
                ChildSpec(name: "replication", heartbeatTimeout: .seconds(30), readyTimeout: .seconds(60)) {
                    ReplicationService(gateway: gateway, config: config, opened: try provided.store.value(), credentials: provided.identity.current)
                },
                ChildSpec(name: "status", heartbeatTimeout: .seconds(30)) {
                    StatusService(gateway: gateway, store: try provided.store.value().store)
                },
                // Last, so its restart (rest_for_one) restarts nothing else; replication takes the
                // radios' current state when it starts, and their changes as messages.
                ChildSpec(name: "radios", heartbeatTimeout: .seconds(30)) { RadioService(gateway: gateway) },
            ] + (config.site.http.enabled ? [
                // The local API, after everything it shows; its restart restarts nothing else.
                ChildSpec(name: "http", heartbeatTimeout: .seconds(30), readyTimeout: .seconds(30)) {
                    HTTPService(gateway: gateway, opened: try provided.store.value())
                },
            ] : []) + (config.site.mqtt.enabled ? [
                // The MQTT bridge: one child per broker, each reconnecting on its own.
                ChildSpec(name: "mqtt", heartbeatTimeout: .seconds(30), readyTimeout: .seconds(60)) {
                    MQTTService.supervisor(gateway: gateway, settings: config.site.mqtt, store: { try provided.store.value() })
                },
            ] : []) + (config.site.uplink.enabled ? [
                // The uplink to a NATS JetStream hub; while the hub is away it reconnects on its own.
                ChildSpec(name: "uplink", heartbeatTimeout: .seconds(30), readyTimeout: .seconds(60)) {
                    UplinkService(gateway: gateway, opened: try provided.store.value(), settings: config.site.uplink)
                },
            ] : []) + [
                // Updates of Shoal itself: status, confirmation, releases (last: restarts nothing).
                ChildSpec(name: "update", heartbeatTimeout: .seconds(300)) {
                    UpdateService(gateway: gateway, config: config, opened: try provided.store.value())
                },
            ],
            report: gateway.report)
    }

    public static func run(_ options: RuntimeOptions) async -> Int32 {
        let environment = ProcessEnvironment.current
        let logger = Logger(sink: StderrLogSink(journal: environment["JOURNAL_STREAM"] != nil), level: options.logLevel ?? .info)
        let config: LoadedConfig
        do {
            config = try ConfigurationLoading.load(options, logger: logger)
        } catch let e as BoardNotFound {
            logger.error(.board, "--board: \(e)")
            return ExitCode.notFound
        } catch let e as ConfigError {
            for line in e.description.split(separator: "\n") { logger.error(.board, "configuration: \(line)") }
            return ExitCode.config
        } catch {
            logger.error(.board, "configuration: \(error)")
            return ExitCode.config
        }
        // Before anything opens the store or the socket: one gateway per data directory. Held
        // until this function returns (the process exits right after); the kernel drops it on death.
        let dataDirectory = Files.directory(of: config.storePath)
        let lock: DirectoryLock
        do {
            lock = try DirectoryLock(directory: dataDirectory)
        } catch {
            logger.error(.runtime, "\(error)")
            if case .held = error { return ExitCode.dataDirectoryInUse }
            return ExitCode.failure
        }
        defer { withExtendedLifetime(lock) {} }
        logger.setLevel(config.board.log.level)
        for (domain, level) in config.board.log.domains { logger.setLevel(level, for: domain) }
        if let level = options.logLevel { logger.setLevel(level) }

        let report = SupervisionReport()
        let gateway = Gateway(board: config.board, site: config.site, logger: logger, report: report,
                              storePath: config.storePath, socketPath: config.socketPath,
                              trust: TrustBook.Site(adminKeys: config.adminKeys, roots: config.trustedRoots, allowedPeers: config.allowedPeers,
                                                    revocationList: config.revocationList))
        logger.info(.runtime, "shoal \(ShoalVersion.current) on board \(config.board.id) (\(config.board.name)), group \(config.site.group) (\(GroupID(config.site.group).serviceType)), sources \(config.board.sources.joined(separator: " < ")), site \(config.site.source)")

        if !config.site.http.enabled { logger.info(.http, "local HTTP API off (http.enabled: false in \(config.site.source))") }
        let root = tree(for: gateway, config: config)
        let rootContext = ServiceContext(name: "root", path: "root", logger: logger, clock: SystemClock())
        let notifier = SystemdNotifier(environment: environment)
        let signals = installSignalHandlers(rootContext: rootContext, gateway: gateway, notifier: notifier)
        defer { for s in signals { s.cancel() } }

        let watcher = Task {
            guard await rootContext.waitUntilReady() else { return }
            guard !rootContext.isShuttingDown else { return }
            gateway.setState(.running)
            logger.info(.runtime, "gateway running; control socket \(config.socketPath)")
            notify(notifier, logger, "READY=1\nSTATUS=running on board \(config.board.id)")
            await feedWatchdog(notifier: notifier, report: report, context: rootContext, logger: logger)
        }
        defer { watcher.cancel() }

        do {
            try await root.run(context: rootContext)
            gateway.storeThread.shutdown()
            gateway.workThread.shutdown()
            if let code = gateway.requestedExit {
                logger.info(.runtime, "stopped cleanly; exiting with status \(code) to be started again")
                return code
            }
            logger.info(.runtime, "stopped cleanly")
            return ExitCode.ok
        } catch {
            gateway.setState(.failed)
            logger.error(.runtime, "root supervisor gave up: \(error); exiting with status 1")
            notify(notifier, logger, "STATUS=failed: \(error)")
            return ExitCode.failure
        }
    }

    static func notify(_ notifier: SystemdNotifier, _ logger: Logger, _ message: String) {
        do { try notifier.notify(message) } catch { logger.warning(.runtime, "systemd notify failed: \(error)") }
    }

    /// Sends WATCHDOG=1 at half the watchdog interval, but only while every child is healthy: a
    /// tree stuck restarting stops feeding, and systemd restarts the whole process.
    static func feedWatchdog(notifier: SystemdNotifier, report: SupervisionReport, context: ServiceContext, logger: Logger) async {
        guard let micros = notifier.watchdogMicros else { return }
        let period = Duration.microseconds(Int64(micros / 2))
        var wasHealthy = true
        while await context.pause(for: period) {
            let healthy = report.isHealthy
            if healthy { notify(notifier, logger, "WATCHDOG=1") }
            if healthy != wasHealthy {
                logger.warning(.runtime, healthy ? "tree healthy again; feeding the watchdog" : "tree unhealthy; not feeding the watchdog")
                notify(notifier, logger, healthy ? "STATUS=running" : "STATUS=degraded: a child is restarting or hung")
                wasHealthy = healthy
            }
        }
    }

    /// SIGTERM and SIGINT ask the tree to stop gracefully; a second one exits at once.
    static func installSignalHandlers(rootContext: ServiceContext, gateway: Gateway, notifier: SystemdNotifier) -> [any DispatchSourceSignal] {
        let queue = DispatchQueue(label: "shoal.signals")
        let count = Atomic<Int>(0)
        var sources: [any DispatchSourceSignal] = []
        for sig in [SIGTERM, SIGINT] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: queue)
            source.setEventHandler {
                let n = count.add(1, ordering: .relaxed).newValue
                let name = sig == SIGTERM ? "SIGTERM" : "SIGINT"
                if n == 1 {
                    gateway.logger.info(.runtime, "\(name): stopping gracefully (send again to exit at once)")
                    gateway.setState(.stopping)
                    try? notifier.notify("STOPPING=1")
                    rootContext.requestShutdown()
                } else {
                    gateway.logger.warning(.runtime, "\(name) again: exiting now")
                    _exit(ExitCode.failure)
                }
            }
            source.resume()
            sources.append(source)
        }
        return sources
    }
}
