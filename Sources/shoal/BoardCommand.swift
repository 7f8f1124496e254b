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
                    rows.append(["id": .string(name), "error": .string("\(error)")])
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
            try a.expectPositionals(2...2, command: "board show", usage: "board show NAME")
            let b = try loader.loadBoard(a.positionals[1])
            let j = json(b)
            if a.flags.contains("--json") { output(j) } else { out(j.prettyText) }
            return ExitCode.ok
        case "check":
            try a.expectPositionals(2...2, command: "board check", usage: "board check FILE")
            let b = try loader.loadBoard(a.positionals[1])
            out("\(a.positionals[1]): ok (\(b.name), \(b.support.rawValue); merged from \(b.sources.joined(separator: " < ")))")
            if let site = a.values["--config"] {
                guard let text = try Files.read(site) else { throw ConfigurationFailure(message: "\(site): no such file") }
                let s = try loader.loadSite(text: text, file: site)
                _ = try loader.applying(s, to: b)
                out("\(site): ok (group \(s.group), \(s.collections.count.counted("collection")))")
            }
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
