/// One HTTP request as the server hands it to the handler: the method, the path split into
/// percent-decoded segments (so an id holding an encoded `/` stays one segment), the query's
/// values decoded, the headers by lower-cased name, and the whole body (within the limits).
public struct HTTPRequest: Sendable {
    public let method: String
    /// The path as it came, still escaped (`/v1/collections/a/docs/x%2Fy`).
    public let rawPath: String
    /// Its decoded segments (`["v1", "collections", "a", "docs", "x/y"]`); nil when a segment is
    /// not valid percent-encoded UTF-8.
    public let segments: [String]?
    public let query: [String: String]
    /// Lower-cased names; a repeated header keeps its first value.
    public let headers: [String: String]
    public let body: [UInt8]

    public init(method: String, rawPath: String, query: [String: String], headers: [String: String], body: [UInt8]) {
        self.method = method
        self.rawPath = rawPath
        self.segments = HTTPRequest.decodeSegments(rawPath)
        self.query = query
        self.headers = headers
        self.body = body
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }

    static func decodeSegments(_ path: String) -> [String]? {
        var out: [String] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            guard let decoded = percentDecode(part, plusIsSpace: false) else { return nil }
            out.append(decoded)
        }
        return out
    }

    /// `%XX` escapes to bytes, then UTF-8 to text; nil for a broken escape or invalid UTF-8.
    public static func percentDecode<S: StringProtocol>(_ text: S, plusIsSpace: Bool) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var it = text.utf8.makeIterator()
        while let b = it.next() {
            if b == UInt8(ascii: "%") {
                guard let h = it.next(), let l = it.next(), let hv = hexValue(h), let lv = hexValue(l) else { return nil }
                bytes.append(hv << 4 | lv)
            } else if b == UInt8(ascii: "+") && plusIsSpace {
                bytes.append(UInt8(ascii: " "))
            } else {
                bytes.append(b)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
