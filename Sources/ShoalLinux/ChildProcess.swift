import Glibc

/// A child process started with posix_spawn (no Foundation): for `shoal bench` and the demo's
/// helpers. Its standard output and error are inherited unless redirected to /dev/null.
public final class ChildProcess: @unchecked Sendable {  // a pid and pipe descriptors; output read by one thread
    public let pid: pid_t
    private var reaped = false

    /// `output`: a file that receives standard output and error (appended), instead of /dev/null
    /// (`quiet`) or the parent's. Standard input is /dev/null when either is given.
    public init(path: String, arguments: [String], quiet: Bool = true, output: String? = nil) throws(SystemError) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // The child gets standard input, output and error only: any other descriptor the parent
        // has open (a pipe another thread made, a socket) must not live on in it.
        // (glibc ignores a close action on a descriptor closed meanwhile.)
        for fd in ChildProcess.openDescriptors() where fd > 2 { posix_spawn_file_actions_addclose(&actions, fd) }
        if let output {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        } else if quiet {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        // A clean signal state: the spawning thread may block signals (Dispatch's worker threads
        // do) or ignore SIGPIPE, and a child inherits both — a daemon that then ignores SIGTERM.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var child: pid_t = 0
        let rc = posix_spawn(&child, path, &actions, &attributes, argv, environ)
        guard rc == 0 else { throw SystemError(call: "posix_spawn(\(path))", code: rc) }
        pid = child
    }

    /// The descriptors this process has open, from /proc/self/fd.
    static func openDescriptors() -> [Int32] {
        guard let dir = opendir("/proc/self/fd") else { return [] }
        defer { closedir(dir) }
        let own = dirfd(dir)
        var fds: [Int32] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if let fd = Int32(name), fd != own { fds.append(fd) }
        }
        return fds
    }

    /// The path of the running executable.
    public static var currentExecutable: String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return n > 0 ? String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    }

    private var status: Int32 = 0

    /// The exit status if the child has ended (it is reaped then), nil while it runs.
    public func exitStatus() -> Int32? {
        if reaped { return status }
        var raw: Int32 = 0
        let r = waitpid(pid, &raw, WNOHANG)
        if r == 0 { return nil }
        reaped = true
        status = r == pid ? ((raw & 0x7F) == 0 ? (raw >> 8) & 0xFF : 128 + (raw & 0x7F)) : 0
        return status
    }

    /// Waits for the child to end by itself; returns its exit status (128 + signal if killed).
    public func wait() -> Int32 {
        guard !reaped else { return status }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reaped = true
        self.status = (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        return self.status
    }

    /// The full path of `program` found on $PATH, if it is there and executable.
    public static func find(_ program: String) -> String? {
        let path = ProcessEnvironment.get("PATH") ?? "/usr/bin:/bin"
        for dir in path.split(separator: ":") where !dir.isEmpty {
            let candidate = "\(dir)/\(program)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    /// Sends `signal` and waits for the child to end, at most `graceMillis` before SIGKILL;
    /// returns its exit status (128 + signal if killed).
    @discardableResult
    public func stop(signal: Int32 = SIGTERM, graceMillis: Int = 5000) -> Int32 {
        if let s = exitStatus() { return s }
        kill(pid, signal)
        var waited = 0
        while waited < graceMillis {
            if let s = exitStatus() { return s }
            usleep(5000)
            waited += 5
        }
        kill(pid, SIGKILL)
        return wait()
    }

    deinit { if !reaped { stop(signal: SIGKILL) } }
}
