import Foundation

/// README.md as the tests read it: at test time, so the checks follow the README of the tree
/// under test. Parses the parts the README tests need: a section's lines, its first fenced
/// block, and the example lines of "Running a gateway" in the notation README uses
/// (`[optional]`, `a | b` for alternatives, `# comment` with `` `shoal …` `` commands in it).
enum Readme {
    static let path: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("README.md").path

    static func text() throws -> String {
        try String(contentsOfFile: path, encoding: .utf8)
    }

    /// The lines under `heading` (e.g. "## Running a gateway"), up to the next heading of the same
    /// or a higher level; empty when the heading is missing.
    static func section(_ heading: String, in text: String) -> [String] {
        let level = heading.prefix(while: { $0 == "#" }).count
        var lines: [String] = []
        var inside = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if inside {
                let hashes = line.prefix(while: { $0 == "#" }).count
                if hashes > 0 && hashes <= level && line.dropFirst(hashes).first == " " { break }
                lines.append(line)
            } else if line == heading {
                inside = true
            }
        }
        return lines
    }

    /// The lines of the first fenced block (```info) in `lines`.
    static func firstBlock(_ info: String, in lines: [String]) -> [String] {
        guard let start = lines.firstIndex(of: "```" + info) else { return [] }
        let rest = lines[(start + 1)...]
        guard let end = rest.firstIndex(where: { $0.hasPrefix("```") }) else { return [] }
        return Array(rest[..<end])
    }

    /// One example line: the commands it stands for (alternatives and optional parts expanded,
    /// placeholders filled in), and the `shoal …` commands its comment names in backticks.
    struct Example {
        var line: String
        var commands: [[String]]
    }

    /// What README's placeholders become in a test.
    static let placeholders: [String: String] = ["N": "1", "<command>": "doc"]

    static func examples(_ block: [String]) -> [Example] {
        block.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }.map { line in
            let (code, comment) = splitComment(line)
            var commands: [[String]] = []
            for alternative in splitTopLevel(code) {
                for variant in expandOptional(alternative) {
                    let words = shellWords(variant).map { placeholders[$0] ?? $0 }
                    if !words.isEmpty { commands.append(words) }
                }
            }
            // `shoal log levels` in a comment is an example too.
            let quoted = comment.split(separator: "`", omittingEmptySubsequences: false)
            for (i, part) in quoted.enumerated() where i % 2 == 1 && part.hasPrefix("shoal ") {
                commands.append(shellWords(String(part)))
            }
            return Example(line: line, commands: commands)
        }
    }

    /// The code and the comment of a line: a `#` that starts a word outside quotes starts it.
    static func splitComment(_ line: String) -> (code: String, comment: String) {
        var quote: Character?
        var previous: Character = " "
        for index in line.indices {
            let c = line[index]
            if let q = quote {
                if c == q { quote = nil }
            } else if c == "'" || c == "\"" {
                quote = c
            } else if c == "#" && previous.isWhitespace {
                return (String(line[..<index]).trimmingCharacters(in: .whitespaces), String(line[line.index(after: index)...]))
            }
            previous = c
        }
        return (line.trimmingCharacters(in: .whitespaces), "")
    }

    /// Splits on `|` and `,` outside brackets and quotes: `shoal peers | shoal peer ID` and
    /// `shoal --help, shoal <command> --help` are two examples each.
    static func splitTopLevel(_ code: String) -> [String] {
        var parts: [String] = []
        var current = ""
        var depth = 0
        var quote: Character?
        for c in code {
            if let q = quote {
                if c == q { quote = nil }
            } else if c == "'" || c == "\"" {
                quote = c
            } else if c == "[" {
                depth += 1
            } else if c == "]" {
                depth -= 1
            } else if depth == 0 && (c == "|" || c == ",") {
                parts.append(current.trimmingCharacters(in: .whitespaces))
                current = ""
                continue
            }
            current.append(c)
        }
        parts.append(current.trimmingCharacters(in: .whitespaces))
        return parts.filter { !$0.isEmpty }
    }

    /// `cmd [a] [b | c]` → `cmd`, `cmd a`, `cmd b`, `cmd c`, and with more than one group each
    /// group's first alternative together (`cmd a b`).
    static func expandOptional(_ code: String) -> [String] {
        var fixed = ""
        var groups: [(at: Int, alternatives: [String])] = []
        var group: String?
        for c in code {
            if c == "[" && group == nil { group = ""; continue }
            if c == "]", let g = group {
                groups.append((fixed.count, g.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }))
                group = nil
                continue
            }
            if group != nil { group!.append(c) } else { fixed.append(c) }
        }
        func build(_ chosen: [Int: String]) -> String {
            var words: [String] = []
            var last = 0
            for (i, g) in groups.enumerated() {
                let chars = Array(fixed)
                words.append(String(chars[last..<g.at]))
                if let pick = chosen[i] { words.append(" " + pick + " ") }
                last = g.at
            }
            words.append(String(Array(fixed)[last...]))
            return words.joined().split(separator: " ").joined(separator: " ")
        }
        var variants = [build([:])]
        for (i, g) in groups.enumerated() {
            for alternative in g.alternatives { variants.append(build([i: alternative])) }
        }
        if groups.count > 1 {
            variants.append(build(Dictionary(uniqueKeysWithValues: groups.indices.map { ($0, groups[$0].alternatives[0]) })))
        }
        return variants
    }

    /// Words as a shell splits them (single and double quotes; no expansions).
    static func shellWords(_ text: String) -> [String] {
        var words: [String] = []
        var current = ""
        var inWord = false
        var quote: Character?
        for c in text {
            if let q = quote {
                if c == q { quote = nil } else { current.append(c) }
            } else if c == "'" || c == "\"" {
                quote = c
                inWord = true
            } else if c.isWhitespace {
                if inWord { words.append(current); current = ""; inWord = false }
            } else {
                current.append(c)
                inWord = true
            }
        }
        if inWord { words.append(current) }
        return words
    }
}
