/// Reading a collection's expiration settings: `ttl: 7d`, `maxDocuments: 100000`, `maxBytes: 64MB`.
extension ConfigReader {
    /// A duration: a whole number with a unit (`s`, `m`, `h`, `d`; `90s`, `10m`, `7d`), or a bare
    /// whole number of seconds. Returns seconds, within 1 s…10 years.
    mutating func durationSeconds(_ key: String) throws(ConfigError) -> Int64? {
        guard let n = raw(key) else { return nil }
        guard case .scalar(let text, _) = n.value, let seconds = ConfigReader.parseDuration(text) else {
            throw ConfigError(mark: n.mark, key: keyPath(key), message: "expected a duration such as 90s, 10m, 12h or 7d, found \(describe(n))")
        }
        guard (1...(10 * 365 * 86_400)).contains(seconds) else {
            throw ConfigError(mark: n.mark, key: keyPath(key), message: "\(text) is out of range 1s...3650d")
        }
        return seconds
    }

    /// A size: a whole number of bytes, or with `KB`, `MB`, `GB` (powers of 1024). At least 1.
    mutating func byteSize(_ key: String) throws(ConfigError) -> Int64? {
        guard let n = raw(key) else { return nil }
        guard case .scalar(let text, _) = n.value, let bytes = ConfigReader.parseSize(text) else {
            throw ConfigError(mark: n.mark, key: keyPath(key), message: "expected a size such as 65536, 512KB, 64MB or 1GB, found \(describe(n))")
        }
        guard bytes >= 1 else { throw ConfigError(mark: n.mark, key: keyPath(key), message: "\(text) is out of range: at least 1 byte") }
        return bytes
    }

    /// `90s`, `10m`, `12h`, `7d` or a bare number of seconds; nil if it is none of them.
    public static func parseDuration(_ text: String) -> Int64? {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        guard let last = text.last else { return nil }
        let (digits, unit) = units[last].map { (text.dropLast(), $0) } ?? (Substring(text), 1)
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber), let v = Int64(digits) else { return nil }
        let (product, overflow) = v.multipliedReportingOverflow(by: unit)
        return overflow ? nil : product
    }

    /// `65536`, `512KB`, `64MB`, `1GB` (also `B`); nil if it is none of them.
    static func parseSize(_ text: String) -> Int64? {
        let units: [(String, Int64)] = [("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10), ("B", 1)]
        let upper = text.uppercased()
        let (digits, unit) = units.first { upper.hasSuffix($0.0) }.map { (upper.dropLast($0.0.count), $0.1) } ?? (Substring(upper), 1)
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber), let v = Int64(digits) else { return nil }
        let (product, overflow) = v.multipliedReportingOverflow(by: unit)
        return overflow ? nil : product
    }
}
