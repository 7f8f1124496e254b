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

    public init(vector: VersionVector, bodyDigest: UInt64) {
        self.vector = vector
        self.bodyDigest = bodyDigest
    }

    public static let formatByte: UInt8 = 1

    /// [format 1][digest u64 BE][count u8][count × (peer 32 bytes, timestamp u64 BE)].
    public var encoded: [UInt8] {
        var out: [UInt8] = [DocumentVersion.formatByte]
        out.reserveCapacity(10 + vector.entries.count * 40)
        out.appendBigEndian(bodyDigest)
        out.append(UInt8(vector.entries.count))
        for e in vector.entries {
            e.peer.append(to: &out)
            out.appendBigEndian(e.timestamp.rawValue)
        }
        return out
    }

    /// Decodes `encoded`; an empty blob (a document written before versions existed) is the empty version.
    public init(decoding bytes: [UInt8]) throws(VersionError) {
        if bytes.isEmpty {
            self.init(vector: VersionVector(), bodyDigest: 0)
            return
        }
        guard bytes.count >= 10, bytes[0] == DocumentVersion.formatByte else { throw .malformed("unknown format or short header") }
        let digest = bytes.readBigEndianUInt64(at: 1)
        let count = Int(bytes[9])
        guard bytes.count == 10 + count * 40 else { throw .malformed("length \(bytes.count) does not match \(count) entries") }
        var entries: [VersionVector.Entry] = []
        entries.reserveCapacity(count)
        for k in 0..<count {
            let base = 10 + k * 40
            entries.append(.init(peer: PeerID(bytes: Array(bytes[base..<(base + 32)])),
                                 timestamp: HLCTimestamp(rawValue: bytes.readBigEndianUInt64(at: base + 32))))
        }
        self.init(vector: try VersionVector(entries: entries), bodyDigest: digest)
    }

    public var description: String { "[\(vector)]#\(String(bodyDigest, radix: 16).prefix(6))" }

    /// The newest entry's timestamp of an encoded version, read in place: what
    /// `DocumentVersion(decoding:).vector.current?.timestamp` gives for a well-formed version,
    /// without building the vector (no allocation; a store write and an announce check need only
    /// this). nil for an empty or malformed encoding (it does not look for duplicate peers).
    public static func newestTimestamp(encoded bytes: [UInt8]) -> HLCTimestamp? {
        guard bytes.count >= 10, bytes[0] == DocumentVersion.formatByte else { return nil }
        let count = Int(bytes[9])
        guard count > 0, bytes.count == 10 + count * 40 else { return nil }
        var newest: UInt64 = 0
        for k in 0..<count { newest = max(newest, bytes.readBigEndianUInt64(at: 10 + k * 40 + 32)) }
        return HLCTimestamp(rawValue: newest)
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
