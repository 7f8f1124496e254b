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
            let dir = TempDir()
            defer { dir.remove() }
            let path = dir.path + "/shoal.db"
            var totalAcked = 0
            var killedMidRun = 0
            for round in 0..<kills {
                let batch = Int.random(in: 1...25, using: &rng)
                let durability = Int.random(in: 0..<4, using: &rng) == 0 ? "normal" : "full"
                let delayMillis = Int.random(in: 1...60, using: &rng)
                let writer = Process()
                writer.executableURL = URL(fileURLWithPath: Shoal.binary)
                writer.arguments = ["_crash-writer", "--store", path, "--start", String(round * 1_000_000), "--count", "900000",
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
    }
}
