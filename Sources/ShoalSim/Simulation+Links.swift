import Glibc
import ShoalCore
import ShoalGateway
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalWire

/// Simulated links: connecting (both managers decide, then TLS and HELLO), closing, sending.
extension Simulation {
    func connect(_ from: Int, _ to: Int, _ t: MeshTransport) {
        let a = nodes[from], b = nodes[to]
        guard a.up, a.core != nil else { return }
        guard b.up, let coreB = b.core, medium.hears(from, to, on: t) else {
            input(a, .dialFailed(b.peer, t, reason: "no answer"))
            return
        }
        let id = nextConn
        nextConn += 1
        var conn = Conn(a: from, b: to, transport: t)
        conn.openedAt = now
        // Authentication first, as on a real link: neither core hears of a link that failed it.
        // With trust and no real TLS, the books answer what the authenticators would: a revoked
        // peer's certificate is refused by whichever side revokes it.
        if config.trust && !config.tls {
            let (byA, byB) = trustRefuses(a, b)
            if byA || byB {
                trustFigures.linksRefused += 1
                note("link to \(to) from \(from): refused, the peer is revoked")
                if byB { input(a, .refused(b.peer, t, reason: "TLS: the peer's certificate is revoked")) } else { input(a, .dialFailed(b.peer, t, reason: "TLS: the peer is revoked")) }
                return
            }
        }
        if config.tls {
            do {
                conn.tls = try SimTLSLink(client: tlsContexts[from].0, server: tlsContexts[to].1)
                handshakes += 1
            } catch {
                note("link \(id): TLS handshake failed: \(error)")
                // A refusal is told to the dialler as on a real link: heard, and a failed attempt.
                if case TLSError.refusedByPeer = error {
                    input(a, .refused(b.peer, t, reason: "TLS: \(error)"))
                } else {
                    input(a, .dialFailed(b.peer, t, reason: "TLS: \(error)"))
                }
                return
            }
        }
        conns[id] = conn
        // B decides first (accept or refuse), then A; each core starts replication (HELLO first)
        // on a link its mesh keeps.
        let actionsB = coreB.handle(.linkOpened(id, peer: a.peer, t, outgoing: false), now: now)
        guard coreB.keeps(id) else {
            conns[id]?.tls?.close()
            conns[id] = nil
            perform(b, actionsB)
            input(a, .dialFailed(b.peer, t, reason: "refused"))
            return
        }
        let actionsA = a.core!.handle(.linkOpened(id, peer: b.peer, t, outgoing: true), now: now)
        if a.core!.keeps(id) { note("link \(id): \(from) → \(to)") }
        // (If A closed it — a link exists — B learns after the link's latency.)
        perform(b, actionsB)
        perform(a, actionsA)
        checkBudget(a)
        checkBudget(b)
    }

    func checkBudget(_ n: SimNode) {
        guard let m = n.mesh, m.linkedPeerCount > config.mesh.maxConnectionCount else { return }
        budgetViolations.append("node \(n.index) is linked to \(m.linkedPeerCount) peers at \(now) ms")
    }

    /// Closes one side of a connection now; the other side notices after the link latency.
    func closeSide(_ id: Int, at node: Int, tellNode: Bool, notifyPeer: Bool = true) {
        guard var c = conns[id] else { return }
        let isA = node == c.a
        guard isA ? c.openA : c.openB else { return }
        if isA { c.openA = false } else { c.openB = false }
        conns[id] = c
        let other = isA ? c.b : c.a
        if tellNode { input(nodes[node], .linkClosed(id)) }
        if (isA ? c.openB : c.openA) {
            // Without a goodbye (crash, partition) the peer notices after a keepalive timeout.
            let delay = notifyPeer ? kind(c.transport).latencyMillis : 3_000
            schedule(at: now + delay, .remoteClosed(conn: id, to: other))
        } else {
            retire(c)
            conns[id] = nil
        }
    }

    func send(_ id: Int, from: Int, _ frame: [UInt8]) {
        guard var c = conns[id] else { return }
        let toB = from == c.a
        guard toB ? c.openA : c.openB else { return }
        guard medium.hears(c.a, c.b, on: c.transport) else { return }  // partitioned: lost; the link breaks by timeout
        let side = toB ? 0 : 1
        var bytes = UInt64(frame.count + 4 + 21)  // frame length + TLS record (ChaCha20-Poly1305: header 5 + tag 16)
        if let tls = c.tls {
            do { bytes = UInt64(try tls.send(frame, fromA: toB)) } catch {
                note("link \(id): TLS write failed: \(error)")
                return
            }
        }
        bytesSent += bytes
        framesSent += 1
        bytesByType[frame.first ?? 0, default: 0] += bytes
        switch ReplicationMessage.frameClass(ofFirstByte: frame.first ?? 0) {
        case .gossip, .control: noteControl(&c, side: side, bytes: bytes)
        case .documents, .blobData: break
        }
        if config.blobs { noteBlobFrame(frame, to: toB ? c.b : c.a) }
        if debugBodies, case .push(_, _, _, let changes, let docs)? = try? ReplicationMessage(decoding: frame) {
            pushedBodies += docs.count
            pushedChanges += changes.count
        }
        let k = kind(c.transport)
        let transmit = (bytes * 1000 + k.bytesPerSecond - 1) / k.bytesPerSecond  // whole ms, rounded up
        var start = max(now, c.busyUntil[side])
        if medium.loss > 0, Double.random(in: 0..<1, using: &rng) < medium.loss { start += k.retransmitMillis }
        c.busyUntil[side] = start + transmit
        c.inFlight[side] += 1
        maxFramesInFlight = max(maxFramesInFlight, c.inFlight[side])
        conns[id] = c
        var at = start + transmit + k.latencyMillis
        let faulty = config.faultsUntilMillis == 0 || now < config.faultsUntilMillis
        if faulty, medium.reorder > 0, Double.random(in: 0..<1, using: &rng) < medium.reorder {
            at += UInt64.random(in: 1...max(2, 4 * k.latencyMillis), using: &rng)  // later frames overtake it
            faultyFrames += 1
        }
        schedule(at: at, .deliver(conn: id, to: toB ? c.b : c.a, frame: frame))
        if faulty, medium.duplicate > 0, Double.random(in: 0..<1, using: &rng) < medium.duplicate {
            c.inFlight[side] += 1
            conns[id] = c
            faultyFrames += 1
            // Over TLS a copy is a replayed record, which the receiving session refuses (its MAC
            // check fails): an empty frame says so to `.deliver`, which closes the link.
            schedule(at: at + UInt64.random(in: 0...max(1, k.latencyMillis), using: &rng), .deliver(conn: id, to: toB ? c.b : c.a, frame: c.tls == nil ? frame : []))
        }
    }
}
