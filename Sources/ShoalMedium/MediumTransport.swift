import ShoalCore
import ShoalMesh
import ShoalRuntime
import ShoalTLS
import ShoalThreads

/// The in-process medium (`LocalMedium`) as a transport: advertising and scanning go to the
/// medium, links are memory pipes carrying the same TLS sessions and frames as TCP. It carries
/// both of the mesh's radios, so transport switching runs on it too.
package final class MediumTransport: Transport {
    package let kinds: Set<MeshTransport> = [.wifi, .bluetooth]
    let medium: LocalMedium
    let serverTLS: TLSContext
    let clientTLS: TLSContext
    /// Set once by `start`; read by every call after it.
    let hostSlot = Locked<(any TransportHost)?>(nil)
    var host: (any TransportHost)? { hostSlot.withLock { $0 } }

    package init(medium: LocalMedium, serverTLS: TLSContext, clientTLS: TLSContext) {
        self.medium = medium
        self.serverTLS = serverTLS
        self.clientTLS = clientTLS
    }

    package func start(host: any TransportHost) throws {
        hostSlot.withLock { $0 = host }
        medium.join(host.me, heard: { peer, t, online in host.post(online ? .discovered(peer, t, probe: nil) : .lost(peer, t)) },
                    accept: { stream, t in
                        guard !host.isStopping else { stream.close(); return }
                        host.spawn("repl-link") { host.acceptAndRun(stream, over: t, from: "over \(t.rawValue)", context: self.serverTLS) }
                    },
                    radio: { t, up in host.post(.radio(t, up: up)) })
    }

    package func advertise(_ kind: MeshTransport, _ on: Bool) {
        guard let host else { return }
        medium.setAdvertising(host.me, kind, on)
        if on { host.post(.advertising(kind, ok: true, reason: nil)) }
    }

    package func scan(_ kind: MeshTransport, _ on: Bool) {
        guard let host else { return }
        medium.setScanning(host.me, kind, on)
    }

    package func dial(_ peer: PeerID, over kind: MeshTransport) {
        guard let host else { return }
        let medium = self.medium
        host.spawn("repl-dial") {
            let stream: MemoryPipeEnd
            do { stream = try medium.dial(from: host.me, to: peer, over: kind) } catch {
                return host.post(.dialFailed(peer, kind, reason: "\(peer.short) cannot be reached over \(kind.rawValue)"))
            }
            guard let session = host.handshake(stream, expecting: peer, over: kind, at: "the simulated medium", context: self.clientTLS) else { return }
            host.run(LinkIO(id: host.newLinkID(), session: session, stream: stream, address: nil, transport: kind), outgoing: true)
        }
    }

    package func stop() {
        if let host { medium.leave(host.me) }
    }
}

extension MemoryPipeEnd: LinkStream {}

extension ReplicationDriver {
    /// Runs on an in-process medium instead of TCP and DNS-SD.
    package nonisolated func start(medium: LocalMedium) {
        try? start(transports: [MediumTransport(medium: medium, serverTLS: serverTLS, clientTLS: clientTLS)], missing: [:])
    }
}
