import ShoalConfig
import ShoalCore

/// Where each value `board show` prints came from: the site file's line (its `mesh:`/`log:`
/// override), the board file's line (after `extends:`, the file that set it last), or the
/// built-in default. Keys are dotted paths as in the files (`mesh.maxConnectionCount`).
struct BoardOrigins {
    let board: ConfigNode
    let site: SiteConfig?

    func origin(of key: String) -> String {
        let parts = key.split(separator: ".").map(String.init)
        if let site, let first = parts.first {
            let override = first == "mesh" ? site.meshNode : first == "log" ? site.logNode : nil
            if let override, let node = BoardOrigins.node(at: parts.dropFirst(), in: override) {
                return "\(node.mark) (site)"
            }
        }
        if let node = BoardOrigins.node(at: parts[...], in: board) { return "\(node.mark)" }
        return "default"
    }

    func map(of json: JSONValue) -> [String: JSONValue] {
        var o: [String: JSONValue] = [:]
        for (key, _) in BoardOrigins.leaves(of: json) where !key.hasPrefix("sources") && key != "id" { o[key] = .string(origin(of: key)) }
        return o
    }

    static func node(at path: ArraySlice<String>, in node: ConfigNode) -> ConfigNode? {
        guard let key = path.first else { return node }
        guard let child = node[key] else { return nil }
        if case .null = child.value { return nil }
        return self.node(at: path.dropFirst(), in: child)
    }

    /// Every scalar of a JSON object as (dotted path, text), sorted by path.
    static func leaves(of value: JSONValue, prefix: String = "") -> [(String, String)] {
        switch value {
        case .object(let members):
            if members.isEmpty { return prefix.isEmpty ? [] : [(prefix, "{}")] }
            return members.sorted { $0.key < $1.key }.flatMap { leaves(of: $0.value, prefix: prefix.isEmpty ? $0.key : "\(prefix).\($0.key)") }
        case .array(let items): return [(prefix, items.map { $0.stringValue ?? "\($0)" }.joined(separator: ", "))]
        case .string(let s): return [(prefix, s)]
        case .number(let n): return [(prefix, n)]
        case .bool(let b): return [(prefix, String(b))]
        case .null: return [(prefix, "(not set)")]
        }
    }
}
