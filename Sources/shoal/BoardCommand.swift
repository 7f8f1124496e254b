import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalRuntime

extension CLI {
    static func board(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "board", valueOptions: ["--board-dir", "--config"], flagOptions: ["--json"])
        if helpIfAsked(a, "board") { return ExitCode.ok }
        guard let sub = a.positionals.first else { throw UsageError(command: "board", message: "missing subcommand: list, show or check") }
        let dirs = a.values["--board-dir"].map { [$0] } ?? BoardFiles.defaultDirectories
        let loader = ConfigurationLoading.loader(directories: dirs)
        switch sub {
        case "list":
            try a.expectPositionals(1...1, command: "board list", usage: "board list")
            var rows: [JSONValue] = []
            for name in loader.source.boardNames() {
                do {
                    let b = try loader.loadBoard(name)
                    rows.append(["id": .string(name), "name": .string(b.name), "support": .string(b.support.rawValue),
                                 "model": b.model.map { .string($0) } ?? .null, "source": .string(b.sources.last ?? "")])
                } catch {
                    // One line per board: the first error, and how many more `board check` shows.
                    let more = error.all.count - 1 + error.omitted
                    rows.append(["id": .string(name), "error": .string(error.line + (more > 0 ? " (and \(more) more: shoal board check \(name))" : ""))])
                }
            }
            if a.flags.contains("--json") { output(.array(rows)); return ExitCode.ok }
            for r in rows {
                let id = r["id"]?.stringValue ?? "?"
                if let e = r["error"]?.stringValue { out("\(id)\tINVALID: \(e)"); continue }
                out("\(id.padding(14))\(r["support"]?.stringValue?.padding(13) ?? "")\(r["name"]?.stringValue ?? "")")
            }
            return ExitCode.ok
        case "show":
            try a.expectPositionals(2...2, command: "board show", usage: "board show NAME [--config SITE]")
            var b = try ConfigurationLoading.loadBoard(a.positionals[1], loader)
            var site: SiteConfig?
            if let path = a.values["--config"] {
                guard let text = try Files.read(path) else { throw ConfigurationFailure(message: "\(path): no such file (given with --config)") }
                let s = try loader.loadSite(text: text, file: path)
                b = try loader.applying(s, to: b)
                site = s
            }
            let (tree, _) = try loader.boardTree(a.positionals[1])
            let origins = BoardOrigins(board: tree, site: site)
            var j = json(b)
            if case .object(var o) = j {
                o["origins"] = .object(origins.map(of: j))
                if let site { o["site"] = .string(site.source) }
                j = .object(o)
            }
            if a.flags.contains("--json") { output(j); return ExitCode.ok }
            out("board \(b.id): \(b.name) (\(b.support.rawValue)); merged from \(b.sources.joined(separator: " < "))\(site.map { "; site \($0.source)" } ?? "")")
            // The origin column starts where the longest value ends (up to 60 columns), so it lines up.
            let rows = BoardOrigins.leaves(of: json(b)).filter { !$0.0.hasPrefix("sources") && $0.0 != "id" }
            let width = min(60, max(30, (rows.map(\.1.count).max() ?? 0) + 1))
            for (key, value) in rows {
                out("\(key.padding(42)) \(value.padding(width)) \(origins.origin(of: key))")
            }
            return ExitCode.ok
        case "check":
            try a.expectPositionals(2...2, command: "board check", usage: "board check FILE [--config SITE]")
            // Both files are read to their end; every error in either is reported (bounded).
            var errors = ConfigErrors()
            var board: BoardConfig?
            do { board = try ConfigurationLoading.loadBoard(a.positionals[1], loader) } catch {
                guard let e = error as? ConfigError else { throw error }
                errors.add(e)
                // A site file given where a board goes: say so before its keys are listed as unknown.
                let siteKeys = e.all.filter { $0.message.hasPrefix("unknown key") && ["group", "identity", "authenticator", "transports", "replication", "collections"].contains($0.key) }.map(\.key)
                if !siteKeys.isEmpty {
                    printError("shoal board check: \(a.positionals[1]) looks like a site file (\(siteKeys.map { $0 + ":" }.joined(separator: ", "))); "
                        + "check it with `shoal board check BOARD --config \(a.positionals[1])`")
                }
            }
            if let b = board {
                out("\(a.positionals[1]): ok (\(b.name), \(b.support.rawValue); merged from \(b.sources.joined(separator: " < ")))")
            }
            if let path = a.values["--config"] {
                guard let text = try Files.read(path) else { throw ConfigurationFailure(message: "\(path): no such file (given with --config)") }
                do {
                    let s = try loader.loadSite(text: text, file: path, checkFiles: ConfigurationLoading.referencedFileProblem)
                    let roots = try ConfigurationLoading.trustedRoots(s)
                    if let b = board { _ = try loader.applying(s, to: b) }
                    out("\(path): ok (group \(s.group), \(s.collections.count.counted("collection")): \(s.collections.map(\.name.description).joined(separator: ", "))\(roots.isEmpty ? "" : ", \(roots.count.counted("trusted root"))"))")
                } catch {
                    errors.add(error)
                }
            }
            if let e = errors.combined { throw e }
            return ExitCode.ok
        default:
            throw UsageError(command: "board", message: "unknown subcommand \"\(sub)\": list, show or check")
        }
    }

    static func json(_ b: BoardConfig) -> JSONValue {
        var led: [String: JSONValue] = ["driver": .string(b.led.driver.rawValue)]
        if let c = b.led.chip { led["chip"] = .string(c) }
        if let l = b.led.line { led["line"] = .int(l) }
        if b.led.driver == .gpiod { led["activeLow"] = .bool(b.led.activeLow) }
        if let n = b.led.name { led["name"] = .string(n) }
        var mesh: [String: JSONValue] = [:]
        for (k, v) in b.mesh.all { mesh[k] = .int(v) }
        var domains: [String: JSONValue] = [:]
        for (d, l) in b.log.domains { domains[d.rawValue] = .string(l.name) }
        return [
            "id": .string(b.id),
            "board": ["name": .string(b.name), "support": .string(b.support.rawValue), "model": b.model.map { .string($0) } ?? .null],
            "led": .object(led),
            "console": ["device": .string(b.console.device), "baud": .int(b.console.baud), "statusIntervalSeconds": .int(b.console.statusIntervalSeconds)],
            "wifi": ["interface": .string(b.wifiInterface ?? "none")],
            "bluetooth": ["adapter": .string(b.bluetoothAdapter ?? "none")],
            "storage": ["path": .string(b.storagePath), "durability": .string(b.durability.rawValue)],
            "control": ["socket": .string(b.controlSocket)],
            "mesh": .object(mesh),
            "log": ["level": .string(b.log.level.name), "domains": .object(domains)],
            "sources": .array(b.sources.map { .string($0) }),
        ]
    }
}

extension String {
    func padding(_ width: Int) -> String { count >= width ? self + " " : self + String(repeating: " ", count: width - count) }
}
