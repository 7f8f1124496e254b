import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalWire

/// Wi-Fi discovery, isolated to the transport (on the driver's thread): what the DNS-SD thread
/// found and lost, whether our service is published, and whether the board's Wi-Fi interface is up.
extension TCPTransport {
    /// Recomputes where `peer` can be dialled: its static address first, then DNS-SD's (IPv4
    /// before IPv6 link-local).
    func refreshAddresses(_ peer: PeerID) {
        var list: [HostPort] = staticAddress[peer].map { [$0] } ?? []
        let resolved = dnsFound.values.filter { $0.peer == peer }.map(\.address)
        for a in resolved.sorted(by: { ($0.isIPv6 ? 1 : 0, $0.description) < ($1.isIPv6 ? 1 : 0, $1.description) }) where !list.contains(a) {
            list.append(a)
        }
        addresses[peer] = list.isEmpty ? nil : list
    }

    func handleDNSSD(_ event: DNSSD.Event, _ host: any TransportHost) {
        let log = host.log
        switch event {
        case .daemon(let reachable, let detail):
            if reachable {
                avahiVersion = detail
                log.info(.mesh, "wifi: avahi-daemon reachable (\(detail))")
            } else {
                avahiVersion = nil
                log.warning(.mesh, "wifi: \(detail); discovery waits for it (the gateway keeps its other links)")
            }
        case .published(let name):
            if publishedName != name {
                if let old = publishedName, old != name { log.warning(.mesh, "wifi: the DNS-SD name \(old) is taken on this network; published as \(name)") }
                log.info(.mesh, "wifi: published \(name) (\(wifi?.serviceType ?? "?")) on port \(listener?.port ?? 0)")
            }
            publishedName = name
            host.post(.advertising(.wifi, ok: true, reason: nil))
        case .publishFailed(let why):
            host.post(.advertising(.wifi, ok: false, reason: why))
        case .found(let f):
            guard let text = f.txt["id"], let peer = PeerID(hex: text) else {
                log.verbose(.mesh, "wifi: \(f.name) at \(f.host) has no peer id in its TXT record; ignored")
                return
            }
            guard peer != host.me else { return }  // our own service, seen through the daemon
            guard f.txt["v"] == String(ReplicationMessage.protocolVersion) else {
                if incompatible.insert(peer).inserted {
                    log.warning(.mesh, "wifi: peer \(peer.short) speaks protocol \(f.txt["v"] ?? "?"), we speak \(ReplicationMessage.protocolVersion); not connecting")
                }
                return
            }
            let known = dnsFound.values.contains { $0.peer == peer }
            dnsFound[f.key] = (peer, HostPort(host: f.host, port: f.port))
            refreshAddresses(peer)
            if !known { log.verbose(.mesh, "wifi: found peer \(peer.short) as \(f.name) at \(HostPort(host: f.host, port: f.port)) on \(f.interfaceName)") }
            host.post(.discovered(peer, .wifi, probe: nil))
        case .removed(let key):
            guard let gone = dnsFound.removeValue(forKey: key) else { return }
            refreshAddresses(gone.peer)
            if !dnsFound.values.contains(where: { $0.peer == gone.peer }) && staticAddress[gone.peer] == nil {
                log.verbose(.mesh, "wifi: peer \(gone.peer.short) left DNS-SD")
                host.post(.lost(gone.peer, .wifi))
            }
        case .browseFailed(let why):
            log.warning(.mesh, "wifi: \(why)")
        }
        postDetail(host)
    }

    /// The radio manager's report: Wi-Fi usable or not (interface down, no carrier, rfkill). The
    /// mesh hears when it goes (its Wi-Fi links close, advertising stops) and when it comes back.
    package nonisolated func radiosChanged(_ s: RadioSnapshot) {
        assumeIsolated { $0.radiosChangedHere(s) }
    }

    func radiosChangedHere(_ s: RadioSnapshot) {
        guard let host, wifi?.interface != nil else { return }
        let (up, why) = s.wifiUsable
        interfaceDownReason = why
        if up != interfaceUp {
            interfaceUp = up
            host.post(.radio(.wifi, up: up))
            postDetail(host)
        }
    }

    /// How this transport carries links now, for `shoal status` and `shoal radios` alike (both
    /// read it from the mesh view): listening, static peers, and DNS-SD or why there is none.
    func postDetail(_ host: any TransportHost) {
        var parts: [String] = []
        if let wifi {
            var dnssd = "DNS-SD \(wifi.serviceType)"
            if let publishedName { dnssd += " as \"\(publishedName)\" on port \(listener?.port ?? 0)" }
            parts.append(dnssd)
            parts.append(avahiVersion.map { "avahi-daemon \($0)" } ?? "avahi-daemon not reachable")
            if let i = wifi.interface { parts.append(interfaceUp == false ? (interfaceDownReason ?? "\(i) down") : "\(i) up") }
        }
        // No listener: advertising fails and the transport's error says why; not repeated here.
        if let l = listener, wifi == nil { parts.append("listening on port \(l.port)") }
        if !staticPeers.isEmpty { parts.append("static peers \(staticPeers.map(\.description).joined(separator: ", "))") }
        if wifi == nil { parts.append("no DNS-SD discovery (no Wi-Fi interface on this board)") }
        host.post(.detail(.wifi, parts.joined(separator: ", ")))
    }
}
