/// `indexes:` of a collection in the site file: fields to keep an expression index over, so
/// queries on them need not read every document.
///
/// ```yaml
/// collections:
///   - name: sensors.readings
///     indexes: [site, [site, pressure], updatedAt]   # a field, or a list of fields (one index)
/// ```
///
/// A field is `a` or `a.b.c` with segments of letters, digits and `_` (the index's SQL is made
/// from them), or the pseudo-fields `id` and `updatedAt`.
extension ConfigReader {
    mutating func indexList(_ key: String) throws(ConfigError) -> [[String]]? {
        guard let n = raw(key) else { return nil }
        let keyPath = keyPath(key)
        guard case .sequence(let items) = n.value else {
            throw ConfigError(mark: n.mark, key: keyPath, message: "expected a list of indexes, such as [site, [site, pressure]], found \(n.kindName)")
        }
        guard items.count <= 16 else { throw ConfigError(mark: n.mark, key: keyPath, message: "at most 16 indexes per collection") }
        var out: [[String]] = []
        for (i, item) in items.enumerated() {
            let fields: [(String, ConfigNode)]
            switch item.value {
            case .scalar(let s, _): fields = [(s, item)]
            case .sequence(let parts):
                var list: [(String, ConfigNode)] = []
                for p in parts {
                    guard case .scalar(let s, _) = p.value else {
                        throw ConfigError(mark: p.mark, key: "\(keyPath)[\(i)]", message: "expected a field name, found \(p.kindName)")
                    }
                    list.append((s, p))
                }
                fields = list
            default:
                throw ConfigError(mark: item.mark, key: "\(keyPath)[\(i)]", message: "expected a field or a list of fields, found \(item.kindName)")
            }
            guard !fields.isEmpty, fields.count <= 8 else {
                throw ConfigError(mark: item.mark, key: "\(keyPath)[\(i)]", message: "an index has 1 to 8 fields")
            }
            for (f, node) in fields where !ConfigReader.isIndexField(f) {
                throw ConfigError(mark: node.mark, key: "\(keyPath)[\(i)]",
                                  message: "\"\(f.prefix(60))\" is not an indexable field (segments of letters, digits and _ joined by dots, or id, updatedAt)")
            }
            guard Set(fields.map(\.0)).count == fields.count else {
                throw ConfigError(mark: item.mark, key: "\(keyPath)[\(i)]", message: "an index names each field once")
            }
            out.append(fields.map(\.0))
        }
        return out
    }

    static func isIndexField(_ f: String) -> Bool {
        let segments = f.split(separator: ".", omittingEmptySubsequences: false)
        guard !segments.isEmpty, segments.count <= 16 else { return false }
        return segments.allSatisfy { s in
            !s.isEmpty && s.utf8.count <= 128
                && s.utf8.allSatisfy { b in (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F }
        } && !(segments[0].first.map { $0 >= "0" && $0 <= "9" } ?? false)
    }
}
