import ShoalCore
import Synchronization
import ShoalThreads

/// The state of every child in the tree, shared by all supervisors of one tree: what `shoal status`
/// shows, and what decides whether the systemd watchdog is fed (only while the tree is healthy).
public final class SupervisionReport: Sendable {
    public enum ChildState: String, Sendable {
        case starting, running, restarting, stopping, stopped, failed, hung
    }

    public struct Child: Sendable {
        public var path: String
        public var state: ChildState
        public var restarts: Int
        public var lastError: String?
        public var order: Int
    }

    private let children = Locked<[String: Child]>([:])
    private let counter = Atomic<Int>(0)

    public init() {}

    func update(_ path: String, _ change: (inout Child) -> Void) {
        let order = counter.wrappingAdd(1, ordering: .relaxed).oldValue
        children.withLock { all in
            var child = all[path] ?? Child(path: path, state: .starting, restarts: 0, lastError: nil, order: order)
            change(&child)
            all[path] = child
        }
    }

    /// A dynamic child (started by its parent at run time, such as one link per peer) as its
    /// parent sees it now.
    public func record(_ path: String, state: ChildState, restarts: Int, lastError: String?) {
        update(path) { c in
            c.state = state
            c.restarts = restarts
            c.lastError = lastError
        }
    }

    /// A dynamic child is gone for good.
    public func remove(_ path: String) {
        _ = children.withLock { $0.removeValue(forKey: path) }
    }

    func remove(prefix: String) {
        children.withLock { all in all = all.filter { !$0.key.hasPrefix(prefix + "/") } }
    }

    /// Every child, in the order they were first seen (start order).
    public var snapshot: [Child] { children.withLock { Array($0.values) }.sorted { $0.order < $1.order } }

    /// Healthy: no child is restarting, hung or failed. Stopped children (temporary, or transient
    /// that ended normally) do not make the tree unhealthy.
    public var isHealthy: Bool {
        children.withLock { all in
            all.values.allSatisfy { $0.state == .running || $0.state == .stopped || $0.state == .starting }
        }
    }
}
