/// ShoalYAML: the one importer of libyaml. It turns YAML text into ShoalConfig's `ConfigNode` tree,
/// each node marked with file and line. Config files are small and trusted only so far: anchors and
/// aliases are refused (no "billion laughs"), as are duplicate keys, tags, several documents in one
/// file, more than 32 levels of nesting and files over 1 MiB.
import CYAML
import ShoalConfig

public enum YAMLParser {
    public static let maxBytes = 1 << 20
    public static let maxDepth = 32

    /// A `ConfigParser` for ShoalConfig's loader.
    public static let parse: ConfigParser = { (text: String, file: String) throws(ConfigError) -> ConfigNode in
        try YAMLParser.parse(text, file: file)
    }

    public static func parse(_ text: String, file: String) throws(ConfigError) -> ConfigNode {
        let bytes = Array(text.utf8)
        guard bytes.count <= maxBytes else {
            throw ConfigError(mark: SourceMark(file: file, line: 1, column: 1), key: "", message: "file is \(bytes.count) bytes, over the limit of \(maxBytes)")
        }
        var parser = yaml_parser_t()
        guard yaml_parser_initialize(&parser) == 1 else {
            throw ConfigError(mark: SourceMark(file: file, line: 1, column: 1), key: "", message: "libyaml could not start (out of memory)")
        }
        defer { yaml_parser_delete(&parser) }
        return try bytes.withUnsafeBufferPointer { (buffer) throws(ConfigError) -> ConfigNode in
            yaml_parser_set_input_string(&parser, buffer.baseAddress, buffer.count)
            var builder = Builder(file: file)
            while true {
                var event = yaml_event_t()
                guard yaml_parser_parse(&parser, &event) == 1 else {
                    let problem = parser.problem.map { String(cString: $0) } ?? "syntax error"
                    let context = parser.context.map { " " + String(cString: $0) } ?? ""
                    let mark = SourceMark(file: file, line: Int(parser.problem_mark.line) + 1, column: Int(parser.problem_mark.column) + 1)
                    throw ConfigError(mark: mark, key: "", message: "YAML: \(problem)\(context)")
                }
                defer { yaml_event_delete(&event) }
                if try builder.handle(&event) { break }
            }
            try builder.duplicates.check()
            return builder.result ?? ConfigNode(.null, mark: SourceMark(file: file, line: 1, column: 1))
        }
    }

    /// Builds the tree from the event stream with an explicit stack (bounded by maxDepth).
    struct Builder {
        enum Frame {
            case mapping(entries: [ConfigNode.Entry], pendingKey: (String, SourceMark)?, mark: SourceMark)
            case sequence(items: [ConfigNode], mark: SourceMark)
        }
        let file: String
        var stack: [Frame] = []
        var result: ConfigNode?
        var documents = 0
        /// Duplicate keys found so far (the parse fails at the end with all of them).
        var duplicates = ConfigErrors()

        init(file: String) { self.file = file }

        func mark(_ m: yaml_mark_t) -> SourceMark {
            SourceMark(file: file, line: Int(m.line) + 1, column: Int(m.column) + 1)
        }

        /// Returns true at the end of the stream.
        mutating func handle(_ event: inout yaml_event_t) throws(ConfigError) -> Bool {
            let at = mark(event.start_mark)
            switch event.type {
            case YAML_STREAM_START_EVENT, YAML_NO_EVENT:
                return false
            case YAML_STREAM_END_EVENT:
                return true
            case YAML_DOCUMENT_START_EVENT:
                documents += 1
                guard documents == 1 else { throw ConfigError(mark: at, key: "", message: "one YAML document per file") }
                return false
            case YAML_DOCUMENT_END_EVENT:
                return false
            case YAML_ALIAS_EVENT:
                throw ConfigError(mark: at, key: "", message: "YAML aliases (*name) are not allowed in Shoal config files")
            case YAML_SCALAR_EVENT:
                let s = event.data.scalar
                if s.anchor != nil { throw ConfigError(mark: at, key: "", message: "YAML anchors (&name) are not allowed in Shoal config files") }
                if s.tag != nil, s.plain_implicit == 0, s.quoted_implicit == 0 {
                    throw ConfigError(mark: at, key: "", message: "YAML tags (!!type) are not allowed in Shoal config files")
                }
                let text = s.value.map { String(decoding: UnsafeBufferPointer(start: $0, count: s.length), as: UTF8.self) } ?? ""
                let quoted = s.style != YAML_PLAIN_SCALAR_STYLE && s.style != YAML_ANY_SCALAR_STYLE
                let isNull = !quoted && (text.isEmpty || text == "~" || text == "null" || text == "Null" || text == "NULL")
                try add(ConfigNode(isNull ? .null : .scalar(text, quoted: quoted), mark: at))
                return false
            case YAML_SEQUENCE_START_EVENT:
                if event.data.sequence_start.anchor != nil { throw ConfigError(mark: at, key: "", message: "YAML anchors (&name) are not allowed in Shoal config files") }
                try push(.sequence(items: [], mark: at), at: at)
                return false
            case YAML_MAPPING_START_EVENT:
                if event.data.mapping_start.anchor != nil { throw ConfigError(mark: at, key: "", message: "YAML anchors (&name) are not allowed in Shoal config files") }
                try push(.mapping(entries: [], pendingKey: nil, mark: at), at: at)
                return false
            case YAML_SEQUENCE_END_EVENT, YAML_MAPPING_END_EVENT:
                let node: ConfigNode
                switch stack.removeLast() {
                case .sequence(let items, let m): node = ConfigNode(.sequence(items), mark: m)
                case .mapping(let entries, _, let m): node = ConfigNode(.mapping(entries), mark: m)
                }
                try add(node)
                return false
            default:
                return false
            }
        }

        /// The key path of `key` in the mapping being built (`board.name`, `collections[1].name`):
        /// the keys and indices of the enclosing frames, outermost first.
        func path(to key: String) -> String {
            var path = ""
            for frame in stack {
                switch frame {
                case .mapping(_, let pending, _):
                    if let (k, _) = pending { path += path.isEmpty ? k : ".\(k)" }
                case .sequence(let items, _):
                    path += "[\(items.count)]"
                }
            }
            return path.isEmpty ? key : "\(path).\(key)"
        }

        mutating func push(_ frame: Frame, at: SourceMark) throws(ConfigError) {
            // A collection used as a mapping key is not a config key.
            if case .mapping(_, nil, _)? = stack.last {
                throw ConfigError(mark: at, key: "", message: "a key must be a plain name, not a list or mapping")
            }
            guard stack.count < YAMLParser.maxDepth else {
                throw ConfigError(mark: at, key: "", message: "nested deeper than \(YAMLParser.maxDepth) levels")
            }
            stack.append(frame)
        }

        mutating func add(_ node: ConfigNode) throws(ConfigError) {
            guard let top = stack.popLast() else {
                result = node
                return
            }
            switch top {
            case .sequence(var items, let m):
                items.append(node)
                stack.append(.sequence(items: items, mark: m))
            case .mapping(var entries, let pending, let m):
                if let (key, keyMark) = pending {
                    entries.append(ConfigNode.Entry(key: key, keyMark: keyMark, value: node))
                    stack.append(.mapping(entries: entries, pendingKey: nil, mark: m))
                } else {
                    guard case .scalar(let key, _) = node.value else {
                        throw ConfigError(mark: node.mark, key: "", message: "a key must be a plain name")
                    }
                    if let first = entries.first(where: { $0.key == key }) {
                        // Noted, and the file read on, so every duplicate is reported at once.
                        duplicates.add(ConfigError(mark: node.mark, key: path(to: key), message: "duplicate key (first at line \(first.keyMark.line))"))
                    }
                    stack.append(.mapping(entries: entries, pendingKey: (key, node.mark), mark: m))
                }
            }
        }
    }

    public static var libraryVersion: String { String(cString: yaml_get_version_string()) }
}
