import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalTLS
import ShoalTrust

/// `shoal trust`: the fleet's trust. `keygen` makes an admin key; `allow`, `revoke`, `add-root`,
/// `remove-root`, `add-admin-key`, `remove-admin-key` and `checkpoint` sign an entry with it and
/// hand it to the running gateway (or, with --out, write it to a file to import on any gateway
/// later: the key never needs to be on a gateway); `import`, `export`, `pending`, `status`.
extension CLI {
    static let trustSigning = ["allow", "revoke", "add-root", "remove-root", "add-admin-key", "remove-admin-key", "checkpoint"]

    static func trust(_ args: [String]) throws -> Int32 {
        if args.first == "crl" { return try TrustCRLCommand.run(Array(args.dropFirst())) }
        let a = try Arguments.parse(args, command: "trust",
                                    valueOptions: ["--socket", "--admin-key", "--out", "--note", "--serial", "--days", "--next-update-days"],
                                    flagOptions: ["--json", "--force"])
        if helpIfAsked(a, "trust") { return ExitCode.ok }
        let sub = a.positionals.first ?? "status"
        switch sub {
        case "keygen":
            try a.expectPositionals(1...1, command: "trust keygen", usage: "trust keygen --out FILE")
            return try trustKeygen(a)
        case "status":
            try a.expectPositionals(0...1, command: "trust status", usage: "trust status [--json]")
            let answer = try client(a).call(["op": "trust"])
            if a.flags.contains("--json") { output(answer) } else { out(TrustText.status(answer)) }
        case "pending":
            try a.expectPositionals(1...1, command: "trust pending", usage: "trust pending [--json]")
            let answer = try client(a).call(["op": "trust.pending"])
            if a.flags.contains("--json") { output(answer) } else { out(TrustText.pending(answer)) }
        case "export":
            try a.expectPositionals(1...1, command: "trust export", usage: "trust export [--out FILE]")
            let answer = try client(a).call(["op": "trust.entries"])
            let lines = (answer.arrayValue ?? []).compactMap { $0["body"]?.stringValue }
            let text = lines.map { $0 + "\n" }.joined()
            if let path = a.values["--out"] {
                try Files.write(path, text)
                out("wrote \(lines.count.counted("trust entry", plural: "trust entries")) to \(path)")
            } else {
                out(text, newline: false)
            }
        case "import":
            try a.expectPositionals(2...64, command: "trust import", usage: "trust import FILE...")
            var bodies: [JSONValue] = []
            for path in a.positionals.dropFirst() {
                guard let text = try Files.read(path) else { throw Rejected(message: "\(path): no such file") }
                let lines = text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }).map(String.init).filter { !$0.allSatisfy(\.isWhitespace) }
                guard !lines.isEmpty else { throw Rejected(message: "\(path): no entry in it (one signed entry per line, as `shoal trust export` or `--out` writes)") }
                bodies += lines.map { .string($0) }
            }
            return try trustImport(a, bodies)
        case let s where trustSigning.contains(s):
            return try trustSign(a, sub)
        default:
            throw UsageError(command: "trust", message: "unknown subcommand \"\(sub.prefix(40))\"; trust has: status, pending, keygen, \(trustSigning.joined(separator: ", ")), import, export, crl")
        }
        return ExitCode.ok
    }

    /// What a key made by `keygen` signs: the fleet's trust entries, or releases of Shoal.
    enum KeyRole {
        case admin, release
        var command: String { self == .admin ? "trust keygen" : "release keygen" }
        var name: String { self == .admin ? "admin key" : "release key" }
        var signs: String { self == .admin ? "every trust entry" : "every release of Shoal the fleet installs" }
        var siteLines: (String, String) { self == .admin ? ("trust:", "adminKeys:") : ("updates:", "releaseKeys:") }
    }

    static func trustKeygen(_ a: Arguments) throws -> Int32 { try keygen(a, role: .admin) }

    /// A new ECDSA P-256 key: FILE (private, 0600) and FILE.pub, and the site file's lines.
    static func keygen(_ a: Arguments, role: KeyRole) throws -> Int32 {
        guard let path = a.values["--out"] else { throw UsageError(command: role.command, message: "--out FILE is required (the private key; FILE.pub gets the public key)") }
        if Files.exists(path) && !a.flags.contains("--force") {
            throw Rejected(message: "\(path) exists; pass --force to replace it (what its key signed stays valid only while gateways trust that key)")
        }
        let key = try AdminSigningKey.generate()
        try Files.write(path, key.pem, mode: 0o600)
        try Files.write(path + ".pub", key.publicKey.pem)
        if a.flags.contains("--json") {
            output(["privateKey": .string(path), "publicKey": .string(path + ".pub"), "fingerprint": .string(key.publicKey.fingerprint), "hex": .string(key.publicKey.hex)])
            return ExitCode.ok
        }
        out("""
            \(role.name) \(key.publicKey.fingerprint)
            private key: \(path) (keep it off the gateways; it signs \(role.signs))
            public key:  \(path).pub
            for the site file:
              \(role.siteLines.0)
                \(role.siteLines.1)
                  - \(key.publicKey.hex)
            """)
        return ExitCode.ok
    }

    /// Signs one entry with --admin-key and imports it to the running gateway, or writes it to --out.
    static func trustSign(_ a: Arguments, _ kind: String) throws -> Int32 {
        let usage = kind == "checkpoint" ? "trust checkpoint --admin-key FILE [--next-update-days N]" : "trust \(kind) SUBJECT --admin-key FILE [--note TEXT] [--out FILE]"
        try a.expectPositionals(kind == "checkpoint" ? 1...1 : 2...2, command: "trust \(kind)", usage: usage)
        guard let keyPath = a.values["--admin-key"] else { throw UsageError(command: "trust \(kind)", message: "--admin-key FILE is required (the private key `shoal trust keygen` wrote)") }
        guard let keyText = try Files.read(keyPath) else { throw Rejected(message: "\(keyPath): no such file") }
        let key: AdminSigningKey
        do { key = try AdminSigningKey(parsing: Array(keyText.utf8)) } catch { throw Rejected(message: "\(keyPath): \(error)") }
        let offline = a.values["--out"] != nil
        let gateway: ControlClient? = offline ? nil : try client(a)
        let subject: String
        switch kind {
        case "allow", "revoke":
            subject = try peerSubject(a.positionals[1], gateway: gateway)
        case "add-root", "remove-root":
            let path = a.positionals[1]
            guard let text = try Files.read(path) else { throw Rejected(message: "\(path): no such file (the root certificate, PEM)") }
            do { subject = Digest.hex(try Certificate(parsing: Array(text.utf8)).der) } catch { throw Rejected(message: "\(path): \(error)") }
        case "add-admin-key", "remove-admin-key":
            let arg = a.positionals[1]
            do {
                if let text = try Files.read(arg) { subject = try AdminPublicKey(parsing: Array(text.utf8)).hex } else { subject = try AdminPublicKey(hex: arg).hex }
            } catch let e as TLSError { throw Rejected(message: "\(arg): \(e)") }
        default:
            subject = ""
        }
        let now = Identity.now()
        var nextUpdate: Int64?
        if kind == "checkpoint" {
            let days = try a.int("--next-update-days", command: "trust checkpoint", default: 30, range: 1...3650)
            nextUpdate = now + Int64(days) * 86_400
        }
        // The serial: one more than the highest this key signed, as the key's .serial file and the
        // gateway (when one answers) know it.
        let serialPath = keyPath + ".serial"
        var serial = UInt64((try? Files.read(serialPath))??.split(separator: "\n").first.flatMap { UInt64($0) } ?? 0) + 1
        if let gateway, let held = try? gateway.call(["op": "trust"]), let last = held["lastSerials"]?[key.publicKey.fingerprint]?.int64Value {
            serial = max(serial, UInt64(max(0, last)) + 1)
        }
        if let s = a.values["--serial"] {
            guard let v = UInt64(s), v > 0 else { throw UsageError(command: "trust \(kind)", message: "--serial is a whole number above 0") }
            serial = v
        }
        let entry: TrustEntry
        do {
            entry = try TrustEntry.signed(TrustEntry.Kind(rawValue: kind)!, subject: subject, note: a.values["--note"] ?? "", serial: serial,
                                          issuedAt: now, nextUpdate: nextUpdate, by: key)
        } catch { throw Rejected(message: "\(error)") }
        try Files.write(serialPath, "\(serial)\n", mode: 0o600)
        if let path = a.values["--out"] {
            try Files.write(path, entry.body + "\n")
            out("signed: \(entry.summary)\nwrote it to \(path); `shoal trust import \(path)` on any gateway hands it to the fleet")
            return ExitCode.ok
        }
        return try trustImport(a, [.string(entry.body)])
    }

    /// A peer id, or a prefix (8+ hex digits) of one pending on the running gateway.
    static func peerSubject(_ text: String, gateway: ControlClient?) throws -> String {
        let t = text.lowercased()
        if PeerID(hex: t) != nil { return t }
        guard t.count >= 8, t.allSatisfy(\.isHexDigit) else {
            throw Rejected(message: "\"\(text.prefix(80))\" is not a peer id (64 hex digits, or 8+ of a pending peer's first digits: `shoal trust pending`)")
        }
        guard let gateway else { throw Rejected(message: "give the whole peer id (64 hex digits) with --out: no gateway is asked for pending peers") }
        let pending = (try gateway.call(["op": "trust.pending"]).arrayValue ?? []).compactMap { $0["peer"]?.stringValue }
        let matches = pending.filter { $0.hasPrefix(t) }
        guard matches.count == 1 else {
            throw Rejected(message: matches.isEmpty ? "no pending peer starts with \(t) (`shoal trust pending`); give the whole peer id" : "\(t) matches \(matches.count) pending peers; give more digits")
        }
        return matches[0]
    }

    static func trustImport(_ a: Arguments, _ bodies: [JSONValue]) throws -> Int32 {
        let answer = try client(a).call(["op": "trust.import", "entries": .array(bodies)])
        if a.flags.contains("--json") { output(answer); return ExitCode.ok }
        var refused = 0
        for r in answer["results"]?.arrayValue ?? [] {
            let outcome = r["outcome"]?.stringValue ?? "?"
            let what = r["summary"]?.stringValue ?? "entry \(r["index"]?.int64Value ?? 0)"
            switch outcome {
            case "taken": out("taken: \(what) (replicating to the fleet)")
            case "unchanged": out("already held: \(what)")
            default:
                refused += 1
                out("refused: \(what): \(r["reason"]?.stringValue ?? "?")")
            }
        }
        if refused > 0 { throw Rejected(message: "\(refused.counted("entry", plural: "entries")) refused") }
        return ExitCode.ok
    }
}

/// `shoal trust status` and `pending` as text.
enum TrustText {
    static func status(_ j: JSONValue) -> String {
        var lines: [String] = []
        lines.append("trust: \(j["state"]?.stringValue ?? "?"), \(j["entries"]?.int64Value ?? 0) entries, \(j["rejectedEntries"]?.int64Value ?? 0) refused since start")
        let keys = j["adminKeys"]?.arrayValue ?? []
        lines.append("admin keys: " + (keys.isEmpty ? "none (trust.adminKeys in the site file): no entry can be taken" : keys.map { k in
            "\(k["fingerprint"]?.stringValue ?? "?")\(k["fromSiteFile"]?.boolValue == true ? " (site file)" : "")\(k["removedAt"]?.int64Value != nil ? " (removed)" : "")"
        }.joined(separator: ", ")))
        let allowed = j["allowedPeers"]?.arrayValue ?? []
        lines.append("allowed peers: \(allowed.count)" + (allowed.isEmpty ? "" : "\n" + allowed.compactMap { $0.stringValue.map { "  " + $0 } }.joined(separator: "\n")))
        let revoked = j["revokedPeers"]?.arrayValue ?? []
        lines.append("revoked peers: \(revoked.count)" + (revoked.isEmpty ? "" : "\n" + revoked.map { "  \($0["peer"]?.stringValue ?? "?") since \(IdentityText.date($0["at"]?.int64Value ?? 0))" }.joined(separator: "\n")))
        let roots = j["roots"]?.arrayValue ?? []
        lines.append("roots: \(roots.count)" + (roots.isEmpty ? "" : "\n" + roots.map { "  \($0["subject"]?.stringValue ?? "?") (\($0["from"]?.stringValue ?? "?"), until \(IdentityText.date($0["notAfter"]?.int64Value ?? 0)))" }.joined(separator: "\n")))
        if let c = j["checkpoint"], c != .null {
            let next = c["nextUpdate"]?.int64Value ?? 0
            lines.append("checkpoint: next update by \(IdentityText.date(next))\(c["stale"]?.boolValue == true ? " — PAST: the trust list is stale; sign a new checkpoint (`shoal trust checkpoint`)" : "")")
        } else {
            lines.append("checkpoint: none")
        }
        let pending = j["pending"]?.int64Value ?? 0
        if pending > 0 { lines.append("pending: \(pending) (`shoal trust pending`)") }
        return lines.joined(separator: "\n")
    }

    static func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s : s + String(repeating: " ", count: n - s.count) }

    static func pending(_ j: JSONValue) -> String {
        let items = j.arrayValue ?? []
        guard !items.isEmpty else { return "no peer is waiting for approval" }
        var lines = ["PEER ID                                                           SUBJECT                 OVER          FIRST SEEN            ATTEMPTS"]
        for p in items {
            let subject = (p["subject"]?.stringValue ?? "").prefix(22)
            let over = (p["transports"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ",")
            lines.append("\(p["peer"]?.stringValue ?? "?")  \(pad(String(subject), 22))  \(pad(over, 12))  \(IdentityText.date(p["firstSeen"]?.int64Value ?? 0))  \(p["attempts"]?.int64Value ?? 0)")
        }
        lines.append("allow one with `shoal trust allow PEER_ID --admin-key FILE` (8+ first digits are enough)")
        return lines.joined(separator: "\n")
    }
}
