import Glibc

/// An exclusive flock(2) on `DIR/shoal.lock`, held for as long as this value lives (the gateway
/// keeps it for the life of its process). The kernel drops it when the process dies however it
/// dies, so a gateway killed with SIGKILL leaves nothing to clean up; the file itself stays, and
/// its content (the holder's pid) is only a hint for the message, never trusted for the lock.
/// The descriptor is close-on-exec: a child process must not inherit, and so keep, the lock.
public final class DirectoryLock: @unchecked Sendable {   // immutable after init; the fd is only closed in deinit
    public enum Failure: Error, CustomStringConvertible {
        /// Another process holds the lock; `holder` is the pid it wrote, when it could be read.
        case held(directory: String, holder: Int32?)
        case system(SystemError)

        public var description: String {
            switch self {
            case .held(let directory, let holder):
                "data directory \(directory) is in use by another shoal run\(holder.map { " (pid \($0))" } ?? ""); stop it first, or pass another --data-dir"
            case .system(let e): "cannot lock the data directory: \(e)"
            }
        }
    }

    public static let fileName = "shoal.lock"

    public let path: String
    private let fd: Int32

    /// Creates the directory if needed and takes the lock without waiting.
    public init(directory: String) throws(Failure) {
        let path = directory + "/" + DirectoryLock.fileName
        let fd: Int32
        do {
            try Files.makeDirectories(directory)
            fd = try SystemCall.run("open(\(path))") { open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644) }
        } catch {
            throw .system(error)
        }
        self.path = path
        self.fd = fd
        do {
            try SystemCall.run("flock(\(path))") { flock(fd, LOCK_EX | LOCK_NB) }
        } catch {
            let holder = (try? Files.read(path, max: 64)).flatMap { $0 }.flatMap { Int32($0.trimmingWhitespace) }
            close(fd)
            throw error.code == EWOULDBLOCK ? .held(directory: directory, holder: holder) : .system(error)
        }
        // Ours now: say who holds it (best effort; the lock, not this text, is what counts).
        let pid = Array("\(getpid())\n".utf8)
        _ = try? SystemCall.run("ftruncate(\(path))") { ftruncate(fd, 0) }
        _ = try? SystemCall.run("pwrite(\(path))") { pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } }
    }

    deinit { close(fd) }
}

extension String {
    fileprivate var trimmingWhitespace: String {
        String(drop(while: { $0.isWhitespace }).reversed().drop(while: { $0.isWhitespace }).reversed())
    }
}
