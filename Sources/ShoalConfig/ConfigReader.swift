/// Reads typed values out of one mapping node, remembering which keys it used, so that
/// `finish()` can reject every key nobody asked for: a misspelt key is an error, never ignored.
public struct ConfigReader {
    public let node: ConfigNode
    public let path: String
    private var used: Set<String> = []
    private let entries: [ConfigNode.Entry]

    public init(_ node: ConfigNode, path: String) throws(ConfigError) {
        self.node = node
        self.path = path
        switch node.value {
        case .mapping(let e): entries = e
        case .null: entries = []
        default: throw ConfigError(mark: node.mark, key: path, message: "expected a mapping, found \(node.kindName)")
        }
    }

    func keyPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    public mutating func raw(_ key: String) -> ConfigNode? {
        used.insert(key)
        guard let n = entries.first(where: { $0.key == key })?.value else { return nil }
        if case .null = n.value { return nil }
        return n
    }

    public mutating func string(_ key: String) throws(ConfigError) -> String? {
        guard let n = raw(key) else { return nil }
        guard case .scalar(let text, _) = n.value else {
            throw ConfigError(mark: n.mark, key: keyPath(key), message: "expected a string, found \(n.kindName)")
        }
        return text
    }

    public mutating func string(_ key: String, default value: String) throws(ConfigError) -> String {
        try string(key) ?? value
    }

    public mutating func requiredString(_ key: String) throws(ConfigError) -> String {
        guard let s = try string(key), !s.isEmpty else {
            throw ConfigError(mark: node.mark, key: keyPath(key), message: "is required")
        }
        return s
    }

    public mutating func int(_ key: String, in range: ClosedRange<Int64>) throws(ConfigError) -> Int64? {
        guard let n = raw(key) else { return nil }
        guard case .scalar(let text, let quoted) = n.value, !quoted, let v = Int64(text) else {
            throw ConfigError(mark: n.mark, key: keyPath(key), message: "expected a whole number, found \(describe(n))")
        }
        guard range.contains(v) else {
            throw ConfigError(mark: n.mark, key: keyPath(key), message: ConfigReader.outOfRange(v, range))
        }
        return v
    }

    /// The words for a number outside its range (files and `import Shoal` say it alike).
    public static func outOfRange(_ value: Int64, _ range: ClosedRange<Int64>) -> String {
        "\(value) is out of range \(range.lowerBound)...\(range.upperBound)"
    }

    public mutating func bool(_ key: String) throws(ConfigError) -> Bool? {
        guard let n = raw(key) else { return nil }
        guard case .scalar(let text, let quoted) = n.value, !quoted else {
            throw ConfigError(mark: n.mark, key: keyPath(key), message: "expected true or false, found \(describe(n))")
        }
        switch text.lowercased() {
        case "true", "yes", "on": return true
        case "false", "no", "off": return false
        default: throw ConfigError(mark: n.mark, key: keyPath(key), message: "expected true or false, found \(describe(n))")
        }
    }

    public mutating func choice<E: RawRepresentable & CaseIterable>(_ key: String, as: E.Type) throws(ConfigError) -> E? where E.RawValue == String {
        guard let text = try string(key) else { return nil }
        guard let v = E(rawValue: text) else {
            let mark = raw(key)?.mark ?? node.mark
            let allowed = E.allCases.map(\.rawValue).joined(separator: ", ")
            throw ConfigError(mark: mark, key: keyPath(key), message: "\"\(text)\" is not one of: \(allowed)")
        }
        return v
    }

    public mutating func mapping(_ key: String) throws(ConfigError) -> ConfigReader? {
        guard let n = raw(key) else { return nil }
        return try ConfigReader(n, path: keyPath(key))
    }

    public mutating func sequence(_ key: String) throws(ConfigError) -> [ConfigNode]? {
        guard let n = raw(key) else { return nil }
        guard case .sequence(let items) = n.value else {
            throw ConfigError(mark: n.mark, key: keyPath(key), message: "expected a list, found \(n.kindName)")
        }
        return items
    }

    /// The mark of a key, for errors about its value found after reading.
    public func mark(of key: String) -> SourceMark {
        entries.first { $0.key == key }?.value.mark ?? node.mark
    }

    /// Rejects every key that was never read.
    public func finish() throws(ConfigError) {
        var errors = ConfigErrors()
        let known = used.sorted().joined(separator: ", ")
        for e in entries where !used.contains(e.key) {
            errors.add(ConfigError(mark: e.keyMark, key: keyPath(e.key), message: "unknown key (known here: \(known))"))
        }
        try errors.check()
    }

    func describe(_ n: ConfigNode) -> String {
        if case .scalar(let t, _) = n.value { return "\"\(t.prefix(40))\"" }
        return n.kindName
    }
}
