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

/// `shoal bench blob`: one blob, referenced by one document, moved between two processes over TLS
/// on loopback. As `shoal bench replication`: the pusher is a real `shoal run` child with the blob
/// and its document preloaded in its store; the puller is a replication node in this process with
/// a fresh store (durability full, as on a gateway) each round, timed from dialling until the blob
/// is complete in its store. The baseline is TLS bulk data between two `TLSSession`s in this
/// process (`TLSBenchmark.bulk`, an in-memory pipe, no store), measured in the same run.
public enum BlobBenchmark {
    public struct Shape: Sendable {
        public var megabytes: Int
        public var mbps: [Double] = []
        /// Wire bytes (frames both ways) per blob byte, and the blob counters of the last round.
        public var wireBytesPerBlobByte = 0.0
        public var counters = BlobCounters()
        /// The same bytes written through a fresh store here (BlobWriter, the puller's durability).
        public var storeMBps: [Double] = []
        public var median: Double { TLSBenchmark.median(mbps) }
        public var storeMedian: Double { TLSBenchmark.median(storeMBps) }
    }

    public struct Result: Sendable {
        public var shapes: [Shape] = []
        public var tlsMBps: [Double] = []
        public var tlsMedian: Double { TLSBenchmark.median(tlsMBps) }
    }

    /// `megabytes` MiB of pseudo-random bytes from `seed`.
    static func content(megabytes: Int, seed: UInt64) -> [UInt8] {
        var random = SeededRandom(seed: seed)
        var bytes = [UInt8](repeating: 0, count: megabytes << 20)
        for i in stride(from: 0, to: bytes.count, by: 8) {
            let r = random.next()
            for k in 0..<8 { bytes[i + k] = UInt8(truncatingIfNeeded: r >> (8 * UInt64(k))) }
        }
        return bytes
    }

    /// Writes `bytes` as one blob, 1 MiB per append (as an upload does); its reference.
    static func writeBlob(_ bytes: [UInt8], into store: DocumentStore) throws -> BlobReference {
        let blob = try store.blobWriter(contentType: "application/octet-stream")
        var at = 0
        while at < bytes.count {
            let end = min(bytes.count, at + (1 << 20))
            try blob.append(Array(bytes[at..<end]))
            at = end
        }
        return try blob.finish()
    }

    public static func run(megabytes: [Int], rounds: Int, directory: String, port: UInt16, durability: Durability = .full,
                           settings: ReplicationSettings = ReplicationSettings()) throws -> Result {
        let quiet = Logger(sink: MemoryLogSink(), level: .none)
        let pusherDir = directory + "/pusher", pullerDir = directory + "/puller"
        let pusherID = try Identity.createSelfSigned(.init(commonName: "bench-pusher"))
        let pullerID = try Identity.createSelfSigned(.init(commonName: "bench-puller"))
        try IdentityStore(directory: pusherDir + "/identities").save(pusherID, label: "shoal")
        // One collection per blob: the puller asks only for the one it times.
        let collections = try megabytes.map { try CollectionName(parsing: "sensors.blob\($0)mb") }

        // Preload the pusher's store: each blob (pseudo-random bytes) and a document referring to it.
        let store = try DocumentStore.open(StoreOptions(path: pusherDir + "/shoal.db", durability: .normal), logger: quiet)
        for c in collections { try store.createCollection(c) }
        let writer = LocalWriter(peer: pusherID.peerID, store: store, clock: try NodeClock(store: store))
        var references: [BlobReference] = []
        for (n, mb) in megabytes.enumerated() {
            let reference = try writeBlob(content(megabytes: mb, seed: UInt64(n)), into: store)
            references.append(reference)
            _ = try writer.putAll(collections[n], [(try DocumentID("cam"), "{\"photo\":\(reference.json.description)}")])
        }
        store.close()

        let site = directory + "/pusher.yaml"
        let text = """
            group: bench.blob
            collections:
            \(collections.map { "  - name: \($0)" }.joined(separator: "\n"))
            authenticator:
              allowedPeers: [\(pullerID.peerID)]
            replication:
              listen: 127.0.0.1:\(port)
            """
        let child = try ReplicationBenchmark.startPusher(site: site, text: text, dataDir: pusherDir, port: port)
        defer { child.stop() }

        var result = Result()
        for (n, reference) in references.enumerated() {
            var shape = Shape(megabytes: megabytes[n])
            for round in 0..<rounds {
                let dir = "\(pullerDir)-\(n)-\(round)"
                try Files.makeDirectories(dir)
                let pullStore = try DocumentStore.open(StoreOptions(path: dir + "/shoal.db", durability: durability), logger: quiet)
                let (gateway, assembly) = try ReplicationBenchmark.puller(pullerID, of: pusherID, group: "bench.blob", collection: collections[n], store: pullStore,
                                                                          settings: settings, directory: dir, port: port, logger: quiet)
                let driver = try assembly.makeDriver(host: gateway)
                let start = ContinuousClock.now
                try assembly.startLinks(driver)
                while (try? pullStore.blobIsComplete(reference.digest)) != true {
                    usleep(1000)
                    if ContinuousClock.now - start > .seconds(600) { throw ConfigurationFailure(message: "the blob did not arrive in 10 minutes") }
                }
                let seconds = (ContinuousClock.now - start).secondsDouble
                driver.stop()
                shape.mbps.append(Double(reference.length) / 1_048_576 / seconds)
                let c = gateway.counters.withLock { $0 }
                shape.wireBytesPerBlobByte = Double(c.bytesReceived + c.bytesSent) / Double(reference.length)
                shape.counters = c.blob
                pullStore.close()
                _ = system("rm -rf '\(dir)'")

                // The store's own pace: the same bytes (generated again, not timed) written here.
                let bytes = content(megabytes: megabytes[n], seed: UInt64(n))
                let storeDir = "\(pullerDir)-store-\(n)-\(round)"
                try Files.makeDirectories(storeDir)
                let local = try DocumentStore.open(StoreOptions(path: storeDir + "/shoal.db", durability: durability), logger: quiet)
                let began = ContinuousClock.now
                _ = try writeBlob(bytes, into: local)
                shape.storeMBps.append(Double(reference.length) / 1_048_576 / (ContinuousClock.now - began).secondsDouble)
                local.close()
                _ = system("rm -rf '\(storeDir)'")
            }
            result.shapes.append(shape)
        }
        child.stop()

        // The baseline: TLS bulk data of the largest blob's size, between two sessions here.
        let a = try Identity.createSelfSigned(.init(commonName: "bench-a"))
        let b = try Identity.createSelfSigned(.init(commonName: "bench-b"))
        let client = try TLSContext(role: .client, identity: a, authenticator: .trust(allowedPeers: [b.peerID]))
        let server = try TLSContext(role: .server, identity: b, authenticator: .trust(allowedPeers: [a.peerID]))
        let (c, s, _, _) = try TLSBenchmark.pair(client, server)
        defer { c.close(); s.close() }
        for _ in 0..<rounds { result.tlsMBps.append(try TLSBenchmark.bulk(c, s, total: (megabytes.max() ?? 1) << 20, bare: false)) }
        return result
    }
}
