import Synchronization
import ShoalThreads

/// Many subscribers, each with its own stream (bounded: a subscriber that never reads keeps the
/// newest 10,000 events).
public final class Broadcaster<Element: Sendable>: Sendable {
    private let subscribers = Locked<[Int: AsyncStream<Element>.Continuation]>([:])
    private let next = Atomic<Int>(0)

    public init() {}

    deinit {
        for c in subscribers.withLock({ Array($0.values) }) { c.finish() }
    }

    /// A new stream of what is sent from now on, and its continuation (to yield a first value).
    public func subscribe() -> (AsyncStream<Element>, AsyncStream<Element>.Continuation) {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        let key = next.add(1, ordering: .relaxed).oldValue
        // The table itself, not a weak self: a weak reference's side table is invisible to
        // LeakSanitizer (reported as a leak at exit). The cycle table → continuation → this
        // closure → table ends when the stream ends; deinit ends every stream still open.
        continuation.onTermination = { [subscribers] _ in _ = subscribers.withLock { $0.removeValue(forKey: key) } }
        subscribers.withLock { $0[key] = continuation }
        return (stream, continuation)
    }

    /// How many streams are subscribed now.
    public var count: Int { subscribers.withLock { $0.count } }

    /// Sends to every subscriber.
    public func send(_ e: Element) {
        for c in subscribers.withLock({ Array($0.values) }) { c.yield(e) }
    }
}

