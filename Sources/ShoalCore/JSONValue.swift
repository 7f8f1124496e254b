/// ShoalCore: the plain types every layer shares — JSON values, names of collections and documents,
/// logging, clocks, and the small threading tools that keep blocking work off Swift's cooperative pool.
///
/// `JSONValue` is Shoal's own JSON tree. Shoal avoids full Foundation (the binary must stay small),
/// so it parses and prints JSON itself. Numbers keep their literal text, so a document's
/// `12345678901234567890` is never rounded through a Double on its way through a gateway.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public static func int<I: BinaryInteger>(_ value: I) -> JSONValue { .number(String(value)) }
    public static func double(_ value: Double) -> JSONValue {
        value.isFinite ? .number(String(value)) : .null
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    public var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var int64Value: Int64? { if case .number(let n) = self { return Int64(n) }; return nil }
    public var doubleValue: Double? { if case .number(let n) = self { return Double(n) }; return nil }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o }; return nil }
    public var isObject: Bool { if case .object = self { return true }; return false }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .number(String(value)) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        var members: [String: JSONValue] = [:]
        for (k, v) in elements { members[k] = v }
        self = .object(members)
    }
    public init(nilLiteral: ()) { self = .null }
}
