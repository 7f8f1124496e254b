/// ShoalConfig: board files and the site file — their model, `extends:` merging, validation and
/// errors that name file, line and key. Pure: YAML text is turned into `ConfigNode`s by ShoalYAML
/// (the one importer of libyaml) and handed in, so this module links no C library.

/// Where a node came from: file, 1-based line and column.
public struct SourceMark: Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int
    public init(file: String, line: Int, column: Int) {
        self.file = file
        self.line = line
        self.column = column
    }
    public var description: String { "\(file):\(line)" }
}

/// A YAML document as a tree, every node marked with its source. Mappings keep key order.
public struct ConfigNode: Sendable, Equatable {
    public enum Value: Sendable, Equatable {
        /// A scalar's text; `quoted` is true for '…' and "…" scalars, which are always strings.
        case scalar(String, quoted: Bool)
        case sequence([ConfigNode])
        case mapping([Entry])
        case null
    }

    public struct Entry: Sendable, Equatable {
        public var key: String
        public var keyMark: SourceMark
        public var value: ConfigNode
        public init(key: String, keyMark: SourceMark, value: ConfigNode) {
            self.key = key
            self.keyMark = keyMark
            self.value = value
        }
    }

    public var value: Value
    public var mark: SourceMark

    public init(_ value: Value, mark: SourceMark) {
        self.value = value
        self.mark = mark
    }

    public var entries: [Entry]? { if case .mapping(let e) = value { return e }; return nil }

    public subscript(key: String) -> ConfigNode? { entries?.first { $0.key == key }?.value }

    var kindName: String {
        switch value {
        case .scalar: "a scalar"
        case .sequence: "a list"
        case .mapping: "a mapping"
        case .null: "empty"
        }
    }

    /// Deep merge for `extends:`: keys of `overlay` replace or merge into `self`; mappings merge
    /// key by key, anything else (scalars, lists) is replaced whole. Marks follow the winning node.
    public func merged(with overlay: ConfigNode) -> ConfigNode {
        guard case .mapping(var base) = value, case .mapping(let top) = overlay.value else { return overlay }
        for entry in top {
            if let i = base.firstIndex(where: { $0.key == entry.key }) {
                base[i] = Entry(key: entry.key, keyMark: entry.keyMark, value: base[i].value.merged(with: entry.value))
            } else {
                base.append(entry)
            }
        }
        return ConfigNode(.mapping(base), mark: overlay.mark)
    }
}

/// A configuration error: file, line, the key's path, and what to do. A check that goes on after
/// an error (a board or site file is read to its end) throws the first one and carries the rest in
/// `also`, at most `ConfigError.maxReported` in all; `omitted` counts those left out.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public var mark: SourceMark
    public var key: String
    public var message: String
    /// Further errors found in the same file (or files), in order.
    public var also: [ConfigError] = []
    /// Errors found beyond `maxReported`.
    public var omitted = 0

    public static let maxReported = 20

    public init(mark: SourceMark, key: String, message: String) {
        self.mark = mark
        self.key = key
        self.message = message
    }

    /// This error alone, without the ones found after it.
    public var line: String {
        key.isEmpty ? "\(mark.file):\(mark.line): \(message)" : "\(mark.file):\(mark.line): \(key): \(message)"
    }

    /// Every error, one a line, the first one first.
    public var all: [ConfigError] {
        var first = self
        first.also = []
        first.omitted = 0
        return [first] + also
    }

    public var description: String {
        var lines = all.map(\.line)
        if omitted > 0 { lines.append("and \(omitted) more error\(omitted == 1 ? "" : "s")") }
        return lines.joined(separator: "\n")
    }
}

/// Gathers the errors of one check, so a file is read to its end and every mistake in it is
/// reported at once (bounded by `ConfigError.maxReported`).
public struct ConfigErrors: Sendable {
    public private(set) var errors: [ConfigError] = []
    public private(set) var total = 0
    public init() {}

    public var isEmpty: Bool { total == 0 }

    public mutating func add(_ error: ConfigError) {
        total += error.all.count + error.omitted
        for e in error.all where errors.count < ConfigError.maxReported { errors.append(e) }
    }

    /// Runs `body`; an error it throws is noted and the check goes on.
    public mutating func attempt(_ body: () throws(ConfigError) -> Void) {
        do { try body() } catch { add(error) }
    }

    /// Runs `body` for its value; nil (and the error noted) when it throws.
    public mutating func value<T>(_ body: () throws(ConfigError) -> T) -> T? {
        do { return try body() } catch { add(error); return nil }
    }

    /// The first error with the others in `also`, or nil when there was none: in line order
    /// within each file (the checks run key by key, not line by line), files in the order they
    /// were first named.
    public var combined: ConfigError? {
        let fileOrder = errors.reduce(into: [String: Int]()) { order, e in order[e.mark.file] = order[e.mark.file] ?? order.count }
        let ordered = errors.enumerated().sorted { a, b in
            let (fa, fb) = (fileOrder[a.element.mark.file] ?? 0, fileOrder[b.element.mark.file] ?? 0)
            if fa != fb { return fa < fb }
            if a.element.mark.line != b.element.mark.line { return a.element.mark.line < b.element.mark.line }
            return a.offset < b.offset
        }.map(\.element)
        guard var first = ordered.first else { return nil }
        first.also = Array(ordered.dropFirst())
        first.omitted = total - errors.count
        return first
    }

    /// Throws `combined`, if there was an error.
    public func check() throws(ConfigError) {
        if let e = combined { throw e }
    }
}

/// Turns YAML text into a node tree. ShoalYAML provides the real one.
public typealias ConfigParser = @Sendable (_ text: String, _ file: String) throws(ConfigError) -> ConfigNode
