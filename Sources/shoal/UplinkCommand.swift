import ShoalCore
import ShoalRuntime

extension CLI {
    /// `shoal uplink status`: the running gateway's uplink to its NATS JetStream hub.
    static func uplink(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "uplink", valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "uplink") { return ExitCode.ok }
        guard let sub = a.positionals.first else { throw UsageError(command: "uplink", message: "missing subcommand: status", helpTopic: "uplink") }
        guard sub == "status" else { throw UsageError(command: "uplink", message: "unknown subcommand \"\(sub.prefix(40))\"; uplink has: status", helpTopic: "uplink") }
        try a.expectPositionals(1...1, command: "uplink status", usage: "uplink status [--json]")
        let answer = try client(a).call(["op": "uplink"])
        if a.flags.contains("--json") { output(answer); return ExitCode.ok }
        out(UplinkText.answer(answer))
        return ExitCode.ok
    }
}
