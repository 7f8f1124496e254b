import ShoalCore
import ShoalReplication
import ShoalStatus

/// The uplink as `shoal uplink status` prints it, read from the board's JSON (`UplinkBoard.State.json`,
/// the control op `uplink`). It lives here rather than in the CLI so it is tested without a
/// running gateway. Ages are measured against `nowMillis` (wall clock), the moment printed.
public enum UplinkText {
    /// What to print when the site file has no `uplink:` section.
    public static let notConfigured = "no uplink: the site file has no uplink: section (see README, \"When one site is not enough\")"
    /// Configured, but the uplink has not reported yet (the gateway starts, or `root/uplink` is down).
    public static let notStarted = "uplink configured but not started yet: the gateway is starting, or root/uplink is not running (see `shoal status`)"

    /// The answer of the control op `uplink` (`{"uplink": …, "configured": …}`) as text.
    public static func answer(_ a: JSONValue, nowMillis: Int64 = Int64(NodeClock.systemWallMillis())) -> String {
        guard let u = a["uplink"], u != .null else {
            return a["configured"]?.boolValue == true ? notStarted : notConfigured
        }
        return block(u, nowMillis: nowMillis)
    }

    public static func block(_ u: JSONValue, nowMillis: Int64) -> String {
        func n(_ v: JSONValue?) -> Int64 { v?.int64Value ?? 0 }
        let push = u["push"], pull = u["pull"]
        let servers = (u["servers"]?.arrayValue ?? []).compactMap(\.stringValue)
        var lines = ["uplink  \(servers.isEmpty ? "?" : servers.joined(separator: ", "))  NATS JetStream"]
        lines.append("  state          " + state(u, nowMillis: nowMillis))
        if let e = u["lastError"]?.stringValue {
            lines.append("  last error     \(e)\(ago(u["lastErrorAtMillis"]?.int64Value, nowMillis))")
        }
        let success = n(u["lastSuccessMillis"])
        lines.append("  last success   \(success > 0 ? IdentityText.localDate(success / 1000) + ago(success, nowMillis) : "never")")
        lines.append("  push           \(n(push?["published"])) published, \(n(push?["alreadyThere"])) already there, "
            + "\(n(push?["casRetries"]).counted("CAS retry", plural: "CAS retries")); lag \(n(push?["lag"]).counted("change")), "
            + "oldest \(seconds(push?["lagSeconds"]?.doubleValue ?? 0))")
        lines.append("  pull           \(n(pull?["received"])) received, \(n(pull?["applied"])) applied, \(n(pull?["unchanged"])) unchanged; "
            + "lag \(n(pull?["lag"]).counted("message"))")
        let skipped = (pull?["skipped"]?.objectValue ?? [:]).compactMapValues(\.int64Value).filter { $0.value > 0 }
        lines.append("  skipped        " + (skipped.isEmpty ? "none"
            : skipped.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + " (not applied; see the log)"))
        lines.append("  conflicts      \(n(u["conflicts"]))")
        let collections = u["collections"]?.arrayValue ?? []
        lines.append("  collections    \(collections.isEmpty ? "none" : "\(collections.count)")")
        let width = collections.map { ($0["name"]?.stringValue ?? "?").count }.max() ?? 0
        for c in collections { lines.append("    " + collection(c, width: width)) }
        return lines.joined(separator: "\n")
    }

    /// An `uplink` event of the mesh event log, as `shoal events` prints it:
    /// `uplink connected to nats://10.0.0.5:4222`, `uplink disconnected from … — why`.
    public static func event(_ e: JSONValue) -> String {
        let server = e["server"]?.stringValue ?? ""
        let connected = e["connected"]?.boolValue == true
        var text = connected ? "uplink connected" : "uplink disconnected"
        if !server.isEmpty { text += connected ? " to \(server)" : " from \(server)" }
        if let why = e["error"]?.stringValue { text += " — \(why)" }
        return text
    }

    /// `connected to nats://… since <date> (3m12s ago) (2 connects, 1 disconnect)`.
    static func state(_ u: JSONValue, nowMillis: Int64) -> String {
        let state = u["state"]?.stringValue ?? "?"
        let server = u["server"]?.stringValue ?? ""
        var text = state == "connected" && !server.isEmpty ? "connected to \(server)" : state
        if let since = u["sinceMillis"]?.int64Value, since > 0 {
            text += " since \(IdentityText.localDate(since / 1000))\(ago(since, nowMillis))"
        }
        let connects = u["connects"]?.int64Value ?? 0, disconnects = u["disconnects"]?.int64Value ?? 0
        return text + " (\(connects.counted("connect")), \(disconnects.counted("disconnect")))"
    }

    /// One collection: `sensors.state  SHOAL_…  push on, lag 0 (0 s), checkpoint 120  pull on, lag 0, checkpoint 80`.
    static func collection(_ c: JSONValue, width: Int) -> String {
        func n(_ key: String) -> Int64 { c[key]?.int64Value ?? 0 }
        let bare = c["name"]?.stringValue ?? "?"
        let name = bare + String(repeating: " ", count: max(0, width - bare.count))
        let push = c["push"]?.boolValue == true
            ? "push on, lag \(n("pushLag")) (\(seconds(c["pushLagSeconds"]?.doubleValue ?? 0))), checkpoint seq \(n("pushCheckpoint"))"
            : "push off"
        let pull = c["pull"]?.boolValue == true
            ? "pull on, lag \(n("pullLag")), checkpoint stream seq \(n("pullCheckpoint"))"
            : "pull off"
        return "\(name)  \(c["stream"]?.stringValue ?? "?")  \(push)  \(pull)"
    }

    /// ` (3m12s ago)`; nothing when the time is unknown.
    static func ago(_ atMillis: Int64?, _ nowMillis: Int64) -> String {
        guard let atMillis, atMillis > 0 else { return "" }
        return " (\(GatewayStatus.duration(max(0, nowMillis - atMillis) / 1000)) ago)"
    }

    /// A lag in seconds: `0 s`, `2.5 s`, then `4m10s` and up.
    static func seconds(_ s: Double) -> String {
        guard s.isFinite, s > 0 else { return "0 s" }
        if s < 10 { return "\((s * 10).rounded() / 10) s" }
        return s < 60 ? "\(Int64(s)) s" : GatewayStatus.duration(Int64(s))
    }
}
