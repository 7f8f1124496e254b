import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalStore

/// Who the replication driver reports to: the stock gateway (status, `shoal events`, the LED) or
/// a replicator made with the `Shoal` library (its listeners). Called from the driver's threads.
package protocol ReplicationHost: AnyObject, Sendable {
    var logger: Logger { get }
    func updateCounters(_ body: (inout ReplicationCounters) -> Void)
    /// The mesh as the node thread sees it now (every 250 ms and at stop).
    func meshViewChanged(_ view: MeshView)
    func meshEvent(_ event: MeshEvent)
    func replicationEvent(_ event: ReplicationEvent)
}

extension Gateway: ReplicationHost {
    package func updateCounters(_ body: (inout ReplicationCounters) -> Void) { counters.withLock { body(&$0) } }
    package func meshViewChanged(_ view: MeshView) { meshView.withLock { $0 = view } }
    package func meshEvent(_ event: MeshEvent) { meshEvents.append(MeshEventLog.json(event), atMillis: Int64(NodeClock.systemWallMillis())) }
    package func replicationEvent(_ event: ReplicationEvent) {}
}

/// A link's byte stream: a TCP connection, or a memory pipe of the in-process medium. `wake()`
/// interrupts a read so the link's thread sends what was queued.
package protocol LinkStream: ByteStream {
    func wake()
}

