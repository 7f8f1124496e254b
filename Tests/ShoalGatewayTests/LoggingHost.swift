import ShoalCore
import ShoalMesh
import ShoalReplication
import ShoalRuntime

/// A replication host that keeps its log, to see why links were refused.
final class LoggingHost: ReplicationHost {
    let sink = MemoryLogSink()
    let logger: Logger
    init() { logger = Logger(sink: sink, level: .debug) }
    func updateCounters(_ body: (inout ReplicationCounters) -> Void) { var c = ReplicationCounters(); body(&c) }
    func meshViewChanged(_ view: MeshView) {}
    func meshEvent(_ event: MeshEvent) {}
    func replicationEvent(_ event: ReplicationEvent) {}
}
