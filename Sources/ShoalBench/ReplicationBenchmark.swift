import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalRuntime
import ShoalStore
import ShoalSupervision
import ShoalTLS

/// `shoal bench replication`: an initial pull of N ~1 KB documents between two processes over TLS
/// on loopback. The pusher is a real `shoal run` child with the documents preloaded in its store;
/// the puller is a replication node in this process with a fresh store (durability full, as on a
/// gateway) each round. Timed from dialling until the last document is committed.
public enum ReplicationBenchmark {
    public struct Result: Sendable {
        public var documents: Int
        public var bodyBytes: Int
        public var docsPerSecond: [Double]
        public var wireBytesPerDocument: Double
        public var median: Double { let s = docsPerSecond.sorted(); return s[s.count / 2] }
    }

    public static func run(documents: Int, rounds: Int, directory: String, port: UInt16, durability: Durability = .full) throws -> Result {
        let quiet = Logger(sink: MemoryLogSink(), level: .none)
        let pusherDir = directory + "/pusher", pullerDir = directory + "/puller"
        let pusherID = try Identity.createSelfSigned(.init(commonName: "bench-pusher"))
        let pullerID = try Identity.createSelfSigned(.init(commonName: "bench-puller"))
        try IdentityStore(directory: pusherDir + "/identities").save(pusherID, label: "shoal")
        let readings = try CollectionName(parsing: "sensors.readings")

        try preload(pusherDir + "/shoal.db", as: pusherID, collection: readings, documents: documents, logger: quiet)

        let site = directory + "/pusher.yaml"
        let text = """
            group: bench.replication
            collections:
              - name: sensors.readings
            authenticator:
              allowedPeers: [\(pullerID.peerID)]
            replication:
              listen: 127.0.0.1:\(port)
            \(ProcessEnvironment.get("SHOAL_BENCH_PUSHER_MESH") ?? "")
            """
        let child = try startPusher(site: site, text: text, dataDir: pusherDir, port: port)
        defer { child.stop() }

        var result = Result(documents: documents, bodyBytes: StoreBenchmark.body(0).utf8.count, docsPerSecond: [], wireBytesPerDocument: 0)
        for round in 0..<rounds {
            let dir = "\(pullerDir)-\(round)"
            try Files.makeDirectories(dir)
            let pullStore = try DocumentStore.open(StoreOptions(path: dir + "/shoal.db", durability: durability), logger: quiet)
            let (gateway, assembly) = try puller(pullerID, of: pusherID, group: "bench.replication", collection: readings, store: pullStore,
                                                 settings: ReplicationSettings(), directory: dir, port: port, logger: quiet)
            // Timed from dialling, as before the assembly existed: TLS set-up is not the pull.
            let driver = try assembly.makeDriver(host: gateway)
            let start = ContinuousClock.now
            try assembly.startLinks(driver)
            // Every pulled document is one commit in the puller's feed; lastSequence is in memory.
            while pullStore.lastSequence < Int64(documents) {
                usleep(1000)
                if ContinuousClock.now - start > .seconds(600) { throw ConfigurationFailure(message: "the pull did not finish in 10 minutes") }
            }
            let seconds = (ContinuousClock.now - start).secondsDouble
            if ProcessEnvironment.get("SHOAL_BENCH_THREADS") != nil {
                for task in Files.list("/proc/self/task") {
                    if let stat = try? Files.read("/proc/self/task/\(task)/stat") {
                        let f = stat.split(separator: " ")
                        print("thread \(task): utime \(f[13]) stime \(f[14]) (ticks)")
                    }
                }
                for task in Files.list("/proc/\(child.pid)/task") {
                    if let stat = try? Files.read("/proc/\(child.pid)/task/\(task)/stat") {
                        let f = stat.split(separator: " ")
                        print("pusher thread \(task): utime \(f[13]) stime \(f[14]) (ticks)")
                    }
                }
            }
            driver.stop()
            guard try pullStore.stats().documents == documents else { throw ConfigurationFailure(message: "the puller holds the wrong number of documents") }
            result.docsPerSecond.append(Double(documents) / seconds)
            let bytes = gateway.counters.withLock { $0.bytesReceived + $0.bytesSent }
            result.wireBytesPerDocument = Double(bytes) / Double(documents)
            pullStore.close()
        }
        return result
    }
}

extension ReplicationBenchmark {
    /// Fills a pusher's store with `documents` ~1 KB bodies the way its own gateway would have
    /// written them (durability normal: the preload is not what is measured).
    static func preload(_ path: String, as identity: Identity, collection: CollectionName, documents: Int, logger: Logger) throws {
        let store = try DocumentStore.open(StoreOptions(path: path, durability: .normal), logger: logger)
        defer { store.close() }
        try store.createCollection(collection)
        let writer = LocalWriter(peer: identity.peerID, store: store, clock: try NodeClock(store: store))
        var i = 0
        while i < documents {
            let end = min(i + 1000, documents)
            _ = try writer.putAll(collection, try (i..<end).map { (try DocumentID("doc-\($0)"), StoreBenchmark.body($0)) })
            i = end
        }
    }

    /// A pull-only replication node for `collection` in this process, dialling the pusher on
    /// 127.0.0.1:`port`, with the gateway whose counters it updates.
    static func puller(_ identity: Identity, of pusher: Identity, group: String, collection: CollectionName, store: DocumentStore,
                       settings: ReplicationSettings, directory dir: String, port: UInt16, logger: Logger) throws -> (Gateway, ReplicationAssembly) {
        try store.createCollection(collection)
        let clock = try NodeClock(store: store)
        var policy = CollectionPolicy(name: collection)
        policy.push = false
        let loader = ConfigurationLoading.loader(directories: [])
        let board = try loader.loadBoard("sim")
        let siteConfig = try loader.loadSite(text: "group: \(group)\n", file: "<bench>")
        let gateway = Gateway(board: board, site: siteConfig, logger: logger, report: SupervisionReport(), storePath: dir + "/shoal.db", socketPath: dir + "/c.sock")
        let assembly = ReplicationAssembly(
            identity: identity, group: group, store: store, clock: clock, collections: [policy],
            replication: settings, mesh: MeshSettings(board.mesh),
            authenticator: PeerAuthenticator.trust(allowedPeers: [pusher.peerID]),
            links: .network(listen: nil, peers: [HostPort(host: "127.0.0.1", port: port)], wifi: nil, bluetooth: nil))
        return (gateway, assembly)
    }

    /// Writes the pusher's site file and starts `shoal run` on it (`SHOAL_BENCH_PUSHER`: another
    /// shoal binary as the pusher, to tell which side a change moved); returns once it listens.
    static func startPusher(site: String, text: String, dataDir: String, port: UInt16) throws -> ChildProcess {
        let fd = open(site, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = Array(text.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        let child = try ChildProcess(path: ProcessEnvironment.get("SHOAL_BENCH_PUSHER") ?? ChildProcess.currentExecutable,
                                     arguments: ["run", "--board", "sim", "--data-dir", dataDir, "--config", site, "--log-level", "warning"])
        for _ in 0..<200 {
            if let s = try? TCPStream.connect(ipv4: "127.0.0.1", port: port, timeoutMillis: 200) { s.close(); return child }
            usleep(50_000)
        }
        child.stop()
        throw ConfigurationFailure(message: "the pusher did not start listening on 127.0.0.1:\(port)")
    }
}
