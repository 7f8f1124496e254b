import ShoalCore

/// One direction of a link's `topologyRefs` gossip: the ids its receiver can resolve from their
/// first 8 bytes. The sender and the receiver each keep one and change it alike, frame by frame
/// (a link delivers in order), so a short reference resolves to the very id the sender meant: an
/// id goes in full until it is in the table, and an id whose prefix another holds takes its place.
/// At most `capacity` ids: past that, new ids always go in full (a hostile peer cannot make the
/// receiver's table grow without bound).
public struct PeerRefTable: Sendable {
    public static let capacity = 4096
    var ids: [UInt64: PeerID] = [:]

    public init() {}

    public var count: Int { ids.count }

    /// The sender's side: gossip entries as a `topologyRefs` message (at most
    /// `maxTopologyEntries`, each with at most 64 neighbours, as `topology` carries).
    public mutating func message(_ entries: [(origin: PeerID, sequence: UInt64, neighbours: [PeerID])]) -> ReplicationMessage {
        precondition((1...ReplicationMessage.maxTopologyEntries).contains(entries.count), "1 to maxTopologyEntries entries a frame")
        return .topologyRefs(entries.map { e in
            var refs: [ReplicationMessage.PeerRef] = [reference(e.origin)]
            refs.reserveCapacity(1 + min(64, e.neighbours.count))
            for n in e.neighbours.prefix(64) { refs.append(reference(n)) }
            return ReplicationMessage.TopologyEntry(sequence: e.sequence, refs: refs)
        })
    }

    mutating func reference(_ p: PeerID) -> ReplicationMessage.PeerRef {
        if ids[p.prefix64] == p { return .short(p.prefix64) }
        learn(p)
        return .full(p)
    }

    /// The receiver's side: the ids a `topologyRefs` message names, in order (nil: a short
    /// reference to an id never sent in full on this link).
    public mutating func resolve(_ refs: [ReplicationMessage.PeerRef]) -> [PeerID]? {
        var out: [PeerID] = []
        out.reserveCapacity(refs.count)
        for ref in refs {
            switch ref {
            case .full(let p):
                learn(p)
                out.append(p)
            case .short(let prefix):
                guard let p = ids[prefix] else { return nil }
                out.append(p)
            }
        }
        return out
    }

    mutating func learn(_ p: PeerID) {
        if ids[p.prefix64] != nil || ids.count < Self.capacity { ids[p.prefix64] = p }
    }
}
