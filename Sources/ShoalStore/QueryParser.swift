import ShoalCore

/// The query text: a filter, and the small lists the CLI and the control op take beside it.
///
///     filter  := (empty) | or
///     or      := and ("or" and)*
///     and     := unary ("and" unary)*
///     unary   := "not" unary | "(" or ")" | "exists" field | field test
///     test    := ("=" | "!=" | "<" | "<=" | ">" | ">=") literal
///              | "in" "[" literal ("," literal)* "]" | "exists" | "starts" string
///     field   := segment ("." segment)*      segment := [A-Za-z0-9_]+ | `any text`
///     literal := "string" (JSON escapes) | number | true | false | null
///
/// Keywords are lower case; a field named like one is written in backticks. Every error names the
/// character where it was found.
public enum QueryParser {
    public static func parseFilter(_ text: String) throws(QueryError) -> QueryPredicate? {
        var p = try Parser(text)
        if p.peek.kind == .end { return nil }
        let e = try p.parseOr(depth: 0)
        guard p.peek.kind == .end else { throw p.error("expected and, or or the end of the query, found \(p.peek.describe)") }
        return e
    }

    public static func parseField(_ text: String) throws(QueryError) -> FieldPath {
        var p = try Parser(text)
        let f = try p.parseField()
        guard p.peek.kind == .end else { throw p.error("expected the end of the field name, found \(p.peek.describe)") }
        return f
    }

    /// `a,-b,c` (a leading `-`: descending; a `+` or nothing: ascending).
    public static func parseOrder(_ text: String) throws(QueryError) -> [QueryOrderKey] {
        var keys: [QueryOrderKey] = []
        var p = try Parser(text)
        while true {
            var descending = false
            if p.peek.kind == .minus { descending = true; p.advance() } else if p.peek.kind == .plus { p.advance() }
            keys.append(QueryOrderKey(try p.parseField(), descending: descending))
            guard keys.count <= QueryLimits.maxOrderKeys else { throw p.error("at most \(QueryLimits.maxOrderKeys) order keys") }
            if p.peek.kind == .end { return keys }
            guard p.peek.kind == .comma else { throw p.error("expected a comma between order keys, found \(p.peek.describe)") }
            p.advance()
        }
    }

    /// `a,b.c`.
    public static func parseFields(_ text: String, max: Int = QueryLimits.maxFields) throws(QueryError) -> [FieldPath] {
        var out: [FieldPath] = []
        var p = try Parser(text)
        while true {
            out.append(try p.parseField())
            guard out.count <= max else { throw p.error("at most \(max) fields") }
            if p.peek.kind == .end { return out }
            guard p.peek.kind == .comma else { throw p.error("expected a comma between fields, found \(p.peek.describe)") }
            p.advance()
        }
    }

    /// `count,avg(pressure),max(a.b)`.
    public static func parseAggregates(_ text: String) throws(QueryError) -> [QueryAggregate] {
        var out: [QueryAggregate] = []
        var p = try Parser(text)
        while true {
            let start = p.peek
            guard case .word(let name) = start.kind, let function = QueryAggregate.Function(rawValue: name) else {
                throw p.error("expected count, min(FIELD), max(FIELD), sum(FIELD) or avg(FIELD), found \(start.describe)")
            }
            p.advance()
            if p.peek.kind == .open {
                p.advance()
                let f = try p.parseField()
                guard p.peek.kind == .close else { throw p.error("expected ) after the field, found \(p.peek.describe)") }
                p.advance()
                out.append(QueryAggregate(function, f))
            } else {
                guard function == .count else { throw p.error("\(name) needs a field: \(name)(FIELD)") }
                out.append(QueryAggregate(.count))
            }
            guard out.count <= QueryLimits.maxAggregates else { throw p.error("at most \(QueryLimits.maxAggregates) aggregates") }
            if p.peek.kind == .end { return out }
            guard p.peek.kind == .comma else { throw p.error("expected a comma between aggregates, found \(p.peek.describe)") }
            p.advance()
        }
    }
}

struct Token {
    enum Kind: Equatable {
        case word(String), quotedName(String), string(String), number(String)
        case compare(QueryComparison), open, close, openBracket, closeBracket, comma, dot, minus, plus, end
    }
    var kind: Kind
    /// 1-based character position.
    var position: Int

    var describe: String {
        switch kind {
        case .word(let w): "\"\(w.prefix(40))\""
        case .quotedName(let n): "`\(n.prefix(40))`"
        case .string(let s): "the string \(JSONValue.string(String(s.prefix(40))).compactText)"
        case .number(let n): "the number \(n.prefix(40))"
        case .compare(let c): c.rawValue
        case .open: "("
        case .close: ")"
        case .openBracket: "["
        case .closeBracket: "]"
        case .comma: ","
        case .dot: "."
        case .minus: "-"
        case .plus: "+"
        case .end: "the end of the query"
        }
    }
}

struct Parser {
    var tokens: [Token] = []
    var index = 0
    var terms = 0
    static let keywords: Set<String> = ["and", "or", "not", "in", "exists", "starts", "true", "false", "null"]

    init(_ text: String) throws(QueryError) {
        guard text.utf8.count <= QueryLimits.maxTextBytes else {
            throw QueryError(position: 0, message: "the query is \(text.utf8.count) bytes, over the limit of \(QueryLimits.maxTextBytes)")
        }
        tokens = try Parser.tokenize(Array(text.unicodeScalars))
    }

    var peek: Token { tokens[index] }
    mutating func advance() { if index < tokens.count - 1 { index += 1 } }
    func error(_ message: String) -> QueryError { QueryError(position: peek.position, message: message) }

    static func isWordScalar(_ u: Unicode.Scalar) -> Bool {
        (u >= "a" && u <= "z") || (u >= "A" && u <= "Z") || (u >= "0" && u <= "9") || u == "_"
    }

    static func tokenize(_ s: [Unicode.Scalar]) throws(QueryError) -> [Token] {
        var out: [Token] = []
        var i = 0
        func fail(_ at: Int, _ message: String) -> QueryError { QueryError(position: at + 1, message: message) }
        while i < s.count {
            let u = s[i]
            let start = i
            if u == " " || u == "\t" || u == "\n" || u == "\r" { i += 1; continue }
            switch u {
            case "(": out.append(Token(kind: .open, position: i + 1)); i += 1
            case ")": out.append(Token(kind: .close, position: i + 1)); i += 1
            case "[": out.append(Token(kind: .openBracket, position: i + 1)); i += 1
            case "]": out.append(Token(kind: .closeBracket, position: i + 1)); i += 1
            case ",": out.append(Token(kind: .comma, position: i + 1)); i += 1
            case ".": out.append(Token(kind: .dot, position: i + 1)); i += 1
            case "+": out.append(Token(kind: .plus, position: i + 1)); i += 1
            case "=":
                i += 1
                if i < s.count && s[i] == "=" { i += 1 }  // `==` reads as `=`
                out.append(Token(kind: .compare(.equal), position: start + 1))
            case "!":
                guard i + 1 < s.count, s[i + 1] == "=" else { throw fail(i, "expected != (a lone ! means nothing; use not)") }
                out.append(Token(kind: .compare(.notEqual), position: start + 1)); i += 2
            case "<":
                if i + 1 < s.count && s[i + 1] == "=" { out.append(Token(kind: .compare(.lessOrEqual), position: start + 1)); i += 2 }
                else if i + 1 < s.count && s[i + 1] == ">" { out.append(Token(kind: .compare(.notEqual), position: start + 1)); i += 2 }
                else { out.append(Token(kind: .compare(.less), position: start + 1)); i += 1 }
            case ">":
                if i + 1 < s.count && s[i + 1] == "=" { out.append(Token(kind: .compare(.greaterOrEqual), position: start + 1)); i += 2 }
                else { out.append(Token(kind: .compare(.greater), position: start + 1)); i += 1 }
            case "\"":
                let (text, next) = try string(s, from: i)
                out.append(Token(kind: .string(text), position: start + 1)); i = next
            case "'":
                throw fail(i, "strings are in double quotes (\"east\"), field names with other characters in backticks")
            case "`":
                var j = i + 1
                var name = String.UnicodeScalarView()
                while j < s.count && s[j] != "`" { name.append(s[j]); j += 1 }
                guard j < s.count else { throw fail(i, "a backtick-quoted field name is not closed") }
                let n = String(name)
                try FieldPath.check(segment: n, position: start + 1)
                out.append(Token(kind: .quotedName(n), position: start + 1)); i = j + 1
            case "-":
                if i + 1 < s.count, s[i + 1] >= "0" && s[i + 1] <= "9" {
                    let (text, next) = try number(s, from: i)
                    out.append(Token(kind: .number(text), position: start + 1)); i = next
                } else {
                    out.append(Token(kind: .minus, position: i + 1)); i += 1
                }
            default:
                if u >= "0" && u <= "9", out.last?.kind != .dot {
                    let (text, next) = try number(s, from: i)
                    out.append(Token(kind: .number(text), position: start + 1)); i = next
                } else if isWordScalar(u) {
                    var j = i
                    var w = String.UnicodeScalarView()
                    while j < s.count && isWordScalar(s[j]) { w.append(s[j]); j += 1 }
                    guard w.count <= QueryLimits.maxSegmentBytes else { throw fail(i, "a name is longer than \(QueryLimits.maxSegmentBytes) characters") }
                    out.append(Token(kind: .word(String(w)), position: start + 1)); i = j
                } else {
                    throw fail(i, "unexpected character \(JSONValue.string(String(u)).compactText) (field names with other characters go in backticks)")
                }
            }
        }
        out.append(Token(kind: .end, position: s.count + 1))
        return out
    }

    /// A JSON string literal starting at the quote; returns its value and the index after it.
    static func string(_ s: [Unicode.Scalar], from start: Int) throws(QueryError) -> (String, Int) {
        var i = start + 1
        var out = String.UnicodeScalarView()
        func fail(_ at: Int, _ m: String) -> QueryError { QueryError(position: at + 1, message: m) }
        while true {
            guard i < s.count else { throw fail(start, "a string is not closed (a double quote is missing)") }
            let u = s[i]
            if u == "\"" { return (String(out), i + 1) }
            if u.value < 0x20 { throw fail(i, "a control character in a string (write it as an escape, \\n or \\u0009)") }
            if u != "\\" { out.append(u); i += 1; continue }
            guard i + 1 < s.count else { throw fail(i, "a string ends in a lone backslash") }
            let e = s[i + 1]
            i += 2
            switch e {
            case "\"": out.append("\"")
            case "\\": out.append("\\")
            case "/": out.append("/")
            case "b": out.append("\u{08}")
            case "f": out.append("\u{0C}")
            case "n": out.append("\n")
            case "r": out.append("\r")
            case "t": out.append("\t")
            case "u":
                guard let hi = hex4(s, i) else { throw fail(i - 2, "\\u needs four hex digits") }
                i += 4
                var value = hi
                if hi >= 0xD800 && hi < 0xDC00 {
                    guard i + 1 < s.count, s[i] == "\\", s[i + 1] == "u", let lo = hex4(s, i + 2), lo >= 0xDC00 && lo < 0xE000 else {
                        throw fail(i - 6, "a high surrogate \\u escape without its low surrogate")
                    }
                    i += 6
                    value = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                }
                guard let scalar = Unicode.Scalar(value), value != 0 else { throw fail(i - 6, "\\u escape of a lone surrogate or NUL") }
                out.append(scalar)
            default:
                throw fail(i - 2, "unknown escape \\\(e) in a string")
            }
        }
    }

    static func hex4(_ s: [Unicode.Scalar], _ i: Int) -> UInt32? {
        guard i + 4 <= s.count else { return nil }
        var v: UInt32 = 0
        for k in i..<(i + 4) {
            guard let d = Int(String(s[k]), radix: 16) else { return nil }
            v = v << 4 | UInt32(d)
        }
        return v
    }

    /// A JSON number; returns its text and the index after it.
    static func number(_ s: [Unicode.Scalar], from start: Int) throws(QueryError) -> (String, Int) {
        var i = start
        func digit(_ k: Int) -> Bool { k < s.count && s[k] >= "0" && s[k] <= "9" }
        func fail(_ m: String) -> QueryError { QueryError(position: start + 1, message: m) }
        if s[i] == "-" { i += 1 }
        guard digit(i) else { throw fail("a number needs a digit") }
        if s[i] == "0" && digit(i + 1) { throw fail("a number does not start with 0 (write 7, not 07)") }
        while digit(i) { i += 1 }
        if i < s.count && s[i] == "." {
            i += 1
            guard digit(i) else { throw fail("a number needs a digit after its decimal point") }
            while digit(i) { i += 1 }
        }
        if i < s.count && (s[i] == "e" || s[i] == "E") {
            i += 1
            if i < s.count && (s[i] == "+" || s[i] == "-") { i += 1 }
            guard digit(i) else { throw fail("a number needs a digit in its exponent") }
            while digit(i) { i += 1 }
        }
        if i < s.count && isWordScalar(s[i]) { throw QueryError(position: i + 1, message: "a number runs into a name (put a space between them)") }
        var text = String.UnicodeScalarView()
        text.append(contentsOf: s[start..<i])
        let t = String(text)
        guard t.count <= 40, let d = Double(t), d.isFinite else { throw fail("the number \(t.prefix(40)) is out of range") }
        return (t, i)
    }

    // MARK: grammar

    mutating func parseOr(depth: Int) throws(QueryError) -> QueryPredicate {
        var left = try parseAnd(depth: depth)
        while peek.kind == .word("or") {
            advance()
            left = .or(left, try parseAnd(depth: depth))
        }
        return left
    }

    mutating func parseAnd(depth: Int) throws(QueryError) -> QueryPredicate {
        var left = try parseUnary(depth: depth)
        while peek.kind == .word("and") {
            advance()
            left = .and(left, try parseUnary(depth: depth))
        }
        return left
    }

    mutating func parseUnary(depth: Int) throws(QueryError) -> QueryPredicate {
        guard depth < QueryLimits.maxDepth else { throw error("the query nests deeper than \(QueryLimits.maxDepth) (parentheses and not)") }
        switch peek.kind {
        case .word("not"):
            advance()
            return .not(try parseUnary(depth: depth + 1))
        case .open:
            let open = peek
            advance()
            let inner = try parseOr(depth: depth + 1)
            guard peek.kind == .close else {
                throw error("expected ) to close the ( at character \(open.position), found \(peek.describe)")
            }
            advance()
            return inner
        case .word("exists"):
            advance()
            let f = try parseField()
            try countTerm()
            return .exists(f)
        case .end:
            throw error("expected a condition (such as site = \"east\"), found the end of the query")
        default:
            let f = try parseField()
            return try parseTest(f)
        }
    }

    mutating func countTerm() throws(QueryError) {
        terms += 1
        guard terms <= QueryLimits.maxTerms else { throw error("the query has more than \(QueryLimits.maxTerms) terms") }
    }

    mutating func parseTest(_ f: FieldPath) throws(QueryError) -> QueryPredicate {
        let t = peek
        switch t.kind {
        case .compare(let op):
            advance()
            let lit = try parseLiteral()
            if lit == .null && op != .equal && op != .notEqual {
                throw QueryError(position: t.position, message: "null compares only with = and != (null is not ordered)")
            }
            try countTerm()
            return .compare(f, op, lit)
        case .word("in"):
            advance()
            guard peek.kind == .openBracket else { throw error("expected [ after in, found \(peek.describe)") }
            advance()
            var values: [QueryLiteral] = []
            if peek.kind == .closeBracket { throw error("an in list needs at least one value") }
            while true {
                values.append(try parseLiteral())
                try countTerm()
                if peek.kind == .closeBracket { advance(); break }
                guard peek.kind == .comma else { throw error("expected , or ] in the in list, found \(peek.describe)") }
                advance()
            }
            return .oneOf(f, values)
        case .word("exists"):
            advance()
            try countTerm()
            return .exists(f)
        case .word("starts"):
            advance()
            guard case .string(let prefix) = peek.kind else { throw error("starts takes a string, found \(peek.describe)") }
            advance()
            try countTerm()
            return .startsWith(f, prefix)
        default:
            throw error("expected =, !=, <, <=, >, >=, in, exists or starts after the field \(f), found \(t.describe)")
        }
    }

    mutating func parseLiteral() throws(QueryError) -> QueryLiteral {
        let t = peek
        switch t.kind {
        case .string(let s): advance(); return .string(s)
        case .number(let n): advance(); return .number(n)
        case .word("true"): advance(); return .bool(true)
        case .word("false"): advance(); return .bool(false)
        case .word("null"): advance(); return .null
        case .word(let w) where !Parser.keywords.contains(w):
            throw error("expected a value, found the name \(t.describe) (strings are in double quotes: \"\(w.prefix(40))\")")
        default:
            throw error("expected a value (a \"string\", a number, true, false or null), found \(t.describe)")
        }
    }

    mutating func parseField() throws(QueryError) -> FieldPath {
        var segments: [String] = []
        var quotedFirst = false
        while true {
            let t = peek
            switch t.kind {
            case .word(let w):
                if Parser.keywords.contains(w) {
                    throw error("expected a field name, found the keyword \(w) (a field of that name goes in backticks: `\(w)`)")
                }
                if segments.isEmpty, let first = w.unicodeScalars.first, first >= "0" && first <= "9" {
                    throw error("a field name does not start with a digit (put it in backticks)")
                }
                segments.append(w)
            case .quotedName(let n):
                if segments.isEmpty { quotedFirst = true }
                segments.append(n)
            case .number(let n) where !segments.isEmpty && n.allSatisfy({ $0 >= "0" && $0 <= "9" }):
                segments.append(n)
            default:
                throw error(segments.isEmpty ? "expected a field name, found \(t.describe)" : "expected a field name after the dot, found \(t.describe)")
            }
            advance()
            guard segments.count <= QueryLimits.maxPathSegments else { throw error("a field has at most \(QueryLimits.maxPathSegments) segments") }
            guard peek.kind == .dot else { break }
            advance()
        }
        if segments.count == 1, !quotedFirst, let pseudo = FieldPath.Pseudo(rawValue: segments[0]) { return FieldPath(pseudo: pseudo) }
        return try FieldPath(segments: segments)
    }
}
