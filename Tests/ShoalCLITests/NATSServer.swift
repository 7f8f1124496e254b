import Foundation
import ShoalLinux
import ShoalTesting
import Testing

/// A real NATS server with JetStream for the uplink's process tests: Debian's `nats-server -c <its
/// own config>` (never its systemd service) on a free loopback port (never 4222), in a temporary
/// directory of its own. JetStream is on with its `store_dir` there, so `restart()` keeps the
/// streams; `stop()` is SIGTERM, `kill()` SIGKILL (JetStream's file store recovers what it wrote).
/// With a monitoring port (`http:`, on by default) readiness waits for JetStream's health
/// (`/healthz?js-enabled-only=true`). Its log is a file kept for failure messages (`log()`);
/// `remove()` (or deinit) stops it and deletes the directory.
///
/// The files in `dir`:
///   nats-server.conf   the config this fixture writes (see `writeConfig`)
///   nats-server.log    the server's log (`log_file`); nats-server.out: its stdout and stderr
///                      (errors before the log opens: a bad config, a port in use)
///   jetstream/         the JetStream store (`store_dir`)
///   tls/               with `tls`: see `TestPKI` (server.crt also names `serverAddresses`)
///
/// Users: without `tls`, `users` authenticate with their passwords, and the fixture adds `admin`
/// (password `adminPassword`, no restrictions) for `hub(_:)`. With `tls` every client must present
/// a certificate the server trusts (the test CA's, or one of `clientTrust`), and `verify_and_map`
/// makes the certificate's subject (or a SAN) the user name: a `User` named like
/// `certificateSubject(of:)` gives that certificate its permissions; the test client certificate
/// (CN=shoal-test-client) is the unrestricted admin `hub(_:)` uses. A certificate that maps to no
/// user is refused.
final class NATSServer: @unchecked Sendable {  // one test's server, used from that test's thread only
    static let binary = "/usr/sbin/nats-server"
    static let hubScript = MQTTTools.repo + "/Tests/NATS/hub.py"

    /// nats-server is installed (`make deps`).
    static var available: Bool { FileManager.default.isExecutableFile(atPath: binary) }

    /// Python with nats-py importable (`make deps`: Tests/NATS/requirements.txt).
    static let natsPyAvailable: Bool = {
        (try? MQTTTools.run(["/usr/bin/env", "python3", "-c", "import nats.js"], timeout: 30).status) == 0
    }()

    /// A user of the server, with allow lists for the subjects it may publish to and subscribe to
    /// (nil: no restriction that way). With `tls`, `name` is a certificate subject ("CN=…") and
    /// `password` is not used.
    struct User {
        var name: String
        var password: String?
        var publish: [String]?
        var subscribe: [String]?
        init(_ name: String, password: String? = nil, publish: [String]? = nil, subscribe: [String]? = nil) {
            self.name = name
            self.password = password
            self.publish = publish
            self.subscribe = subscribe
        }
    }

    /// A JetStream cluster this server is a node of (`cluster { name, listen, routes }`).
    struct Cluster {
        var name: String
        /// The other nodes' route URLs (nats-route://host:port); may include this node's own.
        var routes: [String]
        var port: UInt16
    }

    struct Options {
        /// The client port requires TLS with a client certificate (`verify_and_map: true`); see the
        /// class's comment for users.
        var tls = false
        /// PEM files of further certificates trusted for client certificates (appended to the
        /// server's `ca_file`): a gateway's self-signed identity certificate is its own anchor.
        var clientTrust: [String] = []
        /// More IP addresses for the server certificate (where clients reach it in a lab).
        var serverAddresses: [String] = []
        var users: [User] = []
        /// The monitoring port (`http:`), used to wait for JetStream's health.
        var monitoring = true
        var jetstream = true
        /// JetStream's domain (`jetstream { domain }`: a leaf node's own JetStream).
        var jetstreamDomain: String?
        /// `server_name` (default: shoal-test-<port>); required for clusters.
        var serverName: String?
        var cluster: Cluster?
        /// More config lines, verbatim.
        var extraConfig: [String] = []
        /// Runs the server inside this network namespace (a NetLab node or host), listening on
        /// `listenAddress` (0.0.0.0: every leg) at port 14222 (monitoring 18222): its own
        /// namespace, so nothing else holds them. `hub(_:)` runs its clients there too.
        var netns: String?
        var listenAddress: String?
        /// A fixed client port (default: a free one; 14222 in a namespace).
        var port: UInt16?
        /// Logs every protocol message (`trace: true`). For small tests.
        var trace = false
    }

    let options: Options
    let dir: TemporaryDirectory
    let port: UInt16
    let monitorPort: UInt16?
    let pki: TestPKI?
    let adminPassword = "admin-\(UUID().uuidString.prefix(8))"
    private var process: ChildProcess?
    /// How many times the server was started (restarts included).
    private(set) var starts = 0

    var configPath: String { dir.path + "/nats-server.conf" }
    var logPath: String { dir.path + "/nats-server.log" }
    var outputPath: String { dir.path + "/nats-server.out" }
    var storeDir: String { dir.path + "/jetstream" }
    var serverName: String { options.serverName ?? "shoal-test-\(port)" }
    var listenAddress: String { options.listenAddress ?? (options.netns == nil ? "127.0.0.1" : "0.0.0.0") }
    var scheme: String { options.tls ? "tls" : "nats" }
    /// The site file's server URL from the server's own namespace (the host's, or its netns).
    var url: String { "\(scheme)://127.0.0.1:\(port)" }
    /// The URL at another address of the server (a lab host's address at one site).
    func url(at address: String) -> String { "\(scheme)://\(address):\(port)" }
    var isRunning: Bool { process.map { $0.exitStatus() == nil } ?? false }
    var pid: pid_t? { isRunning ? process?.pid : nil }

    /// Writes the config (and with `tls` the certificates) and starts the server; throws, with
    /// its log, if it is not ready (JetStream healthy) within 60 s.
    init(_ options: Options = Options()) throws {
        self.options = options
        let dir = TemporaryDirectory(prefix: "shoal-nats")
        do {
            try FileManager.default.createDirectory(atPath: dir.path + "/jetstream", withIntermediateDirectories: true)
            port = try options.port ?? (options.netns == nil ? Mosquitto.freePort() : 14222)
            monitorPort = options.monitoring ? (options.netns == nil ? try Mosquitto.freePort() : 18222) : nil
            pki = options.tls ? try TestPKI(directory: dir.path + "/tls", clientTrust: options.clientTrust, serverAddresses: options.serverAddresses) : nil
        } catch {
            dir.remove()
            throw error
        }
        self.dir = dir
        try writeConfig()  // on a throw from here on, deinit stops the server and removes dir
        try start()
    }

    deinit { remove() }

    static func quoted(_ s: String) -> String { "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }

    static func list(_ items: [String]) -> String { "[" + items.map(quoted).joined(separator: ", ") + "]" }

    /// One `users` entry of a nats-server config.
    static func userEntry(_ u: User, withPassword: Bool) -> String {
        var fields = ["user: \(quoted(u.name))"]
        if withPassword, let p = u.password { fields.append("password: \(quoted(p))") }
        var perms: [String] = []
        if let p = u.publish { perms.append("publish: {allow: \(list(p))}") }
        if let s = u.subscribe { perms.append("subscribe: {allow: \(list(s))}") }
        if !perms.isEmpty { fields.append("permissions: {\(perms.joined(separator: ", "))}") }
        return "{" + fields.joined(separator: ", ") + "}"
    }

    /// The subject of the test PKI's client certificate: the admin user with `tls`.
    static let testClientSubject = "CN=shoal-test-client"

    private func writeConfig() throws {
        var lines = [
            "# written by the Shoal tests' NATSServer fixture (Tests/ShoalCLITests/NATSServer.swift)",
            "server_name: \(Self.quoted(serverName))",
            "listen: \(Self.quoted("\(listenAddress):\(port)"))",
            "log_file: \(Self.quoted(logPath))",
            "logtime: true",
            "max_payload: 8MB",
        ]
        if options.trace { lines += ["trace: true", "debug: true"] }
        if let monitorPort { lines += ["http: \(Self.quoted("\(listenAddress):\(monitorPort)"))"] }
        if options.jetstream {
            lines += ["jetstream {", "  store_dir: \(Self.quoted(storeDir))", "  max_memory_store: 256MB", "  max_file_store: 2GB"]
            if let d = options.jetstreamDomain { lines += ["  domain: \(Self.quoted(d))"] }
            lines += ["}"]
        }
        if let pki {
            lines += ["tls {", "  cert_file: \(Self.quoted(pki.serverCert))", "  key_file: \(Self.quoted(pki.serverKey))",
                      "  ca_file: \(Self.quoted(pki.brokerClientCAs))", "  verify_and_map: true", "  timeout: 5", "}"]
            let users = [User(Self.testClientSubject)] + options.users
            lines += ["authorization {", "  users: ["] + users.map { "    " + Self.userEntry($0, withPassword: false) } + ["  ]", "}"]
        } else if !options.users.isEmpty {
            let users = [User("admin", password: adminPassword)] + options.users
            lines += ["authorization {", "  users: ["] + users.map { "    " + Self.userEntry($0, withPassword: true) } + ["  ]", "}"]
        }
        if let c = options.cluster {
            lines += ["cluster {", "  name: \(Self.quoted(c.name))", "  listen: \(Self.quoted("\(listenAddress):\(c.port)"))",
                      "  routes: \(Self.list(c.routes))", "}"]
        }
        lines += options.extraConfig
        try (lines.joined(separator: "\n") + "\n").write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    /// `args` run in the server's namespace, if it has one.
    func inNamespace(_ args: [String]) -> [String] {
        guard let ns = options.netns else { return args }
        return [NetLab.tool("ip") ?? "/usr/sbin/ip", "netns", "exec", ns] + args
    }

    /// Starts the server on its ports and store; returns once it is ready (with monitoring and
    /// JetStream: once `/healthz?js-enabled-only=true` says ok; a cluster's node: before its
    /// cluster has a meta leader, see NATSCluster.waitForJetStream).
    func start() throws {
        guard !isRunning else { return }
        process = try ChildProcess(path: inNamespace([Self.binary])[0], arguments: Array(inNamespace([Self.binary, "-c", configPath]).dropFirst()), output: outputPath)
        starts += 1
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if !isRunning { break }
            if log().components(separatedBy: "Server is ready").count - 1 >= starts,
               monitorPort == nil || !options.jetstream || healthz(jetstreamOnly: true) { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let status = process?.exitStatus()
        throw MQTTTools.Failed(description: "nats-server -c \(configPath) \(status.map { "exited \($0)" } ?? "is not ready after 60 s"): \(diagnostics())")
    }

    /// The monitoring port's `/healthz` (`js-enabled-only=true`: JetStream is on, not whether a
    /// cluster's meta leader is known) answers ok.
    func healthz(jetstreamOnly: Bool = false) -> Bool {
        guard let monitorPort, isRunning else { return false }
        let url = "http://127.0.0.1:\(monitorPort)/healthz" + (jetstreamOnly ? "?js-enabled-only=true" : "")
        guard let r = try? MQTTTools.run(inNamespace(["/usr/bin/curl", "-s", "-m", "5", url]), timeout: 10) else { return false }
        return r.status == 0 && r.output.contains("\"ok\"")
    }

    /// A monitoring endpoint's JSON (`jsz`, `varz`, `routez`, `connz`…), or nil.
    func monitor(_ endpoint: String) -> [String: Any]? {
        guard let monitorPort, isRunning,
              let r = try? MQTTTools.run(inNamespace(["/usr/bin/curl", "-s", "-m", "5", "http://127.0.0.1:\(monitorPort)/\(endpoint)"]), timeout: 10),
              r.status == 0 else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(r.output.utf8))) as? [String: Any]
    }

    /// SIGTERM: the server shuts down cleanly. Returns its exit status.
    @discardableResult
    func stop() -> Int32? { stopProcess(signal: SIGTERM) }

    /// SIGKILL: no goodbye to the clients or the cluster.
    @discardableResult
    func kill() -> Int32? { stopProcess(signal: SIGKILL) }

    /// Stops the server (SIGTERM, or SIGKILL with `hard`) if it runs, waits `pause` seconds, and
    /// starts it again on the same ports with the same store.
    func restart(hard: Bool = false, pause: Double = 0) throws {
        stopProcess(signal: hard ? SIGKILL : SIGTERM)
        if pause > 0 { Thread.sleep(forTimeInterval: pause) }
        try start()
    }

    @discardableResult
    private func stopProcess(signal: Int32) -> Int32? {
        guard let process else { return nil }
        defer { self.process = nil }
        return process.stop(signal: signal, graceMillis: 10_000)
    }

    /// Stops the server and deletes its directory.
    func remove() {
        stopProcess(signal: SIGKILL)
        dir.remove()
    }

    /// The server's log so far.
    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The end of the log and of the server's own output, for a failure message.
    func diagnostics(_ characters: Int = 3000) -> String {
        let out = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        return "log \(logPath): …\(log().suffix(characters))\noutput: \(out.suffix(600))"
    }

    /// hub.py's connection options as this server's admin: the test client certificate with
    /// `tls`, else the admin password when there are users.
    var adminArguments: [String] {
        if let pki { return ["--ca", pki.caCert, "--cert", pki.clientCert, "--key", pki.clientKey] }
        return options.users.isEmpty ? [] : ["--user", "admin", "--password", adminPassword]
    }

    /// `python3 Tests/NATS/hub.py --server <url> <connection> args` to completion, in the server's
    /// namespace (or in `ns`, with `servers`), as its admin unless `connection` says otherwise
    /// (e.g. ["--user", "gw1", "--password", "…"] or a gateway's --cert/--key with --ca).
    func hub(_ args: [String], connection: [String]? = nil, servers: [String]? = nil, ns: String? = nil,
             timeout: Double = 120) throws -> NATSHubResult {
        try NATSHubResult.run(args, servers: servers ?? [url], connection: connection ?? adminArguments, ns: ns ?? options.netns, timeout: timeout)
    }

    /// The subject of a PEM certificate (its first) as verify_and_map names the user: Go's
    /// pkix.Name.String(), attributes in Go's fixed order (CN, OU, O, …, C) whatever their order
    /// in the certificate (a Shoal identity is "CN=<host name>,O=Shoal": openssl's RFC 2253 form
    /// says "O=Shoal,CN=<host name>"). Simple values only (no ',' or '+' in them).
    static func certificateSubject(of pem: String) throws -> String {
        let r = try MQTTTools.run(["/usr/bin/openssl", "x509", "-in", pem, "-noout", "-subject", "-nameopt", "RFC2253"], timeout: 20)
        guard r.status == 0, let line = r.output.split(separator: "\n").first(where: { $0.hasPrefix("subject=") }) else {
            throw MQTTTools.Failed(description: "openssl x509 -subject \(pem): exit \(r.status): \(r.output)")
        }
        let parts = line.dropFirst("subject=".count).split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let order = ["SERIALNUMBER", "CN", "OU", "O", "POSTALCODE", "STREET", "L", "ST", "C"]
        func rank(_ p: String) -> Int { order.firstIndex(of: String(p.prefix { $0 != "=" })) ?? order.count }
        return parts.enumerated().sorted { (rank($0.element), $0.offset) < (rank($1.element), $1.offset) }.map(\.element).joined(separator: ",")
    }
}

/// What a hub.py command printed: its exit status, its JSON lines and its whole output.
struct NATSHubResult: CustomStringConvertible {
    var status: Int32
    var lines: [[String: Any]]
    var output: String
    var description: String { "hub.py: exit \(status): \(output.prefix(3000))" }
    var ok: Bool { status == 0 }
    /// The last line's "error", if any.
    var error: String? { lines.last?["error"] as? String }

    static func run(_ args: [String], servers: [String], connection: [String], ns: String?, timeout: Double) throws -> NATSHubResult {
        var cmd = ["/usr/bin/env", "python3", NATSServer.hubScript] + servers.flatMap { ["--server", $0] } + connection + args
        if let ns { cmd = [NetLab.tool("ip") ?? "/usr/sbin/ip", "netns", "exec", ns] + cmd }
        let (status, output) = try MQTTTools.run(cmd, timeout: timeout)
        let lines = output.split(separator: "\n").compactMap { line -> [String: Any]? in
            guard line.hasPrefix("{") else { return nil }
            return (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
        return NATSHubResult(status: status, lines: lines, output: output)
    }
}

/// Three (or `size`) nats-server nodes forming a JetStream cluster, each in a NetLab host
/// namespace `<prefix>-n<i>` on one site's bridge at `<subnet>.<firstOctet + i - 1>` (10.78.1.201–203
/// at site 0 of `NetLab(sites:)`), client port 14222, cluster port 16222, monitoring 18222.
/// Gateways on the same site (the lab's nodes there) reach them at `urls`.
///
///     let lab = try NetLab(sites: [1])                  // g1 at 10.78.1.1
///     let cluster = try NATSCluster(lab: lab)           // n1–n3 at 10.78.1.201–203
///     // site file: uplink: {servers: cluster.urls, replicas: 3}
///     cluster.kill(1)                                   // SIGKILL node n2 (0-based index 1)
///     try cluster.restart(1)
final class NATSCluster: @unchecked Sendable {
    let lab: NetLab
    let site: Int
    let hosts: [NetLab.Host]
    let servers: [NATSServer]
    let name: String
    static let clusterPort: UInt16 = 16222

    init(lab: NetLab, site: Int = 0, size: Int = 3, name: String = "shoal-hub", firstOctet: Int = 201, options: NATSServer.Options = .init()) throws {
        self.lab = lab
        self.site = site
        self.name = name
        let hosts = try (1...size).map { try lab.addHost("n\($0)", sites: [site], octet: firstOctet + $0 - 1) }
        self.hosts = hosts
        let routes = hosts.map { "nats-route://\($0.addresses[site]!):\(Self.clusterPort)" }
        // Started together: each node's JetStream waits for its peers before it is healthy.
        var servers: [NATSServer] = []
        for (i, h) in hosts.enumerated() {
            var o = options
            o.netns = h.ns
            o.serverName = "n\(i + 1)"
            o.serverAddresses += [h.addresses[site]!]
            o.cluster = .init(name: name, routes: routes, port: Self.clusterPort)
            servers.append(try NATSServer(o))
        }
        self.servers = servers
        guard waitForJetStream(within: 60) else {
            throw MQTTTools.Failed(description: "the cluster has no JetStream meta leader after 60 s: \(servers.map { $0.diagnostics(1500) }.joined(separator: "\n"))")
        }
    }

    /// The site file's `servers:` (every node, from the cluster's site).
    var urls: [String] { zip(hosts, servers).map { $1.url(at: $0.addresses[site]!) } }

    /// Every running node's `/healthz` is ok (JetStream current, a meta leader known).
    func waitForJetStream(within seconds: Double = 60) -> Bool {
        eventuallyBlocking(within: seconds, every: 0.2) { servers.filter(\.isRunning).allSatisfy { $0.healthz() } }
    }

    /// The JetStream meta leader's server name, by a running node's `/jsz`.
    func metaLeader() -> String? {
        for s in servers where s.isRunning {
            if let leader = (s.monitor("jsz")?["meta_cluster"] as? [String: Any])?["leader"] as? String, !leader.isEmpty { return leader }
        }
        return nil
    }

    @discardableResult
    func kill(_ i: Int) -> Int32? { servers[i].kill() }
    @discardableResult
    func stop(_ i: Int) -> Int32? { servers[i].stop() }
    func restart(_ i: Int, hard: Bool = false) throws { try servers[i].restart(hard: hard) }

    /// hub.py as the admin against every node, run in a running node's namespace.
    func hub(_ args: [String], connection: [String]? = nil, timeout: Double = 120) throws -> NATSHubResult {
        let via = servers.firstIndex(where: \.isRunning) ?? 0
        return try servers[via].hub(args, connection: connection, servers: urls, ns: hosts[via].ns, timeout: timeout)
    }

    func diagnostics() -> String { servers.map { "\($0.serverName): \($0.diagnostics(1500))" }.joined(separator: "\n") }

    func remove() { servers.forEach { $0.remove() } }
}

extension NetLab {
    /// A single nats-server as the hub of several sites: a host namespace `<prefix>-hub` with a
    /// leg on each site's bridge at `.254` (10.78.1.254 and 10.78.2.254 for two sites), the
    /// server listening on every leg. A gateway at site s uses `hub.url(at: host.addresses[s]!)`;
    /// `link(host, site: s, up: false)` cuts site s off the hub (and `up: true` heals it). The
    /// host routes nothing: the sites cannot reach each other through it.
    func startHub(sites: [Int]? = nil, options: NATSServer.Options = .init()) throws -> (host: Host, server: NATSServer) {
        let host = try addHost("hub", sites: sites ?? subnets.indices.map { $0 }, octet: 254)
        var o = options
        o.netns = host.ns
        o.serverName = o.serverName ?? "hub"
        o.serverAddresses += host.addresses.values.sorted()
        return (host, try NATSServer(o))
    }
}

/// The uplink's names on the hub (the contract in issue 22) and the least a gateway's user may do.
enum NATSUplinkNames {
    /// tok(x) as ShoalWire's HubLayout makes it: bytes [A-Za-z0-9-] kept, every other byte (`_`
    /// too) `_XX` (upper-case hex). Not `%XX`: see NATSFixtureTests.percentInStreamName.
    static func token(_ s: String) -> String {
        s.utf8.map { b -> String in
            let c = Character(UnicodeScalar(b))
            return (c.isASCII && (c.isLetter || c.isNumber)) || c == "-" ? String(c) : String(format: "_%02X", b)
        }.joined()
    }

    static func stream(group: String, collection: String) -> String { "SHOAL_\(group)_\(token(collection))" }

    /// The minimal permissions of a gateway of group token `group` syncing `collections`, found by
    /// `hub.py gateway-check` against nats-server 2.9.10 (NATSConfigExamplesTests): publish to its
    /// group's documents; per stream: info, create, the last message by subject
    /// (STREAM.MSG.GET: js_GetLastMsg), DIRECT.GET (only for a stream with allow_direct), an
    /// ordered consumer (CONSUMER.CREATE.<stream> for an unnamed one, .<stream>.> for a named one),
    /// its deletion when the subscription ends (CONSUMER.DELETE), its flow-control replies
    /// ($JS.FC.<stream>.>); subscribe: replies and deliveries on _INBOX.>.
    static func gatewayPermissions(group: String, collections: [String]) -> (publish: [String], subscribe: [String]) {
        var publish = ["shoal.\(group).>"]
        for c in collections {
            let s = stream(group: group, collection: c)
            publish += ["$JS.API.STREAM.INFO.\(s)", "$JS.API.STREAM.CREATE.\(s)", "$JS.API.STREAM.MSG.GET.\(s)",
                        "$JS.API.DIRECT.GET.\(s)", "$JS.API.DIRECT.GET.\(s).>",
                        "$JS.API.CONSUMER.CREATE.\(s)", "$JS.API.CONSUMER.CREATE.\(s).>", "$JS.API.CONSUMER.DELETE.\(s).*",
                        "$JS.FC.\(s).>"]
        }
        return (publish, ["_INBOX.>"])
    }
}
