import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalStatus

/// `shoal peers`, `shoal peer`, `shoal mesh`, `shoal events`, `shoal radios`: the mesh of a running
/// gateway, through its control socket.
extension CLI {
    static func peers(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "peers", valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "peers") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "peers", usage: "peers [--json]")
        let result = try client(a).call(["op": "peers"])
        if a.flags.contains("--json") { output(result); return ExitCode.ok }
        let rows = result.arrayValue ?? []
        if rows.isEmpty { out("no peers known yet (discovery runs in phases; see `shoal events --follow`)"); return ExitCode.ok }
        out("PEER      ONLINE  HEARD ON        LINK               ACTIVITY    ADDRESS                NEIGHBOURS")
        for p in rows {
            let id = String((p["peer"]?.stringValue ?? "?").prefix(8))
            let heard = (p["discoveredOn"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ",")
            let link = p["connectedOn"]?.stringValue.map { "\($0) \(p["direction"]?.stringValue ?? "")" } ?? "-"
            let neighbours = (p["neighbours"]?.arrayValue ?? []).compactMap { $0.stringValue.map { String($0.prefix(8)) } }.joined(separator: " ")
            out("\(pad(id, 9)) \(pad(p["online"]?.boolValue == true ? "yes" : "no", 7)) \(pad(heard.isEmpty ? "-" : heard, 15)) \(pad(link, 18)) \(pad(p["activity"]?.stringValue ?? "?", 11)) \(pad(p["address"]?.stringValue ?? "-", 22)) \(neighbours.isEmpty ? "-" : neighbours)")
            if let error = p["lastError"]?.stringValue { out("          last attempt failed: \(error)") }
            // A sync pulled from this peer, under its row while it runs.
            if let sync = SyncProgress(json: p["sync"]) { out("          syncing \(sync.text)") }
        }
        return ExitCode.ok
    }

    static func peer(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "peer", valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "peer") { return ExitCode.ok }
        try a.expectPositionals(1...1, command: "peer", usage: "peer ID [--json]")
        let id = a.positionals[0]
        guard (4...64).contains(id.count), id.allSatisfy(\.isHexDigit) else {
            throw UsageError(command: "peer", message: "ID is a peer id or at least its first 4 hex digits (as `shoal peers` shows them), not \"\(id)\"")
        }
        let p = try client(a).call(["op": "peer", "peer": .string(a.positionals[0])])
        if a.flags.contains("--json") { output(p); return ExitCode.ok }
        out("peer           \(p["peer"]?.stringValue ?? "?")")
        out("online         \(p["online"]?.boolValue == true ? "yes" : "no")")
        out("discovered on  \((p["discoveredOn"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ", ").nonEmpty ?? "-")")
        out("link           \(p["connectedOn"]?.stringValue.map { "\($0), \(p["direction"]?.stringValue ?? "")" } ?? "none")")
        out("activity       \(p["activity"]?.stringValue ?? "?")")
        out("address        \(p["address"]?.stringValue ?? "-")")
        if let error = p["lastError"]?.stringValue { out("last error     \(error)") }
        out("sync           \(SyncProgress(json: p["sync"]).map { "\($0.text) (received/announced so far)" } ?? "none running")")
        if let c = p["certificate"] {
            out("certificate    \(c["subject"]?.stringValue ?? "?"), valid until \(c["notAfter"]?.int64Value.map(IdentityText.date) ?? "?")")
        }
        let neighbours = (p["neighbours"]?.arrayValue ?? []).compactMap(\.stringValue)
        out("neighbours     \(neighbours.isEmpty ? "-" : neighbours.joined(separator: "\n               "))")
        return ExitCode.ok
    }

    static func mesh(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "mesh", valueOptions: ["--socket", "--svg"], flagOptions: ["--json", "--dot"])
        if helpIfAsked(a, "mesh") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "mesh", usage: "mesh [--dot] [--svg FILE] [--json]")
        // One output at a time (help: --dot | --svg FILE | --json); two would print one and drop the other.
        let chosen = [a.flags.contains("--dot") ? "--dot" : nil, a.values["--svg"] != nil ? "--svg" : nil, a.flags.contains("--json") ? "--json" : nil].compactMap { $0 }
        guard chosen.count <= 1 else { throw UsageError(command: "mesh", message: "\(chosen.joined(separator: " and ")) go one at a time: --dot, --svg FILE or --json") }
        let m = try client(a).call(["op": "mesh"])
        if a.flags.contains("--json") { output(m); return ExitCode.ok }
        let dot = m["dot"]?.stringValue ?? ""
        if let svg = a.values["--svg"] {
            guard let dotTool = ChildProcess.find("dot") else {
                printError("shoal mesh: Graphviz `dot` is not installed (apt-get install graphviz); `shoal mesh --dot` prints the source")
                return ExitCode.failure
            }
            let source = svg + ".dot"
            try Files.write(source, dot)
            defer { unlink(source) }
            let rc = try ChildProcess(path: dotTool, arguments: ["-Tsvg", source, "-o", svg], quiet: false).wait()
            guard rc == 0 else { printError("shoal mesh: dot failed (exit \(rc))"); return ExitCode.failure }
            out("wrote \(svg)")
            return ExitCode.ok
        }
        if a.flags.contains("--dot") { out(dot, newline: false); return ExitCode.ok }
        let c = m["counters"] ?? .null
        out("mesh state     \(m["state"]?.stringValue ?? "?")")
        out("this gateway   \(m["peer"]?.stringValue ?? "?")")
        out("peers          \(c["discoveredPeers"]?.int64Value ?? 0) discovered, \(c["connectedPeers"]?.int64Value ?? 0) connected")
        out("links known    \((m["links"]?.arrayValue ?? []).count) (from gossip); tree links here: \((m["tree"]?.arrayValue ?? []).count)")
        for l in m["links"]?.arrayValue ?? [] {
            let ends = (l.arrayValue ?? []).compactMap { $0.stringValue.map { String($0.prefix(8)) } }
            out("               \(ends.joined(separator: " — "))")
        }
        out("counters       failed attempts \(c["failedConnectionAttempts"]?.int64Value ?? 0), evictions \(c["evictions"]?.int64Value ?? 0), messages \(c["messagesSent"]?.int64Value ?? 0) sent / \(c["messagesReceived"]?.int64Value ?? 0) received,")
        out("               documents \(c["documentsReceived"]?.int64Value ?? 0) received / \(c["documentsApplied"]?.int64Value ?? 0) applied, bytes \(c["bytesSent"]?.int64Value ?? 0) sent / \(c["bytesReceived"]?.int64Value ?? 0) received, conflicts \(c["conflicts"]?.int64Value ?? 0)")
        return ExitCode.ok
    }

    static func events(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "events", valueOptions: ["--socket", "--since"], flagOptions: ["--json", "--follow"])
        if helpIfAsked(a, "events") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "events", usage: "events [--since N] [--follow] [--json]")
        var since = Int64(try a.int("--since", command: "events", default: 0, range: 0...Int.max))
        let json = a.flags.contains("--json")
        let c = try client(a)
        var answered = false
        repeat {
            let r: JSONValue
            do { r = try c.call(["op": "events", "since": .int(since)]) } catch {
                if answered, case .protocolError = error { throw gatewayGone(c) }
                throw error
            }
            answered = true
            for e in r["events"]?.arrayValue ?? [] {
                out(json ? e.compactText : eventLine(e))
                since = max(since, e["sequence"]?.int64Value ?? since)
            }
            if a.flags.contains("--follow") { usleep(250_000) }
        } while a.flags.contains("--follow")
        return ExitCode.ok
    }

    static func eventLine(_ e: JSONValue) -> String {
        let peer = e["peer"]?.stringValue.map { String($0.prefix(8)) } ?? ""
        let error = e["error"]?.stringValue.map { " — \($0)" } ?? ""
        let text: String
        switch e["type"]?.stringValue ?? "" {
        case "state": text = "mesh state \(e["state"]?.stringValue ?? "?")"
        case "transport": text = "\(e["transport"]?.stringValue ?? "?") \(e["active"]?.boolValue == true ? "active" : "inactive")\(error)"
        case "peerDiscovery": text = "peer \(peer) \(e["online"]?.boolValue == true ? "discovered" : "lost") on \(e["transport"]?.stringValue ?? "?")"
        case "peerReplicator": text = "peer \(peer) \(e["direction"]?.stringValue ?? "?") \(e["transport"]?.stringValue ?? "?"): \(e["activity"]?.stringValue ?? "?")\(error)"
        case "uplink": text = UplinkText.event(e)
        case "mqtt": text = "mqtt broker \(e["broker"]?.stringValue ?? "?") \(e["connected"]?.boolValue == true ? "connected" : "disconnected")\(error)"
        default: text = e.compactText
        }
        return "\(e["sequence"]?.int64Value ?? 0)\t\(IdentityText.date((e["atMillis"]?.int64Value ?? 0) / 1000))\t\(text)"
    }

    static func radios(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "radios", valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "radios") { return ExitCode.ok }
        try a.expectPositionals(0...1, command: "radios", usage: "radios [status|retry]")
        let sub = a.positionals.first ?? "status"
        if sub == "status" {
            let r = try client(a).call(["op": "radios"])
            if a.flags.contains("--json") { output(r); return ExitCode.ok }
            for name in ["wifi", "bluetooth"] {
                let t = r[name]
                let device = t?["interface"]?.stringValue ?? t?["adapter"]?.stringValue ?? "none"
                let usable = t?["transport"]?["usable"]?.boolValue == true
                let why = t?["transport"]?["why"]?.stringValue
                var line = "\(pad(name, 10)) \(pad(device, 8)) \(usable ? "usable" : "not usable")\(why.map { usable ? " (\($0))" : ": \($0)" } ?? "")"
                if t?["softBlocked"]?.boolValue == true || t?["hardBlocked"]?.boolValue == true {
                    line += " [rfkill\(t?["softBlocked"]?.boolValue == true ? " soft" : "")\(t?["hardBlocked"]?.boolValue == true ? " hard" : "")]"
                }
                out(line)
                // The transport as `shoal status` shows it (the same record, the same words).
                if let mesh = t?["transport"], mesh["active"] != nil {
                    out("\(pad("", 10)) transport \(GatewayStatus.Transport(name: name, json: mesh).summary)")
                }
            }
            return ExitCode.ok
        }
        guard sub == "retry" else { throw UsageError(command: "radios", message: "unknown subcommand \"\(sub)\" (status or retry)") }
        _ = try client(a).call(["op": "radios.retry"])
        out("retrying the radios now: advertising and a discovery phase start, backoffs are forgotten")
        return ExitCode.ok
    }

    static func pad(_ s: String, _ w: Int) -> String { s.count >= w ? s : s + String(repeating: " ", count: w - s.count) }
}

extension String {
    var nonEmpty: String? { isEmpty ? nil : self }
}
