/// ShoalThreads: the locks and threads every other module uses, over pthreads (locks
/// ThreadSanitizer can see, detached threads, the blocking-work thread). ShoalLinux builds its
/// executor thread and worker groups on these.
import Glibc

/// A value behind a pthread mutex: Shoal's lock for state shared between threads. For a lock with
/// no value, use ConditionLock (a zero-size value would share its address with the mutex pointer,
/// and ThreadSanitizer reports the two as one racing variable).
///
/// Why not Synchronization's `Mutex`: on Linux it waits on a futex directly, which
/// ThreadSanitizer cannot see, so every access it protects is reported as a race and a sanitizer
/// run of the suite drowns in false reports (checked: two threads bumping a Mutex-guarded counter
/// give "Swift access race"). A pthread mutex costs about the same uncontended, and TSan knows it.
public final class Locked<Value>: @unchecked Sendable {  // the value only under the pthread mutex
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value, exclusively. Never wait or block inside.
    public func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
