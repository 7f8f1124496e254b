import ShoalConfig
import ShoalCore
import ShoalMesh
import ShoalStatus
import ShoalWire

/// The mesh's control-socket requests: peers, peer, mesh, events, radios.retry.
extension ControlHandler {
    func dispatchMesh(_ op: String, _ r: [String: JSONValue]) throws -> JSONValue? {
        switch op {
        case "peers":
            let view = gateway.meshView.withLock { $0 }
            return .array(view.peers.map(ControlHandler.json))
        case "peer":
            guard let text = r["peer"]?.stringValue?.lowercased(), text.count >= 4 else { throw bad("\"peer\" is a peer id or at least 4 of its first hex digits") }
            let view = gateway.meshView.withLock { $0 }
            let matches = view.peers.filter { $0.info.peer.description.hasPrefix(text) }
            guard !matches.isEmpty else { throw ControlError(code: .notFound, message: "no peer \(text) known to this gateway") }
            guard matches.count == 1 else { throw bad("\(text) matches \(matches.count.counted("peer")); give more digits") }
            return ControlHandler.json(matches[0])
        case "mesh":
            let view = gateway.meshView.withLock { $0 }
            var counters: [String: JSONValue] = [
                "discoveredPeers": .int(Int64(view.counters.discoveredPeers)), "connectedPeers": .int(Int64(view.counters.connectedPeers)),
                "failedConnectionAttempts": .int(Int64(view.counters.failedConnectionAttempts)),
                "evictions": .int(Int64(view.counters.evictions)), "refusedConnections": .int(Int64(view.counters.refusedConnections)),
            ]
            let c = gateway.counters.withLock { $0 }
            counters["messagesSent"] = .int(Int64(c.messagesSent))
            counters["messagesReceived"] = .int(Int64(c.messagesReceived))
            counters["documentsReceived"] = .int(Int64(c.documentsReceived))
            counters["documentsApplied"] = .int(Int64(c.documentsApplied))
            counters["documentsSent"] = .int(Int64(c.documentsSent))
            counters["bytesSent"] = .int(Int64(c.bytesSent))
            counters["bytesReceived"] = .int(Int64(c.bytesReceived))
            counters["conflicts"] = .int(Int64(c.conflicts))
            return [
                "state": .string(view.state.rawValue),
                "peer": view.me.map { .string($0.description) } ?? .null,
                "counters": .object(counters),
                "links": .array(view.links.map { .array([.string($0.0.description), .string($0.1.description)]) }),
                "tree": .array(view.treeNeighbours.map { .string($0.description) }),
                "dot": .string(view.dot()),
                "options": ControlHandler.meshOptions(gateway.board.mesh),
            ]
        case "events":
            let since = r["since"]?.int64Value ?? 0
            let (entries, last) = gateway.meshEvents.after(since)
            return [
                "events": .array(entries.map { e in
                    var o = e.event.objectValue ?? [:]
                    o["sequence"] = .int(e.sequence)
                    o["atMillis"] = .int(e.atMillis)
                    return .object(o)
                }),
                "last": .int(last),
            ]
        case "radios":
            guard let r = gateway.radios.withLock({ $0 }) else { throw ControlError(code: .unavailable, message: "the radio manager has not looked yet") }
            // The radio's own verdict (usable, why), then the transport as the mesh sees it: the
            // same record `shoal status` shows.
            func transport(_ u: (Bool, String?), _ t: MeshTransport) -> JSONValue {
                var o: [String: JSONValue] = ["usable": .bool(u.0), "why": u.1.map(JSONValue.string) ?? .null]
                if let s = gateway.transportStatus(t), case .object(let mesh) = s.json { o.merge(mesh) { a, _ in a } }
                return .object(o)
            }
            return [
                "wifi": [
                    "interface": r.wifiInterface.map(JSONValue.string) ?? .null, "state": .string(r.wifi.rawValue),
                    "softBlocked": .bool(r.wifiBlock.soft), "hardBlocked": .bool(r.wifiBlock.hard), "transport": transport(r.wifiUsable, .wifi),
                ],
                "bluetooth": [
                    "adapter": r.bluetoothAdapter.map(JSONValue.string) ?? .null, "present": .bool(r.bluetoothPresent), "up": .bool(r.bluetoothUp),
                    "softBlocked": .bool(r.bluetoothBlock.soft), "hardBlocked": .bool(r.bluetoothBlock.hard), "transport": transport(r.bluetoothUsable, .bluetooth),
                ],
            ]
        case "radios.retry":
            guard gateway.retryRadios() else { throw ControlError(code: .unavailable, message: "replication is not running (no identity or store yet?)") }
            return ["retrying": true]
        default:
            return nil
        }
    }

    static func json(_ p: MeshView.Peer) -> JSONValue {
        let i = p.info
        var o: [String: JSONValue] = [
            "peer": .string(i.peer.description),
            "online": .bool(i.online),
            "discoveredOn": .array(i.discoveredOn.map { .string($0.rawValue) }),
            "connectedOn": i.connectedOn.map { .string($0.rawValue) } ?? .null,
            "direction": i.outgoing.map { .string($0 ? "outgoing" : "incoming") } ?? .null,
            "activity": .string(i.activity.rawValue),
            "neighbours": .array(i.neighbours.map { .string($0.description) }),
            "address": p.address.map(JSONValue.string) ?? .null,
            "lastError": i.lastError.map(JSONValue.string) ?? .null,
            "sync": p.sync?.json ?? .null,
        ]
        if let subject = p.certificateSubject {
            o["certificate"] = ["subject": .string(subject), "notAfter": p.certificateNotAfter.map { .int($0) } ?? .null]
        }
        return .object(o)
    }

    /// The mesh options this gateway runs with (the board's, with the site's overrides).
    static func meshOptions(_ mesh: MeshOptions) -> JSONValue {
        var o: [String: JSONValue] = [:]
        for (k, v) in mesh.all { o[k] = .int(v) }
        return .object(o)
    }
}
