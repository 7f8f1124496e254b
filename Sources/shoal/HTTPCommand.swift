import Glibc
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
            if running["enabled"]?.boolValue == false {
                throw NotFound(message: "the running gateway's HTTP API is off (http.enabled: false in its site file); its token, if any, is in \(HTTPToken.path(dataDirectory: dir))")
            }
            directory = dir
        } else {
            let loaded = try ConfigurationLoading.load(runtimeOptions(a), logger: Logger(sink: MemoryLogSink(), level: .none))
            directory = Files.directory(of: loaded.storePath)
        }
        let found: String?
        do { found = try HTTPToken.read(dataDirectory: directory) } catch {
            if error.code == EACCES {
                throw Rejected(message: "\(HTTPToken.path(dataDirectory: directory)) is readable only by the gateway's user (mode 0600): run this as that user or with sudo")
            }
            throw error
        }
        guard let token = found else {
            throw NotFound(message: "no token in \(HTTPToken.path(dataDirectory: directory)) yet: the gateway makes it on its first start (`shoal run`); for a gateway run with --data-dir DIR, pass --data-dir DIR or --socket DIR/control.sock")
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
