import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalWire
import Synchronization
import ShoalThreads

/// One link's session, its outbox, and the wake-up that interrupts its read.
package final class LinkIO: Sendable {
    package let id: LinkID
    package let session: TLSSession
    package let stream: any LinkStream
    /// The static address we dialled (nil for accepted links).
    package let address: String?
    /// The radio it runs over.
    package let transport: MeshTransport
    let outbox = Locked<(frames: [[UInt8]], bytes: Int)>(([], 0))
    let closedFlag = Atomic<Bool>(false)
    /// What may wait to be written. Replication's window keeps a healthy link far below this (8
    /// batches of txLogBatchSizeKb in flight); a link whose peer stopped reading reaches it, and is
    /// closed: its replicator resumes from its checkpoint on the next link.
    package static let maxQueuedBytes = 32 << 20

    package init(id: LinkID, session: TLSSession, stream: any LinkStream, address: String?, transport: MeshTransport = .wifi) {
        self.id = id
        self.session = session
        self.stream = stream
        self.address = address
        self.transport = transport
    }

    package var isClosed: Bool { closedFlag.load(ordering: .relaxed) }

    /// Queues a frame; false (and the link closes) if the queue is over its bound.
    @discardableResult
    package func send(_ payload: [UInt8]) -> Bool {
        let fits = outbox.withLock { o -> Bool in
            guard o.bytes + payload.count <= LinkIO.maxQueuedBytes else { return false }
            o.frames.append(payload)
            o.bytes += payload.count
            return true
        }
        if !fits { closedFlag.store(true, ordering: .relaxed) }
        stream.wake()
        return fits
    }

    package func takeOutbox() -> [[UInt8]] {
        outbox.withLock { o in
            defer { o = ([], 0) }
            return o.frames
        }
    }

    package func close() {
        closedFlag.store(true, ordering: .relaxed)
        stream.wake()
    }
}
