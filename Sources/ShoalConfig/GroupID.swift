import ShoalCore

/// A group id (Couchbase's peerGroupID, ObjectBox's meshId) and what is derived from it.
public struct GroupID: Sendable, Equatable, CustomStringConvertible {
    public let rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// The DNS-SD service type: `_` + the first 6 bytes of SHA-256(group id) in upper-case hex +
    /// `._tcp`, as in the ObjectBox seed (`com.example.myapp.mesh` gives `_C17B206CE9F6._tcp`).
    public var serviceType: String {
        "_" + SHA256.hex(SHA256.hash(Array(rawValue.utf8)).prefix(6), uppercase: true) + "._tcp"
    }

    /// The Bluetooth LE service UUID (16 bytes, as printed): bytes 6–21 of SHA-256(group id), with
    /// the version-4 and variant bits set, so it reads as a random UUID and differs from the DNS-SD
    /// type's bytes.
    public var bleServiceUUID: [UInt8] {
        var u = Array(SHA256.hash(Array(rawValue.utf8))[6..<22])
        u[6] = (u[6] & 0x0F) | 0x40
        u[8] = (u[8] & 0x3F) | 0x80
        return u
    }

    /// `bleServiceUUID` as text (8-4-4-4-12 hex digits).
    public var bleServiceUUIDText: String {
        let h = SHA256.hex(bleServiceUUID, uppercase: true)
        let c = Array(h)
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(c[$0]) }.joined(separator: "-")
    }
}
