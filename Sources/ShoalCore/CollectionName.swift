/// A collection's full name, `scope.collection`, as in the Couchbase seed. `_default._default`
/// always exists. A bare name such as `sensors` means `_default.sensors`.
///
/// Names are 1–251 bytes of `A-Z a-z 0-9 _ - %`, and may not start with `_` or `%` unless they are
/// `_default`: the same rule as Couchbase, so names carry over between the two systems.
public struct CollectionName: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let scope: String
    public let name: String

    public static let defaultName = "_default"
    public static let `default` = CollectionName(uncheckedScope: defaultName, name: defaultName)
    /// Shoal's own collections live in scope `_system`, which no user name can reach (a name may not
    /// start with `_`): only Shoal writes them.
    public static let systemScope = "_system"
    /// The fleet's signed trust entries (`ShoalTrust`).
    public static let trust = CollectionName(uncheckedScope: systemScope, name: "_trust")
    /// Signed release manifests of Shoal itself (`ShoalTrust.ReleaseManifest`).
    public static let releases = CollectionName(uncheckedScope: systemScope, name: "_releases")
    /// One update status document per gateway, written by that gateway (`ShoalTrust.GatewayStatus`).
    public static let status = CollectionName(uncheckedScope: systemScope, name: "_status")
    public var isSystem: Bool { scope == CollectionName.systemScope }
    /// Every system collection, in the order they replicate on a new link (trust first).
    public static let systemNames = [trust, releases, status]

    /// A name as stored or sent by Shoal itself: a user name by the rules, or one of Shoal's own.
    public init(stored scope: String, name: String) throws(NameError) {
        if scope == CollectionName.systemScope, let own = CollectionName.systemNames.first(where: { $0.name == name }) {
            self = own
            return
        }
        try self.init(scope: scope, name: name)
    }

    init(uncheckedScope scope: String, name: String) {
        self.scope = scope
        self.name = name
    }

    public init(scope: String, name: String) throws(NameError) {
        try CollectionName.check(scope, what: "scope")
        try CollectionName.check(name, what: "collection")
        self.scope = scope
        self.name = name
    }

    /// Parses `scope.collection` or `collection` (in the default scope).
    public init(parsing text: String) throws(NameError) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        switch parts.count {
        case 1: try self.init(scope: CollectionName.defaultName, name: String(parts[0]))
        case 2: try self.init(scope: String(parts[0]), name: String(parts[1]))
        default: throw NameError(text: text, reason: "a collection is written `scope.collection` or `collection`")
        }
    }

    public var description: String { "\(scope).\(name)" }

    /// Shoal's own collections first (they replicate first on every link), then by name.
    public static func < (a: CollectionName, b: CollectionName) -> Bool {
        (a.isSystem ? 0 : 1, a.scope, a.name) < (b.isSystem ? 0 : 1, b.scope, b.name)
    }

    /// The same order over full names as written (`scope.collection`).
    public static func replicatesBefore(_ a: String, _ b: String) -> Bool {
        let sa = a.hasPrefix(systemScope + "."), sb = b.hasPrefix(systemScope + ".")
        return sa != sb ? sa : a < b
    }

    static func check(_ part: String, what: String) throws(NameError) {
        let bytes = Array(part.utf8)
        guard !bytes.isEmpty, bytes.count <= 251 else {
            throw NameError(text: part, reason: "a \(what) name has 1 to 251 characters")
        }
        if part == defaultName { return }
        if bytes[0] == UInt8(ascii: "_") || bytes[0] == UInt8(ascii: "%") {
            throw NameError(text: part, reason: "a \(what) name may not start with '_' or '%' (only `_default` may)")
        }
        for b in bytes {
            let ok = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == UInt8(ascii: "_") || b == UInt8(ascii: "-") || b == UInt8(ascii: "%")
            guard ok else { throw NameError(text: part, reason: "a \(what) name uses only A-Z a-z 0-9 _ - %") }
        }
    }
}

/// A name or id that breaks Shoal's rules, with the rule.
public struct NameError: Error, Sendable, Equatable, CustomStringConvertible {
    public let text: String
    public let reason: String
    public var description: String { "\"\(text.prefix(64))\": \(reason)" }
}

/// A document id: 1 to 250 bytes of UTF-8 with no control characters.
public struct DocumentID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public static let maxBytes = 250
    public let rawValue: String

    public init(_ text: String) throws(NameError) {
        let count = text.utf8.count
        guard count >= 1, count <= DocumentID.maxBytes else {
            throw NameError(text: text, reason: "a document id has 1 to \(DocumentID.maxBytes) bytes (this one has \(count))")
        }
        guard !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            throw NameError(text: text, reason: "a document id may not contain control characters")
        }
        self.rawValue = text
    }

    public var description: String { rawValue }
    public static func < (a: DocumentID, b: DocumentID) -> Bool { a.rawValue < b.rawValue }
}
