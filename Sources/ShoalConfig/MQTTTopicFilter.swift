/// An inbound rule's topic filter with named wildcards: `sensors/+site/+device/state` subscribes
/// to `sensors/+/+/state` and names the two levels `site` and `device` for the id template.
/// `+name` is one level, `#name` (or `#`) the rest, possibly none: `sport/#` matches `sport` too.
/// The names never reach the broker; `mqttFilter` is what is subscribed.
public struct MQTTTopicFilter: Sendable, Equatable, CustomStringConvertible {
    public enum Level: Sendable, Equatable {
        case literal(String)
        /// `+` or `+name`: exactly one level.
        case single(name: String?)
        /// `#` or `#name`: the remaining levels, zero or more; only last.
        case multi(name: String?)
    }

    /// As written in the site file.
    public let text: String
    public let levels: [Level]

    /// The name a template uses for the whole topic; no wildcard may take it.
    public static let topicPlaceholder = "topic"
    /// MQTT's bound on a topic's length in bytes.
    public static let maxBytes = 65_535

    public init(parsing text: String) throws(MQTTSyntaxError) {
        guard !text.isEmpty else { throw MQTTSyntaxError("a topic filter may not be empty (e.g. sensors/+device/state)") }
        guard text.utf8.count <= MQTTTopicFilter.maxBytes else {
            throw MQTTSyntaxError("a topic filter has at most \(MQTTTopicFilter.maxBytes) bytes")
        }
        guard !text.unicodeScalars.contains("\0") else { throw MQTTSyntaxError("a topic filter may not contain a NUL character") }
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        var levels: [Level] = []
        var names: Set<String> = []
        for (i, part) in parts.enumerated() {
            let level = try MQTTTopicFilter.level(part)
            switch level {
            case .literal: break
            case .single(let name), .multi(let name):
                if case .multi = level, i != parts.count - 1 {
                    throw MQTTSyntaxError("\"\(part)\" must be the last level: # takes all the levels after it")
                }
                if let name {
                    guard name != MQTTTopicFilter.topicPlaceholder else {
                        throw MQTTSyntaxError("the name \"topic\" is taken ({topic} is the whole topic); choose another")
                    }
                    guard names.insert(name).inserted else { throw MQTTSyntaxError("the name \"\(name)\" is used twice") }
                }
            }
            levels.append(level)
        }
        self.text = text
        self.levels = levels
    }

    static func level(_ part: Substring) throws(MQTTSyntaxError) -> Level {
        guard let first = part.first, first == "+" || first == "#" else {
            if part.contains("+") || part.contains("#") {
                throw MQTTSyntaxError("\"\(part)\": a wildcard is a whole level (+, +name, # or #name), e.g. sensors/+device/state")
            }
            return .literal(String(part))
        }
        let rest = part.dropFirst()
        let name: String? = rest.isEmpty ? nil : String(rest)
        if let name, !MQTTTopicFilter.isName(name) {
            throw MQTTSyntaxError("\"\(part)\": a wildcard's name is letters, digits and _, not starting with a digit (e.g. +device)")
        }
        return first == "+" ? .single(name: name) : .multi(name: name)
    }

    /// `[A-Za-z_][A-Za-z0-9_]*`: wildcard and placeholder names.
    static func isName<S: StringProtocol>(_ s: S) -> Bool {
        guard let first = s.utf8.first, !(first >= 0x30 && first <= 0x39) else { return false }
        return s.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == UInt8(ascii: "_")
        }
    }

    /// The filter to subscribe, names stripped: `sensors/+/+/state`.
    public var mqttFilter: String {
        levels.map { level in
            switch level {
            case .literal(let s): s
            case .single: "+"
            case .multi: "#"
            }
        }.joined(separator: "/")
    }

    /// The wildcards' names, in order.
    public var names: [String] {
        levels.compactMap { level in
            switch level {
            case .literal: nil
            case .single(let name), .multi(let name): name
            }
        }
    }

    public var description: String { text }

    /// The named fields of `topic`, or nil when the filter does not match it. A `#name` field is
    /// the remaining levels joined by "/" ("" when there are none). As MQTT says, a filter that
    /// starts with a wildcard does not match a topic starting with `$` (`$SYS/…`).
    public func match(_ topic: String) -> [String: String]? {
        // Bytes, as the broker compares them: a "/" followed by a combining mark still splits,
        // and canonically equal but different bytes do not match.
        let parts = topic.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        if topic.utf8.first == UInt8(ascii: "$"), let first = levels.first, first.isWildcard { return nil }
        var fields: [String: String] = [:]
        for (i, level) in levels.enumerated() {
            switch level {
            case .multi(let name):
                if let name { fields[name] = parts[i...].map { String(decoding: $0, as: UTF8.self) }.joined(separator: "/") }
                return fields
            case .single(let name):
                guard i < parts.count else { return nil }
                if let name { fields[name] = String(decoding: parts[i], as: UTF8.self) }
            case .literal(let text):
                guard i < parts.count, parts[i].elementsEqual(text.utf8) else { return nil }
            }
        }
        return parts.count == levels.count ? fields : nil
    }
}

extension MQTTTopicFilter.Level {
    var isWildcard: Bool { if case .literal = self { return false }; return true }
}

/// A topic filter or template that breaks the syntax, with the rule it breaks; the site-file
/// reader adds where it is.
public struct MQTTSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}
