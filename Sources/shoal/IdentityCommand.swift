import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalTLS

extension CLI {
    /// `shoal identity create|show|delete`: the gateway's TLS identity on disk. Works without a
    /// running gateway; the directory is the one `shoal run` uses (`<storage>/identities` of the
    /// board, or --data-dir), or --dir.
    static func identity(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "identity",
                                    valueOptions: ["--label", "--days", "--cn", "--ca-key", "--ca-cert", "--dir", "--board", "--config", "--data-dir", "--board-dir"],
                                    flagOptions: ["--json", "--force"])
        if helpIfAsked(a, "identity") { return ExitCode.ok }
        guard let sub = a.positionals.first else { throw UsageError(command: "identity", message: "missing subcommand: create, show or delete") }
        try a.expectPositionals(1...1, command: "identity \(sub)", usage: "identity \(sub)")
        let options = runtimeOptions(a)
        let directory: String
        var label = a.values["--label"]
        if let dir = a.values["--dir"] {
            directory = dir
        } else {
            let loaded = try ConfigurationLoading.load(options, logger: Logger(sink: MemoryLogSink(), level: .none))
            directory = loaded.identityDirectory
            label = label ?? loaded.site.identityLabel
        }
        let store = IdentityStore(directory: directory)
        let name = label ?? "shoal"
        switch sub {
        case "create":
            let days = try a.int("--days", command: "identity create", default: 365, range: 1...36_500)
            if let existing = try store.find(name), !a.flags.contains("--force") {
                throw Rejected(message: "identity \(name) already exists in \(directory) (peer id \(existing.peerID)); pass --force to replace it (its peer id will change)")
            }
            let request = Identity.Request(commonName: a.values["--cn"] ?? IdentityDefaults.commonName(label: name), validDays: days)
            let identity: Identity
            switch (a.values["--ca-key"], a.values["--ca-cert"]) {
            case (nil, nil):
                identity = try Identity.createSelfSigned(request)
            case (let keyPath?, let certPath?):
                guard let keyText = try Files.read(keyPath) else { throw Rejected(message: "\(keyPath): no such file") }
                guard let certText = try Files.read(certPath) else { throw Rejected(message: "\(certPath): no such file") }
                identity = try Identity.createSigned(request, caKey: PrivateKey(parsing: Array(keyText.utf8)),
                                                     caCertificate: Certificate(parsing: Array(certText.utf8)))
            default:
                throw UsageError(command: "identity create", message: "--ca-key and --ca-cert go together")
            }
            try store.save(identity, label: name)
            if a.flags.contains("--json") { output(json(identity, label: name, directory: directory)) }
            else { out("created identity \(name) in \(directory)\npeer id \(identity.peerID)") }
        case "show":
            guard let identity = try store.find(name) else {
                throw NotFound(message: "no identity \(name) in \(directory); `shoal identity create` makes one (and `shoal run` does on first boot)")
            }
            let j = json(identity, label: name, directory: directory)
            if a.flags.contains("--json") { output(j); return ExitCode.ok }
            out("label        \(name) (\(directory))")
            out("peer id      \(identity.peerID)")
            out("subject      \(identity.certificate.subject)")
            out("issuer       \(identity.certificate.issuer)")
            out("not before   \(IdentityText.date(identity.certificate.notBefore))")
            out("not after    \(IdentityText.date(identity.certificate.notAfter))\(identity.isExpired() ? "  EXPIRED" : "")")
            out("key usages   \(identity.certificate.extendedKeyUsages.joined(separator: ", "))")
        case "delete":
            guard try store.delete(name) else { throw NotFound(message: "no identity \(name) in \(directory)") }
            out("deleted identity \(name) from \(directory)")
        default:
            throw UsageError(command: "identity", message: "unknown subcommand \"\(sub)\": create, show or delete")
        }
        return ExitCode.ok
    }

    static func json(_ identity: Identity, label: String, directory: String) -> JSONValue {
        let c = identity.certificate
        return [
            "label": .string(label), "directory": .string(directory), "peerID": .string(identity.peerID.description),
            "subject": .string(c.subject), "issuer": .string(c.issuer),
            "notBefore": .string(IdentityText.date(c.notBefore)), "notAfter": .string(IdentityText.date(c.notAfter)),
            "expired": .bool(identity.isExpired()),
            "extendedKeyUsages": .array(c.extendedKeyUsages.map { .string($0) }),
        ]
    }
}

/// Something the user named does not exist (exit 4).
struct NotFound: Error {
    let message: String
}
