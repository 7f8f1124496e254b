import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalStore

/// `shoal backup FILE` (a running gateway copies its store online) and `shoal restore FILE` (a
/// stopped gateway's store replaced by a checked backup).
extension CLI {
    static func backup(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "backup", valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "backup") { return ExitCode.ok }
        try a.expectPositionals(1...1, command: "backup", usage: "backup FILE [--json] [--socket PATH]")
        // The gateway process writes the file: a relative path means the CLI's directory, not its.
        let path = absolutePath(a.positionals[0])
        let c = try client(a)
        // A large store on a slow card takes longer than a call's usual 30 s: wait up to an hour.
        try c.send(["op": "backup", "path": .string(path)])
        guard let reply = try c.receive(timeoutMillis: 3_600_000) else { throw ControlClient.Failure.protocolError("gateway closed the connection during the backup") }
        let r = try ControlClient.unwrap(reply)
        if a.flags.contains("--json") { output(r); return ExitCode.ok }
        let bytes = Double(r["bytes"]?.int64Value ?? 0)
        let seconds = r["seconds"]?.doubleValue ?? 0
        let mbps = seconds > 0 ? bytes / 1_000_000 / seconds : 0
        out("backup \(r["path"]?.stringValue ?? path): \(megabytes(bytes)) MB, \(r["pages"]?.int64Value ?? 0) pages, up to sequence \(r["lastSequence"]?.int64Value ?? 0), \(fmt2(seconds)) s, \(fmt2(mbps)) MB/s")
        return ExitCode.ok
    }

    static func restore(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "restore", valueOptions: ["--board", "--config", "--data-dir", "--board-dir"], flagOptions: ["--json", "--force"])
        if helpIfAsked(a, "restore") { return ExitCode.ok }
        try a.expectPositionals(1...1, command: "restore", usage: "restore FILE [--config FILE] [--data-dir DIR]")
        let backup = absolutePath(a.positionals[0])
        // The same board, site and data directory `shoal run` with these options would use.
        let loaded = try ConfigurationLoading.load(runtimeOptions(a), logger: Logger(sink: MemoryLogSink(), level: .none))
        let dataDirectory = Files.directory(of: loaded.storePath)
        // The gateway holds this lock for as long as it runs: restore only a stopped gateway's store.
        let lock: DirectoryLock
        do { lock = try DirectoryLock(directory: dataDirectory) } catch {
            if case .held = error {
                printError("shoal restore: \(error) (restore replaces the store: stop the gateway first)")
                return ExitCode.dataDirectoryInUse
            }
            throw Rejected(message: "\(error)")
        }
        defer { withExtendedLifetime(lock) {} }
        let report: StoreRestore.Report
        do {
            report = try StoreRestore.restore(backup: backup, storePath: loaded.storePath, group: loaded.site.group,
                                              maxAgeSeconds: loaded.board.mesh.txLogMaxAgeSeconds, force: a.flags.contains("--force"))
        } catch {
            throw Rejected(message: "refused: \(error)")
        }
        if a.flags.contains("--json") {
            output(["backup": .string(report.backup), "store": .string(report.storePath), "movedAsideTo": report.movedAsideTo.map(JSONValue.string) ?? .null,
                    "schemaVersion": .int(report.schemaVersion), "documents": .int(report.documents), "lastSequence": .int(report.lastSequence),
                    "group": .string(loaded.site.group), "groupRecorded": .bool(report.recordedGroup != nil)])
            return ExitCode.ok
        }
        out("restored \(report.backup) as \(report.storePath): \(report.documents.counted("document")) (tombstones included), schema \(report.schemaVersion), group \(loaded.site.group)\(report.recordedGroup == nil ? " (the backup did not record its group: it predates group records)" : "")")
        out(report.movedAsideTo.map { "the store that was there is kept at \($0)" } ?? "there was no store before")
        out("on its next start the gateway takes a new store epoch and catches up from the mesh")
        return ExitCode.ok
    }

    static func absolutePath(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return path }
        return String(cString: buffer) + "/" + path
    }

    static func megabytes(_ bytes: Double) -> String { fmt2(bytes / 1_000_000) }
}
