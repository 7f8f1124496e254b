import ShoalCore

/// A query over one collection's live documents: a filter, an order, a page, and either documents
/// (optionally projected to some fields) or aggregates (count/min/max/sum/avg, per group).
///
/// What a reader gets wrong: comparisons are typed as JSON, not as SQLite. A string never equals
/// a number, `true` never equals `1`, and a field that is missing or of another type makes every
/// comparison on it false (so `not (x = 1)` and `x != 1` hold for a document without `x`).
/// `QueryReference` is the same semantics in Swift, over the same documents.
public struct Query: Sendable, Equatable {
    public var filter: QueryPredicate?
    public var order: [QueryOrderKey] = []
    /// At most this many documents or groups (nil: `QueryLimits.defaultLimit`).
    public var limit: Int?
    public var offset: Int = 0
    /// A cursor from a previous result (`QueryResult.nextCursor`): continue after its last row.
    public var after: String?
    /// Only these fields of each document (nil: the whole body).
    public var fields: [FieldPath]?
    /// Aggregates instead of documents (empty: documents).
    public var aggregates: [QueryAggregate] = []
    public var groupBy: [FieldPath] = []

    public init(filter: QueryPredicate? = nil, order: [QueryOrderKey] = [], limit: Int? = nil, offset: Int = 0, after: String? = nil,
                fields: [FieldPath]? = nil, aggregates: [QueryAggregate] = [], groupBy: [FieldPath] = []) {
        self.filter = filter
        self.order = order
        self.limit = limit
        self.offset = offset
        self.after = after
        self.fields = fields
        self.aggregates = aggregates
        self.groupBy = groupBy
    }

    /// Parses the filter text (`site = "east" and pressure > 2.5`; empty: every document).
    public init(_ filterText: String) throws(QueryError) {
        self.init(filter: try QueryParser.parseFilter(filterText))
    }
}

/// Bounds every query: nothing returns an unbounded result or parses without bound.
public enum QueryLimits {
    public static let maxTextBytes = 4096
    /// Parentheses and `not`s nested (the compiled SQL must also stay within SQLite's parser).
    public static let maxDepth = 16
    /// Comparisons (and `in` values) in one filter.
    public static let maxTerms = 128
    public static let defaultLimit = 100
    public static let maxLimit = 10_000
    public static let maxOffset = 100_000
    public static let maxOrderKeys = 8
    public static let maxFields = 32
    public static let maxAggregates = 16
    public static let maxGroupBy = 8
    public static let maxPathSegments = 16
    public static let maxSegmentBytes = 128
}

/// A malformed query: what is wrong and where (the 1-based character position in its text; 0
/// when the problem is not at one place, such as a cursor that does not fit the order).
public struct QueryError: Error, Sendable, Equatable, CustomStringConvertible {
    public var position: Int
    public var message: String
    public init(position: Int, message: String) {
        self.position = position
        self.message = message
    }
    public var description: String { position > 0 ? "at character \(position): \(message)" : message }
}

/// A field: `site`, `a.b.c`, a segment in backticks for other characters (`` `odd key`.x ``), or
/// a pseudo-field: `id` (the document id) and `updatedAt` (its last local write, ms since 1970).
/// A quoted `` `id` `` is the body's own field `id`.
public struct FieldPath: Sendable, Hashable, CustomStringConvertible {
    public enum Pseudo: String, Sendable { case id, updatedAt }
    public let segments: [String]
    public let pseudo: Pseudo?

    public static let id = FieldPath(pseudo: .id)
    public static let updatedAt = FieldPath(pseudo: .updatedAt)

    init(pseudo: Pseudo) {
        self.segments = [pseudo.rawValue]
        self.pseudo = pseudo
    }

    /// A body field by its segments; refuses names SQLite's JSON paths cannot hold.
    public init(segments: [String]) throws(QueryError) {
        guard !segments.isEmpty, segments.count <= QueryLimits.maxPathSegments else {
            throw QueryError(position: 0, message: "a field has 1 to \(QueryLimits.maxPathSegments) segments")
        }
        for s in segments { try FieldPath.check(segment: s, position: 0) }
        self.segments = segments
        self.pseudo = nil
    }

    /// `a.b.c` (or `id` / `updatedAt`), as the CLI's --order and --fields write it.
    public init(parsing text: String) throws(QueryError) {
        self = try QueryParser.parseField(text)
    }

    static func check(segment s: String, position: Int) throws(QueryError) {
        guard !s.isEmpty else { throw QueryError(position: position, message: "a field name is empty") }
        guard s.utf8.count <= QueryLimits.maxSegmentBytes else {
            throw QueryError(position: position, message: "a field name is longer than \(QueryLimits.maxSegmentBytes) bytes")
        }
        for u in s.unicodeScalars where u == "\"" || u == "`" || u.value < 0x20 || u.value == 0x7F {
            throw QueryError(position: position, message: "a field name cannot hold a double quote, a backtick or a control character")
        }
    }

    /// Every segment is [A-Za-z0-9_]: the JSON path may be written into SQL text (expression
    /// indexes need it literally). Any other path is bound as a parameter.
    var isPlain: Bool {
        segments.allSatisfy { s in s.utf8.allSatisfy { b in (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F } }
    }

    /// SQLite's JSON path: `$.a.b`, with other segments quoted (`$."odd key"`).
    var jsonPath: String {
        var out = "$"
        for s in segments {
            let plain = s.utf8.allSatisfy { b in (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F }
            out += plain ? "." + s : ".\"" + s + "\""
        }
        return out
    }

    public var description: String {
        if pseudo != nil { return segments[0] }
        return segments.map { s in
            let plain = !s.isEmpty && s.utf8.allSatisfy { b in (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F }
            let first = s.unicodeScalars.first!
            return plain && FieldPath.Pseudo(rawValue: s) == nil && !Parser.keywords.contains(s) && !(first >= "0" && first <= "9") ? s : "`" + s + "`"
        }.joined(separator: ".")
    }

    /// The value at this path of a body (nil: missing). Pseudo-fields are not in the body.
    func value(in body: JSONValue) -> JSONValue? {
        var v = body
        for s in segments {
            guard case .object(let members) = v, let next = members[s] else { return nil }
            v = next
        }
        return v
    }
}

/// A literal of a query.
public enum QueryLiteral: Sendable, Hashable, CustomStringConvertible {
    case string(String)
    /// The number's text, as written (an integer if it fits in Int64, otherwise a double).
    case number(String)
    case bool(Bool)
    case null

    public var description: String {
        switch self {
        case .string(let s): JSONValue.string(s).compactText
        case .number(let n): n
        case .bool(let b): String(b)
        case .null: "null"
        }
    }
}

public enum QueryComparison: String, Sendable, CaseIterable {
    case equal = "=", notEqual = "!=", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">="
}

/// A filter.
public indirect enum QueryPredicate: Sendable, Equatable {
    case compare(FieldPath, QueryComparison, QueryLiteral)
    case oneOf(FieldPath, [QueryLiteral])
    case exists(FieldPath)
    /// The field is a string that begins with this prefix (by Unicode scalars, not graphemes).
    case startsWith(FieldPath, String)
    case and(QueryPredicate, QueryPredicate)
    case or(QueryPredicate, QueryPredicate)
    case not(QueryPredicate)
    case always(Bool)
}

public struct QueryOrderKey: Sendable, Equatable {
    public var field: FieldPath
    public var descending: Bool
    public init(_ field: FieldPath, descending: Bool = false) {
        self.field = field
        self.descending = descending
    }
}

public struct QueryAggregate: Sendable, Equatable, CustomStringConvertible {
    public enum Function: String, Sendable, CaseIterable { case count, min, max, sum, avg }
    public var function: Function
    /// nil only for `count` (count of documents).
    public var field: FieldPath?
    public init(_ function: Function, _ field: FieldPath? = nil) {
        self.function = function
        self.field = field
    }
    public var description: String { field.map { "\(function.rawValue)(\($0))" } ?? function.rawValue }
}

/// One row of a document query.
public struct QueryRow: Sendable, Equatable {
    public var id: String
    public var updatedAtMillis: Int64
    /// The body as stored, or only the asked-for fields (as a JSON object).
    public var body: String
}

/// One group of an aggregate query: its key (per group-by field: nil when the field is missing,
/// `.null` for null and for arrays and objects, which group together) and one value per aggregate.
public struct QueryGroup: Sendable, Equatable {
    public var keys: [JSONValue?]
    public var values: [JSONValue]
}

public struct QueryResult: Sendable, Equatable {
    public var rows: [QueryRow] = []
    public var groups: [QueryGroup] = []
    /// Set when the page is full: pass it as `Query.after` for the next page.
    public var nextCursor: String?
    public var isAggregate: Bool = false
}

extension QueryPredicate: CustomStringConvertible {
    /// The query text that parses back to this predicate, with only the parentheses its shape
    /// needs (`and` and `or` chains read left to right): never deeper than the text it came from.
    public var description: String {
        switch self {
        case .compare(let f, let op, let lit): "\(f) \(op.rawValue) \(lit)"
        case .oneOf(let f, let lits): "\(f) in [\(lits.map(\.description).joined(separator: ", "))]"
        case .exists(let f): "\(f) exists"
        case .startsWith(let f, let p): "\(f) starts \(JSONValue.string(p).compactText)"
        case .and(let a, let b):
            "\(a.isOr ? "(\(a))" : "\(a)") and \(b.isOr || b.isAnd ? "(\(b))" : "\(b)")"
        case .or(let a, let b): "\(a) or \(b.isOr ? "(\(b))" : "\(b)")"
        case .not(let a): a.isOr || a.isAnd ? "not (\(a))" : "not \(a)"
        case .always(let b): b ? "exists id" : "not exists id"
        }
    }

    var isAnd: Bool { if case .and = self { return true }; return false }
    var isOr: Bool { if case .or = self { return true }; return false }
}
