/// A document id or topic template: literal text with `{name}` placeholders, `{site}-{device}`
/// or `shoal/{collection}/{id}`. There is no escape: a `{` or `}` that opens or closes no
/// placeholder is an error, so a typo never becomes part of every id.
public struct MQTTTemplate: Sendable, Equatable, CustomStringConvertible {
    public enum Part: Sendable, Equatable {
        case literal(String)
        case placeholder(String)
    }

    /// As written in the site file.
    public let text: String
    public let parts: [Part]

    public init(parsing text: String) throws(MQTTSyntaxError) {
        guard !text.isEmpty else { throw MQTTSyntaxError("a template may not be empty (e.g. \"{site}-{device}\")") }
        var parts: [Part] = []
        var literal = ""
        var rest = Substring(text)
        while let c = rest.first {
            rest = rest.dropFirst()
            switch c {
            case "{":
                guard let close = rest.firstIndex(of: "}") else {
                    throw MQTTSyntaxError("a '{' with no '}' after it; placeholders are written {name}")
                }
                let name = rest[..<close]
                guard !name.isEmpty else { throw MQTTSyntaxError("an empty placeholder {}; write a name in it, e.g. {device}") }
                guard MQTTTopicFilter.isName(name) else {
                    throw MQTTSyntaxError("\"{\(name)}\": a placeholder's name is letters, digits and _, not starting with a digit")
                }
                if !literal.isEmpty { parts.append(.literal(literal)) }
                literal = ""
                parts.append(.placeholder(String(name)))
                rest = rest[rest.index(after: close)...]
            case "}":
                throw MQTTSyntaxError("a '}' with no '{' before it; placeholders are written {name}")
            default:
                literal.append(c)
            }
        }
        if !literal.isEmpty { parts.append(.literal(literal)) }
        self.text = text
        self.parts = parts
    }

    /// The placeholders' names, each once, in order of first use.
    public var placeholders: [String] {
        var seen: Set<String> = []
        return parts.compactMap { part in
            guard case .placeholder(let name) = part, seen.insert(name).inserted else { return nil }
            return name
        }
    }

    /// The literal text (placeholders left out), for checks on what a template always contains.
    public var literalText: String {
        parts.map { part in if case .literal(let s) = part { return s }; return "" }.joined()
    }

    /// The text with each placeholder replaced by its field; a field that is not given renders as
    /// nothing (the site-file check makes sure every placeholder has one).
    public func render(_ fields: [String: String]) -> String {
        var out = ""
        for part in parts {
            switch part {
            case .literal(let s): out += s
            case .placeholder(let name): out += fields[name] ?? ""
            }
        }
        return out
    }

    public var description: String { text }
}
