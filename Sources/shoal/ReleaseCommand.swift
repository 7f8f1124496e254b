import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalTLS
import ShoalTrust
import ShoalUpdate

/// `shoal release`: updates of Shoal itself over the mesh. `keygen` makes a release key, `sign`
/// makes a signed manifest for a binary (offline: the key need never be on a gateway), `publish`
/// hands a manifest and its binary to the running gateway, `status` shows every gateway's update
/// status document. `shoal update boot-check` is the unit's ExecStartPre.
extension CLI {
    static func release(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "release",
                                    valueOptions: ["--socket", "--key", "--binary", "--version", "--min-version", "--rollout", "--peers", "--notes", "--serial", "--out"],
                                    flagOptions: ["--json", "--force"])
        if helpIfAsked(a, "release") { return ExitCode.ok }
        switch a.positionals.first ?? "status" {
        case "keygen":
            try a.expectPositionals(1...1, command: "release keygen", usage: "release keygen --out FILE")
            return try keygen(a, role: .release)
        case "sign":
            try a.expectPositionals(1...1, command: "release sign", usage: "release sign --key FILE --binary FILE --version V [--min-version V] [--rollout 25% | --peers ID,...] --out FILE")
            return try releaseSign(a)
        case "publish":
            try a.expectPositionals(2...2, command: "release publish", usage: "release publish MANIFEST --binary FILE")
            guard let binary = a.values["--binary"] else { throw UsageError(command: "release publish", message: "--binary FILE is required (the binary the manifest was signed for)") }
            guard let text = try Files.read(a.positionals[1], max: ReleaseManifest.maxBytes) else { throw Rejected(message: "\(a.positionals[1]): no such file") }
            let answer = try client(a).call(["op": "release.publish", "manifest": .string(text.trimmingWhitespace), "binary": .string(Files.absolute(binary))])
            if a.flags.contains("--json") { output(answer) } else { out(answer["summary"]?.stringValue ?? "published") }
        case "status":
            try a.expectPositionals(0...1, command: "release status", usage: "release status [--json]")
            let answer = try client(a).call(["op": "release.status"])
            if a.flags.contains("--json") { output(answer) } else { out(releaseStatusText(answer)) }
        case let sub:
            throw UsageError(command: "release", message: "unknown subcommand \"\(sub.prefix(40))\"; release has: keygen, sign, publish, status")
        }
        return ExitCode.ok
    }

    static func releaseSign(_ a: Arguments) throws -> Int32 {
        let command = "release sign"
        guard let keyPath = a.values["--key"] else { throw UsageError(command: command, message: "--key FILE is required (the private key `shoal release keygen` wrote)") }
        guard let binaryPath = a.values["--binary"] else { throw UsageError(command: command, message: "--binary FILE is required (the shoal binary to release)") }
        guard let versionText = a.values["--version"] else { throw UsageError(command: command, message: "--version V is required (dotted whole numbers: 0.2.0)") }
        guard let outPath = a.values["--out"] else { throw UsageError(command: command, message: "--out FILE is required (the manifest, for `shoal release publish`)") }
        guard let version = ReleaseVersion(versionText) else { throw UsageError(command: command, message: "--version \(versionText.prefix(40)): dotted whole numbers (0.2.0)") }
        var minVersion: ReleaseVersion?
        if let m = a.values["--min-version"] {
            guard let v = ReleaseVersion(m) else { throw UsageError(command: command, message: "--min-version \(m.prefix(40)): dotted whole numbers (0.1.0)") }
            minVersion = v
        }
        let rollout = try rolloutOption(a, command: command)
        guard let keyText = try Files.read(keyPath) else { throw Rejected(message: "\(keyPath): no such file") }
        let key: AdminSigningKey
        do { key = try AdminSigningKey(parsing: Array(keyText.utf8)) } catch { throw Rejected(message: "\(keyPath): \(error)") }
        guard let binary = try Files.readBytes(binaryPath, max: Int(BlobReference.maxLength)) else { throw Rejected(message: "\(binaryPath): no such file") }
        let now = Identity.now()
        var serial = UInt64(now)
        if let s = a.values["--serial"] {
            guard let n = UInt64(s), n > 0 else { throw UsageError(command: command, message: "--serial: a whole number above 0") }
            serial = n
        }
        let manifest: ReleaseManifest
        do {
            manifest = try ReleaseManifest.signed(binary: binary, version: version, minVersion: minVersion, rollout: rollout,
                                                  notes: a.values["--notes"] ?? "", serial: serial, issuedAt: now, by: key)
        } catch { throw Rejected(message: "\(binaryPath): \(error)") }
        if Files.exists(outPath) && !a.flags.contains("--force") { throw Rejected(message: "\(outPath) exists; pass --force to replace it") }
        try Files.write(outPath, manifest.body + "\n")
        if a.flags.contains("--json") { output(["manifest": .string(outPath), "id": .string(manifest.documentID), "summary": .string(manifest.summary)]) } else {
            out("wrote \(outPath): \(manifest.summary)")
        }
        return ExitCode.ok
    }

    static func rolloutOption(_ a: Arguments, command: String) throws -> ReleaseManifest.Rollout {
        switch (a.values["--rollout"], a.values["--peers"]) {
        case (nil, nil), ("all"?, nil): return .all
        case (let r?, nil):
            guard r.hasSuffix("%"), let p = Int(r.dropLast()), (1...100).contains(p) else {
                throw UsageError(command: command, message: "--rollout \(r.prefix(20)): a percentage from 1% to 100%, or all")
            }
            return .percent(p)
        case (nil, let list?):
            let ids = list.split(separator: ",").map { String($0).lowercased() }
            let peers = ids.compactMap { $0.count == 64 ? PeerID(hex: $0) : nil }
            guard !ids.isEmpty, peers.count == ids.count, peers.count <= ReleaseManifest.maxPeers else {
                throw UsageError(command: command, message: "--peers: 1 to \(ReleaseManifest.maxPeers) peer ids (64 hex digits each, as `shoal identity show` prints), comma-separated")
            }
            return .peers(peers)
        default:
            throw UsageError(command: command, message: "--rollout and --peers exclude each other")
        }
    }

    static func releaseStatusText(_ answer: JSONValue) -> String {
        var lines = ["gateway           running   attempted  outcome       at                    reason"]
        for s in answer["gateways"]?.arrayValue ?? [] {
            let peer = String((s["peer"]?.stringValue ?? "?").prefix(16))
            func pad(_ t: String, _ n: Int) -> String { t.count >= n ? t + " " : t + String(repeating: " ", count: n - t.count) }
            let at = s["outcomeAt"]?.int64Value ?? 0
            lines.append(pad(peer, 18) + pad(s["running"]?.stringValue ?? "?", 10) + pad(s["attempted"]?.stringValue ?? "", 11)
                         + pad(s["outcome"]?.stringValue ?? "?", 14) + pad(at == 0 ? "-" : String(at), 22) + (s["reason"]?.stringValue ?? ""))
        }
        let releases = answer["releases"]?.arrayValue ?? []
        lines.append("")
        lines.append(releases.isEmpty ? "no release manifests held" : "releases held:")
        for r in releases { lines.append("  " + (r["summary"]?.stringValue ?? "?")) }
        return lines.joined(separator: "\n")
    }

    // MARK: update

    static func update(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "update", valueOptions: ["--dir", "--packaged", "--confirm-seconds", "--config", "--board", "--board-dir", "--data-dir"],
                                    flagOptions: ["--json"])
        if helpIfAsked(a, "update") { return ExitCode.ok }
        guard a.positionals.first == "boot-check" else {
            throw UsageError(command: "update", message: "unknown subcommand \"\((a.positionals.first ?? "").prefix(40))\"; update has: boot-check")
        }
        try a.expectPositionals(1...1, command: "update boot-check", usage: "update boot-check [--config FILE] [--dir DIR] [--packaged FILE] [--confirm-seconds N]")
        var dir = a.values["--dir"], confirm = a.values["--confirm-seconds"].flatMap { Int64($0) }
        if dir == nil || confirm == nil {
            // The site file's updates: section, as `shoal run` reads it.
            let loaded = try ConfigurationLoading.load(runtimeOptions(a), logger: Logger(sink: MemoryLogSink(), level: .none))
            dir = dir ?? loaded.site.updates.installDir
            confirm = confirm ?? loaded.site.updates.confirmSeconds
        }
        let packaged = a.values["--packaged"] ?? Files.absolute("/proc/self/exe")
        let installer = UpdateInstaller(directory: dir ?? "/var/lib/shoal/updates", packagedBinary: packaged)
        let (_, line) = try installer.bootCheck(now: Identity.now(), confirmSeconds: confirm ?? 120)
        if a.flags.contains("--json") { output(["line": .string(line), "current": .string(installer.target("current") ?? "")]) } else { out("boot check: \(line)") }
        return ExitCode.ok
    }
}

extension String {
    var trimmingWhitespace: String {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s = s.dropFirst() }
        while let c = s.last, c.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}
