import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// Updates over the mesh with real processes: three `shoal run` gateways, each under a small
    /// supervisor that does what the unit does under systemd (ExecStartPre=`shoal update
    /// boot-check` by the packaged binary, ExecStart=`<installDir>/current/shoal run`,
    /// Restart=on-failure). A good release (0.2.0: a copy of this build, versioned by its
    /// release directory) is taken and confirmed everywhere; a broken one (0.3.0: an executable
    /// that exits 1 at once) is installed, crashes, and is rolled back everywhere; the status
    /// documents, read from one gateway, show both.
    /// The binary is published on one gateway only: the others fetch it through the mesh as a
    /// blob (chunk by chunk, verified), as they get the manifest and each other's status documents.
    @Suite("Releases between processes", .serialized)
    struct ReleaseProcessTests {
        /// What systemd does for the unit, in a thread: boot check, start `current/shoal`,
        /// restart after a failure, stop when told.
        final class Supervisor: @unchecked Sendable {  // `process`, `exits` and `stopping` only under `lock`
            let name: String, installDir: String, dataDir: String, site: String
            let lock = NSLock()
            var process: Process?
            var exits: [Int32] = []
            var bootChecks: [String] = []
            var stopping = false
            let log: FileHandle
            var thread: Thread?

            init(name: String, installDir: String, dataDir: String, site: String, logPath: String) throws {
                self.name = name
                self.installDir = installDir
                self.dataDir = dataDir
                self.site = site
                FileManager.default.createFile(atPath: logPath, contents: nil)
                log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
            }

            var socket: String { dataDir + "/control.sock" }

            func start() {
                let t = Thread { [self] in loop() }
                thread = t
                t.start()
            }

            func loop() {
                for _ in 0..<20 {
                    if lock.withLock({ stopping }) { return }
                    let check = (try? Shoal.run(["update", "boot-check", "--dir", installDir, "--packaged", Shoal.binary, "--confirm-seconds", "60"]))
                    lock.withLock { bootChecks.append(check?.stdout ?? "boot check failed: \(check?.stderr ?? "")") }
                    let p = Process()
                    p.executableURL = URL(fileURLWithPath: installDir + "/current/shoal")
                    p.arguments = ["run", "--board", "sim", "--data-dir", dataDir, "--config", site, "--log-level", "verbose"]
                    p.standardOutput = log
                    p.standardError = log
                    do { try p.run() } catch {
                        lock.withLock { exits.append(-1) }
                        Thread.sleep(forTimeInterval: 0.5)
                        continue
                    }
                    lock.withLock { process = p }
                    p.waitUntilExit()
                    let status = p.terminationStatus
                    lock.withLock { exits.append(status); process = nil }
                    // Restart=on-failure: a clean exit (or our stop) ends it; anything else restarts.
                    if status == 0 || lock.withLock({ stopping }) { return }
                    Thread.sleep(forTimeInterval: 0.3)
                }
            }

            func stop() {
                let p = lock.withLock { () -> Process? in stopping = true; return process }
                if let p, p.isRunning { p.terminate() }
                let deadline = Date().addingTimeInterval(30)
                while thread?.isFinished == false && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
                try? log.close()
            }

            func cli(_ args: [String]) throws -> Shoal.Result { try Shoal.run(args + ["--socket", socket]) }
        }

        static func statuses(_ s: Supervisor) -> [String: [String: Any]] {
            guard let r = try? s.cli(["release", "status", "--json"]), r.status == 0,
                  let j = try? Shoal.json(r) as? [String: Any], let list = j["gateways"] as? [[String: Any]] else { return [:] }
            var out: [String: [String: Any]] = [:]
            for g in list { if let p = g["peer"] as? String { out[p] = g } }
            return out
        }

        static func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if condition() { return true }
                Thread.sleep(forTimeInterval: 0.5)
            }
            return condition()
        }

        @Test("a release reaches three gateways and is confirmed; a broken one is rolled back everywhere; status documents show both")
        func rollOutAndRollBack() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let names = ["a", "b", "c"]
            var ids: [String: String] = [:]
            for n in names { ids[n] = try ReplicationProcessTests.peerID(base.path + "/\(n)") }
            let key = try Shoal.json(Shoal.run(["release", "keygen", "--out", base.path + "/release.key", "--json"])) as? [String: Any]
            let keyHex = try #require(key?["hex"] as? String)
            let port = 40_000 + Int(getpid() % 15_000)
            let ports = ["a": port, "b": port + 1, "c": port + 2]
            var gateways: [String: Supervisor] = [:]
            for n in names {
                let others = names.filter { $0 != n }
                let site = try ReplicationProcessTests.writeSite(
                    in: base.path, n, group: "test.release", allow: others.map { ids[$0]! },
                    replication: ["listen: 127.0.0.1:\(ports[n]!)", "peers: [\(others.map { "127.0.0.1:\(ports[$0]!)" }.joined(separator: ", "))]"])
                try "updates:\n  releaseKeys: [\(keyHex)]\n  installDir: \(base.path)/\(n)/updates\n  confirmSeconds: 60\n  holdOffSeconds: 0\n"
                    .appendLine(toFile: site)
                gateways[n] = try Supervisor(name: n, installDir: base.path + "/\(n)/updates", dataDir: base.path + "/\(n)", site: site,
                                             logPath: base.path + "/\(n).log")
            }
            defer { for g in gateways.values { g.stop() } }
            for n in names { gateways[n]!.start() }
            let a = gateways["a"]!
            #expect(Self.waitFor(60) { Self.statuses(a).count == 3 }, "status documents of every gateway reach a: \(Self.statuses(a).keys)")

            // 0.2.0: this build, signed offline, published on a only; b and c fetch it through the mesh.
            func release(_ version: String, binary: String) throws {
                let manifest = base.path + "/\(version).json"
                let signed = try Shoal.run(["release", "sign", "--key", base.path + "/release.key", "--binary", binary, "--version", version, "--out", manifest])
                #expect(signed.status == 0, "\(signed.stderr)")
                let published = try a.cli(["release", "publish", manifest, "--binary", binary])
                #expect(published.status == 0, "\(published.stderr)")
            }
            // A manifest signed by a key the site file does not list is refused at publish.
            _ = try Shoal.run(["release", "keygen", "--out", base.path + "/stranger.key"])
            let forged = base.path + "/forged.json"
            #expect(try Shoal.run(["release", "sign", "--key", base.path + "/stranger.key", "--binary", Shoal.binary, "--version", "9.0.0", "--out", forged]).status == 0)
            let refused = try a.cli(["release", "publish", forged, "--binary", Shoal.binary])
            #expect(refused.status == 6 && refused.stderr.contains("not a release key this gateway trusts"), "\(refused.status) \(refused.stderr)")

            try release("0.2.0", binary: Shoal.binary)
            let confirmed = Self.waitFor(240) {
                let s = Self.statuses(a)
                return s.count == 3 && s.values.allSatisfy { $0["running"] as? String == "0.2.0" && $0["outcome"] as? String == "confirmed" }
            }
            #expect(confirmed, "0.2.0 confirmed everywhere: \(Self.statuses(a))")
            // b and c hold the binary as a complete blob: it came through the mesh.
            let m020 = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: base.path + "/0.2.0.json"))) as? [String: Any])
            let digest020 = try #require(m020["sha256"] as? String)
            for n in ["b", "c"] {
                let ls = try gateways[n]!.cli(["blob", "ls", "--json"])
                #expect(ls.status == 0 && ls.stdout.contains(digest020) && ls.stdout.contains("complete"), "\(n): \(ls.stdout.prefix(400)) \(ls.stderr)")
                #expect(!FileManager.default.fileExists(atPath: base.path + "/\(n)/updates/blobs/" + digest020))
            }

            // 0.3.0: an executable that exits 1 at once, as a binary that crashes at start does.
            try release("0.3.0", binary: "/bin/false")
            let rolledBack = Self.waitFor(240) {
                let s = Self.statuses(a)
                return s.count == 3 && s.values.allSatisfy {
                    $0["running"] as? String == "0.2.0" && $0["attempted"] as? String == "0.3.0" && $0["outcome"] as? String == "rolled-back"
                }
            }
            let final = Self.statuses(a)
            #expect(rolledBack, "0.3.0 rolled back everywhere: \(final)")
            for s in final.values { #expect((s["reason"] as? String)?.contains("0.3.0 stopped before it confirmed") == true, "\(s)") }
            for n in names {
                let g = gateways[n]!
                let exits = g.lock.withLock { g.exits }
                // 75 twice (each install), 1 once (the broken binary's one start), no more.
                #expect(exits.filter { $0 == 75 }.count == 2 && exits.filter { $0 == 1 }.count == 1, "\(n) exits: \(exits)")
                let checks = g.lock.withLock { g.bootChecks }.joined()
                #expect(checks.contains("rolled back from 0.3.0 to releases/0.2.0"), "\(n) boot checks: \(checks)")
            }
        }
    }
}

extension String {
    func appendLine(toFile path: String) throws {
        let h = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? h.close() }
        h.seekToEndOfFile()
        h.write(self.data(using: .utf8)!)
    }
}
