import Glibc

/// Small, bounded file operations (no Foundation).
public enum Files {
    /// Reads a whole file of at most `max` bytes; nil if it cannot be read, an error if too big.
    public static func read(_ path: String, max: Int = 1 << 20) throws(SystemError) -> String? {
        try readBytes(path, max: max).map { String(decoding: $0, as: UTF8.self) }
    }

    /// `read`'s bytes as they are (for binary files: DER certificates and keys).
    public static func readBytes(_ path: String, max: Int = 1 << 20) throws(SystemError) -> [UInt8]? {
        let fd: Int32
        do { fd = try SystemCall.run("open(\(path))") { open(path, O_RDONLY | O_CLOEXEC) } } catch {
            if error.code == ENOENT { return nil }
            throw error
        }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = try SystemCall.run("read(\(path))") { chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, 65536) } }
            if n == 0 { break }
            out.append(contentsOf: chunk.prefix(n))
            if out.count > max { throw SystemError(call: "read(\(path)): file over \(max) bytes", code: EFBIG) }
        }
        return out
    }

    public static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    /// A file's size in bytes (nil if it cannot be stat'ed).
    public static func size(_ path: String) -> Int? {
        var st = stat()
        return stat(path, &st) == 0 ? Int(st.st_size) : nil
    }

    /// Writes `text` to `path` (created or truncated, mode 0644 unless told).
    public static func write(_ path: String, _ text: String, mode: mode_t = 0o644) throws(SystemError) {
        let fd = try SystemCall.run("open(\(path))") { open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode) }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            offset += try SystemCall.run("write(\(path))") { bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } }
        }
    }

    /// The path made absolute and free of `..` and links (realpath), or as given if it cannot be.
    public static func absolute(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    public static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    /// Creates a directory and its parents (mode 0750 for new ones).
    public static func makeDirectories(_ path: String) throws(SystemError) {
        var current = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            current += "/" + part
            if mkdir(current, 0o750) != 0 && errno != EEXIST {
                throw SystemError(call: "mkdir(\(current))", code: errno)
            }
        }
    }

    /// The parent directory of a path ("." for a bare name).
    public static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// Names in a directory (without . and ..), or [] if it cannot be read.
    public static func list(_ path: String) -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// Free bytes for unprivileged users on the file system holding `path`.
    public static func freeBytes(_ path: String) -> UInt64? {
        var s = statvfs()
        guard statvfs(path, &s) == 0 else { return nil }
        return UInt64(s.f_bavail) * UInt64(s.f_frsize)
    }

    /// `count` bytes from the kernel's random source (/dev/urandom).
    public static func randomBytes(_ count: Int) throws(SystemError) -> [UInt8] {
        let fd = try SystemCall.run("open(/dev/urandom)") { open("/dev/urandom", O_RDONLY | O_CLOEXEC) }
        defer { close(fd) }
        var out = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let n = try SystemCall.run("read(/dev/urandom)") { out[filled...].withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
            guard n > 0 else { throw SystemError(call: "read(/dev/urandom): end of file", code: EIO) }
            filled += n
        }
        return out
    }
}
