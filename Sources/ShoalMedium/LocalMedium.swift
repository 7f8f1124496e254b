import ShoalCore
import ShoalMesh
import Synchronization
import ShoalThreads

/// An in-process radio medium, in real time: replication drivers in one process that join the same
/// medium hear each other on the transports they advertise (while they scan), and connect through
/// memory pipes that carry the same TLS sessions and frames as TCP. The `Shoal` library's
/// simulated medium; tests and the example firmware use it where no network is wanted.
///
/// Pairs can be cut (`setReachable`): a cut pair stops hearing each other and its open pipes close,
/// as a partition does. A transport can be taken away from one member (`setTransport`), as a radio
/// that goes down.
package final class LocalMedium: Sendable {
    package typealias Heard = @Sendable (_ peer: PeerID, _ transport: MeshTransport, _ online: Bool) -> Void
    package typealias Accept = @Sendable (_ stream: MemoryPipeEnd, _ transport: MeshTransport) -> Void
    package typealias RadioChange = @Sendable (_ transport: MeshTransport, _ up: Bool) -> Void

    struct Member {
        var heard: Heard
        var accept: Accept
        var radio: RadioChange
        var advertising: Set<MeshTransport> = []
        var scanning: Set<MeshTransport> = []
        var down: Set<MeshTransport> = []
        /// Who this member hears now, per transport (what it was told).
        var hears: [MeshTransport: Set<PeerID>] = [:]
    }

    struct State {
        var members: [PeerID: Member] = [:]
        var cut: Set<[PeerID]> = []
        /// Dials to or from these peers over these transports fail (heard, but not reachable);
        /// kept across joins, so a test can set it before a replicator starts.
        var failDials: [PeerID: Set<MeshTransport>] = [:]
        /// Open pipes per pair (sorted), so a cut closes them.
        var pipes: [[PeerID]: [MemoryPipeEnd]] = [:]
    }

    let state = Locked(State())
    /// Each direction of a pipe holds this much before a writer waits.
    package let pipeCapacity: Int

    package init(pipeCapacity: Int = 256 * 1024) { self.pipeCapacity = pipeCapacity }

    static func pair(_ a: PeerID, _ b: PeerID) -> [PeerID] { a < b ? [a, b] : [b, a] }

    package func join(_ peer: PeerID, heard: @escaping Heard, accept: @escaping Accept, radio: @escaping RadioChange) {
        state.withLock { $0.members[peer] = Member(heard: heard, accept: accept, radio: radio) }
    }

    /// Leaves the medium: others lose this peer; its pipes close.
    package func leave(_ peer: PeerID) {
        let (calls, pipes) = state.withLock { s -> ([() -> Void], [MemoryPipeEnd]) in
            s.members[peer] = nil
            var pipes: [MemoryPipeEnd] = []
            for key in s.pipes.keys where key.contains(peer) { pipes += s.pipes.removeValue(forKey: key) ?? [] }
            return (LocalMedium.reconcile(&s), pipes)
        }
        for p in pipes { p.close() }
        for c in calls { c() }
    }

    package func setAdvertising(_ peer: PeerID, _ t: MeshTransport, _ on: Bool) {
        let calls = state.withLock { s -> [() -> Void] in
            if on { s.members[peer]?.advertising.insert(t) } else { s.members[peer]?.advertising.remove(t) }
            return LocalMedium.reconcile(&s)
        }
        for c in calls { c() }
    }

    package func setScanning(_ peer: PeerID, _ t: MeshTransport, _ on: Bool) {
        let calls = state.withLock { s -> [() -> Void] in
            if on { s.members[peer]?.scanning.insert(t) } else { s.members[peer]?.scanning.remove(t) }
            return LocalMedium.reconcile(&s)
        }
        for c in calls { c() }
    }

    /// Cuts or restores the radio between two peers (on every transport).
    package func setReachable(_ a: PeerID, _ b: PeerID, _ reachable: Bool) {
        let key = LocalMedium.pair(a, b)
        let (calls, pipes) = state.withLock { s -> ([() -> Void], [MemoryPipeEnd]) in
            var pipes: [MemoryPipeEnd] = []
            if reachable { s.cut.remove(key) } else {
                s.cut.insert(key)
                pipes = s.pipes.removeValue(forKey: key) ?? []
            }
            return (LocalMedium.reconcile(&s), pipes)
        }
        for p in pipes { p.close() }
        for c in calls { c() }
    }

    /// Takes a transport's radio away from one member, or gives it back. The member's driver hears
    /// of it (as from the radio manager); it stops being heard on that transport.
    package func setTransport(_ peer: PeerID, _ t: MeshTransport, up: Bool) {
        let (calls, radio) = state.withLock { s -> ([() -> Void], RadioChange?) in
            guard s.members[peer] != nil else { return ([], nil) }
            if up { s.members[peer]!.down.remove(t) } else { s.members[peer]!.down.insert(t) }
            return (LocalMedium.reconcile(&s), s.members[peer]!.radio)
        }
        radio?(t, up)
        for c in calls { c() }
    }

    /// Makes dials to and from `peer` over `t` fail while it stays heard there (a network that
    /// passes discovery but not connections), or work again.
    package func setDialsFail(_ peer: PeerID, _ t: MeshTransport, _ failing: Bool) {
        state.withLock { s in
            if failing { s.failDials[peer, default: []].insert(t) } else { s.failDials[peer]?.remove(t) }
        }
    }

    /// A connection from `from` to `to` over `t`: the dialler's end; the other end goes to the
    /// callee's accept handler (on the caller's thread).
    package func dial(from: PeerID, to: PeerID, over t: MeshTransport) throws(StreamError) -> MemoryPipeEnd {
        let key = LocalMedium.pair(from, to)
        let (mine, theirs, accept) = try state.withLock { s throws(StreamError) -> (MemoryPipeEnd, MemoryPipeEnd, Accept) in
            guard let callee = s.members[to], let caller = s.members[from],
                  callee.advertising.contains(t), !callee.down.contains(t), !caller.down.contains(t),
                  !(s.failDials[to]?.contains(t) ?? false), !(s.failDials[from]?.contains(t) ?? false),
                  !s.cut.contains(key) else { throw .closed }
            let (a, b) = MemoryPipe.pair(capacity: pipeCapacity)
            s.pipes[key, default: []].append(a)
            s.pipes[key]!.append(b)
            return (a, b, callee.accept)
        }
        accept(theirs, t)
        return mine
    }

    /// Brings every member's `hears` in line with who advertises now; returns the callbacks to make
    /// (outside the lock).
    static func reconcile(_ s: inout State) -> [() -> Void] {
        var calls: [() -> Void] = []
        for (me, m) in s.members {
            for t in MeshTransport.allCases {
                var now = Set<PeerID>()
                if m.scanning.contains(t) && !m.down.contains(t) {
                    for (other, o) in s.members where other != me && o.advertising.contains(t) && !o.down.contains(t) && !s.cut.contains(pair(me, other)) {
                        now.insert(other)
                    }
                }
                let before = m.hears[t] ?? []
                let heard = m.heard
                for p in now.subtracting(before).sorted() { calls.append { heard(p, t, true) } }
                // Losing a peer is told even when scanning stopped: it is gone from the medium.
                let gone = before.subtracting(now).filter { s.members[$0] == nil || s.cut.contains(pair(me, $0)) || !(s.members[$0]!.advertising.contains(t)) || s.members[$0]!.down.contains(t) || m.down.contains(t) }
                for p in gone.sorted() { calls.append { heard(p, t, false) } }
                s.members[me]!.hears[t] = now.union(before.subtracting(now).subtracting(gone))
            }
        }
        return calls
    }
}
