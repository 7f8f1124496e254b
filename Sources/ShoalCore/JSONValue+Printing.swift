extension JSONValue {
    /// Compact JSON with object keys sorted, so equal values print to equal bytes.
    public var compactText: String {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(into: &out, indent: nil, level: 0)
        return String(decoding: out, as: UTF8.self)
    }

    /// Indented JSON for people, keys sorted.
    public var prettyText: String {
        var out: [UInt8] = []
        write(into: &out, indent: 2, level: 0)
        return String(decoding: out, as: UTF8.self)
    }

    func write(into out: inout [UInt8], indent: Int?, level: Int) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let n): out.append(contentsOf: n.utf8)
        case .string(let s): JSONValue.writeString(s, into: &out)
        case .array(let elements):
            if elements.isEmpty { out.append(contentsOf: "[]".utf8); return }
            out.append(UInt8(ascii: "["))
            for (i, e) in elements.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.newline(&out, indent: indent, level: level + 1)
                e.write(into: &out, indent: indent, level: level + 1)
            }
            JSONValue.newline(&out, indent: indent, level: level)
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            if members.isEmpty { out.append(contentsOf: "{}".utf8); return }
            out.append(UInt8(ascii: "{"))
            for (i, key) in members.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.newline(&out, indent: indent, level: level + 1)
                JSONValue.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                if indent != nil { out.append(UInt8(ascii: " ")) }
                members[key]!.write(into: &out, indent: indent, level: level + 1)
            }
            JSONValue.newline(&out, indent: indent, level: level)
            out.append(UInt8(ascii: "}"))
        }
    }

    static func newline(_ out: inout [UInt8], indent: Int?, level: Int) {
        guard let indent else { return }
        out.append(0x0A)
        out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: indent * level))
    }

    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        for b in s.utf8 {
            switch b {
            case 0x22: out.append(contentsOf: [0x5C, 0x22])
            case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 0xF)]])
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

extension JSONValue: CustomStringConvertible {
    public var description: String { compactText }
}
