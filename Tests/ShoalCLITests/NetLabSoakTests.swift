import Foundation
import ShoalCore
import ShoalStore
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The lab soak: five gateways in namespaces with real Avahi and two links each, writes on all
    /// sides, a gateway partitioned (its Wi-Fi link down) every 5–30 s and a random gateway killed
    /// -9 every 3–15 s (restarted 0.5–3 s later), for SHOAL_SOAK_SECONDS (default 45; `make
    /// lab-soak` runs 600). Then the faults stop: every gateway must hold every acknowledged
    /// write, the same documents, and a store that passes `integrity_check`.
    @Suite("Network lab soak", .serialized, .enabled(if: NetLab.available, "needs root, iproute2, dbus, avahi-daemon and avahi-utils"))
    struct NetLabSoakTests {
        @Test("five gateways under partitions and kill -9 with writes on all sides: all converge, nothing acknowledged lost")
        func soak() throws {
            let seconds = Double(ProcessInfo.processInfo.environment["SHOAL_SOAK_SECONDS"] ?? "") ?? 45
            let seed = UInt64(ProcessInfo.processInfo.environment["SHOAL_SOAK_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970)
            print("LAB soak: \(Int(seconds)) s, seed \(seed) (SHOAL_SOAK_SEED=\(seed) replays the choices, not the timing)")
            var rng = SeededRandom(seed: seed)
            let lab = try NetLab(nodes: 5)
            defer { lab.teardown() }
            let ids = try NetLabTests.identities(lab)
            let sites = try (1...5).map { try NetLabTests.site(lab, "s\($0)", group: "lab.soak", allowed: ids, extra: "  maxConnectionCount: 2") }
            let gateways = try lab.nodes.enumerated().map { i, n in try lab.startGateway(n, site: sites[i]) }
            #expect(eventuallyBlocking(within: 40, every: 0.25) { gateways.allSatisfy { $0.counter("connectedPeers") >= 1 } }, "the mesh formed")

            var acked: [String: String] = [:]
            var down: Set<Int> = []           // killed, to restart at restartAt
            var restartAt: [Int: Date] = [:]
            var partitioned: Int?
            var partitions = 0, kills = 0, writes = 0, refused = 0
            let start = Date()
            var nextPartition = start.addingTimeInterval(Double.random(in: 5...30, using: &rng))
            var nextKill = start.addingTimeInterval(Double.random(in: 3...15, using: &rng))
            while Date().timeIntervalSince(start) < seconds {
                let now = Date()
                if now >= nextPartition {
                    if let p = partitioned { try lab.link(lab.nodes[p], up: true); partitioned = nil } else {
                        let p = Int.random(in: 0..<5, using: &rng)
                        try lab.link(lab.nodes[p], up: false)
                        partitioned = p
                        partitions += 1
                    }
                    nextPartition = now.addingTimeInterval(Double.random(in: 5...30, using: &rng))
                }
                if now >= nextKill {
                    let k = Int.random(in: 0..<5, using: &rng)
                    if !down.contains(k) {
                        gateways[k].kill9()
                        down.insert(k)
                        restartAt[k] = now.addingTimeInterval(Double.random(in: 0.5...3, using: &rng))
                        kills += 1
                    }
                    nextKill = now.addingTimeInterval(Double.random(in: 3...15, using: &rng))
                }
                for k in down where restartAt[k]! <= now {
                    try gateways[k].start()
                    down.remove(k)
                }
                // Writes on all sides: new documents, and edits of a few shared ones (conflicts).
                let w = Int.random(in: 0..<5, using: &rng)
                if !down.contains(w) {
                    let shared = Int.random(in: 0..<10, using: &rng) == 0
                    let id = shared ? "shared-\(Int.random(in: 0..<5, using: &rng))" : "w\(w + 1)-\(writes)"
                    let body = "{\"by\":\(w + 1),\"n\":\(writes)}"
                    writes += 1
                    if gateways[w].put(id, body) {
                        if !shared { acked[id] = body }
                    } else { refused += 1 }
                }
                Thread.sleep(forTimeInterval: 0.05)
            }
            if let p = partitioned { try lab.link(lab.nodes[p], up: true) }
            for k in down { try gateways[k].start() }

            let quiet = Date()
            var counts: [Int] = []
            let converged = eventuallyBlocking(within: 180, every: 0.5) {
                counts = gateways.map { $0.documentCount() }
                return counts.allSatisfy { $0 >= acked.count && $0 == counts[0] }
            }
            #expect(converged, "documents per gateway \(counts), acknowledged \(acked.count) (seed \(seed))")
            let settle = Date().timeIntervalSince(quiet)
            for g in gateways { g.stop() }
            for (i, n) in lab.nodes.enumerated() {
                let store = try DocumentStore.open(StoreOptions(path: n.dir + "/data/shoal.db"), logger: Logger(sink: MemoryLogSink(), level: .none))
                defer { store.close() }
                #expect(try store.integrityProblems(full: true).isEmpty, "g\(i + 1): integrity_check fails (seed \(seed))")
                let collection = try CollectionName(parsing: "sensors.readings")
                var missing = 0
                for id in acked.keys where try store.get(collection, id: DocumentID(id)) == nil { missing += 1 }
                #expect(missing == 0, "g\(i + 1) lacks \(missing) of \(acked.count) acknowledged writes (seed \(seed))")
            }
            print(String(format: "LAB soak: %.0f s with %d partitions and %d kill -9s, %d writes (%d acknowledged new documents, %d refused while a gateway was down or busy); all 5 converged %.1f s after the faults stopped, every acknowledged write on every gateway, integrity_check ok",
                         quiet.timeIntervalSince(start), partitions, kills, writes, acked.count, refused, settle))
        }
    }
}
