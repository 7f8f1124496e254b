/// A document's version: for each peer that wrote it, the HLC timestamp of that peer's latest
/// write. Entries are kept sorted by peer id, so equal vectors encode to equal bytes.
public struct VersionVector: Sendable, Hashable, CustomStringConvertible {
    public struct Entry: Sendable, Hashable {
        public let peer: PeerID
        public let timestamp: HLCTimestamp
        public init(peer: PeerID, timestamp: HLCTimestamp) {
            self.peer = peer
            self.timestamp = timestamp
        }
    }

    /// Most writers a document may name; a vector past this is refused as malformed.
    public static let maxEntries = 255
    public private(set) var entries: [Entry]

    public init() { entries = [] }

    public init(entries: [Entry]) throws(VersionError) {
        guard entries.count <= VersionVector.maxEntries else { throw .tooManyEntries(entries.count) }
        let sorted = entries.sorted { $0.peer < $1.peer }
        for i in sorted.indices.dropFirst() where sorted[i].peer == sorted[i - 1].peer { throw .duplicatePeer }
        self.entries = sorted
    }

    public var isEmpty: Bool { entries.isEmpty }

    public func timestamp(of peer: PeerID) -> HLCTimestamp? { entries.first { $0.peer == peer }?.timestamp }

    /// The newest entry (timestamp, then peer id): the version's "current" write, which
    /// last-write-wins compares.
    public var current: Entry? {
        entries.max { ($0.timestamp, $0.peer) < ($1.timestamp, $1.peer) }
    }

    /// This vector with `peer`'s entry set to `timestamp`.
    public func setting(_ peer: PeerID, to timestamp: HLCTimestamp) -> VersionVector {
        var copy = self
        if let i = copy.entries.firstIndex(where: { $0.peer == peer }) {
            copy.entries[i] = Entry(peer: peer, timestamp: max(timestamp, copy.entries[i].timestamp))
        } else {
            copy.entries.append(Entry(peer: peer, timestamp: timestamp))
            copy.entries.sort { $0.peer < $1.peer }
        }
        return copy
    }

    /// The pointwise maximum: a version that dominates (or equals) both.
    public func merged(with other: VersionVector) -> VersionVector {
        var out = self
        for e in other.entries { out = out.setting(e.peer, to: e.timestamp) }
        return out
    }

    public enum Order: Sendable, Equatable { case equal, dominates, dominated, concurrent }

    /// How this vector relates to `other`.
    public func compare(_ other: VersionVector) -> Order {
        var greater = false, less = false
        var i = 0, j = 0
        let a = entries, b = other.entries
        while i < a.count || j < b.count {
            if j >= b.count || (i < a.count && a[i].peer < b[j].peer) {
                greater = true; i += 1
            } else if i >= a.count || b[j].peer < a[i].peer {
                less = true; j += 1
            } else {
                if a[i].timestamp > b[j].timestamp { greater = true }
                if a[i].timestamp < b[j].timestamp { less = true }
                i += 1; j += 1
            }
            if greater && less { return .concurrent }
        }
        return greater ? .dominates : (less ? .dominated : .equal)
    }

    public var description: String {
        entries.map { "\($0.peer.short)@\($0.timestamp)" }.joined(separator: ",")
    }
}

public enum VersionError: Error, Sendable, Equatable, CustomStringConvertible {
    case tooManyEntries(Int)
    case duplicatePeer
    case malformed(String)
    public var description: String {
        switch self {
        case .tooManyEntries(let n): "version vector with \(n) entries (at most \(VersionVector.maxEntries))"
        case .duplicatePeer: "version vector names a peer twice"
        case .malformed(let why): "malformed version: \(why)"
        }
    }
}

/// What the store keeps as a document's version: the vector and a 64-bit digest of the body
/// (0 for a tombstone). Two nodes that merged the same conflict with a custom resolver can hold
/// equal vectors but different bodies; the digest tells them apart and breaks the tie the same way
/// everywhere (the larger digest wins), so every node converges.
public struct DocumentVersion: Sendable, Hashable, CustomStringConvertible {
    public var vector: VersionVector
    public var bodyDigest: UInt64
    /// Who last set each top-level field, where that is not the vector's current (newest) write,
    /// and fields removed (see `FieldStamp`). A field in the body with no entry here was set by the
    /// current write; a version with none at all (format 1) says that of every field.
    public var fields: [String: FieldStamp]

    public init(vector: VersionVector, bodyDigest: UInt64, fields: [String: FieldStamp] = [:]) {
        self.vector = vector
        self.bodyDigest = bodyDigest
        self.fields = fields
    }

    public static let formatByte: UInt8 = 1
    /// Format 1 followed by the field stamps.
    public static let fieldsFormatByte: UInt8 = 2
    /// Most field stamps a version keeps (past it the oldest go first; see `FieldMerge.bounded`).
    public static let maxFieldStamps = 1024

    /// Format 1: [1][digest u64 BE][count u8][count × (peer 32 bytes, timestamp u64 BE)].
    /// Format 2 (when there are field stamps): [2] and the same, then [stamps u16 BE] and per stamp,
    /// in name order: [name length u8][name UTF-8][flags u8: 1 removed][writer: index into the
    /// entries u8][timestamp u64 BE].
    public var encoded: [UInt8] {
        var out: [UInt8] = [fields.isEmpty ? DocumentVersion.formatByte : DocumentVersion.fieldsFormatByte]
        out.reserveCapacity(10 + vector.entries.count * 40)
        out.appendBigEndian(bodyDigest)
        out.append(UInt8(vector.entries.count))
        for e in vector.entries {
            e.peer.append(to: &out)
            out.appendBigEndian(e.timestamp.rawValue)
        }
        guard !fields.isEmpty else { return out }
        let named = fields.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        precondition(named.count <= DocumentVersion.maxFieldStamps, "more field stamps than a version holds")
        out.append(UInt8(named.count >> 8))
        out.append(UInt8(named.count & 0xFF))
        for (name, stamp) in named {
            let n = Array(name.utf8)
            guard let writer = vector.entries.firstIndex(where: { $0.peer == stamp.peer }) else {
                preconditionFailure("a field stamp names a writer the vector does not")
            }
            precondition(!n.isEmpty && n.count <= 255, "a stamped field name is 1 to 255 bytes")
            out.append(UInt8(n.count))
            out.append(contentsOf: n)
            out.append(stamp.removed ? 1 : 0)
            out.append(UInt8(writer))
            out.appendBigEndian(stamp.timestamp.rawValue)
        }
        return out
    }

    /// Decodes `encoded`; an empty blob (a document written before versions existed) is the empty version.
    public init(decoding bytes: [UInt8]) throws(VersionError) {
        if bytes.isEmpty {
            self.init(vector: VersionVector(), bodyDigest: 0)
            return
        }
        guard bytes.count >= 10, bytes[0] == DocumentVersion.formatByte || bytes[0] == DocumentVersion.fieldsFormatByte else {
            throw .malformed("unknown format or short header")
        }
        let digest = bytes.readBigEndianUInt64(at: 1)
        let count = Int(bytes[9])
        let end = 10 + count * 40
        guard bytes[0] == DocumentVersion.formatByte ? bytes.count == end : bytes.count > end else {
            throw .malformed("length \(bytes.count) does not match \(count) entries")
        }
        var entries: [VersionVector.Entry] = []
        entries.reserveCapacity(count)
        for k in 0..<count {
            let base = 10 + k * 40
            entries.append(.init(peer: PeerID(bytes: Array(bytes[base..<(base + 32)])),
                                 timestamp: HLCTimestamp(rawValue: bytes.readBigEndianUInt64(at: base + 32))))
        }
        let vector = try VersionVector(entries: entries)
        let fields = bytes[0] == DocumentVersion.fieldsFormatByte ? try DocumentVersion.decodeStamps(bytes, from: end, entries: entries) : [:]
        self.init(vector: vector, bodyDigest: digest, fields: fields)
    }

    static func decodeStamps(_ bytes: [UInt8], from start: Int, entries: [VersionVector.Entry]) throws(VersionError) -> [String: FieldStamp] {
        guard start + 2 <= bytes.count else { throw .malformed("field stamps cut short") }
        let count = Int(bytes[start]) << 8 | Int(bytes[start + 1])
        guard count > 0, count <= DocumentVersion.maxFieldStamps else { throw .malformed("format 2 with \(count) field stamps") }
        var fields: [String: FieldStamp] = [:]
        fields.reserveCapacity(min(count, (bytes.count - start) / 12))
        var i = start + 2
        var previous: ArraySlice<UInt8> = []
        for _ in 0..<count {
            guard i < bytes.count else { throw .malformed("field stamps cut short") }
            let n = Int(bytes[i])
            guard n > 0, i + 1 + n + 10 <= bytes.count else { throw .malformed("field stamp cut short") }
            let nameBytes = bytes[(i + 1)..<(i + 1 + n)]
            guard previous.isEmpty || previous.lexicographicallyPrecedes(nameBytes) else { throw .malformed("field stamps out of order") }
            guard let name = String(validating: nameBytes, as: UTF8.self) else { throw .malformed("field name is not UTF-8") }
            let flags = bytes[i + 1 + n], writer = Int(bytes[i + 2 + n])
            guard flags <= 1, writer < entries.count else { throw .malformed("field stamp flags or writer out of range") }
            let ts = HLCTimestamp(rawValue: bytes.readBigEndianUInt64(at: i + 3 + n))
            guard ts <= entries[writer].timestamp else { throw .malformed("field stamp newer than its writer's entry") }
            fields[name] = FieldStamp(peer: entries[writer].peer, timestamp: ts, removed: flags == 1)
            previous = nameBytes
            i += 11 + n
        }
        guard i == bytes.count else { throw .malformed("bytes after the field stamps") }
        return fields
    }

    public var description: String { "[\(vector)]#\(String(bodyDigest, radix: 16).prefix(6))" + (fields.isEmpty ? "" : "+\(fields.count)f") }

    /// The newest entry's timestamp of an encoded version, read in place: what
    /// `DocumentVersion(decoding:).vector.current?.timestamp` gives for a well-formed version,
    /// without building the vector (no allocation; a store write and an announce check need only
    /// this). nil for an empty or malformed encoding (it does not look for duplicate peers).
    public static func newestTimestamp(encoded bytes: [UInt8]) -> HLCTimestamp? {
        guard bytes.count >= 10, bytes[0] == DocumentVersion.formatByte || bytes[0] == DocumentVersion.fieldsFormatByte else { return nil }
        let count = Int(bytes[9])
        let end = 10 + count * 40
        guard count > 0, bytes[0] == DocumentVersion.formatByte ? bytes.count == end : bytes.count > end else { return nil }
        var newest: UInt64 = 0
        for k in 0..<count { newest = max(newest, bytes.readBigEndianUInt64(at: 10 + k * 40 + 32)) }
        return HLCTimestamp(rawValue: newest)
    }

    /// An encoded version as a peer that does not know field stamps takes it: format 1, the same
    /// vector and digest (a format-1 version comes back as it is).
    public static func documentLevel(_ bytes: [UInt8]) -> [UInt8] {
        guard bytes.count >= 10, bytes[0] == DocumentVersion.fieldsFormatByte else { return bytes }
        let end = 10 + Int(bytes[9]) * 40
        guard bytes.count > end else { return bytes }
        var out = Array(bytes[0..<end])
        out[0] = DocumentVersion.formatByte
        return out
    }

    /// A 64-bit digest of the body's UTF-8 bytes, eight at a time (FNV-style multiply and a final
    /// avalanche): a tie-breaker, not a security digest. Never 0 for a body (0 means tombstone).
    public static func digest(of body: String?) -> UInt64 {
        guard var body else { return 0 }
        return body.withUTF8 { bytes in
            var h: UInt64 = 0xcbf2_9ce4_8422_2325 ^ UInt64(bytes.count)
            let raw = UnsafeRawBufferPointer(bytes)
            var i = 0
            while i + 8 <= raw.count {
                h = (h ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self).littleEndian) &* 0x0000_0100_0000_01B3
                h ^= h >> 29
                i += 8
            }
            while i < raw.count {
                h = (h ^ UInt64(raw[i])) &* 0x0000_0100_0000_01B3
                i += 1
            }
            h ^= h >> 33
            h = h &* 0xFF51_AFD7_ED55_8CCD
            h ^= h >> 33
            return h == 0 ? 1 : h
        }
    }
}

extension [UInt8] {
    public mutating func appendBigEndian(_ v: UInt64) {
        for shift in stride(from: 56, through: 0, by: -8) { append(UInt8(truncatingIfNeeded: v >> UInt64(shift))) }
    }
    public mutating func appendBigEndian(_ v: UInt32) {
        for shift in stride(from: 24, through: 0, by: -8) { append(UInt8(truncatingIfNeeded: v >> UInt32(shift))) }
    }
    public func readBigEndianUInt64(at i: Int) -> UInt64 {
        var v: UInt64 = 0
        for k in 0..<8 { v = v << 8 | UInt64(self[i + k]) }
        return v
    }
}
