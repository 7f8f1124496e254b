import Glibc

/// Starts an OS thread for blocking work that lives as long as something else does (a socket
/// accept loop, one control connection). Use `BlockingThread` for a queue of short jobs.
public enum DetachedThread {
    final class Box {
        let name: String?
        let body: () -> Void
        init(_ name: String?, _ body: @escaping () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Returns false if the system refused to make another thread. `name` (at most 15 bytes are
    /// kept) is what `top -H`, `ps -L` and `perf` show for the thread.
    @discardableResult
    public static func start(name: String? = nil, _ body: @escaping @Sendable () -> Void) -> Bool {
        let box = Unmanaged.passRetained(Box(name, body))
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { raw in
            let b = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            if let name = b.name { DetachedThread.nameCurrentThread(name) }
            b.body()
            return nil
        }, box.toOpaque())
        guard rc == 0 else {
            box.release()
            return false
        }
        pthread_detach(tid)
        return true
    }

    /// Names the calling thread (Glibc's pthread_setname_np is not visible to Swift; the kernel
    /// takes the name through /proc/thread-self/comm just the same). Best effort.
    public static func nameCurrentThread(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY)
        guard fd >= 0 else { return }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}
