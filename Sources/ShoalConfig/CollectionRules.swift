/// Conflict resolvers and filters a site file can give a collection, as data (the runtime turns
/// them into the replicator's closures). In YAML:
///
/// ```yaml
/// collections:
///   - name: sensors.readings
///     resolver: fieldMerge             # the default; or lastWriteWins, deleteWins, mergeFields, localWins, remoteWins,
///                                      # or {max: temperature}, or {min: pressure}
///     documentIDs: [boiler-1, boiler-2]  # only these replicate, both ways
///     pushFilter:                      # a document goes to a peer only if every condition holds
///       idPrefix: boiler-              # or a list of prefixes
///       field: {site: east}            # top-level fields equal to these values
///       fieldIn: {kind: [pump, valve]} # top-level fields with one of these values
///       peers: [<peer id>, …]          # only these peers
///     pullFilter: …                    # the same, for what peers send us
///     ttl: 7d                          # purge (no tombstone) 7 days after the last write
///     maxDocuments: 100000             # then purge the oldest writes past these budgets
///     maxBytes: 64MB
/// ```
public enum ResolverSpec: Sendable, Equatable {
    /// The default: versions joined field by field (each top-level field keeps its newest write,
    /// fields only one side changed survive); a delete against a concurrent edit, or a body that is
    /// not an object, by last-write-wins on the whole document.
    case fieldMerge
    /// The newest write wins (HLC, then peer id); a delete is a write like any other.
    case lastWriteWins
    /// A delete on either side wins; otherwise the newest write.
    case deleteWins
    case localWins
    case remoteWins
    /// Top-level fields of both bodies: a field only one side has is kept; a field both sides hold
    /// with different values takes the value of the side written last (whole-document versions:
    /// it cannot tell which side changed a field; `fieldMerge` can).
    case mergeFields
    /// The side whose numeric `field` is larger (smaller) wins; when only one side has a number there,
    /// it wins; when neither does, the newest write.
    case maxField(String)
    case minField(String)

    public static let names = ["fieldMerge", "lastWriteWins", "deleteWins", "localWins", "remoteWins", "mergeFields", "{max: FIELD}", "{min: FIELD}"]

    /// How the conflict log names it.
    public var name: String {
        switch self {
        case .fieldMerge: "fieldMerge"
        case .lastWriteWins: "lastWriteWins"
        case .deleteWins: "deleteWins"
        case .localWins: "localWins"
        case .remoteWins: "remoteWins"
        case .mergeFields: "mergeFields"
        case .maxField(let f): "max(\(f))"
        case .minField(let f): "min(\(f))"
        }
    }
}

/// A scalar from a site file, typed as YAML reads it: unquoted numbers and booleans are numbers and
/// booleans, `null` or `~` is null, everything else (and anything quoted) a string.
public enum ConfigScalar: Sendable, Equatable, CustomStringConvertible {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null

    init(_ text: String, quoted: Bool) {
        if quoted { self = .string(text); return }
        switch text {
        case "true", "True", "TRUE": self = .bool(true)
        case "false", "False", "FALSE": self = .bool(false)
        case "null", "Null", "NULL", "~", "": self = .null
        default: self = Double(text).map { .number($0) } ?? .string(text)
        }
    }

    public var description: String {
        switch self {
        case .string(let s): "\"\(s)\""
        case .number(let n): n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        case .bool(let b): String(b)
        case .null: "null"
        }
    }
}

/// Conditions on a document (and the peer it goes to or comes from); all must hold.
public struct FilterSpec: Sendable, Equatable {
    public var idPrefixes: [String] = []
    /// Field → the value it must have.
    public var fieldEquals: [String: ConfigScalar] = [:]
    /// Field → the values it may have.
    public var fieldIn: [String: [ConfigScalar]] = [:]
    /// Peer ids (64 hex digits, lower case); empty: any peer.
    public var peers: [String] = []
    public init() {}
}

extension ConfigReader {
    /// `resolver:` — a name or a one-key mapping `{max: FIELD}` / `{min: FIELD}`.
    mutating func resolverSpec(_ key: String) throws(ConfigError) -> ResolverSpec? {
        guard let n = raw(key) else { return nil }
        let keyPath = keyPath(key)
        let unknown = { (what: String) in
            ConfigError(mark: n.mark, key: keyPath, message: "\(what) is not a built-in resolver (\(ResolverSpec.names.joined(separator: ", ")))")
        }
        switch n.value {
        case .scalar(let text, _):
            switch text {
            case "fieldMerge": return .fieldMerge
            case "lastWriteWins": return .lastWriteWins
            case "deleteWins": return .deleteWins
            case "localWins": return .localWins
            case "remoteWins": return .remoteWins
            case "mergeFields": return .mergeFields
            default: throw unknown("\"\(text)\"")
            }
        case .mapping(let entries):
            guard entries.count == 1, let e = entries.first, e.key == "max" || e.key == "min" else {
                throw unknown("a mapping other than {max: FIELD} or {min: FIELD}")
            }
            guard case .scalar(let field, _) = e.value.value, !field.isEmpty else {
                throw ConfigError(mark: e.value.mark, key: "\(keyPath).\(e.key)", message: "expected a top-level field name")
            }
            return e.key == "max" ? .maxField(field) : .minField(field)
        default:
            throw unknown("a \(n.kindName)")
        }
    }

    /// A list of strings (a single string is a list of one).
    mutating func stringList(_ key: String) throws(ConfigError) -> [String]? {
        guard let n = raw(key) else { return nil }
        let keyPath = keyPath(key)
        switch n.value {
        case .scalar(let s, _): return [s]
        case .sequence(let items):
            var out: [String] = []
            for (i, item) in items.enumerated() {
                guard case .scalar(let s, _) = item.value else {
                    throw ConfigError(mark: item.mark, key: "\(keyPath)[\(i)]", message: "expected a string, found \(item.kindName)")
                }
                out.append(s)
            }
            return out
        default:
            throw ConfigError(mark: n.mark, key: keyPath, message: "expected a string or a list of strings, found \(n.kindName)")
        }
    }

    /// `pushFilter:` / `pullFilter:` — see `FilterSpec`. `peersRefused`: why `peers:` has no
    /// meaning here (the uplink's filters: the hub is no peer), nil where it applies.
    mutating func filterSpec(_ key: String, peersRefused: String? = nil) throws(ConfigError) -> FilterSpec? {
        guard var r = try mapping(key) else { return nil }
        if let peersRefused, let entry = r.node.entries?.first(where: { $0.key == "peers" }) {
            throw ConfigError(mark: entry.keyMark, key: r.keyPath("peers"), message: peersRefused)
        }
        var f = FilterSpec()
        f.idPrefixes = try r.stringList("idPrefix") ?? []
        if var fr = try r.mapping("field") {
            for e in fr.node.entries ?? [] {
                guard case .scalar(let text, let quoted) = e.value.value else {
                    throw ConfigError(mark: e.value.mark, key: fr.keyPath(e.key), message: "expected a value (string, number, true/false, null), found \(e.value.kindName)")
                }
                _ = fr.raw(e.key)
                f.fieldEquals[e.key] = ConfigScalar(text, quoted: quoted)
            }
        }
        if var fr = try r.mapping("fieldIn") {
            for e in fr.node.entries ?? [] {
                guard case .sequence(let items) = e.value.value, !items.isEmpty else {
                    throw ConfigError(mark: e.value.mark, key: fr.keyPath(e.key), message: "expected a non-empty list of values")
                }
                var values: [ConfigScalar] = []
                for (i, item) in items.enumerated() {
                    guard case .scalar(let text, let quoted) = item.value else {
                        throw ConfigError(mark: item.mark, key: "\(fr.keyPath(e.key))[\(i)]", message: "expected a value, found \(item.kindName)")
                    }
                    values.append(ConfigScalar(text, quoted: quoted))
                }
                _ = fr.raw(e.key)
                f.fieldIn[e.key] = values
            }
        }
        let peers = try r.stringList("peers") ?? []
        for (i, p) in peers.enumerated() {
            let lower = p.lowercased()
            guard lower.utf8.count == 64, lower.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
                throw ConfigError(mark: r.mark(of: "peers"), key: "\(r.keyPath("peers"))[\(i)]", message: "a peer id is 64 hex digits (see `shoal identity show`)")
            }
            f.peers.append(lower)
        }
        try r.finish()
        if f == FilterSpec() {
            throw ConfigError(mark: r.node.mark, key: r.path, message: "an empty filter: give \(peersRefused == nil ? "idPrefix, field, fieldIn or peers" : "idPrefix, field or fieldIn")")
        }
        return f
    }
}
