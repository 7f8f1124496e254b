import Glibc

/// A fresh directory under /tmp, removed with everything in it by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(prefix: String = "shoal-test") {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed: \(errno)")
        path = String(cString: made!)
    }

    /// A directory at `path` (made, with its parents, if missing): a test that names where a
    /// gateway keeps its data.
    public init(path: String) {
        self.path = path
        var built = ""
        for part in path.split(separator: "/") {
            built += "/" + part
            mkdir(built, 0o755)
        }
    }

    public func file(_ name: String) -> String { "\(path)/\(name)" }

    public func remove() {
        TemporaryDirectory.removeTree(path)
    }

    /// Removes `path` and everything in it.
    public static func removeTree(_ path: String) {
        if let dir = opendir(path) {
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self) }
                if name == "." || name == ".." { continue }
                let child = "\(path)/\(name)"
                if entry.pointee.d_type == UInt8(DT_DIR) { removeTree(child) } else { unlink(child) }
            }
            closedir(dir)
        }
        rmdir(path)
    }
}
