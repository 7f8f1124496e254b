import Glibc
import ShoalCore
import ShoalLinux
import ShoalStore
import ShoalWire

/// `backup`: an online copy of the store (`DocumentStore.backup`) to a path the gateway process
/// writes. The CLI resolves a relative path against its own directory before sending, so a path
/// here must be absolute. Runs on the control connection's own thread; writers go on meanwhile.
extension ControlHandler {
    func dispatchBackup(_ op: String, _ r: [String: JSONValue]) throws -> JSONValue? {
        guard op == "backup" else { return nil }
        guard let path = r["path"]?.stringValue, path.hasPrefix("/"), path.utf8.count <= 4096, !path.utf8.contains(0) else {
            throw bad("\"path\" must be an absolute file path (up to 4096 bytes)")
        }
        let pages = r["pagesPerStep"]?.int64Value ?? 256
        guard (1...65536).contains(pages) else { throw bad("\"pagesPerStep\" is 1 to 65536") }
        let pagesPerStep = Int32(pages)
        let store = Files.absolute(gateway.storePath)
        let name = path.split(separator: "/").last.map(String.init) ?? ""
        guard !name.isEmpty else { throw bad("\"path\" names a directory; give a file name") }
        let directory = Files.directory(of: path)
        guard Files.isDirectory(directory) else { throw bad("directory \(directory) does not exist (the gateway process writes the backup; give a directory it can see)") }
        guard access(directory, W_OK) == 0 else { throw bad("the gateway process (uid \(getuid())) cannot write to \(directory)") }
        let target = Files.absolute(directory) + "/" + name
        guard target != store, !target.hasPrefix(store + "-"), !target.hasPrefix(store + "."), !path.hasPrefix(store + "-"), !path.hasPrefix(store + ".") else {
            throw bad("\(path) is the store itself or one of its files; choose a path outside \(store)")
        }
        gateway.logger.info(.control, "backup of the store to \(path) started")
        let report = try openStore().backup(to: path, pagesPerStep: pagesPerStep)
        gateway.logger.info(.control, "backup to \(path): \(report.bytes) bytes, \(report.pages) pages in \(report.steps) steps, up to sequence \(report.lastSequence)")
        return ["path": .string(report.path), "bytes": .int(report.bytes), "pages": .int(Int64(report.pages)), "steps": .int(Int64(report.steps)),
                "seconds": .double(report.seconds), "lastSequence": .int(report.lastSequence)]
    }
}
