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

/// One link's session, its outbox, and the wake-up that interrupts its read.
final class LinkIO: @unchecked Sendable {
    let id: LinkID
    let session: TLSSession
    let stream: TCPStream
    /// The static address we dialled (nil for accepted links).
    let address: String?
    let outbox = Mutex<[[UInt8]]>([])
    let closedFlag = Atomic<Bool>(false)

    init(id: LinkID, session: TLSSession, stream: TCPStream, address: String?) {
        self.id = id
        self.session = session
        self.stream = stream
        self.address = address
    }

    var isClosed: Bool { closedFlag.load(ordering: .relaxed) }

    func send(_ payload: [UInt8]) {
        outbox.withLock { $0.append(payload) }
        stream.wake()
    }

    func takeOutbox() -> [[UInt8]] { outbox.withLock { o in defer { o.removeAll() }; return o } }

    func close() {
        closedFlag.store(true, ordering: .relaxed)
        stream.wake()
    }
}
