/// Prometheus's text exposition format, version 0.0.4: what `GET /metrics` answers. Pure: the
/// runtime gathers the figures into families, this renders them.
///
/// What a reader gets wrong: the names are ours (constants in the code), the label values are not —
/// peer ids, collection names, LED pattern names and child paths come from outside and are escaped
/// here (`\\`, `\"`, newline). A name that breaks the format is a programming error and stops the
/// process; a value never does. Output is deterministic: families by name, samples by their label
/// values, so two scrapes of an idle gateway are the same bytes.
public enum MetricsExposition {
    /// The `Content-Type` of the answer.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    public enum Kind: String, Sendable {
        /// Only goes up (it may start again from 0 when the process or the thing counted restarts).
        /// Its name ends in `_total`.
        case counter
        /// Goes up and down; info and state metrics (`…_info`, `…{state="x"} 1`) are gauges too.
        case gauge
    }

    /// One sample: its labels, in the order given, and its value.
    public struct Sample: Sendable, Equatable {
        public var labels: [(name: String, value: String)]
        public var value: Double

        public init(_ labels: [(name: String, value: String)] = [], _ value: Double) {
            self.labels = labels
            self.value = value
        }

        public init(_ labels: [(name: String, value: String)] = [], _ value: Int) {
            self.init(labels, Double(value))
        }

        public static func == (a: Sample, b: Sample) -> Bool {
            a.value == b.value && a.labels.elementsEqual(b.labels) { $0.name == $1.name && $0.value == $1.value }
        }
    }

    /// One metric: its name, help text, type and samples.
    public struct Family: Sendable, Equatable {
        public var name: String
        public var help: String
        public var kind: Kind
        public var samples: [Sample]

        public init(_ name: String, _ kind: Kind, help: String, _ samples: [Sample]) {
            self.name = name
            self.kind = kind
            self.help = help
            self.samples = samples
        }

        /// A family of one sample with no labels.
        public init(_ name: String, _ kind: Kind, help: String, value: Double) {
            self.init(name, kind, help: help, [Sample([], value)])
        }

        public init(_ name: String, _ kind: Kind, help: String, value: Int) {
            self.init(name, kind, help: help, value: Double(value))
        }
    }

    /// The exposition of `families`: `# HELP`, `# TYPE` and the samples of each, families sorted by
    /// name, samples by their label values. A family without samples is left out; of two samples
    /// with the same labels the first is kept (the format allows one).
    public static func render(_ families: [Family]) -> String {
        var out = ""
        var seen = Set<String>()
        for family in families.sorted(by: { $0.name < $1.name }) {
            check(family)
            precondition(seen.insert(family.name).inserted, "metric \(family.name) is gathered twice")
            var lines: [(key: String, line: String)] = []
            var keys = Set<String>()
            for sample in family.samples {
                let labels = labelText(sample.labels)
                guard keys.insert(labels).inserted else { continue }
                lines.append((labels, family.name + labels + " " + valueText(sample.value)))
            }
            guard !lines.isEmpty else { continue }
            out += "# HELP \(family.name) \(escapeHelp(family.help))\n"
            out += "# TYPE \(family.name) \(family.kind.rawValue)\n"
            for l in lines.sorted(by: { $0.key < $1.key }) { out += l.line + "\n" }
        }
        return out
    }

    /// `{a="x",b="y"}`, or nothing without labels.
    static func labelText(_ labels: [(name: String, value: String)]) -> String {
        guard !labels.isEmpty else { return "" }
        return "{" + labels.map { "\($0.name)=\"\(escapeLabelValue($0.value))\"" }.joined(separator: ",") + "}"
    }

    /// A label value: backslash, double quote and line feed escaped (the three the format names).
    public static func escapeLabelValue(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for c in s.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// Help text: backslash and line feed escaped (a quote stays as it is there).
    public static func escapeHelp(_ s: String) -> String {
        var out = ""
        for c in s.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// Whole numbers without a fraction (`12`, not `12.0`); `NaN`, `+Inf`, `-Inf` as the format
    /// spells them; other numbers in the shortest form that reads back the same.
    public static func valueText(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        if v == v.rounded(), v.magnitude < 9.0e15 { return String(Int64(v)) }
        return v.description
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*` for a metric, `[a-zA-Z_][a-zA-Z0-9_]*` (not `__…`) for a label.
    public static func isValidName(_ name: String, label: Bool) -> Bool {
        guard let first = name.utf8.first, !(label && name.hasPrefix("__")) else { return false }
        func letter(_ b: UInt8) -> Bool { (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 95 || (!label && b == 58) }
        return letter(first) && name.utf8.allSatisfy { letter($0) || ($0 >= 48 && $0 <= 57) }
    }

    /// The names are the code's own: a wrong one is a bug here, not bad input.
    static func check(_ f: Family) {
        precondition(isValidName(f.name, label: false), "metric name \(f.name) breaks the exposition format")
        precondition((f.kind == .counter) == f.name.hasSuffix("_total"), "metric \(f.name): counters, and only they, end in _total")
        for s in f.samples {
            for l in s.labels { precondition(isValidName(l.name, label: true), "metric \(f.name): label name \(l.name) breaks the format") }
        }
    }
}
