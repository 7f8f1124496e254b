/// Hand-written argument parsing (no outside packages). Each command declares its options; an
/// option it did not declare is an error that names the command, never silently ignored.
struct UsageError: Error, CustomStringConvertible {
    let command: String
    let message: String
    /// Whose help to point at: the command's own, or (for an unknown command) `shoal --help`.
    var helpTopic: String
    init(command: String, message: String, helpTopic: String? = nil) {
        self.command = command
        self.message = message
        self.helpTopic = helpTopic ?? command
    }
    var description: String { "shoal \(command): \(message) (see `shoal \(helpTopic.isEmpty ? "" : helpTopic + " ")--help`)" }
}

struct Arguments {
    var positionals: [String] = []
    var values: [String: String] = [:]
    /// Every value each option was given, in order (`values` keeps the last): for options that repeat.
    var lists: [String: [String]] = [:]
    var flags: Set<String> = []
    var wantsHelp = false

    /// `valueOptions` take a value (`--name V` or `--name=V`); `flagOptions` take none.
    static func parse(_ args: [String], command: String, valueOptions: Set<String> = [], flagOptions: Set<String> = []) throws(UsageError) -> Arguments {
        var out = Arguments()
        var i = 0
        var onlyPositionals = false
        while i < args.count {
            let a = args[i]
            i += 1
            if onlyPositionals || !a.hasPrefix("-") || a == "-" {
                out.positionals.append(a)
                continue
            }
            if a == "--" { onlyPositionals = true; continue }
            if a == "--help" || a == "-h" { out.wantsHelp = true; continue }
            var name = a
            var inline: String?
            if let eq = a.firstIndex(of: "=") {
                name = String(a[..<eq])
                inline = String(a[a.index(after: eq)...])
            }
            if valueOptions.contains(name) {
                let value: String
                if let inline {
                    value = inline
                } else {
                    guard i < args.count else { throw UsageError(command: command, message: "\(name) needs a value") }
                    value = args[i]
                    i += 1
                }
                out.values[name] = value
                out.lists[name, default: []].append(value)
            } else if flagOptions.contains(name) {
                guard inline == nil else { throw UsageError(command: command, message: "\(name) takes no value") }
                out.flags.insert(name)
            } else {
                throw UsageError(command: command, message: "unknown option \(name)")
            }
        }
        return out
    }

    func expectPositionals(_ range: ClosedRange<Int>, command: String, usage: String) throws(UsageError) {
        guard range.contains(positionals.count) else {
            throw UsageError(command: command, message: positionals.count < range.lowerBound
                ? "missing arguments; usage: shoal \(usage)"
                : "unexpected argument \"\(positionals[range.upperBound])\"; usage: shoal \(usage)")
        }
    }

    func int(_ name: String, command: String, default value: Int, range: ClosedRange<Int>) throws(UsageError) -> Int {
        guard let text = values[name] else { return value }
        guard let v = Int(text), range.contains(v) else {
            let bounds = range.upperBound == Int.max ? "\(range.lowerBound) or more" : "from \(range.lowerBound) to \(range.upperBound)"
            throw UsageError(command: command, message: "\(name) must be a whole number \(bounds), not \"\(text)\"")
        }
        return v
    }
}
