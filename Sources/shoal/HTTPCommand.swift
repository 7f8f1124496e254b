import ShoalCore
import ShoalLinux
import ShoalRuntime

extension CLI {
    /// `shoal http token`: the local API's bearer token, from the data directory of the
    /// configuration given (or found).
    static func http(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "http", valueOptions: ["--board", "--config", "--data-dir", "--board-dir", "--socket"], flagOptions: [])
        if helpIfAsked(a, "http") { return ExitCode.ok }
        guard let sub = a.positionals.first else { throw UsageError(command: "http", message: "missing subcommand: token", helpTopic: "http") }
        try a.expectPositionals(1...1, command: "http \(sub)", usage: "http token")
        guard sub == "token" else { throw UsageError(command: "http", message: "unknown subcommand \"\(sub.prefix(40))\"; http has: token", helpTopic: "http") }
        // The running gateway's data directory (as `identity show` finds it), else the configuration's.
        let directory: String
        if let running = try runningHTTP(a), let dir = running["dataDirectory"]?.stringValue {
            directory = dir
        } else {
            let loaded = try ConfigurationLoading.load(runtimeOptions(a), logger: Logger(sink: MemoryLogSink(), level: .none))
            directory = Files.directory(of: loaded.storePath)
        }
        guard let token = try HTTPToken.read(dataDirectory: directory) else {
            throw NotFound(message: "no token in \(HTTPToken.path(dataDirectory: directory)) yet: the gateway makes it on its first start (`shoal run`)")
        }
        out(token)
        return ExitCode.ok
    }

    static func runningHTTP(_ a: Arguments) throws -> [String: JSONValue]? {
        guard ["--board", "--config", "--data-dir", "--board-dir"].allSatisfy({ a.values[$0] == nil }) else { return nil }
        do {
            return try ControlClient(path: ControlClient.resolveSocket(a.values["--socket"])).call(["op": "http"]).objectValue
        } catch {
            if a.values["--socket"] != nil { throw error }
            return nil
        }
    }
}
