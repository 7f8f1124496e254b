import ShoalConfig
import ShoalCore

/// `shoal doc expire COLLECTION ID --in 10m | --at UNIX | --never`: a document's local expiry on
/// the running gateway (this gateway only; the purge leaves no tombstone and replicates nothing).
extension CLI {
    static func docExpire(_ rest: [String], command: String) throws -> Int32 {
        let a = try Arguments.parse(rest, command: command, valueOptions: ["--socket", "--in", "--at"], flagOptions: ["--json", "--never"])
        if helpIfAsked(a, "doc") { return ExitCode.ok }
        try a.expectPositionals(2...2, command: command, usage: "doc expire <collection> <id> --in DURATION | --at UNIX | --never")
        let chosen = [a.values["--in"] != nil, a.values["--at"] != nil, a.flags.contains("--never")].filter { $0 }.count
        guard chosen == 1 else { throw UsageError(command: command, message: "give exactly one of --in DURATION (90s, 10m, 12h, 7d), --at UNIX or --never") }
        var request: [String: JSONValue] = ["op": "doc.expire", "collection": .string(a.positionals[0]), "id": .string(a.positionals[1])]
        if let text = a.values["--in"] {
            guard let seconds = ConfigReader.parseDuration(text) else {
                throw UsageError(command: command, message: "--in takes a duration such as 90s, 10m, 12h or 7d, not \"\(text.prefix(40))\"")
            }
            request["inSeconds"] = .int(seconds)
        } else if let text = a.values["--at"] {
            guard let at = Int64(text), at >= 0 else { throw UsageError(command: command, message: "--at takes a unix time in seconds, not \"\(text.prefix(40))\"") }
            request["at"] = .int(at)
        } else {
            request["never"] = .bool(true)
        }
        let result = try client(a).call(.object(request))
        if a.flags.contains("--json") { output(result); return ExitCode.ok }
        let at = result["expiresAt"]?.int64Value
        let what = result["purged"]?.boolValue == true ? "purged now (this gateway only, no tombstone)"
            : at.map { "expires at \($0) (unix seconds); purged on this gateway only, no tombstone" } ?? "never expires here"
        out("\(a.positionals[0])/\(a.positionals[1]): " + what)
        return ExitCode.ok
    }
}
