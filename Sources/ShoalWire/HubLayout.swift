import ShoalCore

/// Where and how a group's documents live on the hub (see README "When one site is not enough"):
/// one stream per collection, named `SHOAL_<G>_<tok(collection)>`, holding the latest message of
/// each document on `shoal.<G>.<tok(collection)>.<tok(id)>`. G is the first 6 bytes of SHA-256 of
/// the group id in upper-case hex (the DNS-SD type's digits); tok keeps `[A-Za-z0-9-]` and writes
/// every other byte (`_` too) as `_XX` (upper-case hex), so any collection or document id is one
/// subject token and a valid stream name. Not `%XX`: nats-server 2.9 formats acknowledgement
/// subjects with the stream name as a format string, and a `%` there garbles them.
public struct HubLayout: Sendable, Equatable {
    public let groupToken: String

    public init(group: String) {
        groupToken = SHA256.hex(SHA256.hash(Array(group.utf8)).prefix(6), uppercase: true)
    }

    public func streamName(_ collection: CollectionName) -> String {
        "SHOAL_\(groupToken)_\(HubLayout.token(collection.description))"
    }

    /// The stream's subjects (one wildcard token: the document id).
    public func streamSubjects(_ collection: CollectionName) -> String {
        "shoal.\(groupToken).\(HubLayout.token(collection.description)).*"
    }

    public func subject(_ collection: CollectionName, id: String) -> String {
        "shoal.\(groupToken).\(HubLayout.token(collection.description)).\(HubLayout.token(id))"
    }

    /// The document id a subject of `collection`'s stream names; nil for any other subject.
    public func documentID(subject: String, in collection: CollectionName) -> String? {
        let prefix = "shoal.\(groupToken).\(HubLayout.token(collection.description))."
        guard subject.hasPrefix(prefix) else { return nil }
        return HubLayout.untoken(String(subject.dropFirst(prefix.count)))
    }

    public static func token(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for b in text.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                out += "_" + SHA256.hex([b], uppercase: true)
            }
        }
        return out
    }

    /// The text a token stands for; nil when it is not one `token` makes (a stray `_`, a byte
    /// outside the kept set, invalid UTF-8).
    public static func untoken(_ token: String) -> String? {
        var bytes: [UInt8] = []
        var it = Array(token.utf8)[...]
        while let b = it.popFirst() {
            if b == UInt8(ascii: "_") {
                guard it.count >= 2, let v = UInt8(String(decoding: it.prefix(2), as: UTF8.self), radix: 16) else { return nil }
                bytes.append(v)
                it = it.dropFirst(2)
            } else {
                guard HubLayout.token(String(decoding: [b], as: UTF8.self)).utf8.count == 1 else { return nil }
                bytes.append(b)
            }
        }
        // Only the one spelling `token` makes (upper-case hex, no escape of a kept byte): two
        // subjects must never name one document.
        guard let s = String(validating: bytes, as: UTF8.self), !s.isEmpty, HubLayout.token(s) == token else { return nil }
        return s
    }
}

/// The headers a document version travels with.
public enum HubHeader {
    /// Hex of the encoded `DocumentVersion` (vector and body digest; format 1).
    public static let version = "Shoal-Version"
    /// The peer id of the gateway that published it.
    public static let origin = "Shoal-Origin"
    /// The newest entry's hybrid logical clock, readable (`<ms>.<logical>`); informative.
    public static let hlc = "Shoal-HLC"
    /// `true` on a tombstone (empty payload).
    public static let deleted = "Shoal-Deleted"
    /// Hex of the version with its field stamps (format 2), when it has any. `Shoal-Version` holds
    /// it without them (format 1), which protocol-1 gateways read; they ignore this header.
    public static let fields = "Shoal-Fields"

    public static func hex(_ bytes: [UInt8]) -> String { SHA256.hex(bytes) }

    public static func bytes(hex: String) -> [UInt8]? {
        let u = Array(hex.utf8)
        guard u.count % 2 == 0, !u.isEmpty else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(u.count / 2)
        var i = 0
        while i < u.count {
            guard let v = UInt8(String(decoding: u[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
            out.append(v)
            i += 2
        }
        return out
    }
}
