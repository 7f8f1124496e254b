import ShoalCore
import ShoalMesh
import ShoalReplication
import ShoalSupervision

/// The replication service's dynamic children: one per peer it links to, shown in the supervision
/// tree (`shoal status`: `…/replication/links/<peer>`, with state, restarts and last error).
///
/// What a reader gets wrong: nobody here restarts a link. A link that ends abnormally (an I/O or
/// TLS error, a protocol error) is restarted by the mesh, which dials the peer again with its
/// backoff (or the peer dials us) — a supervisor dialling on its own would fight the mesh's link
/// budget. So a child that ended is `stopped` with its error, and `restarts` counts each abnormal
/// end that a new link to the same peer followed. Never `restarting`: a peer that is away would
/// then keep the tree unhealthy and starve the systemd watchdog.
struct LinkChildren {
    struct Child {
        var links: Set<LinkID> = []
        var restarts = 0
        var lastError: String?
        /// The last link ended abnormally (a new link counts as a restart).
        var failed = false
        var endedAt: Int?
    }

    /// At most this many ended children are kept (the oldest go first).
    static let maxEnded = 64

    let report: SupervisionReport?
    let path: String
    var children: [PeerID: Child] = [:]
    /// Why each open link failed, when replication said so before its I/O ended.
    var failures: [LinkID: String] = [:]

    init(report: SupervisionReport?, path: String) {
        self.report = report
        self.path = path
    }

    func childPath(_ peer: PeerID) -> String { "\(path)/links/\(peer.short)" }

    /// A link to `peer` was kept by the mesh.
    mutating func opened(_ link: LinkID, peer: PeerID) {
        var c = children[peer] ?? Child()
        if c.links.isEmpty && c.failed { c.restarts += 1 }
        c.failed = false
        c.endedAt = nil
        c.links.insert(link)
        children[peer] = c
        publish(peer)
    }

    /// Replication failed this link (its I/O ends next).
    mutating func failed(_ link: LinkID, because error: String) {
        failures[link] = error
    }

    /// A link's I/O ended; `error` nil when it was closed on purpose (by us or by the peer).
    mutating func ended(_ link: LinkID, peer: PeerID, error: String?, now: Int) {
        let why = failures.removeValue(forKey: link) ?? error
        guard var c = children[peer], c.links.remove(link) != nil else { return }
        if let why {
            c.failed = true
            c.lastError = why
        }
        if c.links.isEmpty { c.endedAt = now }
        children[peer] = c
        publish(peer)
        trim()
    }

    /// Whether `peer`'s child runs (it has a link), its restarts and last error.
    func state(of peer: PeerID) -> (running: Bool, restarts: Int, lastError: String?)? {
        children[peer].map { (!$0.links.isEmpty, $0.restarts, $0.lastError) }
    }

    func publish(_ peer: PeerID) {
        guard let report, let c = children[peer] else { return }
        report.record(childPath(peer), state: c.links.isEmpty ? .stopped : .running, restarts: c.restarts, lastError: c.lastError)
    }

    /// The service stops: its links are gone, and so are their children.
    mutating func removeAll() {
        for peer in children.keys { report?.remove(childPath(peer)) }
        children = [:]
        failures = [:]
    }

    mutating func trim() {
        let ended = children.filter { $0.value.endedAt != nil }.sorted { $0.value.endedAt! < $1.value.endedAt! }
        for (peer, _) in ended.prefix(max(0, ended.count - Self.maxEnded)) {
            children[peer] = nil
            report?.remove(childPath(peer))
        }
    }
}
