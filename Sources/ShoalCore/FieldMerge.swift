/// The write that last set (or removed) one top-level field of a document: its writer and HLC
/// time. Ordered by time, then writer, as last-write-wins orders whole documents.
public struct FieldStamp: Sendable, Hashable {
    public var peer: PeerID
    public var timestamp: HLCTimestamp
    /// The write removed the field (it is absent from the body).
    public var removed: Bool

    public init(peer: PeerID, timestamp: HLCTimestamp, removed: Bool = false) {
        self.peer = peer
        self.timestamp = timestamp
        self.removed = removed
    }

    func isNewer(than other: FieldStamp) -> Bool { (timestamp, peer) > (other.timestamp, other.peer) }
}

/// Field-level versions: which write set each top-level field of a JSON object, and the join of
/// two concurrent versions field by field. The join mints no new version (the vector is the
/// pointwise maximum, every stamp a write that happened), and every node that joins the same two
/// versions gets the same body and version, whichever it held first.
///
/// What wins, field by field: the newer stamp (HLC time, then writer id). A field one side never
/// saw comes from the other. A field's removal is a stamp like a set. A field in a version without
/// stamps for it counts as set by that version's newest write (so a version from a gateway that
/// keeps no field stamps merges as whole-document last-write-wins, field by field).
public enum FieldMerge {
    /// The stamps a local write of `body` by `writer` at `time` leaves, given the version and body
    /// it replaces: fields it changes, adds or keeps at their value are implicit or keep their old
    /// stamps; fields it drops become removals. A create, a delete, or a body that is not an object
    /// keeps none.
    public static func stampsAfterWrite(previous: DocumentVersion?, previousBody: String?, body: String?,
                                        writer: PeerID, at time: HLCTimestamp) -> [String: FieldStamp] {
        guard let previous, let previousBody, let body,
              let old = try? JSONValue.parse(previousBody).objectValue, let new = try? JSONValue.parse(body).objectValue else { return [:] }
        let oldCurrent = previous.vector.current
        var out: [String: FieldStamp] = [:]
        for (name, value) in new where stampable(name) {
            // Unchanged: whoever set it before still did.
            guard old[name] == value else { continue }
            if let s = previous.fields[name] {
                out[name] = s
            } else if let c = oldCurrent {
                out[name] = FieldStamp(peer: c.peer, timestamp: c.timestamp)
            }
        }
        for name in old.keys where new[name] == nil && stampable(name) {
            out[name] = FieldStamp(peer: writer, timestamp: time, removed: true)
        }
        for (name, s) in previous.fields where s.removed && new[name] == nil && out[name] == nil {
            out[name] = s
        }
        // Stamps equal to the new write itself are implicit.
        out = out.filter { !($0.value.peer == writer && $0.value.timestamp == time && !$0.value.removed) }
        return bounded(out)
    }

    /// Two concurrent versions of a document whose bodies are both JSON objects, joined field by
    /// field; nil when either is a tombstone or not an object (the caller falls back to
    /// last-write-wins for the whole document).
    public static func join(_ a: (body: String?, version: DocumentVersion), _ b: (body: String?, version: DocumentVersion)) -> (body: String, version: DocumentVersion)? {
        guard let ab = a.body, let bb = b.body, let ao = try? JSONValue.parse(ab).objectValue, let bo = try? JSONValue.parse(bb).objectValue,
              let ac = a.version.vector.current, let bc = b.version.vector.current else { return nil }
        let vector = a.version.vector.merged(with: b.version.vector)
        guard let current = vector.current else { return nil }
        func stamp(_ name: String, _ o: [String: JSONValue], _ v: DocumentVersion, _ c: VersionVector.Entry) -> FieldStamp? {
            if let s = v.fields[name] { return s }
            return o[name] == nil ? nil : FieldStamp(peer: c.peer, timestamp: c.timestamp)
        }
        var names = Set(ao.keys).union(bo.keys)
        for (n, _) in a.version.fields { names.insert(n) }
        for (n, _) in b.version.fields { names.insert(n) }
        var body: [String: JSONValue] = [:]
        var fields: [String: FieldStamp] = [:]
        for name in names {
            let sa = stamp(name, ao, a.version, ac), sb = stamp(name, bo, b.version, bc)
            let takeB: Bool
            switch (sa, sb) {
            case (nil, nil): continue
            case (nil, _): takeB = true
            case (_, nil): takeB = false
            case (let x?, let y?): takeB = y.isNewer(than: x) || (y == x && (bo[name].map { v in ao[name].map { v.compactText > $0.compactText } ?? true } ?? false))
            }
            let s = takeB ? sb! : sa!
            if let value = takeB ? bo[name] : ao[name] {
                body[name] = value
                let isCurrent = s.peer == current.peer && s.timestamp == current.timestamp
                if !isCurrent && stampable(name) { fields[name] = FieldStamp(peer: s.peer, timestamp: s.timestamp) }
            } else if stampable(name) {
                fields[name] = FieldStamp(peer: s.peer, timestamp: s.timestamp, removed: true)
            }
        }
        let text = JSONValue.object(body).compactText
        return (text, DocumentVersion(vector: vector, bodyDigest: DocumentVersion.digest(of: text), fields: bounded(fields)))
    }

    /// The stamps of `body` as written under `version`, restated for a version whose vector is
    /// `vector` (a larger one: its newest write may be another): fields `version` counted as set by
    /// its newest write name that write.
    public static func stamps(of body: String?, _ version: DocumentVersion, under vector: VersionVector) -> [String: FieldStamp] {
        guard let body, let o = try? JSONValue.parse(body).objectValue, let own = version.vector.current, let current = vector.current else {
            return version.fields
        }
        var out = version.fields
        if own != current {
            for name in o.keys where out[name] == nil && stampable(name) { out[name] = FieldStamp(peer: own.peer, timestamp: own.timestamp) }
        }
        return bounded(out)
    }

    /// A name a version can stamp (1 to 255 bytes); longer ones count as set by the newest write.
    static func stampable(_ name: String) -> Bool { !name.isEmpty && name.utf8.count <= 255 }

    /// At most `DocumentVersion.maxFieldStamps` (a document with more top-level fields than that
    /// written at different times): the oldest stamps go, whatever their kind. A dropped set then
    /// counts as set by the newest write, a dropped removal as never seen.
    static func bounded(_ stamps: [String: FieldStamp]) -> [String: FieldStamp] {
        guard stamps.count > DocumentVersion.maxFieldStamps else { return stamps }
        let keep = stamps.sorted { x, y in x.value.isNewer(than: y.value) || (x.value.timestamp == y.value.timestamp && x.value.peer == y.value.peer && x.key < y.key) }
            .prefix(DocumentVersion.maxFieldStamps)
        return Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
    }
}
