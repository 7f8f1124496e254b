/// A JSON text that could not be parsed: where (byte offset) and why.
public struct JSONError: Error, Sendable, Equatable, CustomStringConvertible {
    public let offset: Int
    public let reason: String
    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

extension JSONValue {
    /// Limits that bound what a hostile input can make the parser do.
    public struct ParseLimits: Sendable {
        public var maxDepth: Int
        public var maxBytes: Int
        public init(maxDepth: Int = 64, maxBytes: Int = 16 << 20) {
            self.maxDepth = maxDepth
            self.maxBytes = maxBytes
        }
    }

    /// Parses one JSON value (RFC 8259) from UTF-8 text. Duplicate object keys are an error: two
    /// gateways must never read the same document differently.
    public static func parse(_ text: String, limits: ParseLimits = ParseLimits()) throws(JSONError) -> JSONValue {
        try parse(bytes: Array(text.utf8), limits: limits)
    }

    public static func parse(bytes: [UInt8], limits: ParseLimits = ParseLimits()) throws(JSONError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { buffer throws(JSONError) in try parse(utf8: buffer, limits: limits) }
    }

    public static func parse(utf8 buffer: UnsafeBufferPointer<UInt8>, limits: ParseLimits = ParseLimits()) throws(JSONError) -> JSONValue {
        try run(buffer, limits: limits, build: true)
    }

    /// Checks that `text` is one valid JSON value, as `parse` would, without building the tree
    /// (the store validates every body it writes; this is its fast path). Returns true if the
    /// value is an object.
    public static func validate(_ text: String, limits: ParseLimits = ParseLimits()) throws(JSONError) -> Bool {
        var copy = text
        let result: Result<Bool, JSONError> = copy.withUTF8 { buffer in
            do throws(JSONError) { return .success(isObject(try run(buffer, limits: limits, build: false))) } catch { return .failure(error) }
        }
        return try result.get()
    }

    private static func isObject(_ v: JSONValue) -> Bool { if case .object = v { return true }; return false }

    private static func run(_ buffer: UnsafeBufferPointer<UInt8>, limits: ParseLimits, build: Bool) throws(JSONError) -> JSONValue {
        guard buffer.count <= limits.maxBytes else {
            throw JSONError(offset: 0, reason: "text is \(buffer.count) bytes, more than the limit of \(limits.maxBytes)")
        }
        var parser = JSONParser(bytes: buffer, maxDepth: limits.maxDepth, build: build)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == buffer.count else { throw parser.error("unexpected text after the value") }
        return value
    }
}

/// A recursive-descent parser over UTF-8 bytes, bounded in depth. With `build` false it checks
/// everything (syntax, UTF-8, duplicate keys) but keeps only object keys: containers come back
/// empty and scalars as placeholders.
struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    let maxDepth: Int
    let build: Bool
    var index = 0
    /// Checking only: the plain keys (ASCII, no escape) of the objects being read, as byte ranges
    /// of the text, the innermost object's last. An object compares their bytes, making no String.
    var plainKeys: [Range<Int>] = []

    init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int, build: Bool = true) {
        self.bytes = bytes
        self.maxDepth = maxDepth
        self.build = build
        if !build { plainKeys.reserveCapacity(16) }  // one allocation per text, not one per growth
    }

    func error(_ reason: String) -> JSONError { JSONError(offset: index, reason: reason) }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func parseValue(depth: Int) throws(JSONError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of text") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""):
            if build { return .string(try parseString()) }
            try skipString()
            return .null
        case UInt8(ascii: "t"): try expectWord("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectWord("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectWord("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let text = try parseNumber()
            return build ? .number(text) : .null
        default: throw error("unexpected character")
        }
    }

    mutating func expectWord(_ word: String) throws(JSONError) {
        let expected = Array(word.utf8)
        guard index + expected.count <= bytes.count else { throw error("unexpected end of text") }
        for i in 0..<expected.count where bytes[index + i] != expected[i] { throw error("unexpected word") }
        index += expected.count
    }

    mutating func parseObject(depth: Int) throws(JSONError) -> JSONValue {
        guard depth <= maxDepth else { throw error("nesting deeper than \(maxDepth)") }
        index += 1
        var members: [String: JSONValue] = [:]
        // Checking only (no tree): while the object's keys are plain and few (a set costs more
        // than it saves below ~16), each is compared by its bytes with the ones before it; past
        // that, or at a key that is not plain (an escape can spell a plain key; non-ASCII text
        // compares by canonical equivalence), the keys go into a set of Strings.
        let base = plainKeys.count
        defer { if !build { plainKeys.removeSubrange(base...) } }
        var keys: Set<String>?
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let keyOffset = index
            let plain = build ? nil : scanPlainKey()
            let key = plain == nil ? try parseString() : ""
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            let duplicate: Bool
            if build {
                duplicate = members.updateValue(value, forKey: key) != nil
            } else if keys == nil, let plain, plainKeys.count - base < 16 {
                duplicate = plainKeys[base...].contains { sameBytes($0, plain) }
                if !duplicate { plainKeys.append(plain) }
            } else {
                if keys == nil { keys = Set(plainKeys[base...].map(text)) }
                duplicate = !keys!.insert(plain.map(text) ?? key).inserted
            }
            if duplicate {
                let key = plain.map(text) ?? key
                throw JSONError(offset: keyOffset, reason: "duplicate key \"\(key)\"")
            }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of text in object") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            throw error("expected ',' or '}'")
        }
    }

    mutating func parseArray(depth: Int) throws(JSONError) -> JSONValue {
        guard depth <= maxDepth else { throw error("nesting deeper than \(maxDepth)") }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
        while true {
            skipWhitespace()
            let element = try parseValue(depth: depth)
            if build { elements.append(element) }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of text in array") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            throw error("expected ',' or ']'")
        }
    }

    mutating func parseNumber() throws(JSONError) -> String {
        let start = index
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw error("number ends early") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if isDigit(bytes[index]) {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        } else {
            throw error("expected a digit")
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("expected a digit after '.'") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("expected a digit in exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        return build ? String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self) : ""
    }

    func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }

    /// A key of printable ASCII without escapes, as the range of its bytes (past the quotes);
    /// nil, the index unmoved, for any other key.
    mutating func scanPlainKey() -> Range<Int>? {
        var i = index + 1
        while i < bytes.count {
            let b = bytes[i]
            if b == UInt8(ascii: "\"") {
                defer { index = i + 1 }
                return (index + 1)..<i
            }
            guard b >= 0x20, b < 0x7F, b != UInt8(ascii: "\\") else { return nil }
            i += 1
        }
        return nil
    }

    func sameBytes(_ a: Range<Int>, _ b: Range<Int>) -> Bool {
        a.count == b.count && bytes[a].elementsEqual(bytes[b])
    }

    /// The text of a plain key (ASCII, so no validation).
    func text(_ r: Range<Int>) -> String { String(decoding: UnsafeBufferPointer(rebasing: bytes[r]), as: UTF8.self) }

    mutating func parseString() throws(JSONError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes.
        while index < bytes.count {
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                let raw = UnsafeBufferPointer(rebasing: bytes[start..<index])
                guard let s = UTF8Text.string(raw) else { throw JSONError(offset: start, reason: "string is not valid UTF-8") }
                index += 1
                return s
            }
            if b == UInt8(ascii: "\\") { break }
            if b < 0x20 { throw error("control character in string") }
            index += 1
        }
        var out = [UInt8](UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                index += 1
                guard let s = UTF8Text.string(out) else { throw JSONError(offset: start, reason: "string is not valid UTF-8") }
                return s
            }
            if b < 0x20 { throw error("control character in string") }
            if b != UInt8(ascii: "\\") { out.append(b); index += 1; continue }
            index += 1
            guard index < bytes.count else { break }
            let e = bytes[index]
            index += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try parseHex4()
                if scalar >= 0xD800 && scalar < 0xDC00 {
                    guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                        throw error("lone high surrogate")
                    }
                    index += 2
                    let low = try parseHex4()
                    guard low >= 0xDC00 && low < 0xE000 else { throw error("invalid low surrogate") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if scalar >= 0xDC00 && scalar < 0xE000 {
                    throw error("lone low surrogate")
                }
                guard let u = Unicode.Scalar(scalar) else { throw error("invalid unicode escape") }
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default:
                throw error("invalid escape")
            }
        }
        throw error("unterminated string")
    }

    /// Checks a string value without keeping it: ASCII runs are scanned in place; anything with
    /// escapes or non-ASCII bytes goes through the full parser (which checks UTF-8).
    mutating func skipString() throws(JSONError) {
        let start = index
        var i = index + 1
        // Eight bytes at a time while none is a quote, a backslash, a control character or
        // non-ASCII (most of a document's text); the loop below takes the word that has one.
        if let base = bytes.baseAddress {
            let raw = UnsafeRawPointer(base)
            while i + 8 <= bytes.count, JSONParser.plainWord(raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)) { i += 8 }
        }
        while i < bytes.count {
            let b = bytes[i]
            if b == UInt8(ascii: "\"") { index = i + 1; return }
            if b == UInt8(ascii: "\\") || b >= 0x80 { break }
            if b < 0x20 { index = i; throw error("control character in string") }
            i += 1
        }
        index = start
        _ = try parseString()
    }

    /// True when none of the word's eight bytes is `"`, `\\`, below 0x20 or 0x80 and up (the bit
    /// tricks find a byte equal to, or below, a value in all eight lanes at once; byte order does
    /// not matter). A word it wrongly calls special only sends the scan to the byte loop.
    @inline(__always)
    static func plainWord(_ w: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        let quote = w ^ (ones &* 0x22), backslash = w ^ (ones &* 0x5C)
        let special = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((w &- ones &* 0x20) & ~w) | w
        return special & highs == 0
    }

    mutating func parseHex4() throws(JSONError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("short unicode escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[index]
            let d: UInt32
            switch b {
            case 0x30...0x39: d = UInt32(b - 0x30)
            case 0x41...0x46: d = UInt32(b - 0x41 + 10)
            case 0x61...0x66: d = UInt32(b - 0x61 + 10)
            default: throw error("invalid hex digit")
            }
            v = v << 4 | d
            index += 1
        }
        return v
    }
}
