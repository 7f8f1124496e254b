import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalTLS

extension CLI {
    /// `shoal identity create|show|delete`: the gateway's TLS identity on disk. Works without a
    /// running gateway; the directory is --dir, or the one `shoal run` uses with the given
    /// --board/--config/--data-dir. With none of these it asks the running gateway (its control
    /// socket, found as `shoal status` finds it) where its identity is — `show` then prints the
    /// identity it uses — and falls back to the stock board's directory when none answers.
    static func identity(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "identity",
                                    valueOptions: ["--label", "--days", "--cn", "--ca-key", "--ca-cert", "--dir", "--board", "--config", "--data-dir", "--board-dir", "--socket"],
                                    flagOptions: ["--json", "--force", "--new-key", "--self-signed"])
        if helpIfAsked(a, "identity") { return ExitCode.ok }
        guard let sub = a.positionals.first else { throw UsageError(command: "identity", message: "missing subcommand: create, show or delete") }
        try a.expectPositionals(1...1, command: "identity \(sub)", usage: "identity \(sub)")
        let directory: String
        var label = a.values["--label"]
        var running: [String: JSONValue]?
        if let dir = a.values["--dir"] {
            directory = dir
        } else if let found = try runningIdentity(a) {
            running = found
            directory = found["directory"]?.stringValue ?? ""
            label = label ?? found["label"]?.stringValue
        } else {
            let loaded = try ConfigurationLoading.load(runtimeOptions(a), logger: Logger(sink: MemoryLogSink(), level: .none))
            directory = loaded.identityDirectory
            label = label ?? loaded.site.identityLabel
        }
        let store = IdentityStore(directory: directory)
        let name = label ?? "shoal"
        switch sub {
        case "create":
            try create(a, store: store, name: name)
        case "show":
            // A running gateway's own identity (what it presents now), unless another label was asked for.
            if let running, running["label"]?.stringValue == name {
                guard running["peerID"]?.stringValue != nil else {
                    throw NotFound(message: "the running gateway has no usable identity \(name) in \(directory): \(running["problem"]?.stringValue ?? "none yet")")
                }
                show(running, json: a.flags.contains("--json"), socket: ControlClient.resolveSocket(a.values["--socket"]))
                return ExitCode.ok
            }
            guard let identity = try store.find(name) else {
                throw NotFound(message: "no identity \(name) in \(directory); `shoal identity create` makes one (and `shoal run` does on first boot)")
            }
            show(IdentityText.json(identity, label: name, directory: directory).objectValue ?? [:], json: a.flags.contains("--json"), socket: nil)
        case "delete":
            guard try store.delete(name) else { throw NotFound(message: "no identity \(name) in \(directory)") }
            out("deleted identity \(name) from \(directory)")
        default:
            throw UsageError(command: "identity", message: "unknown subcommand \"\(sub)\": create, show or delete")
        }
        return ExitCode.ok
    }

    /// The running gateway's answer about its identity, when no flag says where to look: nil if
    /// no gateway answers at the socket (or it predates the request). An explicit --socket that
    /// does not answer is an error.
    static func runningIdentity(_ a: Arguments) throws -> [String: JSONValue]? {
        guard ["--board", "--config", "--data-dir", "--board-dir"].allSatisfy({ a.values[$0] == nil }) else { return nil }
        let path = ControlClient.resolveSocket(a.values["--socket"])
        do {
            return try ControlClient(path: path).call(["op": "identity"]).objectValue
        } catch {
            if a.values["--socket"] != nil { throw error }
            return nil
        }
    }

    /// `identity create`: a new identity, or (--force) a certificate re-issued over the existing
    /// key, so the peer id stays; --new-key replaces the key too.
    static func create(_ a: Arguments, store: IdentityStore, name: String) throws {
        let days = try a.int("--days", command: "identity create", default: 365, range: 1...36_500)
        let newKey = a.flags.contains("--new-key")
        let existing = try store.find(name)
        if let existing, !a.flags.contains("--force") {
            throw Rejected(message: "identity \(name) already exists in \(store.directory) (peer id \(existing.peerID)); pass --force to re-issue its certificate over the same key (the peer id stays), or --force --new-key for a new key (a new peer id: update the other gateways' allowedPeers)")
        }
        let cn = a.values["--cn"] ?? existing.flatMap { commonName(of: $0.certificate) } ?? IdentityDefaults.commonName(label: name)
        let request = Identity.Request(commonName: cn, validDays: days)
        var issuer: (key: PrivateKey, certificate: Certificate)?
        switch (a.values["--ca-key"], a.values["--ca-cert"]) {
        case (nil, nil):
            break
        case (let keyPath?, let certPath?):
            guard let keyText = try Files.read(keyPath) else { throw Rejected(message: "\(keyPath): no such file") }
            guard let certText = try Files.read(certPath) else { throw Rejected(message: "\(certPath): no such file") }
            issuer = (try PrivateKey(parsing: Array(keyText.utf8)), try Certificate(parsing: Array(certText.utf8)))
        default:
            throw UsageError(command: "identity create", message: "--ca-key and --ca-cert go together")
        }
        // A CA-signed identity re-issued without the CA would become self-signed: the peers that
        // trust it through the CA (rootCertificates) would refuse it from its next link on.
        if let existing, !newKey, issuer == nil, existing.certificate.issuer != existing.certificate.subject,
           !a.flags.contains("--self-signed") {
            throw Rejected(message: "identity \(name) is signed by \(existing.certificate.issuer); re-issue it with --ca-key K --ca-cert C (peers that trust that CA keep trusting it), or pass --self-signed to make it self-signed (then only peers that name its peer id in allowedPeers accept it)")
        }
        let identity: Identity
        if let existing, !newKey {
            identity = try existing.reissued(request, issuer: issuer)
        } else if let issuer {
            identity = try Identity.createSigned(request, caKey: issuer.key, caCertificate: issuer.certificate)
        } else {
            identity = try Identity.createSelfSigned(request)
        }
        try store.save(identity, label: name)
        if a.flags.contains("--json") { output(IdentityText.json(identity, label: name, directory: store.directory)); return }
        if let existing, !newKey {
            out("re-issued identity \(name) in \(store.directory) over its key: valid until \(IdentityText.date(existing.certificate.notAfter)) → \(IdentityText.date(identity.certificate.notAfter))\npeer id \(identity.peerID) (unchanged)")
        } else if let existing {
            out("replaced identity \(name) in \(store.directory) with a new key\npeer id \(existing.peerID) → \(identity.peerID) (update the other gateways' allowedPeers)")
        } else {
            out("created identity \(name) in \(store.directory)\npeer id \(identity.peerID)")
        }
    }

    /// The CN of a certificate Shoal made ("CN=gw-1, O=Shoal"), to keep it on re-issue.
    static func commonName(of certificate: Certificate) -> String? {
        for part in certificate.subject.split(separator: ",") {
            let item = part.trimmingPrefix(" ")
            if item.hasPrefix("CN=") { return String(item.dropFirst(3)) }
        }
        return nil
    }

    static func show(_ j: [String: JSONValue], json: Bool, socket: String?) {
        // "socket": the running gateway that answered (the text's "gateway running" line), or null when read from files.
        if json { output(.object(j.merging(["socket": socket.map(JSONValue.string) ?? .null]) { _, new in new })); return }
        func field(_ key: String) -> String { j[key]?.stringValue ?? "?" }
        out("label        \(field("label")) (\(field("directory")))")
        if let socket { out("gateway      running (\(socket)): the identity it presents") }
        out("peer id      \(field("peerID"))")
        out("subject      \(field("subject"))")
        out("issuer       \(field("issuer"))")
        out("not before   \(field("notBefore"))")
        out("not after    \(field("notAfter"))\(j["expired"]?.boolValue == true ? "  EXPIRED" : "")")
        out("key usages   \((j["extendedKeyUsages"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ", "))")
        if let problem = j["problem"]?.stringValue { out("problem      \(problem)") }
    }
}

/// Something the user named does not exist (exit 4).
struct NotFound: Error {
    let message: String
}
