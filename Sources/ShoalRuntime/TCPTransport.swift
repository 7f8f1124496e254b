import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalTLS
import ShoalWire
import Synchronization
import ShoalThreads

/// Wi-Fi as the mesh sees it: TCP links with mutual TLS, found two ways — the site's static peers
/// (probed during discovery phases: a handshake tells who answers at each address) and, with
/// Wi-Fi discovery on, DNS-SD through avahi-daemon (publish while advertising, browse while
/// scanning). Listening is this transport's advertising. The board's Wi-Fi interface is watched
/// for up and down.
///
/// An actor on the driver's executor (its thread): the address book, the DNS-SD state and the
/// discovery detail are isolated to it, and the driver's calls, made on that thread, enter it
/// synchronously (`assumeIsolated`, which checks the thread). Its threads — an accept loop, a
/// dialler per connection, a prober for the static peers, the DNS-SD agent's — reach it through
/// the host (`post`, `onNodeThread`).
package actor TCPTransport: Transport {
    /// Wi-Fi discovery by DNS-SD: the service type (from the group), the name to publish under,
    /// and the board's Wi-Fi interface (watched for up/down; nil: not watched).
    package struct WifiDiscovery: Sendable {
        var serviceType: String
        var serviceName: String
        var interface: String?
        package init(serviceType: String, serviceName: String, interface: String?) {
            self.serviceType = serviceType
            self.serviceName = serviceName
            self.interface = interface
        }
    }

    package nonisolated let kinds: Set<MeshTransport> = [.wifi]
    nonisolated let listen: HostPort?
    nonisolated let staticPeers: [HostPort]
    nonisolated let wifi: WifiDiscovery?
    nonisolated let serverTLS: TLSContext
    nonisolated let clientTLS: TLSContext
    nonisolated let executor: ThreadExecutor
    package nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    /// What `start` sets up, once, from the starting thread: the host, the listener, the DNS-SD agent.
    nonisolated let parts = Locked<(host: (any TransportHost)?, listener: TCPListener?, dnssd: DNSSD?)>((nil, nil, nil))
    nonisolated var host: (any TransportHost)? { parts.withLock { $0.host } }
    nonisolated var listener: TCPListener? { parts.withLock { $0.listener } }
    nonisolated var dnssd: DNSSD? { parts.withLock { $0.dnssd } }

    /// Scanning (the mesh's discovery phase) is on: the prober probes.
    nonisolated let scanning = Atomic<Bool>(false)
    nonisolated let probeWake = ConditionLock()
    /// A probe round was asked for (changed under `probeWake`).
    nonisolated let probeRequested = Locked(false)
    /// Static addresses whose gateway we are linked to (the prober skips them).
    nonisolated let linkedAddresses = Locked<Set<String>>([])
    /// Static addresses whose gateway refused us, and when last (monotonic ms): the prober leaves
    /// them to the mesh's dials (one per backoffMillis) and probes them again only if no dial came
    /// for a backoff and a probe interval more (to notice a gateway that went away).
    nonisolated let refusedAt = Locked<[String: Int]>([:])
    /// Incoming connections still in their TLS handshake, per remote address: a flood or
    /// slow-loris handshakes from one address cannot use up threads, and honest peers (other
    /// addresses) still get in.
    nonisolated let admission = Locked(HandshakeAdmission())

    // Isolated to the driver's thread.
    /// Where each peer can be dialled: static addresses, then what DNS-SD resolved (IPv4 first).
    var addresses: [PeerID: [HostPort]] = [:]
    var staticAddress: [PeerID: HostPort] = [:]
    /// DNS-SD instances (interface/protocol/name) and the peer and address each resolved to.
    var dnsFound: [String: (peer: PeerID, address: HostPort)] = [:]
    var publishedName: String?
    var avahiVersion: String?
    var interfaceUp: Bool?
    var interfaceDownReason: String?
    /// Peers whose TXT said another protocol version (logged once each).
    var incompatible: Set<PeerID> = []

    /// How long a static peer whose name did not resolve waits before the next try (the mesh's
    /// backoffMillis).
    nonisolated let backoffMillis: Int

    package init(listen: HostPort?, peers: [HostPort], wifi: WifiDiscovery?, serverTLS: TLSContext, clientTLS: TLSContext, executor: ThreadExecutor,
                 backoffMillis: Int = 10_000) {
        self.executor = executor
        self.backoffMillis = backoffMillis
        self.listen = listen
        self.staticPeers = peers
        self.wifi = wifi
        self.serverTLS = serverTLS
        self.clientTLS = clientTLS
    }

    package nonisolated var listenPort: UInt16? { listener?.port }

    package nonisolated func start(host: any TransportHost) throws {
        parts.withLock { $0.host = host }
        // DNS-SD tells peers the port, so with discovery on and no address in the site file the
        // gateway listens on every address (IPv6 and IPv4) on a port the kernel picks.
        var address = listen
        if address == nil && wifi != nil { address = HostPort(host: "::", port: 0) }
        if let address {
            var made = try? TCPListener(host: address.host, port: address.port)
            if made == nil && listen == nil { made = try? TCPListener(host: "0.0.0.0", port: 0) }  // a kernel without IPv6
            let l = try made ?? TCPListener(host: address.host, port: address.port)
            parts.withLock { $0.listener = l }
            host.log.info(.mesh, "replication listening on \(HostPort(host: address.host, port: l.port))")
            host.spawn("repl-accept") { self.acceptLoop(l, host) }
        }
        if !staticPeers.isEmpty { host.spawn("repl-probe") { self.probeLoop(host) } }
        host.onNodeThread { self.assumeIsolated { $0.postDetail(host) } }
        if let wifi {
            let agent = DNSSD(serviceType: wifi.serviceType) { [weak self] event in
                guard let self else { return }
                host.onNodeThread { self.assumeIsolated { $0.handleDNSSD(event, host) } }
            }
            if agent.start() { parts.withLock { $0.dnssd = agent } } else { host.log.error(.mesh, "cannot start the DNS-SD thread") }
        }
    }

    package nonisolated func advertise(_ kind: MeshTransport, _ on: Bool) {
        guard let host else { return }
        guard on else { dnssd?.unpublish(); return }
        guard let listener else {
            return host.post(.advertising(.wifi, ok: false, reason: "no replication.listen address in the site file: peers cannot connect here"))
        }
        // Listening is how peers reach us; with DNS-SD, publishing tells them where (the answer
        // comes back as an event from the DNS-SD thread).
        if let dnssd, let wifi {
            dnssd.publish(name: wifi.serviceName, port: listener.port, txt: ["v": String(ReplicationMessage.protocolVersion), "id": host.me.description])
        } else {
            host.post(.advertising(.wifi, ok: true, reason: nil))
        }
    }

    package nonisolated func scan(_ kind: MeshTransport, _ on: Bool) {
        scanning.store(on, ordering: .relaxed)
        dnssd?.browse(on)
        guard on else { return }
        probeWake.withLock {
            probeRequested.withLock { $0 = true }
            probeWake.broadcast()
        }
    }

    package nonisolated func dial(_ peer: PeerID, over kind: MeshTransport) {
        guard let host else { return }
        guard let list = assumeIsolated({ $0.addresses[peer] }), !list.isEmpty else { return host.post(.dialFailed(peer, .wifi, reason: "no address known")) }
        host.spawn("repl-dial") { self.dial(peer, at: list, host) }
    }

    package nonisolated func linkKept(_ link: LinkIO) {
        if let a = link.address { linkedAddresses.withLock { _ = $0.insert(a) } }
    }

    package nonisolated func linkEnded(_ link: LinkIO) {
        if let a = link.address { linkedAddresses.withLock { _ = $0.remove(a) } }
    }

    package nonisolated func stop() {
        if let abandoned = dnssd?.stop(), !abandoned.isEmpty, let host {
            host.log.warning(.peerDiscovery, "DNS-SD: stopping: abandoned \(abandoned.joined(separator: ", ")) still blocked after 3 s")
        }
        probeWake.withLock { probeWake.broadcast() }
    }

    /// Closing a listener under a thread polling it was a data race on its descriptor (found by
    /// ThreadSanitizer): the driver calls this once its threads ended.
    package nonisolated func close() { listener?.close() }

    /// Where the driver shows a peer (`shoal peers`).
    package nonisolated func address(of peer: PeerID) -> String? { assumeIsolated { $0.addresses[peer]?.first?.description } }

    // MARK: - Threads

    nonisolated func acceptLoop(_ listener: TCPListener, _ host: any TransportHost) {
        while !host.isStopping {
            guard let stream = try? listener.accept(timeoutMillis: 250) else { continue }
            let from = stream.remoteHost
            if case .refused(let say) = admission.withLock({ $0.admit(from, nowMillis: monotonicMillis()) }) {
                host.countFailedConnection()
                if let say { host.log.warning(.tls, say) }
                stream.close()
                continue
            }
            host.spawn("repl-link") {
                let session: TLSSession
                do throws(TLSError) {
                    session = try TLSSession.accept(over: stream, context: self.serverTLS)
                } catch {
                    self.admission.withLock { $0.release(from) }
                    stream.close()
                    host.incomingFailed(from: "from \(from)", error)
                    return
                }
                self.admission.withLock { $0.release(from) }
                host.run(LinkIO(id: host.newLinkID(), session: session, stream: stream, address: nil), outgoing: false)
            }
        }
    }

    /// One connection the mesh asked for, to the first of the peer's addresses that answers; runs
    /// the link on this thread if it comes up.
    nonisolated func dial(_ peer: PeerID, at list: [HostPort], _ host: any TransportHost) {
        var stream: TCPStream?
        var address = list[0]
        var problems: [String] = []
        for a in list where !host.isStopping {
            do {
                stream = try TCPTransport.connect(a, timeoutMillis: 5000)
                address = a
                break
            } catch {
                problems.append("\(a): \(error)")
            }
        }
        let key = address.description
        guard let stream else {
            refusedAt.withLock { for a in list { $0[a.description] = nil } }
            return host.post(.dialFailed(peer, .wifi, reason: problems.joined(separator: "; ")))
        }
        let refused: (TLSError) -> Void = { error in
            self.refusedAt.withLock { if case .refusedByPeer = error { $0[key] = monotonicMillis() } else { $0[key] = nil } }
        }
        guard let session = host.handshake(stream, expecting: peer, over: .wifi, at: key, context: clientTLS, failed: refused) else { return }
        refusedAt.withLock { $0[key] = nil }
        host.run(LinkIO(id: host.newLinkID(), session: session, stream: stream, address: address.description), outgoing: true)
    }

    /// A static peer that answered and refused us: heard (at that address), and a failed attempt,
    /// in one input; the prober then leaves it to the mesh's dials, one per backoffMillis.
    nonisolated func probeRefused(_ peer: PeerID, at address: HostPort, _ error: TLSError, _ host: any TransportHost) {
        refusedAt.withLock { $0[address.description] = monotonicMillis() }
        host.onNodeThread {
            self.assumeIsolated { t in
                t.staticAddress[peer] = address
                t.refreshAddresses(peer)
            }
            host.post(.refused(peer, .wifi, at: address.description, error: error))
        }
    }

    /// The site's static peers, probed during discovery phases: a handshake says which gateway
    /// answers at each address (the peer id is the digest of its certificate's public key), so the
    /// mesh can choose.
    nonisolated func probeLoop(_ host: any TransportHost) {
        var known: [String: PeerID] = [:]
        /// Static peers by name: when the name failed to resolve, when to try again and why not.
        var unresolved: [String: (retryAt: Int, reason: String)] = [:]
        /// Static peers by name: what each resolved to last (logged when it changes).
        var resolvedTo: [String: [HostPort]] = [:]
        while !host.isStopping {
            if scanning.load(ordering: .relaxed) {
                let linked = linkedAddresses.withLock { $0 }
                for address in staticPeers where !host.isStopping && !linked.contains(address.description) {
                    if let u = unresolved[address.description], monotonicMillis() < u.retryAt { continue }
                    if let at = refusedAt.withLock({ $0[address.description] }), monotonicMillis() < at + host.backoffMillis + 2000 { continue }
                    do {
                        let numeric: [HostPort]
                        do { numeric = try TCPTransport.resolve(address) } catch {
                            // A failed attempt with its reason, logged when the reason changes, tried
                            // again after backoffMillis: never a crash, never a log line every 2 s.
                            host.countFailedConnection()
                            if unresolved[address.description]?.reason != error.reason {
                                host.log.warning(.mesh, "static peer \(address): \(error); trying again every \(backoffMillis) ms")
                            }
                            unresolved[address.description] = (monotonicMillis() + backoffMillis, error.reason)
                            throw error
                        }
                        unresolved.removeValue(forKey: address.description)
                        if address.isName, resolvedTo[address.description] != numeric {
                            resolvedTo[address.description] = numeric
                            host.log.info(.mesh, "static peer \(address) resolves to \(numeric.map(\.description).joined(separator: ", "))")
                        }
                        let stream = try TCPTransport.connect(numeric, timeoutMillis: 2000)
                        let session: TLSSession
                        do { session = try TLSSession.connect(over: stream, context: clientTLS) } catch {
                            stream.close()
                            if case .refusedByPeer(let who?, _) = error, let peer = PeerID(hex: who) {
                                if let old = known[address.description], old != peer { host.post(.lost(old, .wifi)) }
                                known[address.description] = peer
                                probeRefused(peer, at: address, error, host)
                                continue
                            }
                            throw error
                        }
                        refusedAt.withLock { $0[address.description] = nil }
                        let peer = session.peerID
                        if let old = known[address.description], old != peer { host.post(.lost(old, .wifi)) }
                        known[address.description] = peer
                        let probe = LinkIO(id: host.newLinkID(), session: session, stream: stream, address: address.description)
                        host.onNodeThread {
                            self.assumeIsolated { t in
                                t.staticAddress[peer] = address
                                t.refreshAddresses(peer)
                            }
                            host.post(.discovered(peer, .wifi, probe: probe))
                        }
                    } catch {
                        refusedAt.withLock { $0[address.description] = nil }
                        if let old = known.removeValue(forKey: address.description) { host.post(.lost(old, .wifi)) }
                        if !(error is NameLookupError) { host.log.verbose(.mesh, "static peer \(address) does not answer: \(error)") }
                    }
                }
            }
            // Every 2 s while scanning; at once when a phase starts (even one that started while
            // we were probing) or on stop.
            probeWake.withLock {
                if !host.isStopping && !probeRequested.withLock({ $0 }) { probeWake.wait(timeoutMillis: 2000) }
                probeRequested.withLock { $0 = false }
            }
        }
    }
}

extension TCPTransport {
    /// The numeric addresses of a site file's peer: itself when numeric; a host name resolved now
    /// (getaddrinfo, on the calling thread: a transport's own), and a `.local` name the system
    /// cannot resolve asked of avahi-daemon.
    static func resolve(_ a: HostPort) throws(NameLookupError) -> [HostPort] {
        guard a.isName else { return [a] }
        do {
            return try SystemCall.addresses(of: a.host).map { HostPort(host: $0, port: a.port) }
        } catch {
            guard a.host.lowercased().hasSuffix(".local") else { throw error }
            do { return [HostPort(host: try MDNSHostResolver.resolve(a.host), port: a.port)] } catch let avahi {
                throw NameLookupError(host: a.host, reason: "\(error.reason); \(avahi.reason)")
            }
        }
    }

    /// A connection to the first of `list` that answers (the last failure if none does).
    static func connect(_ list: [HostPort], timeoutMillis: Int32) throws -> TCPStream {
        var last: (any Error)?
        for a in list {
            do { return try TCPStream.connect(host: a.host, port: a.port, timeoutMillis: timeoutMillis) } catch { last = error }
        }
        throw last ?? NameLookupError(host: list.first?.host ?? "?", reason: "no address")
    }

    /// A connection to a site file's or DNS-SD's address, resolving a name first.
    static func connect(_ a: HostPort, timeoutMillis: Int32) throws -> TCPStream {
        try connect(try resolve(a), timeoutMillis: timeoutMillis)
    }
}

extension TCPStream: LinkStream {}
