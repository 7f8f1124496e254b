/// ShoalRuntime: the composition root. It is the only module that knows every part: it loads the
/// board and site files, builds the supervision tree (store, status, control socket, watchdog),
/// handles signals and systemd, and serves the control socket.
import ShoalConfig
import ShoalLinux

/// Board files from a directory (the operator's own, e.g. /etc/shoal/boards), falling back to the
/// copies built into the binary. A name with a `/` or a `.yaml` suffix is a path.
public struct BoardFiles: BoardSource {
    public let directories: [String]

    /// Where shoal looks for board files, in order, before its built-in copies.
    public static let defaultDirectories = ["/etc/shoal/boards"]

    public init(directories: [String] = BoardFiles.defaultDirectories) { self.directories = directories }

    /// A name with a `/` or a `.yaml`/`.yml` suffix is a file's path, not a board's name.
    public static func isPath(_ name: String) -> Bool {
        name.contains("/") || name.hasSuffix(".yaml") || name.hasSuffix(".yml")
    }

    public func boardFile(named name: String, relativeTo: String?) -> (path: String, text: String)? {
        if BoardFiles.isPath(name) {
            var path = name
            if !name.hasPrefix("/"), let from = relativeTo, from.contains("/") { path = Files.directory(of: from) + "/" + name }
            if let text = try? Files.read(path) { return (path, text) }
            return nil
        }
        // A file extends a sibling in its own directory first, then the usual places.
        var dirs = directories
        if let from = relativeTo, from.contains("/") { dirs.insert(Files.directory(of: from), at: 0) }
        for dir in dirs {
            let path = "\(dir)/\(name).yaml"
            if let text = try? Files.read(path) { return (path, text) }
        }
        if let text = EmbeddedBoards.files[name] { return ("<built-in>/\(name).yaml", text) }
        return nil
    }

    public func boardNames() -> [String] {
        var names = Set(EmbeddedBoards.files.keys)
        for dir in directories {
            for file in Files.list(dir) where file.hasSuffix(".yaml") { names.insert(String(file.dropLast(5))) }
        }
        return names.sorted()
    }

    /// The built-in copy of a board file, for tests that compare it with board-configs/.
    public static func builtIn(_ name: String) -> String? { EmbeddedBoards.files[name] }
    public static var builtInNames: [String] { EmbeddedBoards.files.keys.sorted() }
}
