import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalTLS

/// A way to reach peers: TCP (static peers and DNS-SD), Bluetooth LE over L2CAP, the in-process
/// medium, or a test's double. The replication driver knows transports only through this
/// protocol: it asks them to advertise, scan and dial on behalf of the mesh, and they answer with
/// `TransportEvent`s and with authenticated links, which the driver runs. A new transport is a new
/// type; the driver does not change.
///
/// Threads: every call comes from the driver's node thread, so a transport's own state may be
/// confined to it; what a transport's threads learn goes back through `host.post` (or
/// `host.onNodeThread`). Blocking work (accepting, dialling, handshakes, HCI, D-Bus) runs on
/// threads started with `host.spawn`, which the driver joins when it stops.
///
/// What a reader gets wrong: a transport authenticates before it hands over a link (the TLS
/// handshake is the transport's, with the contexts the assembly gave it), and the mesh decides
/// afterwards whether the link is kept.
package protocol Transport: AnyObject, Sendable {
    /// The mesh's radios this transport carries.
    var kinds: Set<MeshTransport> { get }
    /// Starts whatever threads it needs; called once, before the node thread starts (a throw,
    /// such as a listen address in use, stops the driver from starting).
    func start(host: any TransportHost) throws
    /// Become reachable and findable over `kind` (answer: `.advertising`), or stop.
    func advertise(_ kind: MeshTransport, _ on: Bool)
    /// Look for peers over `kind` (they come as `.discovered` / `.lost`), or stop.
    func scan(_ kind: MeshTransport, _ on: Bool)
    /// Dial `peer`: the link comes through `host.run(_:outgoing: true)`, or `.dialFailed` comes.
    func dial(_ peer: PeerID, over kind: MeshTransport)
    /// The radio manager saw a change (interfaces, adapters, rfkill).
    func radiosChanged(_ snapshot: RadioSnapshot)
    /// A link over this transport was kept by the mesh, and later ended.
    func linkKept(_ link: LinkIO)
    func linkEnded(_ link: LinkIO)
    /// The port peers reach it on, if it listens on one.
    var listenPort: UInt16? { get }
    /// Where it reaches `peer`, for `shoal peers` (nil: it does not say).
    func address(of peer: PeerID) -> String?
    /// Stopping, phase one: no new work (agents stop; threads see `host.isStopping`).
    func stop()
    /// Phase two, once the driver's threads ended: close listening sockets.
    func close()
}

extension Transport {
    package func radiosChanged(_ snapshot: RadioSnapshot) {}
    package func linkKept(_ link: LinkIO) {}
    package func linkEnded(_ link: LinkIO) {}
    package var listenPort: UInt16? { nil }
    package func address(of peer: PeerID) -> String? { nil }
    package func close() {}
}

/// What a transport tells the driver.
package enum TransportEvent: Sendable {
    case advertising(MeshTransport, ok: Bool, reason: String?)
    /// A peer of our group answers over `kind`. `probe`: a session that found out who it is (the
    /// link, if the mesh wants this peer now: one handshake instead of two).
    case discovered(PeerID, MeshTransport, probe: LinkIO?)
    case lost(PeerID, MeshTransport)
    /// The radio under `kind` went down or came back.
    case radio(MeshTransport, up: Bool)
    case dialFailed(PeerID, MeshTransport, reason: String)
    /// `peer` answered over `kind` (a dial or a probe) and its authenticator refused us; `error`
    /// is its alert, typed (`TLSError.refusedByPeer`). Counts as a failed attempt.
    case refused(PeerID, MeshTransport, at: String, error: TLSError)
    /// How discovery runs now, for `shoal status` (service type, adapter, daemon).
    case detail(MeshTransport, String)
}

/// The driver, as a transport sees it.
package protocol TransportHost: AnyObject, Sendable {
    var me: PeerID { get }
    var group: String { get }
    var log: Logger { get }
    var isStopping: Bool { get }
    func post(_ event: TransportEvent)
    /// Runs `body` on the node thread (a transport's state lives there).
    func onNodeThread(_ body: @escaping @Sendable () -> Void)
    /// Starts a thread the driver joins when it stops.
    func spawn(_ name: String, _ body: @escaping @Sendable () -> Void)
    func newLinkID() -> LinkID
    /// Runs an authenticated link on the calling thread until it closes.
    func run(_ io: LinkIO, outgoing: Bool)
    /// A connection that failed before it became a link (refused, failed its handshake).
    func countFailedConnection()
    /// An incoming connection whose handshake failed (we refused the peer, it refused us, or it
    /// broke): counted, and logged once per peer (or address) per backoffMillis.
    func incomingFailed(from: String, _ error: TLSError)
    /// The mesh's backoffMillis: how long a refused peer waits before it tries again.
    var backoffMillis: Int { get }
}

extension TransportHost {
    /// The client side of a dialled link's TLS handshake: the session if it is the peer we
    /// wanted (otherwise the stream is closed and `.dialFailed` or `.refused` posted; `failed`
    /// hears a handshake's error first).
    package func handshake(_ stream: any LinkStream, expecting peer: PeerID, over kind: MeshTransport, at address: String,
                           context: TLSContext, failed: (TLSError) -> Void = { _ in }) -> TLSSession? {
        let session: TLSSession
        do { session = try TLSSession.connect(over: stream, context: context) } catch {
            stream.close()
            failed(error)
            if case .refusedByPeer = error {
                post(.refused(peer, kind, at: address, error: error))
            } else {
                post(.dialFailed(peer, kind, reason: "\(address): \(error)"))
            }
            return nil
        }
        guard session.peerID == peer else {
            session.close()
            post(.dialFailed(peer, kind, reason: "another gateway (\(session.peerID.short)) answers at \(address) now"))
            return nil
        }
        return session
    }

    /// The server side of an accepted stream's handshake, then the link on this thread.
    package func acceptAndRun(_ stream: any LinkStream, over kind: MeshTransport, from: String, context: TLSContext, address: String? = nil) {
        let session: TLSSession
        do { session = try TLSSession.accept(over: stream, context: context) } catch {
            stream.close()
            incomingFailed(from: from, error)
            return
        }
        run(LinkIO(id: newLinkID(), session: session, stream: stream, address: address, transport: kind), outgoing: false)
    }
}
