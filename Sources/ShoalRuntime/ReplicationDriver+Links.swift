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

/// Link threads: accepting, dialling, probing static peers, and running one link's TLS session.
extension ReplicationDriver {
    func acceptLoop(_ listener: TCPListener) {
        while !isStopping {
            guard let stream = try? listener.accept(timeoutMillis: 250) else { continue }
            let from = stream.remoteHost
            if case .refused(let say) = admission.withLock({ $0.admit(from, nowMillis: monotonicMillis()) }) {
                host.updateCounters { $0.failedConnections += 1 }
                if let say { log.warning(.tls, say) }
                stream.close()
                continue
            }
            spawn("repl-link") {
                let session: TLSSession
                do {
                    session = try TLSSession.accept(over: stream, context: self.serverTLS)
                } catch {
                    self.admission.withLock { $0.release(from) }
                    self.host.updateCounters { $0.failedConnections += 1 }
                    self.log.warning(.tls, "refused an incoming replication link from \(from): \(error)")
                    stream.close()
                    return
                }
                self.admission.withLock { $0.release(from) }
                self.run(LinkIO(id: self.nextLink.add(1, ordering: .relaxed).oldValue, session: session, stream: stream, address: nil), outgoing: false)
            }
        }
    }

    /// One connection the mesh asked for, to the first of the peer's addresses that answers; runs
    /// the link on this thread if it comes up.
    func dial(_ peer: PeerID, at list: [HostPort]) {
        var stream: TCPStream?
        var address = list[0]
        var problems: [String] = []
        for a in list where !isStopping {
            do {
                stream = try TCPStream.connect(host: a.host, port: a.port, timeoutMillis: 5000)
                address = a
                break
            } catch {
                problems.append("\(a): \(error)")
            }
        }
        guard let stream else {
            post(.dialFailed(peer, .wifi, problems.joined(separator: "; ")))
            return
        }
        guard let session = handshake(stream, expecting: peer, over: .wifi, at: address.description) else { return }
        run(LinkIO(id: nextLink.add(1, ordering: .relaxed).oldValue, session: session, stream: stream, address: address.description), outgoing: true)
    }

    /// The client side of a dialled link's TLS handshake; the session if it is the peer we wanted
    /// (otherwise the stream is closed and the mesh told).
    func handshake(_ stream: any LinkStream, expecting peer: PeerID, over t: MeshTransport, at address: String, context: TLSContext? = nil) -> TLSSession? {
        let session: TLSSession
        do { session = try TLSSession.connect(over: stream, context: context ?? clientTLS) } catch {
            stream.close()
            post(.dialFailed(peer, t, "\(address): \(error)"))
            return nil
        }
        guard session.peerID == peer else {
            session.close()
            post(.dialFailed(peer, t, "another gateway (\(session.peerID.short)) answers at \(address) now"))
            return nil
        }
        return session
    }

    /// A connection the mesh asked for over the in-process medium; runs the link on this thread.
    func dial(_ peer: PeerID, over t: MeshTransport, on medium: LocalMedium) {
        let stream: MemoryPipeEnd
        do { stream = try medium.dial(from: node.peer, to: peer, over: t) } catch {
            post(.dialFailed(peer, t, "\(peer.short) cannot be reached over \(t.rawValue)"))
            return
        }
        guard let session = handshake(stream, expecting: peer, over: t, at: "the simulated medium") else { return }
        run(LinkIO(id: nextLink.add(1, ordering: .relaxed).oldValue, session: session, stream: stream, address: nil, transport: t), outgoing: true)
    }

    /// A connection the in-process medium brought us; runs the link on this thread.
    func acceptLink(_ stream: MemoryPipeEnd, transport t: MeshTransport) {
        do {
            let session = try TLSSession.accept(over: stream, context: serverTLS)
            run(LinkIO(id: nextLink.add(1, ordering: .relaxed).oldValue, session: session, stream: stream, address: nil, transport: t), outgoing: false)
        } catch {
            host.updateCounters { $0.failedConnections += 1 }
            log.warning(.tls, "refused an incoming replication link over \(t.rawValue): \(error)")
            stream.close()
        }
    }

    /// The site's static peers, probed during discovery phases: a handshake says which gateway
    /// answers at each address (the peer id is its certificate's digest), so the mesh can choose.
    func probeLoop() {
        var known: [String: PeerID] = [:]
        while !isStopping {
            if scanning.load(ordering: .relaxed) {
                let linked = linkedAddresses.withLock { $0 }
                for address in staticPeers where !isStopping && !linked.contains(address.description) {
                    do {
                        let stream = try TCPStream.connect(host: address.host, port: address.port, timeoutMillis: 2000)
                        let session: TLSSession
                        do { session = try TLSSession.connect(over: stream, context: clientTLS) } catch {
                            stream.close()
                            throw error
                        }
                        let peer = session.peerID
                        if let old = known[address.description], old != peer { post(.lost(old)) }
                        known[address.description] = peer
                        let probe = LinkIO(id: nextLink.add(1, ordering: .relaxed).oldValue, session: session, stream: stream, address: address.description)
                        post(.discovered(peer, address, probe: probe))
                    } catch {
                        if let old = known.removeValue(forKey: address.description) { post(.lost(old)) }
                        log.verbose(.mesh, "static peer \(address) does not answer: \(error)")
                    }
                }
            }
            // Every 2 s while scanning; at once when a phase starts (even one that started while
            // we were probing) or on stop.
            probeWake.withLock {
                if !isStopping && !probeRequested { probeWake.wait(timeoutMillis: 2000) }
                probeRequested = false
            }
        }
    }

    /// Runs one link on the calling thread until it closes. An accepted link is announced to the
    /// node only once its first frame (the peer's HELLO) arrived: a static-peer probe (a handshake,
    /// then goodbye) is not a link.
    func run(_ io: LinkIO, outgoing: Bool) {
        var announced = outgoing
        if outgoing { post(.opened(io.id, io, outgoing: true)) }
        var decoder = FrameDecoder(limit: ReplicationMessage.frameLimit)
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let bodyLimit = node.store.options.maxBodyBytes
        loop: while !isStopping && !io.isClosed {
            do {
                for payload in io.takeOutbox() {
                    try io.session.write(try FrameEncoder.encode(payload, limit: ReplicationMessage.frameLimit), timeoutMillis: 30_000)
                }
                let n = try buffer.withUnsafeMutableBytes { (raw) throws(TLSError) -> Int in try io.session.read(into: raw, timeoutMillis: 1000) }
                if n == 0 { break loop }
                decoder.feed(buffer[0..<n])
                // Decoding and checking documents happen here, on the link's thread, so the node's
                // thread only resolves and writes.
                while let frame = try decoder.next() {
                    if !announced {
                        announced = true
                        post(.opened(io.id, io, outgoing: false))
                    }
                    post(.frame(io.id, ReplicationNode.prepare(frame, maxBodyBytes: bodyLimit), bytes: frame.count))
                }
            } catch TLSError.timeout {
                continue
            } catch {
                log.verbose(.replication, "link \(io.id): \(error)")
                break loop
            }
        }
        // What the node queued last (an error frame before a close) goes out if it can.
        for payload in io.takeOutbox() {
            if let frame = try? FrameEncoder.encode(payload, limit: ReplicationMessage.frameLimit) { try? io.session.write(frame, timeoutMillis: 1000) }
        }
        io.session.close()
        if let drained = (io.stream as? L2CAPStream)?.drainedWhileWriting ?? (io.stream as? TCPStream)?.drainedWhileWriting, drained > 0 {
            log.verbose(.replication, "link \(io.id) (\(io.transport.rawValue)) read \(drained) bytes while its writes waited for the peer")
        }
        if announced { post(.closed(io.id)) } else { log.debug(.mesh, "a peer probed us (\(io.session.peerID.short))") }
    }
}

/// Admission for incoming TCP connections before their TLS handshake ends: at most
/// `perAddress` handshakes from one remote address and `total` from all at once. A refused
/// connection is closed at once; the warning is said at most once per address every 10 s.
struct HandshakeAdmission: Sendable {
    static let perAddress = 4
    static let total = 32
    enum Decision: Equatable { case admitted, refused(String?) }
    private(set) var pending: [String: Int] = [:]
    private(set) var inFlight = 0
    private var refused: [String: (count: Int, lastSaidMillis: Int)] = [:]

    mutating func admit(_ address: String, nowMillis: Int) -> Decision {
        let mine = pending[address, default: 0]
        guard mine < Self.perAddress, inFlight < Self.total else {
            var r = refused[address] ?? (0, Int.min / 2)
            r.count += 1
            defer { refused[address] = r }
            guard nowMillis - r.lastSaidMillis >= 10_000 else { return .refused(nil) }
            r.lastSaidMillis = nowMillis
            let why = mine >= Self.perAddress ? "\(mine) handshakes from it in progress (at most \(Self.perAddress))"
                                               : "\(inFlight) handshakes in progress (at most \(Self.total))"
            let n = r.count
            r.count = 0
            return .refused("refusing connections from \(address): \(why); \(n) refused since the last warning")
        }
        pending[address] = mine + 1
        inFlight += 1
        return .admitted
    }

    mutating func release(_ address: String) {
        guard let n = pending[address] else { return }
        pending[address] = n > 1 ? n - 1 : nil
        inFlight -= 1
        if refused.count > 1024 { refused = [:] }
    }
}
