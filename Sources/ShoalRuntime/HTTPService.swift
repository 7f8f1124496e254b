import Glibc
import ShoalConfig
import ShoalCore
import ShoalHTTP
import ShoalLinux
import ShoalStore
import ShoalSupervision
import ShoalThreads

/// The local API (`root/http`): REST, the change feed and events over SSE, /metrics and the web
/// console, served by libmicrohttpd on the site's `http.listen` addresses and the Unix socket
/// `<data dir>/http.sock`. An address that cannot be bound now (a port in use) is a warning, not
/// a failure: the others serve, and it is tried again every 30 s. Addresses other than loopback
/// require the bearer token.
struct HTTPService: Service {
    let gateway: Gateway
    let opened: OpenedStore
    /// 30 s. Tests shorten it with SHOAL_HTTP_RETRY_BIND_MILLIS (100…60000); not a site-file option.
    static let retryBindEvery: Duration = {
        guard let text = ProcessEnvironment.get("SHOAL_HTTP_RETRY_BIND_MILLIS"), let ms = Int(text), (100...60_000).contains(ms) else { return .seconds(30) }
        return .milliseconds(ms)
    }()
    /// A document body (1 MiB, the store's limit) with room for nothing else; a bulk write 4 MiB
    /// (its lines are all parsed before the one transaction: about 6 × its size in memory, measured
    /// 89 MB for 15 MB of lines, too much for a 512 MB Pi Zero 2 W at 16 MiB).
    static let bodyLimit = 1 << 20
    static let bulkBodyLimit = 4 << 20

    func run(context: ServiceContext) async throws {
        let settings = gateway.site.http
        let directory = Files.directory(of: gateway.storePath)
        let token = try HTTPToken.loadOrCreate(dataDirectory: directory)
        let feed = HTTPFeed(store: opened.store, events: gateway.meshEvents)
        let api = HTTPAPI(gateway: gateway, opened: opened, feed: feed)
        var limits = HTTPServer.Limits()
        limits.maxConnections = UInt32(settings.maxConnections)
        limits.maxConnectionsPerAddress = UInt32(settings.maxConnectionsPerAddress)
        limits.connectionTimeoutSeconds = UInt32(settings.connectionTimeoutSeconds)
        let logger = gateway.logger
        // libmicrohttpd speaks mostly of clients (gone, malformed): verbose, so no client can flood the log.
        let log: HTTPServer.Log = { logger.verbose(.http, $0) }

        let workers = WorkerGroup()
        let feedEnded = Latch()
        guard workers.spawn("http-feed", { feed.run(heartbeat: context.heartbeat); feedEnded.open() }) else {
            throw SystemError(call: "pthread_create(http feed)", code: 11)
        }
        var servers: [HTTPServer] = []
        defer {
            feed.stop()
            for s in servers { s.stop() }
        }
        if settings.unixSocket {
            let path = HTTPService.socketPath(dataDirectory: directory)
            let listener = try UnixSocketListener(path: path, backlog: 256)
            let server = try HTTPServer(name: path, listenFD: listener.takeDescriptor(), limits: limits, bearerToken: nil,
                                        bodyLimit: HTTPService.limit, log: log, handler: api.handle)
            servers.append(server)
            api.servers.withLock { $0.append(server) }
            logger.info(.http, "HTTP API on unix:\(path) (curl --unix-socket \(path) http://localhost/v1/status)")
        }
        var pending = settings.listen
        // Warned once per address; the retries after that are verbose (a port held for a day
        // must not write two lines a minute).
        var warned = Set<String>()
        var bound: [String] = settings.unixSocket ? ["unix:" + HTTPService.socketPath(dataDirectory: directory)] : []
        func bindPending() {
            var still: [HostPort] = []
            for address in pending {
                let needsToken = !HTTPSettings.isLoopback(address)
                do {
                    let listener = try TCPListener(host: address.host, port: address.port, backlog: 512)
                    let server = try HTTPServer(name: address.description, listenFD: listener.takeDescriptor(), limits: limits,
                                                bearerToken: needsToken ? token : nil, loopbackHostsOnly: !needsToken, openPaths: ["/"], bodyLimit: HTTPService.limit, log: log, handler: api.handle)
                    servers.append(server)
                    api.servers.withLock { $0.append(server) }
                    let shown = HostPort(host: address.host, port: listener.port)
                    logger.info(.http, "HTTP API on http://\(shown)/\(needsToken ? " (bearer token required: `shoal http token --socket \(gateway.socketPath)`)" : "")")
                    bound.append(shown.description)
                } catch {
                    if warned.insert(address.description).inserted {
                        logger.warning(.http, "HTTP API cannot listen on \(address) now: \(error); serving the other addresses and trying again every \(HTTPService.retryBindEvery) (another gateway on this machine? give each its own port in the site file's http.listen)")
                    } else {
                        logger.verbose(.http, "HTTP API still cannot listen on \(address): \(error)")
                    }
                    still.append(address)
                }
            }
            pending = still
            gateway.setHTTPAddresses(bound)
        }
        bindPending()
        context.markReady()
        while !pending.isEmpty, await context.pause(for: HTTPService.retryBindEvery) { bindPending() }
        while await context.pause(for: .seconds(1)) {
            context.heartbeat()
        }
        // The feed first (it ends every stream), then the servers: stopping a daemon joins its
        // threads, which may be in a store transaction, so it runs on the work thread, not here.
        gateway.setHTTPAddresses([])
        feed.stop()
        _ = await feedEnded.wait()
        let abandoned = (try? await gateway.workThread.run { workers.join(timeoutMillis: 3000) }) ?? []
        if !abandoned.isEmpty { logger.warning(.http, "stopping: abandoned \(abandoned.joined(separator: ", ")) still blocked after 3 s") }
        let stopping = servers
        servers = []
        api.servers.withLock { $0 = [] }
        // The feed has ended every stream: give their clients up to a second to receive the end
        // (the last chunk), so a long poll answers and an SSE client sees a clean close.
        let drain = { @Sendable in
            for _ in 0..<50 where stopping.contains(where: { $0.openStreams > 0 }) { SystemCall.pause(millis: 20) }
            for s in stopping { s.stop() }
        }
        do { try await gateway.workThread.run(drain) } catch { drain() }
        if settings.unixSocket { unlink(HTTPService.socketPath(dataDirectory: directory)) }
    }

    static func socketPath(dataDirectory: String) -> String { dataDirectory + "/http.sock" }

    /// A blob POSTed whole (`/v1/blobs`): the server holds it in memory, so it is bounded; larger
    /// ones go in pieces (`shoal blob put`).
    static let blobBodyLimit = 16 << 20

    @Sendable static func limit(_ method: String, _ path: String) -> Int {
        guard method == "POST" else { return bodyLimit }
        return path == "/v1/blobs" ? blobBodyLimit : bulkBodyLimit
    }
}
