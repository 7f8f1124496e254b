import ShoalCore
import ShoalRuntime
import ShoalStore

/// `shoal doc query`, `shoal doc index create|drop`, `shoal doc indexes`: queries and indexes of a
/// running gateway's store, through its control socket. The query is parsed here first, so a
/// malformed one is shown with a caret under the character at fault before anything is sent.
extension CLI {
    static func docQuery(_ rest: [String]) throws -> Int32 {
        let command = "doc query"
        let a = try Arguments.parse(rest, command: command, valueOptions: ["--socket", "--order", "--limit", "--offset", "--after", "--fields", "--aggregate", "--group-by"],
                                    flagOptions: ["--json", "--explain", "--follow"])
        if helpIfAsked(a, "doc") { return ExitCode.ok }
        try a.expectPositionals(1...2, command: command, usage: "doc query <collection> ['FILTER'] [--order F,-F] [--limit N] [--fields F,F] [--after CURSOR] [--explain] [--follow] [--json]")
        var request: [String: JSONValue] = ["op": "doc.query", "collection": .string(a.positionals[0])]
        func check(_ text: String, _ what: String, _ parse: (String) throws(QueryError) -> Void) throws {
            do throws(QueryError) { try parse(text) } catch {
                var message = "invalid \(what): \(error.message)"
                if error.position > 0 {
                    message += "\n  \(text)\n  " + String(repeating: " ", count: max(0, error.position - 1)) + "^ (character \(error.position))"
                }
                throw Rejected(message: message)
            }
        }
        if a.positionals.count > 1 {
            let text = a.positionals[1]
            try check(text, "query", { t throws(QueryError) in _ = try QueryParser.parseFilter(t) })
            request["where"] = .string(text)
        }
        let options: [(String, String, String, (String) throws(QueryError) -> Void)] = [
            ("--order", "order", "--order", { t throws(QueryError) in _ = try QueryParser.parseOrder(t) }),
            ("--fields", "fields", "--fields", { t throws(QueryError) in _ = try QueryParser.parseFields(t) }),
            ("--aggregate", "aggregate", "--aggregate", { t throws(QueryError) in _ = try QueryParser.parseAggregates(t) }),
            ("--group-by", "groupBy", "--group-by", { t throws(QueryError) in _ = try QueryParser.parseFields(t, max: QueryLimits.maxGroupBy) }),
        ]
        for (option, key, what, parse) in options {
            if let v = a.values[option] {
                try check(v, what, parse)
                request[key] = .string(v)
            }
        }
        if a.values["--limit"] != nil { request["limit"] = .int(try a.int("--limit", command: command, default: QueryLimits.defaultLimit, range: 1...QueryLimits.maxLimit)) }
        if a.values["--offset"] != nil { request["offset"] = .int(try a.int("--offset", command: command, default: 0, range: 0...QueryLimits.maxOffset)) }
        if let after = a.values["--after"] { request["after"] = .string(after) }
        if a.flags.contains("--explain") { request["explain"] = true }
        if a.flags.contains("--follow") {
            guard !a.flags.contains("--explain") else { throw UsageError(command: command, message: "--follow and --explain do not go together", helpTopic: "doc") }
            request["follow"] = true
            return try followQuery(client(a), request, json: a.flags.contains("--json"))
        }
        let result = try client(a).call(.object(request))
        if a.flags.contains("--json") { output(result); return ExitCode.ok }
        if a.flags.contains("--explain") {
            for step in result["plan"]?.arrayValue ?? [] { out(step.stringValue ?? "") }
            let used = (result["indexesUsed"]?.arrayValue ?? []).compactMap(\.stringValue).filter { $0 != "id" }
            out(used.isEmpty ? "no collection index is used\(result["scansCollection"]?.boolValue == true ? " (reads every document of the collection)" : "")"
                             : "uses index \(used.joined(separator: "; "))")
            return ExitCode.ok
        }
        if let groups = result["groups"]?.arrayValue {
            for g in groups { out(g.compactText) }
            return ExitCode.ok
        }
        for d in result["documents"]?.arrayValue ?? [] {
            out("\(d["id"]?.stringValue ?? "?")\t\((d["body"] ?? .null).compactText)")
        }
        if let next = result["next"]?.stringValue { printError("more: --after \(next)") }
        return ExitCode.ok
    }

    /// `doc query --follow`: the whole result first, then what each update adds (`+`), changes
    /// (`~`) and removes (`-`); with --json, each update as one JSON line. Ends (exit 5) when the
    /// gateway stops.
    static func followQuery(_ c: ControlClient, _ request: [String: JSONValue], json: Bool) throws -> Int32 {
        try c.send(.object(request))
        guard let first = try c.receive() else { throw gatewayGone(c) }
        _ = try ControlClient.unwrap(first)
        while let frame = try c.receive(timeoutMillis: Int32.max) {
            guard let u = frame["update"] else { _ = try ControlClient.unwrap(frame); continue }
            if json { out(u.compactText); continue }
            let number = u["update"]?.int64Value ?? 0
            if let groups = u["groups"]?.arrayValue {
                out("-- update \(number)")
                for g in groups { out(g.compactText) }
                continue
            }
            let docs = u["documents"]?.arrayValue ?? []
            func ids(_ key: String) -> [String] { (u[key]?.arrayValue ?? []).compactMap(\.stringValue) }
            let added = ids("added"), changed = ids("changed"), removed = ids("removed")
            if number == 1 {
                out("-- update 1: \(docs.count.counted("document"))")
                for d in docs { out("\(d["id"]?.stringValue ?? "?")\t\((d["body"] ?? .null).compactText)") }
                continue
            }
            out("-- update \(number): \(added.count) added, \(changed.count) changed, \(removed.count) removed (\(docs.count.counted("document")))")
            let byID = Dictionary(docs.map { ($0["id"]?.stringValue ?? "", $0) }, uniquingKeysWith: { a, _ in a })
            for id in added { out("+ \(id)\t\((byID[id]?["body"] ?? .null).compactText)") }
            for id in changed { out("~ \(id)\t\((byID[id]?["body"] ?? .null).compactText)") }
            for id in removed { out("- \(id)") }
            if added.isEmpty && changed.isEmpty && removed.isEmpty { out("(order changed) " + docs.compactMap { $0["id"]?.stringValue }.joined(separator: " ")) }
        }
        throw gatewayGone(c)
    }

    static func docIndex(_ rest: [String]) throws -> Int32 {
        guard let sub = rest.first, sub == "create" || sub == "drop" else {
            throw UsageError(command: "doc index", message: "expected create or drop; usage: shoal doc index create|drop <collection> FIELD[,FIELD…]", helpTopic: "doc")
        }
        let command = "doc index \(sub)"
        let a = try Arguments.parse(Array(rest.dropFirst()), command: command, valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "doc") { return ExitCode.ok }
        try a.expectPositionals(2...2, command: command, usage: "doc index \(sub) <collection> FIELD[,FIELD…]")
        let result = try client(a).call(["op": .string("doc.index.\(sub)"), "collection": .string(a.positionals[0]), "fields": .string(a.positionals[1])])
        if a.flags.contains("--json") { output(result); return ExitCode.ok }
        let fields = result["fields"]?.stringValue ?? a.positionals[1]
        let changed = result["changed"]?.boolValue == true
        out(sub == "create" ? (changed ? "created index \(fields) on \(a.positionals[0])" : "index \(fields) on \(a.positionals[0]) already exists")
                            : (changed ? "dropped index \(fields) on \(a.positionals[0])" : "no index \(fields) on \(a.positionals[0])"))
        return ExitCode.ok
    }

    static func docIndexes(_ rest: [String]) throws -> Int32 {
        let a = try Arguments.parse(rest, command: "doc indexes", valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "doc") { return ExitCode.ok }
        try a.expectPositionals(0...1, command: "doc indexes", usage: "doc indexes [collection]")
        var request: [String: JSONValue] = ["op": "doc.indexes"]
        if let c = a.positionals.first { request["collection"] = .string(c) }
        let result = try client(a).call(.object(request))
        if a.flags.contains("--json") { output(result); return ExitCode.ok }
        let list = result["indexes"]?.arrayValue ?? []
        if list.isEmpty { out("no indexes") }
        for ix in list { out("\(ix["collection"]?.stringValue ?? "?")\t\(ix["fields"]?.stringValue ?? "?")") }
        return ExitCode.ok
    }
}
