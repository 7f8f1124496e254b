import Glibc
import ShoalLinux
import ShoalUpdate
import Testing

/// The installer on real files, and a real child process killed (SIGKILL) right after each step
/// of an install: the boot check then always leaves `current/shoal` a complete, runnable binary,
/// the old one or the new one, never none.
@Suite("Update installer on files")
struct UpdateInstallerTests {
    static let t0: Int64 = 1_800_000_000

    static func temporaryDirectory() throws -> String {
        var template = Array("/tmp/shoal-update-XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw SystemError(call: "mkdtemp", code: errno) }
        return String(cString: p)
    }

    /// A runnable ELF: /bin/true, with `marker` appended (the loader ignores bytes past the segments).
    static func binary(_ marker: String) throws -> [UInt8] {
        try #require(try Files.readBytes("/bin/true", max: 1 << 22)) + Array(marker.utf8)
    }

    static func runs(_ path: String) -> Bool {
        var pid: pid_t = 0
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup(path), nil]
        defer { argv.forEach { free($0) } }
        guard posix_spawn(&pid, path, nil, nil, &argv, environ) == 0 else { return false }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        return status == 0
    }

    @Test("install, one start, confirm: current is the new binary, previous the packaged one")
    func installConfirm() throws {
        let dir = try Self.temporaryDirectory()
        let old = dir + "/packaged-shoal"
        try Files.write(old, "", mode: 0o755)
        let bytes = try Self.binary("v0.1.0")
        let fd = open(old, O_WRONLY | O_TRUNC)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        let installer = UpdateInstaller(directory: dir + "/updates", packagedBinary: old)
        try installer.bootCheck(now: Self.t0, confirmSeconds: 60)
        #expect(installer.target("current") == "releases/base" && Self.runs(installer.currentBinary))
        let new = try Self.binary("v0.2.0")
        try installer.install(version: "0.2.0", binary: new, now: Self.t0)
        #expect(installer.target("current") == "releases/0.2.0" && installer.target("previous") == "releases/base")
        #expect(try Files.readBytes(installer.currentBinary, max: 1 << 22) == new)
        let (d, _) = try installer.bootCheck(now: Self.t0 + 1, confirmSeconds: 60)
        guard case .startCandidate = d else { Issue.record("\(d)"); return }
        guard case .confirm = try installer.confirm(running: "0.2.0", ready: true, healthy: true, now: Self.t0 + 5) else { Issue.record("no confirm"); return }
        #expect(installer.readRecord().0?.phase == .confirmed)
        #expect(try installer.bootCheck(now: Self.t0 + 100, confirmSeconds: 60).0 == .start)
        #expect(installer.target("current") == "releases/0.2.0")
    }

    @Test("a candidate that never confirms is rolled back at the next boot check, and refused if offered again")
    func rollback() throws {
        let dir = try Self.temporaryDirectory()
        let installer = UpdateInstaller(directory: dir, packagedBinary: "/bin/true")
        try installer.install(version: "0.2.0", binary: try Self.binary("v0.2.0"), now: Self.t0)
        _ = try installer.bootCheck(now: Self.t0 + 1, confirmSeconds: 60)
        let (d, line) = try installer.bootCheck(now: Self.t0 + 3, confirmSeconds: 60)
        guard case .rollBack = d else { Issue.record("\(d)"); return }
        #expect(line.hasPrefix("rolled back from 0.2.0 to releases/base"))
        #expect(installer.target("current") == "releases/base" && Self.runs(installer.currentBinary))
        #expect(throws: UpdateError("0.2.0 was rolled back here before; publish a newer release")) {
            try installer.install(version: "0.2.0", binary: try Self.binary("v0.2.0"), now: Self.t0 + 10)
        }
    }

    @Test("SIGKILL right after each install step: the boot check leaves a complete binary current, old or new",
          arguments: UpdateMachine.InstallStep.allCases)
    func killedInstall(_ step: UpdateMachine.InstallStep) throws {
        let dir = try Self.temporaryDirectory()
        let old = try Self.binary("v0.1.0"), new = try Self.binary("v0.2.0")
        let packaged = dir + "/packaged"
        try Files.write(packaged, String(decoding: [], as: UTF8.self), mode: 0o755)
        let fd = open(packaged, O_WRONLY | O_TRUNC)
        _ = old.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        let updates = dir + "/updates"
        // The install runs in a child process that kills itself (SIGKILL) right after `step`.
        let pid = fork()
        if pid == 0 {
            let child = UpdateInstaller(directory: updates, packagedBinary: packaged, killAfter: step)
            do { try child.install(version: "0.2.0", binary: new, now: Self.t0) } catch { _exit(3) }
            _exit(0)
        }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        #expect(status & 0x7F == SIGKILL, "the child was not killed after \(step.rawValue): status \(status)")
        // Boot check, a start that crashes, boot check again: always a runnable binary.
        let installer = UpdateInstaller(directory: updates, packagedBinary: packaged)
        for round in 0..<3 {
            let (_, line) = try installer.bootCheck(now: Self.t0 + Int64(round), confirmSeconds: 60)
            let current = try #require(try Files.readBytes(installer.currentBinary, max: 1 << 22), "\(step.rawValue) round \(round): \(line)")
            #expect(current == old || current == new, "\(step.rawValue) round \(round): \(line)")
            #expect(Self.runs(installer.currentBinary), "\(step.rawValue) round \(round): \(line)")
        }
        // After the candidate's one start without a confirmation, the old binary is current.
        #expect(try Files.readBytes(installer.currentBinary, max: 1 << 22) == old, "after \(step.rawValue)")
        // A cut before the switch leaves the release free to try again (no record yet after
        // staging; an interrupted one after); after the switch, the candidate had its start.
        let record = installer.readRecord().0
        if step == .switchCurrent {
            #expect(record?.phase == .rolledBack)
        } else {
            #expect(step == .stage ? record == nil : record?.phase == .interrupted)
            try installer.install(version: "0.2.0", binary: new, now: Self.t0 + 10)
            #expect(try Files.readBytes(installer.currentBinary, max: 1 << 22) == new)
        }
    }
}
