import ShoalCore
import ShoalThreads

/// The identity a gateway presents in its handshakes, shared by all its TLS contexts (server and
/// client, TCP and Bluetooth). A certificate renewed over the same key (same peer id) is handed
/// over with `present`: handshakes after it send the new certificate, sessions already open keep
/// theirs, and nothing restarts. What a reader gets wrong: a new key is a new peer id, so it is
/// refused here; the gateway restarts replication for that instead.
public final class TLSCredentials: Sendable {
    private let current: Locked<Identity>
    /// Fixed for the credentials' life: every identity presented has it.
    public let peerID: PeerID

    public init(_ identity: Identity) {
        current = Locked(identity)
        peerID = identity.peerID
    }

    /// The identity new handshakes present.
    public var identity: Identity { current.withLock { $0 } }

    /// Presents `renewed` (a certificate over the same key) to the handshakes that follow.
    public func present(_ renewed: Identity) throws(TLSError) {
        guard renewed.peerID == peerID else {
            throw .invalidRequest("the renewed identity has peer id \(renewed.peerID), not \(peerID): a new key needs new credentials")
        }
        current.withLock { $0 = renewed }
    }
}
