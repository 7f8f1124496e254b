import Glibc

/// A child process started with posix_spawn (no Foundation): for `shoal bench` and the demo's
/// helpers. Its standard output and error are inherited unless redirected to /dev/null.
public final class ChildProcess: @unchecked Sendable {
    public let pid: pid_t
    private var reaped = false

    public init(path: String, arguments: [String], quiet: Bool = true) throws(SystemError) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if quiet {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, path, &actions, nil, argv, environ)
        guard rc == 0 else { throw SystemError(call: "posix_spawn(\(path))", code: rc) }
        pid = child
    }

    /// The path of the running executable.
    public static var currentExecutable: String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return n > 0 ? String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    }

    /// Waits for the child to end by itself; returns its exit status (128 + signal if killed).
    public func wait() -> Int32 {
        guard !reaped else { return 0 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reaped = true
        return (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
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

    /// Sends `signal` and waits for the child to end; returns its wait status.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM) -> Int32 {
        guard !reaped else { return 0 }
        kill(pid, signal)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reaped = true
        return status
    }

    deinit { if !reaped { stop(signal: SIGKILL) } }
}
