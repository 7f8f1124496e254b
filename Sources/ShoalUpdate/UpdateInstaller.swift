import Glibc
import ShoalLinux

/// The update's file-system shell: carries out `UpdateMachine`'s decisions in the install
/// directory, every write made durable before the next step (tmp + fsync + rename, then the
/// directory fsynced), so a power cut at any point leaves a `current` link to a complete binary.
///
/// Layout under `directory`: `releases/<version>/shoal` (installed binaries), `releases/base/shoal`
/// (a link to the packaged binary, made on first boot check), `current` and `previous` (links to a
/// release directory: the unit starts `current/shoal`), `update-state.json` (the `UpdateRecord`).
public struct UpdateInstaller: Sendable {
    public let directory: String
    /// The binary the package installed (/usr/bin/shoal): the known-good one `current` starts as.
    public let packagedBinary: String
    /// A test seam: the install kills its own process (SIGKILL) right after this step, as a power
    /// cut would (`SHOAL_UPDATE_KILL_AFTER` in `shoal update install`).
    public var killAfter: UpdateMachine.InstallStep?

    public static let recordName = "update-state.json"
    public static let baseTarget = "releases/base"

    public init(directory: String, packagedBinary: String, killAfter: UpdateMachine.InstallStep? = nil) {
        self.directory = directory
        self.packagedBinary = packagedBinary
        self.killAfter = killAfter
    }

    var recordPath: String { directory + "/" + UpdateInstaller.recordName }
    public var currentBinary: String { directory + "/current/shoal" }

    // MARK: the record

    /// The record, or nil when none was written. A record that cannot be read is treated as none
    /// (what `current` names keeps running) and reported.
    public func readRecord() -> (UpdateRecord?, problem: String?) {
        let text: String?
        do { text = try Files.read(recordPath, max: UpdateRecord.maxBytes) } catch { return (nil, "\(recordPath): \(error)") }
        guard let text else { return (nil, nil) }
        do { return (try UpdateRecord.decode(text), nil) } catch { return (nil, "\(recordPath): \(error)") }
    }

    public func writeRecord(_ r: UpdateRecord) throws(SystemError) {
        try UpdateInstaller.writeDurably(recordPath, Array(r.text.utf8), mode: 0o640)
    }

    // MARK: links

    /// Where `name` (`current`, `previous`) points, or nil.
    public func target(_ name: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink(directory + "/" + name, &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Points `name` at `target` atomically: a new link beside it, renamed over it.
    func point(_ name: String, at target: String) throws(SystemError) {
        let path = directory + "/" + name, tmp = path + ".tmp"
        _ = unlink(tmp)
        _ = try SystemCall.run("symlink(\(tmp))") { symlink(target, tmp) }
        _ = try SystemCall.run("rename(\(tmp))") { rename(tmp, path) }
        try UpdateInstaller.syncDirectory(directory)
    }

    /// Makes `current` exist: on first use it points at `releases/base`, whose `shoal` links to
    /// the packaged binary.
    public func ensureCurrent() throws(SystemError) {
        guard target("current") == nil else { return }
        let base = directory + "/" + UpdateInstaller.baseTarget
        try Files.makeDirectories(base)
        _ = unlink(base + "/shoal.tmp")
        _ = try SystemCall.run("symlink(\(base)/shoal.tmp)") { symlink(packagedBinary, base + "/shoal.tmp") }
        _ = try SystemCall.run("rename(\(base)/shoal.tmp)") { rename(base + "/shoal.tmp", base + "/shoal") }
        try UpdateInstaller.syncDirectory(base)
        try point("current", at: UpdateInstaller.baseTarget)
    }

    // MARK: install

    /// Installs `binary` as `version` and switches `current` to it; the caller then exits with the
    /// restart code. The bytes were checked against their manifest before they got here.
    public func install(version: String, binary: [UInt8], now: Int64, holdOffSeconds: Int64 = 0) throws(UpdateError) {
        let (record, _) = readRecord()
        if let why = UpdateMachine.installRefusal(record, version: version, now: now, holdOffSeconds: holdOffSeconds) { throw UpdateError(why) }
        do {
            try ensureCurrent()
            let previous = target("current") ?? UpdateInstaller.baseTarget
            let dir = directory + "/" + UpdateRecord.target(of: version)
            try Files.makeDirectories(dir)
            try UpdateInstaller.writeDurably(dir + "/shoal", binary, mode: 0o755)
            cut(after: .stage)
            try writeRecord(UpdateMachine.pending(record, version: version, previous: previous, now: now))
            cut(after: .record)
            try point("previous", at: previous)
            cut(after: .linkPrevious)
            try point("current", at: UpdateRecord.target(of: version))
            cut(after: .switchCurrent)
        } catch { throw UpdateError("installing \(version) in \(directory): \(error)") }
    }

    func cut(after step: UpdateMachine.InstallStep) {
        if killAfter == step { _ = kill(getpid(), SIGKILL) }
    }

    // MARK: boot check and confirmation

    /// The boot check (ExecStartPre, by the packaged binary): makes `current` exist, then does
    /// what `UpdateMachine.bootCheck` says. Returns the decision and a line for the journal.
    @discardableResult
    public func bootCheck(now: Int64, confirmSeconds: Int64) throws(UpdateError) -> (UpdateMachine.BootDecision, String) {
        do {
            try ensureCurrent()
            let (record, problem) = readRecord()
            let current = target("current") ?? UpdateInstaller.baseTarget
            let decision = UpdateMachine.bootCheck(record, currentTarget: current, now: now, confirmSeconds: confirmSeconds)
            var line: String
            switch decision {
            case .start:
                line = "starting \(current)"
            case .startCandidate(let r):
                try writeRecord(r)
                line = "starting candidate \(r.candidate) (its one start; it must confirm within \(confirmSeconds) s)"
            case .rollBack(let r):
                try writeRecord(r)
                try point("current", at: r.previous)
                line = "rolled back from \(r.candidate) to \(r.previous): \(r.reason)"
            case .abandon(let r):
                try writeRecord(r)
                line = "install of \(r.candidate) was cut before the switch: \(current) stays"
            case .finishRollBack(let previous):
                try point("current", at: previous)
                line = "finished a cut rollback: \(previous) is current again"
            }
            if let problem { line += " (the update state could not be read: \(problem))" }
            return (decision, line)
        } catch { throw UpdateError("boot check in \(directory): \(error)") }
    }

    /// The running binary's confirmation (called once it is READY and its health check passed).
    public func confirm(running: String, ready: Bool, healthy: Bool, now: Int64) throws(UpdateError) -> UpdateMachine.ConfirmDecision {
        let decision = UpdateMachine.confirm(readRecord().0, running: running, ready: ready, healthy: healthy, now: now)
        if case .confirm(let r) = decision {
            do { try writeRecord(r) } catch { throw UpdateError("confirming \(running) in \(directory): \(error)") }
        }
        return decision
    }

    // MARK: durable writes

    /// `path.tmp` written and fsynced, renamed over `path`, the directory fsynced.
    public static func writeDurably(_ path: String, _ bytes: [UInt8], mode: mode_t) throws(SystemError) {
        let tmp = path + ".tmp"
        let fd = try SystemCall.run("open(\(tmp))") { open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode) }
        do {
            var offset = 0
            while offset < bytes.count {
                offset += try SystemCall.run("write(\(tmp))") { bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } }
            }
            _ = try SystemCall.run("fchmod(\(tmp))") { fchmod(fd, mode) }
            _ = try SystemCall.run("fsync(\(tmp))") { fsync(fd) }
        } catch {
            close(fd)
            throw error
        }
        close(fd)
        _ = try SystemCall.run("rename(\(tmp))") { rename(tmp, path) }
        try UpdateInstaller.syncDirectory(Files.directory(of: path))
    }

    static func syncDirectory(_ path: String) throws(SystemError) {
        let fd = try SystemCall.run("open(\(path))") { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { close(fd) }
        _ = try SystemCall.run("fsync(\(path))") { fsync(fd) }
    }
}
