import Foundation
import ShoalCore
import ShoalStore
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The crash campaign during replication: three `shoal run` processes in a line (a – b – c, static
    /// peers on loopback, so a's writes reach c only through b and back), writes going on at both
    /// ends, and a gateway SIGKILLed at a random moment and restarted, over and over. Halfway through,
    /// b's store is damaged while it is down (power loss below SQLite): b must move it aside and be
    /// refilled by its neighbours. At the end every acknowledged write is on every gateway, each store
    /// passes `integrity_check`, and only b's deliberately damaged file was moved aside.
    @Suite("Crash safety during replication", .serialized)
    struct ReplicationCrashTests {
        /// A gateway that keeps its data directory across kills.
        final class Node {
            let name: String
            let dir: String
            let args: [String]
            var process: Process?
            /// Every process started, so none outlives the test whatever happens.
            var started: [Process] = []
            var log: FileHandle
            init(name: String, dir: String, site: String) throws {
                self.name = name
                self.dir = dir
                args = ["run", "--board", "sim", "--data-dir", dir, "--config", site, "--log-level", "verbose"]
                FileManager.default.createFile(atPath: dir + ".log", contents: nil)
                log = try FileHandle(forWritingTo: URL(fileURLWithPath: dir + ".log"))
            }
            var socket: String { dir + "/control.sock" }
            func start() throws {
                let p = Process()
                p.executableURL = URL(fileURLWithPath: Shoal.binary)
                p.arguments = args
                p.standardOutput = FileHandle.nullDevice
                p.standardError = log
                try p.run()
                process = p
                started.append(p)
                let deadline = Date().addingTimeInterval(20)
                while Date() < deadline, p.isRunning {
                    if (try? Shoal.run(["status", "--socket", socket], timeout: 5).status) == 0 { return }
                    Thread.sleep(forTimeInterval: 0.02)
                }
                Issue.record("\(name) did not come up after a restart")
            }
            func kill9() {
                guard let p = process else { return }
                kill(p.processIdentifier, SIGKILL)
                p.waitUntilExit()
                process = nil
            }
            func stop() {
                if let p = process {
                    kill(p.processIdentifier, SIGTERM)
                    p.waitUntilExit()
                    process = nil
                }
                for p in started where p.isRunning { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() }
            }
            func documents() -> Int? {
                guard let r = try? Shoal.run(["status", "--json", "--socket", socket], timeout: 5), r.status == 0,
                      let j = try? Shoal.json(r) as? [String: Any], let store = j["store"] as? [String: Any] else { return nil }
                return store["documents"] as? Int
            }
        }

        @Test("SIGKILL at random moments while three gateways replicate in a line: every acknowledged write everywhere, stores sound, a damaged store refilled")
        func killsDuringReplication() throws {
            let kills = Int(ProcessInfo.processInfo.environment["SHOAL_CRASH_REPLICATION_KILLS"] ?? "") ?? 40
            let seed = UInt64(ProcessInfo.processInfo.environment["SHOAL_CRASH_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970)
            print("replication crash test: \(kills) kills, seed \(seed) (SHOAL_CRASH_SEED=\(seed) replays the choices)")
            var rng = SeededRandom(seed: seed)
            let base = TemporaryDirectory()
            defer { base.remove() }
            let ids = try ["a", "b", "c"].map { try ReplicationProcessTests.peerID(base.path + "/\($0)") }
            let port = 30_000 + Int(getpid() % 10_000)
            func site(_ i: Int) throws -> String {
                let peers = i == 0 ? "" : "  peers: [127.0.0.1:\(port + i - 1)]"
                let path = base.path + "/site-\(i).yaml"
                try """
                group: test.crash
                collections:
                  - name: sensors.readings
                authenticator:
                  allowedPeers: [\(ids.joined(separator: ", "))]
                replication:
                  listen: 127.0.0.1:\(port + i)
                \(peers)
                mesh:
                  backoffMillis: 200
                """.write(toFile: path, atomically: true, encoding: .utf8)
                return path
            }
            let nodes = try (0..<3).map { try Node(name: ["a", "b", "c"][$0], dir: base.path + "/" + ["a", "b", "c"][$0], site: try site($0)) }
            for n in nodes { try n.start() }
            defer { for n in nodes { n.stop() } }

            // Writes at both ends (b only relays, so damaging its store loses nothing acknowledged).
            var acked: [String: String] = [:]
            var sequence = 0
            func writeBatch(on n: Node) {
                let count = Int.random(in: 1...60, using: &rng)
                var lines = ""
                var batch: [(String, String)] = []
                for _ in 0..<count {
                    let id = "\(n.name)-\(sequence)"
                    let body = "{\"from\":\"\(n.name)\",\"seq\":\(sequence),\"pad\":\"\(String(repeating: "p", count: Int.random(in: 10...900, using: &rng)))\"}"
                    sequence += 1
                    lines += "\(id)\t\(body)\n"
                    batch.append((id, body))
                }
                if (try? Shoal.run(["doc", "import", "sensors.readings", "-", "--socket", n.socket], stdin: lines, timeout: 10).status) == 0 {
                    for (id, body) in batch { acked[id] = body }
                }
            }
            var killed = 0
            var damaged = 0
            var nextKill = Date().addingTimeInterval(Double(Int.random(in: 100...800, using: &rng)) / 1000)
            let started = Date()
            while killed < kills {
                writeBatch(on: nodes[Int.random(in: 0...1, using: &rng) * 2])
                guard Date() >= nextKill else { continue }
                let victim = nodes[Int.random(in: 0..<3, using: &rng)]
                victim.kill9()
                killed += 1
                if victim.name == "b" && damaged == 0 && killed >= kills / 2 {
                    // Power loss below SQLite on b: its WAL never reached the disk and its first two
                    // pages were torn (zeroed).
                    let path = victim.dir + "/shoal.db"
                    unlink(path + "-wal")
                    unlink(path + "-shm")
                    let fd = open(path, O_WRONLY)
                    let zeros = [UInt8](repeating: 0, count: 4096 * 2)
                    _ = zeros.withUnsafeBytes { pwrite(fd, $0.baseAddress, zeros.count, 0) }
                    close(fd)
                    damaged += 1
                }
                try victim.start()
                nextKill = Date().addingTimeInterval(Double(Int.random(in: 100...800, using: &rng)) / 1000)
            }
            let campaign = Date().timeIntervalSince(started)

            // Quiet: every gateway converges on the same documents, a superset of the acknowledged.
            let settleStart = Date()
            var counts: [Int?] = []
            let converged = eventuallyBlocking(within: 120, every: 0.5) {
                counts = nodes.map { $0.documents() }
                return counts.allSatisfy { ($0 ?? -1) >= acked.count && $0 == counts[0] }
            }
            #expect(converged, "documents per gateway \(counts), acknowledged \(acked.count) (seed \(seed))")
            let settle = Date().timeIntervalSince(settleStart)
            for n in nodes { n.stop() }

            for n in nodes {
                let store = try DocumentStore.open(StoreOptions(path: n.dir + "/shoal.db"), logger: Logger(sink: MemoryLogSink(), level: .none))
                defer { store.close() }
                #expect(store.openReport.movedAsideTo == nil)
                #expect(try store.integrityProblems(full: true).isEmpty, "\(n.name): integrity_check fails (seed \(seed))")
                let collection = try CollectionName(parsing: "sensors.readings")
                var lost = 0
                func parsed(_ text: String?) -> NSDictionary? {
                    text.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? NSDictionary }
                }
                for (id, body) in acked where parsed(try store.get(collection, id: DocumentID(id))?.body) != parsed(body) { lost += 1 }
                #expect(lost == 0, "\(n.name) lacks \(lost) of \(acked.count) acknowledged writes (seed \(seed))")
                let aside = (try? FileManager.default.contentsOfDirectory(atPath: n.dir))?.filter { $0.hasPrefix("shoal.db.corrupt-") && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") } ?? []
                #expect(aside.count == (n.name == "b" ? damaged : 0), "\(n.name): moved aside \(aside)")
            }
            print(String(format: "replication crash test: %d kills in %.0f s (b's store damaged %d time(s), moved aside and refilled), %d acknowledged writes on all 3 gateways after %.1f s of quiet, integrity_check ok", killed, campaign, damaged, acked.count, settle))
            #expect(killed == kills)
        }
    }
}
