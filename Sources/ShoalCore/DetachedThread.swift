import Glibc

/// Starts an OS thread for blocking work that lives as long as something else does (a socket
/// accept loop, one control connection). Use `BlockingThread` for a queue of short jobs.
public enum DetachedThread {
    final class Box {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// Returns false if the system refused to make another thread.
    @discardableResult
    public static func start(_ body: @escaping @Sendable () -> Void) -> Bool {
        let box = Unmanaged.passRetained(Box(body))
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { raw in
            let b = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
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
}
