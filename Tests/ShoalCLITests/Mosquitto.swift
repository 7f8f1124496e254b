import Foundation
import ShoalLinux
import ShoalTesting
import Testing

/// A real broker for the MQTT bridge's process tests: Debian's `mosquitto -c <its own config>` on a
/// free loopback port (never 1883: a system mosquitto may hold it), in a temporary directory of its
/// own. Persistence is on with its own `persistence_location`, so `restart()` keeps the sessions
/// (subscriptions of clients with clean session off) and their queued QoS 1 messages; `stop()` is
/// SIGTERM (mosquitto saves its database first), `kill()` is SIGKILL (it saves nothing: what
/// arrived since the last autosave is gone, unless `saveEveryChange`). Its log is a file kept for
/// failure messages (`log()`); `remove()` (or deinit) stops it and deletes the directory.
///
/// The files in `dir`:
///   mosquitto.conf     the config this fixture writes (see `writeConfig`)
///   mosquitto.log      the broker's log (`log_dest file`); mosquitto.out: its stdout and stderr
///                      (errors before the log opens: a bad config, a port in use)
///   data/mosquitto.db  the persistence file (written at SIGTERM and at each autosave)
///   passwords          with `passwords`: mosquitto_passwd's file of users and hashed passwords
///   tls/               with `tls`: see `TestPKI`
final class Mosquitto: @unchecked Sendable {  // one test's broker, used from that test's thread only
    static let binary = "/usr/sbin/mosquitto"

    /// mosquitto and its clients are installed (`make deps`).
    static var available: Bool {
        [binary, MQTTTools.pub, MQTTTools.sub].allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
    }

    struct Options {
        /// A second listener with TLS that requires a client certificate (`tlsPort`).
        var tls = false
        /// PEM files of further certificates the TLS listener accepts client certificates from
        /// (appended to its `cafile`): a gateway's self-signed identity certificate, which is its
        /// own trust anchor.
        var clientTrust: [String] = []
        /// Saves the database after every change (`autosave_on_changes true`, `autosave_interval
        /// 1`), so a SIGKILL loses (almost) nothing the broker acknowledged. Costly: it rewrites
        /// the whole database in each loop of the broker (~200 messages/s instead of ~10,000).
        var saveEveryChange = false
        /// Logs every packet (`log_type all`): PUBLISH/PUBACK per message. For small tests.
        var logAll = false
        /// Users and their passwords (`password_file`, made with mosquitto_passwd): anonymous
        /// clients are refused then.
        var passwords: [String: String] = [:]
        /// More config lines, verbatim.
        var extraConfig: [String] = []
        /// Runs the broker inside this network namespace (NetLab's nodes), on its loopback at
        /// port 18830 (18831 with TLS): its own namespace, so no other broker can hold them. Its
        /// clients must run there too (`MQTTTools` does so for this broker).
        var netns: String?
    }

    let options: Options
    let dir: TemporaryDirectory
    let port: UInt16
    let tlsPort: UInt16?
    let pki: TestPKI?
    private var process: ChildProcess?
    /// How many times the broker was started (restarts included).
    private(set) var starts = 0

    var configPath: String { dir.path + "/mosquitto.conf" }
    var logPath: String { dir.path + "/mosquitto.log" }
    var outputPath: String { dir.path + "/mosquitto.out" }
    var dataDir: String { dir.path + "/data" }
    /// The site file's url for this broker.
    var url: String { "mqtt://127.0.0.1:\(port)" }
    var tlsURL: String? { tlsPort.map { "mqtts://127.0.0.1:\($0)" } }
    var isRunning: Bool { process.map { $0.exitStatus() == nil } ?? false }
    var pid: pid_t? { isRunning ? process?.pid : nil }

    /// Writes the config (and with `tls` the certificates) and starts the broker; throws, with
    /// its log, if it does not accept connections within 20 s.
    init(_ options: Options = Options()) throws {
        self.options = options
        let dir = TemporaryDirectory(prefix: "shoal-mosquitto")
        do {
            try FileManager.default.createDirectory(atPath: dir.path + "/data", withIntermediateDirectories: true)
            port = options.netns == nil ? try Mosquitto.freePort() : 18830
            tlsPort = options.tls ? (options.netns == nil ? try Mosquitto.freePort() : 18831) : nil
            pki = options.tls ? try TestPKI(directory: dir.path + "/tls", clientTrust: options.clientTrust) : nil
        } catch {
            dir.remove()
            throw error
        }
        self.dir = dir
        try writeConfig()  // on a throw from here on, deinit stops the broker and removes dir
        try start()
    }

    deinit { remove() }

    private func writeConfig() throws {
        let user = getpwuid(getuid()).map { String(cString: $0.pointee.pw_name) } ?? "root"
        var lines = [
            "# written by the Shoal tests' Mosquitto fixture (Tests/ShoalCLITests/Mosquitto.swift)",
            // mosquitto run as root drops to the user `mosquitto`, who cannot write this
            // directory; as anyone else, `user` is ignored.
            "user \(user)",
            "per_listener_settings false",
            "allow_anonymous \(options.passwords.isEmpty)",
            "persistence true",
            "persistence_location \(dataDir)/",
            "persistence_file mosquitto.db",
            "max_queued_messages 200000",
            "max_inflight_messages 100",
            "set_tcp_nodelay true",
            "log_dest file \(logPath)",
            "connection_messages true",
            "log_timestamp_format %Y-%m-%dT%H:%M:%S",
        ]
        lines += options.logAll ? ["log_type all"] : ["log_type error", "log_type warning", "log_type notice", "log_type information", "log_type subscribe", "log_type unsubscribe"]
        lines += options.saveEveryChange ? ["autosave_on_changes true", "autosave_interval 1"] : ["autosave_interval 60"]
        lines += ["listener \(port) 127.0.0.1"]
        if let tlsPort, let pki {
            lines += [
                "listener \(tlsPort) 127.0.0.1",
                "cafile \(pki.brokerClientCAs)",
                "certfile \(pki.serverCert)",
                "keyfile \(pki.serverKey)",
                "require_certificate true",
                "use_identity_as_username false",
            ]
        }
        if !options.passwords.isEmpty {
            let file = dir.path + "/passwords"
            for (user, password) in options.passwords.sorted(by: { $0.key < $1.key }) {
                let made = try MQTTTools.run(["/usr/bin/mosquitto_passwd", "-b"] + (FileManager.default.fileExists(atPath: file) ? [] : ["-c"]) + [file, user, password], timeout: 20)
                guard made.status == 0 else { throw MQTTTools.Failed(description: "mosquitto_passwd: exit \(made.status): \(made.output)") }
            }
            lines += ["password_file \(file)"]
        }
        lines += options.extraConfig
        try (lines.joined(separator: "\n") + "\n").write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    /// Starts the broker on its ports and data; returns once every listener accepts.
    func start() throws {
        guard !isRunning else { return }
        if let ns = options.netns {
            // `ip netns exec` execs mosquitto: one pid, the broker's.
            process = try ChildProcess(path: NetLab.tool("ip") ?? "/usr/sbin/ip", arguments: ["netns", "exec", ns, Mosquitto.binary, "-c", configPath], output: outputPath)
        } else {
            process = try ChildProcess(path: Mosquitto.binary, arguments: ["-c", configPath], output: outputPath)
        }
        starts += 1
        let ports = [port] + (tlsPort.map { [$0] } ?? [])
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if !isRunning { break }
            // In a namespace its loopback cannot be reached from here: its log says when it runs.
            if options.netns != nil ? log().split(separator: "\n").filter({ $0.contains("mosquitto version") && $0.hasSuffix(" running") }).count >= starts
                : ports.allSatisfy(Mosquitto.accepts) { return }
            Thread.sleep(forTimeInterval: 0.02)
        }
        let status = process?.exitStatus()
        throw MQTTTools.Failed(description: "mosquitto -c \(configPath) \(status.map { "exited \($0)" } ?? "does not accept on \(ports) after 20 s"): \(diagnostics())")
    }

    /// SIGTERM: mosquitto saves its database and exits. Returns its exit status.
    @discardableResult
    func stop() -> Int32? { stopProcess(signal: SIGTERM) }

    /// SIGKILL: no save, no goodbye to the clients (their sockets are reset).
    @discardableResult
    func kill() -> Int32? { stopProcess(signal: SIGKILL) }

    /// Stops the broker (SIGTERM, or SIGKILL with `hard`) if it runs, waits `pause` seconds, and
    /// starts it again on the same ports with the same data.
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

    /// Stops the broker and deletes its directory.
    func remove() {
        stopProcess(signal: SIGKILL)
        dir.remove()
    }

    /// The broker's log so far.
    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The end of the log and of the broker's own output, for a failure message.
    func diagnostics(_ characters: Int = 3000) -> String {
        let out = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        return "log \(logPath): …\(log().suffix(characters))\noutput: \(out.suffix(600))"
    }

    /// True once the broker has logged `clientID` subscribing to `filter` (`log_type subscribe`
    /// writes "<client id> <qos> <filter>"), at this start or an earlier one.
    func hasSubscription(clientID: String, filter: String) -> Bool {
        log().split(separator: "\n").contains { $0.hasSuffix(": \(clientID) 0 \(filter)") || $0.hasSuffix(": \(clientID) 1 \(filter)") || $0.hasSuffix(": \(clientID) 2 \(filter)") }
    }

    /// Waits until the log shows `clientID` subscribed to `filter` (see `hasSubscription`).
    func waitForSubscription(clientID: String, filter: String, within seconds: Double = 20) -> Bool {
        eventuallyBlocking(within: seconds, every: 0.05) { hasSubscription(clientID: clientID, filter: filter) }
    }

    /// The topics of the QoS 1 messages `clientID` acknowledged (PUBACK), by the broker's log
    /// (needs `logAll`): each "Sending PUBLISH to <id> (… m<mid>, '<topic>', …)" names a message
    /// id's topic until the id is used again; "Received PUBACK from <id> (Mid: <mid>, …)" settles it.
    /// Over every start of the broker (the log is appended to).
    func acknowledgedTopics(by clientID: String) -> [String] {
        var topicOf: [Substring: Substring] = [:]
        var acknowledged: [String] = []
        let send = "Sending PUBLISH to \(clientID) (", ack = "Received PUBACK from \(clientID) (Mid: "
        for line in log().split(separator: "\n") {
            if let r = line.range(of: send) {
                // d0, q1, r0, m12, 'topic', ... (n bytes))
                let rest = line[r.upperBound...]
                guard let m = rest.range(of: ", m"), let quote = rest.range(of: ", '", range: m.upperBound..<rest.endIndex),
                      let end = rest.range(of: "', ...", options: .backwards) else { continue }
                topicOf[rest[m.upperBound..<quote.lowerBound]] = rest[quote.upperBound..<end.lowerBound]
            } else if let r = line.range(of: ack) {
                let mid = line[r.upperBound...].prefix { $0.isNumber }
                if let topic = topicOf.removeValue(forKey: mid) { acknowledged.append(String(topic)) }
            }
        }
        return acknowledged
    }

    /// How many times `clientID` has connected (the log's "New client connected … as <id>").
    func connections(of clientID: String) -> Int {
        log().components(separatedBy: " as \(clientID) (").count - 1
    }

    /// A loopback port that was free a moment ago (the kernel's choice for port 0).
    static func freePort() throws -> UInt16 {
        let l = try HeldPort()
        defer { l.close() }
        return l.port
    }

    /// True when something accepts TCP connections on 127.0.0.1:`port`.
    static func accepts(_ port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}

/// Certificates for a test broker's TLS listener, made with openssl in `directory`:
///
///   ca.crt, ca.key          a test CA (EC P-256, CA:TRUE, keyCertSign). It signs the broker's
///                           server certificate and the test client certificate; a gateway whose
///                           identity it signs (`shoal identity create --ca-key ca.key --ca-cert
///                           ca.crt`, see `signedIdentity`) is trusted by the broker through it.
///                           Clients give it as their CA file (mosquitto_pub --cafile, the site
///                           file's tls.caFile) to check the broker.
///   server.crt, server.key  the broker's certificate: CN 127.0.0.1, subjectAltName IP:127.0.0.1
///                           and DNS:localhost, serverAuth.
///   client.crt, client.key  a client certificate signed by the CA (clientAuth), for
///                           mosquitto_pub/mosquitto_sub --cert/--key.
///   clients.pem             the listener's `cafile`, which checks client certificates: ca.crt
///                           followed by every `clientTrust` file (a gateway's self-signed
///                           identity certificate <data dir>/identities/shoal.crt.pem is its own
///                           anchor; OpenSSL accepts it there).
///
/// A gateway's identity (`shoal identity create`, or its first `shoal run`) is two PEM files in
/// `<data dir>/identities/`: `<label>.crt.pem` (the chain, leaf first; self-signed unless made with
/// --ca-key/--ca-cert) and `<label>.key.pem` (mode 0600); the label is the site's identity label,
/// `shoal` by default. The site file's `tls.identity: true` presents those to the broker.
struct TestPKI {
    let directory: String
    var caCert: String { directory + "/ca.crt" }
    var caKey: String { directory + "/ca.key" }
    var serverCert: String { directory + "/server.crt" }
    var serverKey: String { directory + "/server.key" }
    var clientCert: String { directory + "/client.crt" }
    var clientKey: String { directory + "/client.key" }
    var brokerClientCAs: String { directory + "/clients.pem" }

    /// `serverAddresses`: more IP addresses for the server certificate's subjectAltName (a
    /// nats-server in a NetLab namespace, reached at 10.78.x.y).
    init(directory: String, clientTrust: [String] = [], serverAddresses: [String] = []) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try MQTTTools.openssl(["req", "-x509"] + ec + ["-keyout", caKey, "-out", caCert, "-days", "3", "-subj", "/CN=Shoal test MQTT CA",
                                                      "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        try issue(name: "server", subject: "/CN=127.0.0.1",
                  extensions: "subjectAltName=IP:127.0.0.1,DNS:localhost\(serverAddresses.map { ",IP:\($0)" }.joined())\nextendedKeyUsage=serverAuth\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n")
        try issue(name: "client", subject: "/CN=shoal-test-client",
                  extensions: "extendedKeyUsage=clientAuth\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n")
        var anchors = try String(contentsOfFile: caCert, encoding: .utf8)
        for file in clientTrust { anchors += try String(contentsOfFile: file, encoding: .utf8) }
        try anchors.write(toFile: brokerClientCAs, atomically: true, encoding: .utf8)
    }

    private func issue(name: String, subject: String, extensions: String) throws {
        let key = directory + "/\(name).key", csr = directory + "/\(name).csr", ext = directory + "/\(name).ext"
        try MQTTTools.openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", csr, "-subj", subject])
        try extensions.write(toFile: ext, atomically: true, encoding: .utf8)
        try MQTTTools.openssl(["x509", "-req", "-in", csr, "-CA", caCert, "-CAkey", caKey, "-CAcreateserial", "-days", "3",
                               "-extfile", ext, "-out", directory + "/\(name).crt"])
    }

    /// Makes a gateway identity in `dataDir` signed by this CA (`shoal identity create --ca-key
    /// --ca-cert`): the broker trusts it through ca.crt. Returns the peer id.
    func signedIdentity(dataDir: String) throws -> String {
        let r = try Shoal.run(["identity", "create", "--board", "sim", "--data-dir", dataDir, "--ca-key", caKey, "--ca-cert", caCert, "--json"])
        guard r.status == 0, let id = (try? Shoal.json(r) as? [String: Any])?["peerID"] as? String else {
            throw MQTTTools.Failed(description: "shoal identity create --ca-key: exit \(r.status): \(r.stderr)")
        }
        return id
    }

    /// A gateway's identity files: its certificate chain and key (`<data dir>/identities/`).
    static func identityFiles(dataDir: String, label: String = "shoal") -> (cert: String, key: String) {
        (dataDir + "/identities/\(label).crt.pem", dataDir + "/identities/\(label).key.pem")
    }
}

/// The MQTT clients the tests drive: mosquitto_pub/mosquitto_sub (mosquitto-clients) and the
/// paho-mqtt scripts in Tests/MQTT/. Each runs with a deadline; a background client's output
/// (standard output and error together) goes to a file.
enum MQTTTools {
    static let pub = "/usr/bin/mosquitto_pub"
    static let sub = "/usr/bin/mosquitto_sub"
    static let repo: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static var scripts: String { repo + "/Tests/MQTT" }

    struct Failed: Error, CustomStringConvertible {
        var description: String
    }

    /// Python with paho-mqtt importable (`make deps`).
    static let pahoAvailable: Bool = {
        (try? run(["/usr/bin/env", "python3", "-c", "import paho.mqtt.client"], timeout: 30).status) == 0
    }()

    /// Runs a command to completion (SIGKILL after `timeout` s; status 137 then); its exit status
    /// and its standard output and error together.
    static func run(_ args: [String], timeout: Double = 60) throws -> (status: Int32, output: String) {
        let client = try Background(args)
        return client.wait(timeout: timeout)
    }

    /// `mosquitto_pub -h 127.0.0.1 -p <port> -t topic -m message -q qos` plus `extra`; with `tls`
    /// through the broker's TLS listener with the test client certificate (or `cert`/`key`).
    @discardableResult
    static func publish(_ broker: Mosquitto, topic: String, message: String, qos: Int = 1, retain: Bool = false,
                        tls: Bool = false, cert: String? = nil, key: String? = nil, extra: [String] = [], timeout: Double = 30) throws -> (status: Int32, output: String) {
        try run(inNamespace(broker, [pub] + connection(broker, tls: tls, cert: cert, key: key) + ["-t", topic, "-m", message, "-q", String(qos)] + (retain ? ["-r"] : []) + extra),
                timeout: timeout)
    }

    /// `mosquitto_sub` in the background: `-v` (topic and payload per line), `-C count`, `-W
    /// timeout`, at `qos`; `id` with `persistent` keeps a session (`-c`). Wait for its subscription
    /// with `broker.waitForSubscription(clientID:filter:)` before publishing.
    static func subscribe(_ broker: Mosquitto, filter: String, count: Int, id: String, qos: Int = 1, persistent: Bool = false,
                          timeout: Int = 30, tls: Bool = false, extra: [String] = []) throws -> Background {
        try Background(inNamespace(broker, [sub] + connection(broker, tls: tls, cert: nil, key: nil)
                       + ["-t", filter, "-q", String(qos), "-v", "-C", String(count), "-W", String(timeout), "-i", id] + (persistent ? ["-c"] : []) + extra))
    }

    /// `args` run in the broker's network namespace, if it has one.
    static func inNamespace(_ broker: Mosquitto, _ args: [String]) -> [String] {
        guard let ns = broker.options.netns else { return args }
        return [NetLab.tool("ip") ?? "/usr/sbin/ip", "netns", "exec", ns] + args
    }

    static func connection(_ broker: Mosquitto, tls: Bool, cert: String?, key: String?) -> [String] {
        guard tls, let tlsPort = broker.tlsPort, let pki = broker.pki else { return ["-h", "127.0.0.1", "-p", String(broker.port)] }
        return ["-h", "127.0.0.1", "-p", String(tlsPort), "--cafile", pki.caCert, "--cert", cert ?? pki.clientCert, "--key", key ?? pki.clientKey]
    }

    /// `python3 Tests/MQTT/<script> args` in the background (publish.py, subscribe.py: each ends by
    /// printing one JSON line, read with `Background.json()`).
    static func python(_ script: String, _ args: [String]) throws -> Background {
        try Background(["/usr/bin/env", "python3", scripts + "/" + script] + args)
    }

    /// `python3 Tests/MQTT/<script> args` to completion; its exit status and JSON line.
    static func pythonRun(_ script: String, _ args: [String], timeout: Double = 120) throws -> (status: Int32, json: [String: Any]?, output: String) {
        let client = try python(script, args)
        let (status, output) = client.wait(timeout: timeout)
        return (status, Background.lastJSON(output), output)
    }

    static func openssl(_ args: [String]) throws {
        let r = try run(["/usr/bin/openssl"] + args, timeout: 30)
        guard r.status == 0 else { throw Failed(description: "openssl \(args.joined(separator: " ")): exit \(r.status): \(r.output)") }
    }

    /// A client process whose standard output and error go to a file (posix_spawn, not
    /// Foundation's Process: see NetLab.run). Killed when released.
    final class Background: @unchecked Sendable {  // a pid and a file name, used from one test's thread
        let process: ChildProcess
        let outputPath: String
        let args: [String]
        private var result: (status: Int32, output: String)?

        init(_ args: [String]) throws {
            self.args = args
            outputPath = NSTemporaryDirectory() + "shoal-mqtt-client-\(getpid())-\(UUID().uuidString.prefix(8)).out"
            process = try ChildProcess(path: args[0], arguments: Array(args.dropFirst()), output: outputPath)
        }

        deinit {
            process.stop(signal: SIGKILL)
            try? FileManager.default.removeItem(atPath: outputPath)
        }

        var isRunning: Bool { result == nil && process.exitStatus() == nil }

        /// What it has printed so far.
        func output() -> String { result?.output ?? (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

        /// Waits for it to end (SIGKILL after `timeout` s: status 137); its status and output.
        @discardableResult
        func wait(timeout: Double) -> (status: Int32, output: String) {
            if let result { return result }
            let deadline = Date().addingTimeInterval(timeout)
            var status = process.exitStatus()
            while status == nil && Date() < deadline {
                Thread.sleep(forTimeInterval: 0.01)
                status = process.exitStatus()
            }
            if status == nil { status = process.stop(signal: SIGKILL) }
            result = (status ?? -1, (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "")
            return result!
        }

        /// Ends it now (SIGTERM, SIGKILL after 5 s).
        @discardableResult
        func stop() -> (status: Int32, output: String) {
            process.stop(signal: SIGTERM, graceMillis: 5000)
            return wait(timeout: 0)
        }

        /// The last JSON object line it printed (the paho scripts' result), once it has ended.
        func json(timeout: Double) -> [String: Any]? { Background.lastJSON(wait(timeout: timeout).output) }

        static func lastJSON(_ output: String) -> [String: Any]? {
            for line in output.split(separator: "\n").reversed() where line.hasPrefix("{") {
                if let j = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] { return j }
            }
            return nil
        }

        /// mosquitto_sub -v's lines: (topic, payload) per message.
        func messages() -> [(topic: String, payload: String)] {
            output().split(separator: "\n").compactMap { line -> (topic: String, payload: String)? in
                let parts = line.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
                return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
            }
        }
    }
}
