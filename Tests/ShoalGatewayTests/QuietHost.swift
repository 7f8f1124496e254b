import ShoalCore
import ShoalMesh
import ShoalReplication
import ShoalRuntime

/// A replication host that keeps nothing: for tests that watch the core or the report instead.
final class QuietHost: ReplicationHost {
    let logger = Logger(sink: MemoryLogSink(), level: .none)
    func updateCounters(_ body: (inout ReplicationCounters) -> Void) { var c = ReplicationCounters(); body(&c) }
    func meshViewChanged(_ view: MeshView) {}
    func meshEvent(_ event: MeshEvent) {}
    func replicationEvent(_ event: ReplicationEvent) {}
}
