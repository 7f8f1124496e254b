import ShoalCore
import ShoalRuntime
import ShoalStatus

extension CLI {
    /// `shoal mqtt status`: the running gateway's MQTT bridge, one block per broker.
    static func mqtt(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "mqtt", valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "mqtt") { return ExitCode.ok }
        guard let sub = a.positionals.first else { throw UsageError(command: "mqtt", message: "missing subcommand: status", helpTopic: "mqtt") }
        guard sub == "status" else { throw UsageError(command: "mqtt", message: "unknown subcommand \"\(sub.prefix(40))\"; mqtt has: status", helpTopic: "mqtt") }
        try a.expectPositionals(1...1, command: "mqtt status", usage: "mqtt status [--json]")
        let answer = try client(a).call(["op": "mqtt"])
        if a.flags.contains("--json") { output(answer); return ExitCode.ok }
        let brokers = answer["brokers"]?.arrayValue ?? []
        if brokers.isEmpty {
            out("no MQTT brokers: the site file has no mqtt: section (see README, \"MQTT bridge\")")
            return ExitCode.ok
        }
        for b in brokers { out(MQTTText.block(b)) }
        return ExitCode.ok
    }
}

/// A broker as `shoal mqtt status` prints it.
enum MQTTText {
    static func block(_ b: JSONValue) -> String {
        func n(_ v: JSONValue?) -> Int64 { v?.int64Value ?? 0 }
        let i = b["in"], o = b["out"]
        var lines = ["\(b["name"]?.stringValue ?? "?")  \(b["url"]?.stringValue ?? "?")  MQTT \(b["protocol"]?.stringValue ?? "?")"]
        var state = "  state          \(b["state"]?.stringValue ?? "?")"
        if let since = b["sinceMillis"]?.int64Value, since > 0 { state += " since \(IdentityText.localDate(since / 1000))" }
        state += " (\(n(b["connects"])) connects, \(n(b["disconnects"])) disconnects)"
        lines.append(state)
        if let e = b["lastError"]?.stringValue { lines.append("  last error     \(e)") }
        let subs = (b["subscriptions"]?.arrayValue ?? []).compactMap(\.stringValue)
        lines.append("  subscriptions  \(subs.isEmpty ? "none" : subs.joined(separator: ", "))")
        lines.append("  in             \(n(i?["received"])) received, \(n(i?["committed"])) written, \(n(i?["unchanged"])) unchanged, \(n(i?["expired"])) expired (series keep)")
        let dropped = (i?["dropped"]?.objectValue ?? [:]).compactMapValues(\.int64Value).filter { $0.value > 0 }
        lines.append("  dropped        \(dropped.isEmpty ? "none" : dropped.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        let outDropped = (o?["dropped"]?.objectValue ?? [:]).compactMapValues(\.int64Value).filter { $0.value > 0 }
        if !outDropped.isEmpty { lines.append("  not delivered  " + outDropped.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")) }
        lines.append("  out            \(n(o?["published"])) published, \(n(o?["acknowledged"])) acknowledged, \(n(o?["inFlight"])) in flight, \(n(o?["skippedLoops"])) not sent back to their topic")
        lines.append("  lag            \(n(o?["lag"])) change(s) not yet acknowledged by the broker")
        return lines.joined(separator: "\n")
    }
}
