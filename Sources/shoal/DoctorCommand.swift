import ShoalCore
import ShoalRuntime

extension CLI {
    /// `shoal doctor`: checks before a gateway is trusted in the field. Exit 0 when nothing failed
    /// (warnings allowed), 1 when a check failed.
    static func doctor(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "doctor", valueOptions: ["--board", "--config", "--data-dir", "--board-dir"], flagOptions: ["--json"])
        if helpIfAsked(a, "doctor") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "doctor", usage: "doctor [--board NAME] [--config FILE] [--data-dir DIR] [--json]")
        let options = runtimeOptions(a)
        var loaded: LoadedConfig?
        var problem: String?
        do { loaded = try ConfigurationLoading.load(options, logger: Logger(sink: MemoryLogSink(), level: .none)) } catch {
            problem = "\(error)"
        }
        let checks = Doctor.run(config: loaded, configError: problem)
        let failed = checks.contains { $0.outcome == .fail }
        let failures = checks.filter { $0.outcome == .fail }.count
        let warned = checks.filter { $0.outcome == .warn }.count
        let isolated = checks.contains { $0.name == "links" && $0.outcome != .pass }
        // The last line, for people and (as "verdict" with the counts) for scripts.
        let counted = warned > 0 ? " (\(warned.counted("warning")))" : ""
        let verdict = failed ? "\(failures.counted("check")) failed"
            : isolated ? "it boots, but it will link to nobody\(counted)" : "ready\(counted)"
        if a.flags.contains("--json") {
            output(["ok": .bool(!failed), "verdict": .string(verdict), "failed": .int(Int64(failures)), "warnings": .int(Int64(warned)),
                    "checks": .array(checks.map { c in
                ["name": .string(c.name), "outcome": .string(c.outcome.rawValue), "detail": .string(c.detail), "fix": c.fix.map(JSONValue.string) ?? .null]
            })])
        } else {
            for c in checks {
                // A detail of several lines (every error of a config file) stays in its column.
                let detail = c.detail.split(separator: "\n").joined(separator: "\n" + String(repeating: " ", count: 25))
                out("\(c.outcome.rawValue.uppercased().padding(4))  \(c.name.padding(18)) \(detail)")
                if let fix = c.fix, c.outcome != .pass { out("      \(String(repeating: " ", count: 18)) → \(fix)") }
            }
            out("doctor: \(verdict)")
        }
        return failed ? ExitCode.failure : ExitCode.ok
    }
}
