import Glibc

/// A pthread mutex with a condition variable, for threads that must block and wait (the store's
/// own thread, the control socket's connection threads). Never use it from async code on Swift's
/// cooperative pool: waiting here would stall the pool.
public final class ConditionLock: @unchecked Sendable {  // a pthread mutex and condition variable
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() {
        pthread_mutex_init(mutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    public func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Waits (the lock held by the caller, inside `withLock`) until signalled or `timeoutMillis` passes.
    public func wait(timeoutMillis: Int) {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let ns = Int(ts.tv_nsec) + (timeoutMillis % 1000) * 1_000_000
        ts.tv_sec += timeoutMillis / 1000 + ns / 1_000_000_000
        ts.tv_nsec = ns % 1_000_000_000
        pthread_cond_timedwait(cond, mutex, &ts)
    }

    /// Waits (lock held) until signalled.
    public func wait() { pthread_cond_wait(cond, mutex) }

    public func broadcast() { pthread_cond_broadcast(cond) }
}
