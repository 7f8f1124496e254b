import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalRuntime
import ShoalStore
import ShoalTLS

/// `shoal bench latency`: how long after an import starts on one gateway its peer holds all of
/// it. The writer is a real `shoal run` child (listening, its store empty); the documents go in
/// through its control socket as `shoal doc import` sends them (500 to a request, each request one
/// transaction). Its peer is a replication node in this process (durability full) that dialled it
/// and is live. Per import: the import's own time (from the first request to the last answer) and
/// the time until the peer's store holds the last document, both from the same start.
public enum LatencyBenchmark {
    public struct Sample: Sendable {
        public var importMillis: Double
        public var arrivalMillis: Double
    }

    public struct Result: Sendable {
        /// Samples per import size, in the order asked.
        public var bySize: [(documents: Int, samples: [Sample])]
    }

    public static func median(_ xs: [Double]) -> Double { StoreBenchmark.median(xs) }

    /// `sizes`: documents per import (say 1,000 and 10,000); each imported `rounds` times.
    public static func run(sizes: [Int], rounds: Int, directory: String, port: UInt16,
                           progress: @escaping @Sendable (String) -> Void) throws -> Result {
        let quiet = Logger(sink: MemoryLogSink(), level: .none)
        let writerDir = directory + "/writer", peerDir = directory + "/peer"
        try Files.makeDirectories(writerDir)
        try Files.makeDirectories(peerDir)
        let writerID = try Identity.createSelfSigned(.init(commonName: "bench-writer"))
        let peerID = try Identity.createSelfSigned(.init(commonName: "bench-peer"))
        try IdentityStore(directory: writerDir + "/identities").save(writerID, label: "shoal")
        let readings = try CollectionName(parsing: "sensors.readings")
        let child = try ReplicationBenchmark.startPusher(site: directory + "/writer.yaml", text: """
            group: bench.latency
            collections:
              - name: sensors.readings
            authenticator:
              allowedPeers: [\(peerID.peerID)]
            replication:
              listen: 127.0.0.1:\(port)
            """, dataDir: writerDir, port: port)
        defer { child.stop() }
        let client = try ControlClient(path: writerDir + "/control.sock")

        let store = try DocumentStore.open(StoreOptions(path: peerDir + "/shoal.db", durability: .full), logger: quiet)
        defer { store.close() }
        let (gateway, assembly) = try ReplicationBenchmark.puller(peerID, of: writerID, group: "bench.latency", collection: readings, store: store,
                                                                  settings: ReplicationSettings(), directory: peerDir, port: port, logger: quiet)
        _ = gateway
        let driver = try assembly.makeDriver(host: gateway)
        try assembly.startLinks(driver)
        defer { driver.stop() }

        var written = 0
        /// Imports `count` documents (a refused request throws) and waits for the peer to hold them.
        func once(_ count: Int) throws -> Sample {
            let bodies = try (0..<count).map { i -> JSONValue in try JSONValue.parse(StoreBenchmark.body(written + i)) }
            let target = store.lastSequence + Int64(count)
            let start = ContinuousClock.now
            var i = 0
            while i < count {
                let end = min(i + 500, count)
                let batch = (i..<end).map { k -> JSONValue in ["id": .string("lat-\(written + k)"), "body": bodies[k]] }
                _ = try client.call(["op": "doc.putMany", "collection": "sensors.readings", "documents": .array(batch)])
                i = end
            }
            let imported = ContinuousClock.now
            while store.lastSequence < target {
                usleep(500)
                if ContinuousClock.now - start > .seconds(300) { throw ConfigurationFailure(message: "the peer did not receive an import of \(count) in 5 minutes") }
            }
            let arrived = ContinuousClock.now
            written += count
            return Sample(importMillis: (imported - start).secondsDouble * 1000, arrivalMillis: (arrived - start).secondsDouble * 1000)
        }
        // The link is up and live once a first document got across.
        _ = try once(10)
        var result = Result(bySize: [])
        for size in sizes {
            var samples: [Sample] = []
            for round in 0..<rounds {
                progress("  import of \(size), round \(round + 1)/\(rounds)")
                samples.append(try once(size))
                usleep(300_000)  // let acknowledgements and checkpoints settle between imports
            }
            result.bySize.append((size, samples))
        }
        return result
    }
}
