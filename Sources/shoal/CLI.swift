import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMQTT
import ShoalRuntime
import ShoalStatus
import ShoalStore
import ShoalTLS
import ShoalUplink
import ShoalWire
import ShoalYAML

enum ExitCode {
    static let ok: Int32 = 0
    static let failure: Int32 = 1
    static let usage: Int32 = 2
    static let config: Int32 = 3
    static let notFound: Int32 = 4
    static let unreachable: Int32 = 5
    static let rejected: Int32 = 6
    static let dataDirectoryInUse: Int32 = GatewayRuntime.ExitCode.dataDirectoryInUse
}

/// Writes straight to a file descriptor: unbuffered, so `changes --follow` shows each change at once
/// and the crash test's acknowledgements are out before the next write starts.
func writeFD(_ fd: Int32, _ text: String) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
        if n < 0 { if errno == EINTR { continue }; return }
        offset += n
    }
}

func out(_ text: String, newline: Bool = true) { writeFD(STDOUT_FILENO, newline ? text + "\n" : text) }
/// Input the CLI refuses before sending it (exit 6).
struct Rejected: Error {
    let message: String
}

func printError(_ message: String) { writeFD(STDERR_FILENO, message + "\n") }

enum CLI {
    static func main(_ args: [String]) async -> Int32 {
        guard let command = args.first else {
            out(Help.main)
            return ExitCode.usage
        }
        let rest = Array(args.dropFirst())
        // Errors name the command as typed: `shoal doc put: …`.
        let label = ["doc", "log", "board", "bench", "identity", "radios", "http", "mqtt", "uplink", "trust", "blob", "release", "update"].contains(command) && rest.first.map({ !$0.hasPrefix("-") }) == true
            ? "\(command) \(rest[0])" : command
        do {
            switch command {
            case "-h", "--help", "help":
                if let topic = rest.first, !topic.hasPrefix("-") {
                    guard let text = Help.commands[topic] else { throw UsageError(command: "help", message: "no command \"\(topic)\"", helpTopic: "") }
                    out(text)
                } else if command == "help", rest.contains(where: { $0 == "--help" || $0 == "-h" }), let text = Help.commands["help"] {
                    out(text)  // `shoal help --help`: help's own text
                } else {
                    out(Help.main)
                }
                return ExitCode.ok
            case "--version", "version": return try version(rest)
            case "run": return try await run(rest)
            case "status": return try status(rest)
            case "doc": return try doc(rest)
            case "changes": return try changes(rest)
            case "log": return try log(rest)
            case "board": return try board(rest)
            case "bench": return try bench(rest)
            case "sim": return try sim(rest)
            case "demo": return try demo(rest)
            case "peers": return try peers(rest)
            case "peer": return try peer(rest)
            case "mesh": return try mesh(rest)
            case "events": return try events(rest)
            case "radios": return try radios(rest)
            case "identity": return try identity(rest)
            case "http": return try http(rest)
            case "mqtt": return try mqtt(rest)
            case "uplink": return try uplink(rest)
            case "trust": return try trust(rest)
            case "release": return try release(rest)
            case "update": return try update(rest)
            case "doctor": return try doctor(rest)
            case "conflicts": return try conflicts(rest)
            case "backup": return try backup(rest)
            case "blob": return try blob(rest)
            case "restore": return try restore(rest)
            default:
                throw UsageError(command: command, message: "unknown command; commands: \(Help.commandNames.joined(separator: ", "))", helpTopic: "")
            }
        } catch let e as UsageError {
            printError(e.description)
            return ExitCode.usage
        } catch let e as ControlClient.Failure {
            printError("shoal \(label): \(e)")
            switch e {
            case .unreachable: return ExitCode.unreachable
            case .remote(let r):
                switch r.code {
                case .notFound: return ExitCode.notFound
                case .badRequest, .invalidDocument: return ExitCode.rejected
                default: return ExitCode.failure
                }
            case .protocolError: return ExitCode.failure
            }
        } catch let e as ConfigError {
            printError(e.description)
            return ExitCode.config
        } catch let e as ConfigurationFailure {
            printError(e.description)
            return ExitCode.config
        } catch let e as BoardNotFound {
            printError("shoal \(label): \(e)")
            return ExitCode.notFound
        } catch let e as NotFound {
            printError("shoal \(label): \(e.message)")
            return ExitCode.notFound
        } catch let e as TLSError {
            printError("shoal \(label): \(e)")
            return ExitCode.rejected
        } catch let e as Rejected {
            printError("shoal \(label): \(e.message)")
            return ExitCode.rejected
        } catch let e as JSONError {
            printError("shoal \(label): \(e)")
            return ExitCode.rejected
        } catch {
            printError("shoal \(label): \(error)")
            return ExitCode.failure
        }
    }

    static func helpIfAsked(_ a: Arguments, _ command: String) -> Bool {
        if a.wantsHelp { out(Help.commands[command] ?? Help.main) }
        return a.wantsHelp
    }

    static func output(_ value: JSONValue) { out(value.prettyText) }

    /// --board, --config, --data-dir, --socket and --board-dir, as `shoal run` takes them.
    static func runtimeOptions(_ a: Arguments) -> RuntimeOptions {
        var options = RuntimeOptions()
        options.board = a.values["--board"] ?? "auto"
        options.configPath = a.values["--config"]
        options.dataDir = a.values["--data-dir"]
        options.socketPath = a.values["--socket"]
        if let dir = a.values["--board-dir"] { options.boardDirectories = [dir] }
        return options
    }

    // MARK: run

    static func run(_ args: [String]) async throws -> Int32 {
        let a = try Arguments.parse(args, command: "run", valueOptions: ["--board", "--config", "--data-dir", "--socket", "--log-level", "--board-dir"])
        if helpIfAsked(a, "run") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "run", usage: "run [--board NAME] [--config FILE]")
        // Before the gateway's threads exist: the HTTP API's 16 pool threads, each parsing 4 MiB
        // bulk writes in turn, held ~32 MB more RSS in glibc's per-thread malloc arenas than 2
        // arenas do (HTTPBadInputTests, slow-sse-reader). $MALLOC_ARENA_MAX still wins.
        if ProcessEnvironment.get("MALLOC_ARENA_MAX") == nil { MallocArenas.limit(2) }
        var options = runtimeOptions(a)
        if let text = a.values["--log-level"] {
            guard let level = LogLevel(name: text) else {
                throw UsageError(command: "run", message: "unknown --log-level \"\(text)\" (debug, verbose, info, warning, error, none)")
            }
            options.logLevel = level
        }
        return await GatewayRuntime.run(options)
    }

    // MARK: status

    static func client(_ a: Arguments) throws -> ControlClient {
        try ControlClient(path: ControlClient.resolveSocket(a.values["--socket"]))
    }

    static func status(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "status", valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "status") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "status", usage: "status [--json]")
        let result = try client(a).call(["op": "status"])
        if a.flags.contains("--json") { output(result); return ExitCode.ok }
        out(GatewayStatus(json: result)?.text ?? result.prettyText)
        return ExitCode.ok
    }

    // MARK: doc

    static func doc(_ args: [String]) throws -> Int32 {
        guard let sub = args.first, !sub.hasPrefix("-") else {
            let a = try Arguments.parse(args, command: "doc")
            if helpIfAsked(a, "doc") { return ExitCode.ok }
            throw UsageError(command: "doc", message: "missing subcommand: put, import, get, delete, list, query, index or indexes")
        }
        let command = "doc \(sub)"
        let rest = Array(args.dropFirst())
        switch sub {
        case "query": return try docQuery(rest)
        case "index": return try docIndex(rest)
        case "indexes": return try docIndexes(rest)
        case "put":
            let a = try Arguments.parse(rest, command: command, valueOptions: ["--socket"], flagOptions: ["--json"])
            if helpIfAsked(a, "doc") { return ExitCode.ok }
            try a.expectPositionals(3...3, command: command, usage: "doc put <collection> <id> <json|->")
            let text = a.positionals[2] == "-" ? try readStandardInput(limit: 1 << 20, what: "the most a document body has (1 MiB)") : a.positionals[2]
            guard text.contains(where: { !$0.isWhitespace }) else {
                throw Rejected(message: a.positionals[2] == "-" ? "standard input is empty: pipe a JSON object ({…}) into it" : "the body is empty: give a JSON object ({…})")
            }
            let body = try JSONValue.parse(text)
            guard body.isObject else { throw Rejected(message: "a document body is a JSON object ({…}), not \(text.prefix(20))") }
            let result = try client(a).call(["op": "doc.put", "collection": .string(a.positionals[0]), "id": .string(a.positionals[1]), "body": body])
            if a.flags.contains("--json") { output(result) } else { out(ChangeText.line(result)) }
        case "import":
            // Lines of `ID<TAB>JSON object`, sent 500 to a request (each request is one transaction),
            // fewer when their size would pass a page (a frame holds 4 MiB).
            let a = try Arguments.parse(rest, command: command, valueOptions: ["--socket"], flagOptions: ["--json"])
            if helpIfAsked(a, "doc") { return ExitCode.ok }
            try a.expectPositionals(1...2, command: command, usage: "doc import <collection> [FILE|-]")
            let path = a.positionals.count > 1 ? a.positionals[1] : "-"
            let text: String
            if path == "-" { text = try readStandardInput(limit: 1 << 30, what: "the most one import reads (1 GiB): split the file") } else {
                let t: String?
                do { t = try Files.read(path, max: 1 << 30) } catch {
                    throw Rejected(message: error.code == EISDIR ? "\(path) is a directory: name a file of ID<TAB>JSON lines" : "\(path): cannot read it (\(error))")
                }
                guard let t else { throw Rejected(message: "\(path): no such file") }
                text = t
            }
            let c = try client(a)
            var batch: [JSONValue] = []
            var batchLines: [Int] = []
            var batchBytes = 0
            var total: Int64 = 0
            var last: Int64 = 0
            // What an error leaves behind: the batches before it are in the store.
            func done() -> String { total > 0 ? " (the \(total.counted("document")) before its batch were imported, up to sequence \(last))" : " (nothing was imported)" }
            func send() throws {
                guard !batch.isEmpty else { return }
                let r: JSONValue
                do { r = try c.call(["op": "doc.putMany", "collection": .string(a.positionals[0]), "documents": .array(batch)]) } catch {
                    // The gateway names a document by its place in the batch: name its line instead.
                    if case .remote(let e) = error, e.code == .badRequest || e.code == .invalidDocument,
                       e.message.hasPrefix("documents["), let close = e.message.firstIndex(of: "]"),
                       let i = Int(e.message[e.message.index(e.message.startIndex, offsetBy: 10)..<close]), batchLines.indices.contains(i) {
                        throw Rejected(message: "\(path):\(batchLines[i]): \(e.message[e.message.index(after: close)...].drop { $0 == ":" || $0 == " " })\(done())")
                    }
                    if total > 0, case .remote(let e) = error { throw Rejected(message: e.message + done()) }
                    throw error
                }
                total += r["count"]?.int64Value ?? 0
                last = r["lastSequence"]?.int64Value ?? last
                batch.removeAll(keepingCapacity: true)
                batchLines.removeAll(keepingCapacity: true)
                batchBytes = 0
            }
            // Lines end at LF or CRLF (one Character in Swift); blank lines are skipped but
            // counted, so an error names the line an editor shows.
            for (n, line) in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }).enumerated()
            where !line.allSatisfy({ $0 == "\r" || $0 == " " || $0 == "\t" }) {
                guard let tab = line.firstIndex(of: "\t") else { throw Rejected(message: "\(path):\(n + 1): expected ID<TAB>JSON\(done())") }
                let body: JSONValue
                do { body = try JSONValue.parse(String(line[line.index(after: tab)...])) } catch {
                    throw Rejected(message: "\(path):\(n + 1): \(error)\(done())")
                }
                guard body.isObject else { throw Rejected(message: "\(path):\(n + 1): a document body is a JSON object\(done())") }
                if batchBytes + line.utf8.count + 64 > ControlMessage.pageBudgetBytes { try send() }
                batch.append(["id": .string(String(line[..<tab])), "body": body])
                batchLines.append(n + 1)
                batchBytes += line.utf8.count + 64
                if batch.count == 500 { try send() }
            }
            try send()
            if a.flags.contains("--json") { output(["count": .int(total), "lastSequence": .int(last)]) } else { out("imported \(total.counted("document")) (last sequence \(last))") }
        case "get":
            let a = try Arguments.parse(rest, command: command, valueOptions: ["--socket"], flagOptions: ["--json"])
            if helpIfAsked(a, "doc") { return ExitCode.ok }
            try a.expectPositionals(2...2, command: command, usage: "doc get <collection> <id>")
            let result = try client(a).call(["op": "doc.get", "collection": .string(a.positionals[0]), "id": .string(a.positionals[1])])
            output(a.flags.contains("--json") ? result : (result["body"] ?? .null))
        case "delete":
            let a = try Arguments.parse(rest, command: command, valueOptions: ["--socket"], flagOptions: ["--json"])
            if helpIfAsked(a, "doc") { return ExitCode.ok }
            try a.expectPositionals(2...2, command: command, usage: "doc delete <collection> <id>")
            let result = try client(a).call(["op": "doc.delete", "collection": .string(a.positionals[0]), "id": .string(a.positionals[1])])
            if a.flags.contains("--json") { output(result) } else { out(ChangeText.line(result)) }
        case "list":
            let a = try Arguments.parse(rest, command: command, valueOptions: ["--socket", "--limit", "--after"], flagOptions: ["--json", "--deleted"])
            if helpIfAsked(a, "doc") { return ExitCode.ok }
            try a.expectPositionals(1...1, command: command, usage: "doc list <collection>")
            let limit = try a.int("--limit", command: command, default: 100, range: 1...10_000)
            let (documents, result) = try paged(client(a), limit: limit, key: "documents") { wanted, last in
                var o: [String: JSONValue] = ["op": "doc.list", "collection": .string(a.positionals[0]), "limit": .int(wanted),
                                              "includeDeleted": .bool(a.flags.contains("--deleted"))]
                if let after = last?["id"] ?? a.values["--after"].map(JSONValue.string) { o["after"] = after }
                return .object(o)
            }
            if a.flags.contains("--json") { output(["collection": result["collection"] ?? .null, "documents": .array(documents)]); return ExitCode.ok }
            for d in documents {
                let id = d["id"]?.stringValue ?? "?"
                let state = d["deleted"]?.boolValue == true ? "deleted" : "rev \(d["revision"]?.int64Value ?? 0)"
                out("\(id)\t\(state)\tseq \(d["sequence"]?.int64Value ?? 0)")
            }
        case "expire":
            return try docExpire(rest, command: command)
        default:
            throw UsageError(command: "doc", message: "unknown subcommand \"\(sub)\": put, import, get, delete, list, query, index or indexes")
        }
        return ExitCode.ok
    }

    /// Standard input whole; over `limit` bytes is refused (exit 6), saying `what` the limit is.
    static func readStandardInput(limit: Int, what: String) throws -> String {
        var input: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, 65536) }
            if n < 0 { if errno == EINTR { continue }; throw SystemError(call: "read(stdin)", code: errno) }
            if n == 0 { break }
            input.append(contentsOf: chunk.prefix(n))
            if input.count > limit { throw Rejected(message: "standard input is over \(limit) bytes, \(what)") }
        }
        return String(decoding: input, as: UTF8.self)
    }

    // MARK: changes

    static func changes(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "changes", valueOptions: ["--socket", "--since", "--limit"], flagOptions: ["--json", "--follow"])
        if helpIfAsked(a, "changes") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "changes", usage: "changes [--since SEQ] [--follow]")
        let since = try a.int("--since", command: "changes", default: 0, range: 0...Int.max)
        let limit = try a.int("--limit", command: "changes", default: 1000, range: 1...10_000)
        let json = a.flags.contains("--json")
        let c = try client(a)
        if a.flags.contains("--follow") {
            try c.send(["op": "changes", "since": .int(since), "follow": true])
            guard let first = try c.receive() else { return ExitCode.failure }
            _ = try ControlClient.unwrap(first)
            while let frame = try c.receive(timeoutMillis: Int32.max) {
                guard let change = frame["change"] else { _ = try ControlClient.unwrap(frame); continue }
                out(json ? change.compactText : ChangeText.line(change))
            }
            throw gatewayGone(c)
        }
        let (changes, result) = try paged(c, limit: limit, key: "changes") { wanted, last in
            ["op": "changes", "since": last?["sequence"] ?? .int(since), "limit": .int(wanted)]
        }
        if json { output(["changes": .array(changes), "lastSequence": result["lastSequence"] ?? .null]); return ExitCode.ok }
        for change in changes { out(ChangeText.line(change)) }
        return ExitCode.ok
    }

    /// A --follow stream whose gateway went away ends with exit 5 and says so (not exit 0 in
    /// silence, nor a broken pipe).
    static func gatewayGone(_ c: ControlClient) -> ControlClient.Failure {
        .unreachable(path: c.path, why: "the gateway closed the connection: it stopped or restarted")
    }

    /// A list of up to `limit` items, asked for in as many requests as the gateway's pages need
    /// (an answer that says `"more"` stopped short of a frame's size): `request` gets how many
    /// are still wanted and the last item so far (its cursor). Returns the items and the last answer.
    static func paged(_ c: ControlClient, limit: Int, key: String, request: (Int, JSONValue?) -> JSONValue) throws -> ([JSONValue], JSONValue) {
        var items: [JSONValue] = []
        var result: JSONValue = .null
        repeat {
            result = try c.call(request(limit - items.count, items.last))
            let page = result[key]?.arrayValue ?? []
            items.append(contentsOf: page)
            if page.isEmpty { break }
        } while result["more"]?.boolValue == true && items.count < limit
        return (items, result)
    }

    // MARK: conflicts

    static func conflicts(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "conflicts", valueOptions: ["--socket", "--limit"], flagOptions: ["--json"])
        if helpIfAsked(a, "conflicts") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "conflicts", usage: "conflicts [--limit N] [--json]")
        let limit = try a.int("--limit", command: "conflicts", default: 100, range: 1...10_000)
        let (rows, _) = try paged(client(a), limit: limit, key: "conflicts") { wanted, last in
            var o: [String: JSONValue] = ["op": "conflicts", "limit": .int(wanted)]
            if let before = last?["number"] { o["before"] = before }
            return .object(o)
        }
        if a.flags.contains("--json") { output(.array(rows)); return ExitCode.ok }
        if rows.isEmpty { out("no conflicts") }
        for c in rows { out(ConflictText.block(c)) }
        return ExitCode.ok
    }

    // MARK: log

    static func log(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "log", valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "log") { return ExitCode.ok }
        guard let sub = a.positionals.first else { throw UsageError(command: "log", message: "missing subcommand: level or levels") }
        let result: JSONValue
        switch sub {
        case "level":
            try a.expectPositionals(3...3, command: "log level", usage: "log level DOMAIN|all LEVEL")
            result = try client(a).call(["op": "log.level", "domain": .string(a.positionals[1]), "level": .string(a.positionals[2])])
        case "levels":
            try a.expectPositionals(1...1, command: "log levels", usage: "log levels")
            result = try client(a).call(["op": "log.levels"])
        default:
            throw UsageError(command: "log", message: "unknown subcommand \"\(sub)\": level or levels")
        }
        if a.flags.contains("--json") { output(result); return ExitCode.ok }
        for (domain, level) in (result.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
            out("\(domain)\t\(level.stringValue ?? "?")")
        }
        return ExitCode.ok
    }

    // MARK: version

    static func version(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "version", flagOptions: ["--json"])
        if helpIfAsked(a, "version") { return ExitCode.ok }
        let v: [(String, String)] = [
            ("shoal", ShoalVersion.current), ("sqlite", SQLiteLibrary.version), ("mbedtls", MbedTLSLibrary.version),
            ("libyaml", YAMLParser.libraryVersion), ("libgpiod", HardwareProbe.libgpiodVersion),
            ("libmosquitto", MQTTClient.libraryVersion), ("libnats", NATSClient.libraryVersion),
        ]
        if a.flags.contains("--json") {
            var o: [String: JSONValue] = [:]
            for (k, x) in v { o[k] = .string(x) }
            output(.object(o))
        } else {
            for (k, x) in v { out("\(k) \(x)") }
        }
        return ExitCode.ok
    }
}

/// Human-readable forms of control-socket results.
enum ChangeText {
    static func line(_ c: JSONValue) -> String {
        let kind = c["deleted"]?.boolValue == true ? "delete" : "put"
        return "seq \(c["sequence"]?.int64Value ?? 0)\t\(kind)\t\(c["collection"]?.stringValue ?? "?")/\(c["id"]?.stringValue ?? "?")\trev \(c["revision"]?.int64Value ?? 0)"
    }
}

/// `shoal conflicts` for a person: when (local time, then UTC), which document, who and what won,
/// then both bodies (cut at 200 characters; --json has them whole).
enum ConflictText {
    static func block(_ c: JSONValue) -> String {
        let at = c["atMillis"]?.int64Value ?? 0
        let peer = String((c["peer"]?.stringValue ?? "").prefix(8))
        // Local time, then UTC; once when the local zone is UTC (a gateway's usual setting).
        let (local, utc) = (IdentityText.localDate(at / 1000), IdentityText.date(at / 1000))
        var lines = ["#\(c["number"]?.int64Value ?? 0)  \(local == utc ? utc : "\(local) (\(utc))")  "
            + "\(c["collection"]?.stringValue ?? "?")/\(c["id"]?.stringValue ?? "?")  \(c["resolver"]?.stringValue ?? "?") → \(c["outcome"]?.stringValue ?? "?")  peer \(peer)"]
        for (label, key) in [("local ", "localBody"), ("remote", "remoteBody")] {
            lines.append("    \(label)  \(body(c[key]))")
        }
        return lines.joined(separator: "\n")
    }

    static func body(_ value: JSONValue?) -> String {
        guard let value, value != .null else { return "(none: deleted, or refused before its body came)" }
        let text = value.compactText
        return text.count <= 200 ? text : String(text.prefix(200)) + "… (\(text.utf8.count) bytes; --json shows it whole)"
    }
}
