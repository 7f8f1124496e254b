import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// `shoal backup` from a running gateway while it writes, and `shoal restore` on a stopped one
    /// that then catches up from its peer without reviving what the peer deleted.
    @Suite("Backup and restore between processes", .serialized)
    struct BackupProcessTests {
        static let collection = "sensors.readings"

        static func state(_ g: RunningGateway, _ id: String) -> String {
            guard let r = try? g.cli(["doc", "get", collection, id]) else { return "error" }
            if r.status == 0 { return "live" }
            return r.stderr.contains("is deleted") ? "deleted" : "absent"
        }

        @Test("backup while writing; restore refused while running and for a bad file; after a restore the gateway converges: deletes stay deleted, new documents arrive")
        func backupRestoreCatchUp() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let aDir = base.path + "/a", bDir = base.path + "/b"
            let aID = try ReplicationProcessTests.peerID(aDir), bID = try ReplicationProcessTests.peerID(bDir)
            let port = 20_000 + Int((getpid() + 7) % 20_000)
            func site(_ name: String, allow: String, extra: String) throws -> String {
                try ReplicationProcessTests.writeSite(in: base.path, name, group: "test.backup", allow: [allow], replication: [extra], mesh: nil)
            }
            let bSite = try site("b", allow: aID, extra: "listen: 127.0.0.1:\(port)")
            let aSite = try site("a", allow: bID, extra: "peers: [127.0.0.1:\(port)]")
            let b = try RunningGateway(dataDir: bDir, extraArgs: ["--config", bSite])
            var a = try RunningGateway(dataDir: aDir, extraArgs: ["--config", aSite])
            defer { _ = a.stop(); _ = b.stop() }
            #expect(try a.cli(["doc", "put", Self.collection, "doomed", #"{"v":"a"}"#]).status == 0)
            #expect(eventuallyBlocking(within: 30) { Self.state(b, "doomed") == "live" }, "doomed never reached b")

            // A writer on a while the backup runs (relative path: resolved against the CLI's cwd).
            let writer = BackgroundWriter(socket: a.socket)
            Thread.sleep(forTimeInterval: 0.3)
            let backup = try Shoal.run(["backup", "a-backup.db", "--socket", a.socket], cwd: base.path)
            let writtenDuring = writer.stop()
            #expect(writtenDuring > 0)
            #expect(backup.status == 0, "backup: \(backup.stderr)")
            #expect(backup.stdout.contains("MB/s") && backup.stdout.contains("pages"), "\(backup.stdout)")
            let file = base.path + "/a-backup.db"
            let attributes = try FileManager.default.attributesOfItem(atPath: file)
            #expect((attributes[.posixPermissions] as? Int) == 0o600)
            Thread.sleep(forTimeInterval: 0.3)

            // After the backup: b deletes doomed and writes new-on-b; a writes after-backup-a.
            #expect(try b.cli(["doc", "delete", Self.collection, "doomed"]).status == 0)
            #expect(try b.cli(["doc", "put", Self.collection, "new-on-b", #"{"v":"b"}"#]).status == 0)
            #expect(try a.cli(["doc", "put", Self.collection, "after-backup-a", #"{"v":"a2"}"#]).status == 0)
            // Forty updates of one document: a's sequence runs 40 ahead of the backup's, but catch-up
            // brings back one version. Under the old store epoch b would then skip a's next writes.
            for n in 0..<40 { _ = try a.cli(["doc", "put", Self.collection, "hot", #"{"n":\#(n)}"#]) }
            #expect(eventuallyBlocking(within: 30) { Self.state(b, "after-backup-a") == "live" && Self.state(a, "doomed") == "deleted" })

            // Refused while a runs, and for a file that is not a store; a's store is untouched.
            let restoreArgs = ["--board", "sim", "--data-dir", aDir, "--config", aSite]
            let whileRunning = try Shoal.run(["restore", file] + restoreArgs)
            #expect(whileRunning.status == 7 && whileRunning.stderr.contains("stop"), "\(whileRunning)")
            _ = a.stop(keepDirectory: true)
            try "not a database".write(toFile: base.path + "/junk.db", atomically: true, encoding: .utf8)
            let junk = try Shoal.run(["restore", base.path + "/junk.db"] + restoreArgs)
            #expect(junk.status == 6 && junk.stderr.contains("not a SQLite database"), "\(junk)")

            let restore = try Shoal.run(["restore", "a-backup.db"] + restoreArgs, cwd: base.path)
            #expect(restore.status == 0, "restore: \(restore.stderr)")
            #expect(restore.stdout.contains("kept at"), "\(restore.stdout)")
            a = try RunningGateway(dataDir: aDir, extraArgs: ["--config", aSite])
            // Just restored, a holds doomed live (the backup's copy) and lacks what came after it.
            #expect(eventuallyBlocking(within: 45) {
                Self.state(a, "new-on-b") == "live" && Self.state(a, "after-backup-a") == "live" && Self.state(a, "doomed") == "deleted"
            }, "a did not converge: new-on-b \(Self.state(a, "new-on-b")), after-backup-a \(Self.state(a, "after-backup-a")), doomed \(Self.state(a, "doomed"))")
            // A write on a after the restore reaches b (the new store epoch: b pulls again), and b
            // still holds doomed deleted: a's old live copy did not revive it.
            #expect(try a.cli(["doc", "put", Self.collection, "after-restore-a", #"{"v":"a3"}"#]).status == 0)
            #expect(eventuallyBlocking(within: 30) { Self.state(b, "after-restore-a") == "live" })
            #expect(Self.state(b, "doomed") == "deleted" && Self.state(a, "doomed") == "deleted")
            let aEnd = a.stop(), bEnd = b.stop()
            #expect(aEnd.status == 0 && bEnd.status == 0)
            #expect(aEnd.stderr.contains("replicating with peer \(bID)"))
        }
    }
}

/// `shoal doc put` in a loop on its own thread until stopped.
final class BackgroundWriter: @unchecked Sendable {  // `stopped` and `written` only under `lock`
    private let lock = NSLock()
    private var stopped = false, written = 0

    init(socket: String) {
        Thread { [self] in loop(socket) }.start()
    }

    private func loop(_ socket: String) {
        var n = 0
        while lock.withLock({ !stopped }) {
            if (try? Shoal.run(["doc", "put", "sensors.readings", "w\(n)", #"{"n":\#(n)}"#, "--socket", socket]))?.status == 0 {
                n += 1
                lock.withLock { written = n }
            }
        }
    }

    /// Stops the loop; how many documents it wrote.
    func stop() -> Int {
        lock.withLock { stopped = true; return written }
    }
}
