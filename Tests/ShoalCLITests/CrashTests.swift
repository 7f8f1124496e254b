import Foundation
import ShoalCore
import ShoalStore
import ShoalTesting
import Testing

extension ProcessSuites {
    @Suite("Crash safety", .serialized)
    struct CrashTests {
        /// Kills a writer with SIGKILL at random moments (during open, migration, batches, commits)
        /// at least 100 times. After every kill the store is reopened: every write the writer
        /// acknowledged (printed after its commit returned) must be there with its body, and the file
        /// must pass SQLite's integrity check. The seed is printed so a failure replays.
        @Test("every acknowledged write survives SIGKILL at random points, and the file stays sound")
        func killedWriterLosesNothingAcknowledged() throws {
            let kills = Int(ProcessInfo.processInfo.environment["SHOAL_CRASH_KILLS"] ?? "") ?? 120
            let seed = UInt64(ProcessInfo.processInfo.environment["SHOAL_CRASH_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970)
            print("crash test: \(kills) kills, seed \(seed) (SHOAL_CRASH_SEED=\(seed) replays it)")
            var rng = SeededRandom(seed: seed)
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let path = dir.path + "/shoal.db"
            var totalAcked = 0
            var killedMidRun = 0
            for round in 0..<kills {
                let batch = Int.random(in: 1...25, using: &rng)
                let durability = Int.random(in: 0..<4, using: &rng) == 0 ? "normal" : "full"
                let delayMillis = Int.random(in: 1...60, using: &rng)
                let writer = Process()
                writer.executableURL = URL(fileURLWithPath: Shoal.crashWriter)
                writer.arguments = ["--store", path, "--start", String(round * 1_000_000), "--count", "900000",
                                    "--batch", String(batch), "--durability", durability]
                let out = Pipe()
                writer.standardOutput = out
                writer.standardError = FileHandle.nullDevice
                try writer.run()
                Thread.sleep(forTimeInterval: Double(delayMillis) / 1000)
                kill(writer.processIdentifier, SIGKILL)
                writer.waitUntilExit()
                if writer.terminationReason == .uncaughtSignal { killedMidRun += 1 }
                let acked = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                    .split(separator: "\n").compactMap { line -> Int? in line.hasPrefix("ack ") ? Int(line.dropFirst(4)) : nil }
                totalAcked += acked.count

                // With durability normal, a *power loss* may drop the last commits; a process crash
                // (this test) must not, in either mode.
                let store = try DocumentStore.open(StoreOptions(path: path), logger: Logger(sink: MemoryLogSink(), level: .none))
                #expect(store.openReport.movedAsideTo == nil, "round \(round): store was found corrupt (seed \(seed))")
                for i in acked {
                    let doc = try store.get(.default, id: DocumentID("w-\(i)"))
                    #expect(doc?.body == "{\"i\":\(i)}", "round \(round): acknowledged write w-\(i) missing (seed \(seed))")
                    if doc == nil { break }
                }
                if round % 10 == 9 || round == kills - 1 {
                    #expect(try store.integrityProblems(full: true).isEmpty, "round \(round): integrity_check failed (seed \(seed))")
                }
                store.close()
            }
            print("crash test: \(kills) kills (\(killedMidRun) while running), \(totalAcked) acknowledged writes, all present")
            #expect(killedMidRun >= 100)
            #expect(totalAcked > 0)
        }

        /// Power loss below SQLite, done to the files a SIGKILLed writer left behind: the WAL cut at a
        /// random byte (the disk kept a prefix), a 4 KB block of it zeroed (a torn write), bytes of it
        /// flipped, the main file cut at a page boundary, or pages of it zeroed. Reopening must either
        /// recover — `integrity_check` passes and the documents present are exactly a prefix of the
        /// writer's order, each with its body — or move the file aside and start empty. Anything else
        /// (a hole, a wrong body, a file that opens but fails the check) is silently wrong and fails.
        @Test("power loss below SQLite (WAL cut, torn or flipped; main file cut or zeroed): a prefix recovers or the file is moved aside")
        func powerLossRecoversOrMovesAside() throws {
            let rounds = Int(ProcessInfo.processInfo.environment["SHOAL_POWERLOSS_ROUNDS"] ?? "") ?? 100
            let seed = UInt64(ProcessInfo.processInfo.environment["SHOAL_CRASH_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970)
            print("power-loss test: \(rounds) rounds, seed \(seed) (SHOAL_CRASH_SEED=\(seed) replays the choices)")
            var rng = SeededRandom(seed: seed)
            let faults = ["wal-cut", "wal-torn", "wal-flip", "main-cut", "main-zero"]
            var outcome: [String: (recovered: Int, movedAside: Int, lostAcked: Int)] = [:]
            for round in 0..<rounds {
                let dir = TemporaryDirectory()
                defer { dir.remove() }
                let path = dir.path + "/shoal.db"
                let writer = Process()
                writer.executableURL = URL(fileURLWithPath: Shoal.crashWriter)
                // A first run fills the main file (closing checkpoints the WAL), a second one is killed
                // with its commits in the WAL.
                let firstCount = Int.random(in: 50...400, using: &rng)
                let first = try Shoal.run(["--store", path, "--start", "0", "--count", String(firstCount), "--batch", "25"], executable: Shoal.crashWriter)
                #expect(first.status == 0)
                writer.arguments = ["--store", path, "--start", "100000", "--count", "900000",
                                    "--batch", String(Int.random(in: 1...25, using: &rng)), "--durability", "full"]
                let out = Pipe()
                writer.standardOutput = out
                writer.standardError = FileHandle.nullDevice
                try writer.run()
                // Killed 20–120 ms after its first acknowledgement (so its WAL holds commits, however
                // slowly it starts: under a sanitizer it takes far longer to open the store).
                var text = ""
                while !text.contains("ack ") {
                    let chunk = out.fileHandleForReading.availableData
                    if chunk.isEmpty { break }
                    text += String(decoding: chunk, as: UTF8.self)
                }
                Thread.sleep(forTimeInterval: Double(Int.random(in: 20...120, using: &rng)) / 1000)
                kill(writer.processIdentifier, SIGKILL)
                writer.waitUntilExit()
                text += String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                let acked = text.split(separator: "\n").compactMap { line -> Int? in line.hasPrefix("ack ") ? Int(line.dropFirst(4)) : nil }

                let fault = faults[round % faults.count]
                let target = fault.hasPrefix("wal") ? path + "-wal" : path
                let size = Int((try? FileManager.default.attributesOfItem(atPath: target)[.size] as? Int) ?? 0)
                let fd = open(target, O_RDWR)
                #expect(fd >= 0, "round \(round): no \(target)")
                if fd >= 0 && size > 4096 {
                    switch fault {
                    case "wal-cut": _ = ftruncate(fd, off_t(Int.random(in: 0..<size, using: &rng)))
                    case "wal-torn", "main-zero":
                        let pages = fault == "main-zero" ? Int.random(in: 1...3, using: &rng) : 1
                        let zeros = [UInt8](repeating: 0, count: 4096 * pages)
                        let at = Int.random(in: 0..<(size / 4096), using: &rng) * 4096
                        _ = zeros.withUnsafeBytes { pwrite(fd, $0.baseAddress, min(zeros.count, size - at), off_t(at)) }
                    case "wal-flip":
                        for _ in 0..<Int.random(in: 1...8, using: &rng) {
                            var byte: UInt8 = 0
                            let at = off_t(Int.random(in: 0..<size, using: &rng))
                            _ = pread(fd, &byte, 1, at)
                            byte ^= UInt8(1 << Int.random(in: 0..<8, using: &rng))
                            _ = pwrite(fd, &byte, 1, at)
                        }
                    default: _ = ftruncate(fd, off_t(Int.random(in: 1..<(size / 4096), using: &rng) * 4096))
                    }
                }
                if fd >= 0 { close(fd) }

                let store = try DocumentStore.open(StoreOptions(path: path), logger: Logger(sink: MemoryLogSink(), level: .none))
                defer { store.close() }
                var o = outcome[fault] ?? (0, 0, 0)
                if store.openReport.movedAsideTo != nil {
                    #expect(try store.stats().documents == 0)
                    o.movedAside += 1
                } else {
                    #expect(try store.integrityProblems(full: true).isEmpty, "round \(round) (\(fault)): opened, but integrity_check fails (seed \(seed))")
                    // The first run's documents were all checkpointed: all must be there. The second run
                    // wrote in order, one transaction per batch: what is there must be a prefix of its
                    // writes (never a hole), each with its body.
                    for i in 0..<firstCount {
                        let doc = try store.get(.default, id: DocumentID("w-\(i)"))
                        #expect(doc?.body == "{\"i\":\(i)}", "round \(round) (\(fault)): checkpointed w-\(i) is \(doc?.body ?? "missing") (seed \(seed))")
                        if doc?.body != "{\"i\":\(i)}" { break }
                    }
                    var missing: Int? = nil
                    for i in 100_000..<((acked.max() ?? 99_999) + 26) {
                        let doc = try store.get(.default, id: DocumentID("w-\(i)"))
                        if let doc {
                            #expect(missing == nil, "round \(round) (\(fault)): w-\(i) present but w-\(missing ?? 0) missing: a hole (seed \(seed))")
                            #expect(doc.body == "{\"i\":\(i)}", "round \(round) (\(fault)): w-\(i) has a wrong body (seed \(seed))")
                            if missing != nil || doc.body != "{\"i\":\(i)}" { break }
                        } else if missing == nil {
                            missing = i
                        }
                    }
                    o.recovered += 1
                    o.lostAcked += try acked.filter { try store.get(.default, id: DocumentID("w-\($0)")) == nil }.count
                }
                outcome[fault] = o
            }
            for f in faults {
                let o = outcome[f] ?? (0, 0, 0)
                print("power-loss test: \(f): \(o.recovered) recovered a prefix (\(o.lostAcked) acknowledged writes lost with the cut-off tail), \(o.movedAside) moved aside")
            }
        }
    }
}
