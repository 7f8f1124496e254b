import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalStore
import ShoalTLS
import ShoalTrust

/// `shoal doctor`: the checks a field engineer runs before trusting a gateway. Each passes, warns
/// or fails, and says what to do. Nothing is changed: the store is opened read-only, the LED line
/// is looked at, not requested.
public enum Doctor {
    public enum Outcome: String, Sendable { case pass, warn, fail }

    public struct Check: Sendable {
        public var name: String
        public var outcome: Outcome
        public var detail: String
        /// What to do about a warning or a failure.
        public var fix: String?
    }

    /// What the checks look at (injected so tests can point them at a broken setup).
    public struct Environment: Sendable {
        public var deviceTreeModel: String? = HardwareProbe.deviceTreeModel()
        public var nowSeconds: Int64 = Int64(time(nil))
        /// Before this the clock is surely wrong (no RTC, no NTP yet): the day this release was made.
        public var buildSeconds: Int64 = 1_796_000_000  // 2026-11-30
        public var interfaceState: @Sendable (String) -> HardwareProbe.InterfaceState = { HardwareProbe.interfaceState($0) }
        public var bluetoothAdapter: @Sendable (String) -> Int? = { HardwareProbe.bluetoothAdapter($0) }
        public var avahi: @Sendable () -> (reachable: Bool, detail: String) = { HardwareProbe.avahiDaemon() }
        public var sysfsLEDs = ProcessEnvironment.get("SHOAL_SYSFS_LEDS") ?? "/sys/class/leds"
        public var freeBytes: @Sendable (String) -> UInt64? = { Files.freeBytes($0) }
        public init() {}
    }

    /// Runs every check. `config` is nil when the board or site file did not load (`configError`).
    public static func run(config: LoadedConfig?, configError: String?, environment env: Environment = Environment()) -> [Check] {
        var checks: [Check] = []
        guard let config else {
            checks.append(Check(name: "config", outcome: .fail, detail: configError ?? "the board or site file did not load",
                                fix: "fix the file and line named above; `shoal board check FILE` checks a board file"))
            return checks
        }
        let board = config.board
        checks.append(Check(name: "config", outcome: .pass, detail: "board \(board.id) (\(board.name)), site \(config.site.source), group \(config.site.group)"))
        checks.append(modelCheck(board, env))
        checks.append(ledCheck(board.led, env))
        checks.append(contentsOf: radioChecks(board, config.site, env))
        checks.append(identityCheck(config, env))
        checks.append(linkCheck(config))
        checks.append(trustCheck(config, env))
        checks.append(contentsOf: mqttChecks(config.site))
        checks.append(contentsOf: uplinkChecks(config.site))
        checks.append(storeCheck(config.storePath))
        checks.append(clockCheck(env))
        checks.append(spaceCheck(config.storePath, env))
        return checks
    }

    static func modelCheck(_ board: BoardConfig, _ env: Environment) -> Check {
        guard let expected = board.model else {
            return Check(name: "board model", outcome: .pass, detail: "board \(board.id) names no model (runs anywhere)\(env.deviceTreeModel.map { "; this machine: \($0)" } ?? "")")
        }
        guard let actual = env.deviceTreeModel else {
            return Check(name: "board model", outcome: .warn, detail: "board \(board.id) is for \"\(expected)\" but this machine has no /proc/device-tree/model",
                         fix: "run on the board itself, or choose generic-linux")
        }
        return actual.hasPrefix(expected)
            ? Check(name: "board model", outcome: .pass, detail: "\"\(actual)\" matches board \(board.id)")
            : Check(name: "board model", outcome: .fail, detail: "board \(board.id) is for \"\(expected)\", this machine is \"\(actual)\"",
                    fix: "use --board auto, or the board file made for this hardware")
    }

    static func ledCheck(_ led: BoardConfig.LED, _ env: Environment) -> Check {
        switch led.driver {
        case .none, .console:
            return Check(name: "status LED", outcome: .pass, detail: "driver \(led.driver.rawValue): the pattern shows in the console line and the log")
        case .sysfs:
            let name = led.name ?? "?"
            let dir = env.sysfsLEDs + "/" + name
            guard Files.isDirectory(dir) else {
                return Check(name: "status LED", outcome: .fail, detail: "no LED \(name) in \(env.sysfsLEDs)",
                             fix: "ls \(env.sysfsLEDs) and put an existing name in led.name")
            }
            guard access(dir + "/brightness", W_OK) == 0 else {
                return Check(name: "status LED", outcome: .fail, detail: "\(dir)/brightness is not writable by this user",
                             fix: "run as root or install deploy/99-shoal.rules (udev) and restart")
            }
            return Check(name: "status LED", outcome: .pass, detail: "sysfs LED \(name) present and writable")
        case .gpiod:
            let chip = led.chip ?? "?"
            let line = Int(led.line ?? -1)
            let probe = HardwareProbe.gpioLine(chip: chip, line: line)
            switch probe {
            case .missingChip:
                return Check(name: "status LED", outcome: .fail, detail: "GPIO chip \(chip) not found",
                             fix: "`gpiodetect` lists the chips; set led.chip (the Pi 5's header is gpiochip4, older Pis gpiochip0)")
            case .noSuchLine(let count):
                return Check(name: "status LED", outcome: .fail, detail: "\(chip) has \(count) lines; there is no line \(line)", fix: "set led.line to the LED's line offset")
            case .used(let consumer):
                return Check(name: "status LED", outcome: .fail, detail: "line \(line) of \(chip) is used by \(consumer)",
                             fix: "free the line (a device-tree overlay or another program holds it) or choose another")
            case .free:
                return Check(name: "status LED", outcome: .pass, detail: "line \(line) of \(chip) exists and is free")
            case .inaccessible(let why):
                return Check(name: "status LED", outcome: .fail, detail: "\(chip): \(why)", fix: "run as root or install deploy/99-shoal.rules (udev)")
            }
        }
    }

    static func radioChecks(_ board: BoardConfig, _ site: SiteConfig, _ env: Environment) -> [Check] {
        var out: [Check] = []
        let wifi = site.transports.contains(.wifi)
        if let i = board.wifiInterface {
            let s = env.interfaceState(i)
            switch s {
            case .up: out.append(Check(name: "wifi interface", outcome: .pass, detail: "\(i) is up"))
            case .missing: out.append(Check(name: "wifi interface", outcome: wifi ? .fail : .warn, detail: "no interface \(i)",
                                            fix: "`ip link` lists the interfaces; set wifi.interface in the board file (or none)"))
            case .down, .noCarrier: out.append(Check(name: "wifi interface", outcome: .warn, detail: "\(i) is \(s.rawValue)",
                                                     fix: "connect the gateway to its Wi-Fi (`nmcli`, wpa_supplicant) and check `rfkill list`"))
            }
            if wifi {
                let a = env.avahi()
                out.append(a.reachable
                    ? Check(name: "avahi-daemon", outcome: .pass, detail: "reachable (\(a.detail)); discovery by DNS-SD \(GroupID(site.group).serviceType)")
                    : Check(name: "avahi-daemon", outcome: .fail, detail: "not reachable: \(a.detail)",
                            fix: "apt install avahi-daemon; systemctl enable --now avahi-daemon (peers are found through it)"))
            }
        } else {
            out.append(Check(name: "wifi interface", outcome: wifi ? .warn : .pass, detail: "the board names none",
                             fix: wifi ? "only static peers (replication.peers) can link this gateway" : nil))
        }
        if let a = board.bluetoothAdapter {
            let wanted = site.transports.contains(.bluetooth)
            out.append(env.bluetoothAdapter(a) != nil
                ? Check(name: "bluetooth adapter", outcome: .pass, detail: "\(a) present")
                : Check(name: "bluetooth adapter", outcome: wanted ? .fail : .warn, detail: "no adapter \(a)",
                        fix: "`hciconfig -a` / `btmgmt info` list adapters; check `rfkill list`, or set bluetooth.adapter: none"))
        }
        return out
    }

    static func identityCheck(_ config: LoadedConfig, _ env: Environment) -> Check {
        let label = config.site.identityLabel
        do {
            guard let identity = try IdentityStore(directory: config.identityDirectory).find(label) else {
                return Check(name: "identity", outcome: .warn, detail: "no identity \(label) in \(config.identityDirectory) yet",
                             fix: "the first `shoal run` creates one (self-signed); or `shoal identity create` with --ca-key/--ca-cert")
            }
            let left = (identity.certificate.notAfter - env.nowSeconds) / 86_400
            if left < 0 {
                return Check(name: "identity", outcome: .fail, detail: "\(label) (peer \(identity.peerID.short)) expired \(-left) days ago",
                             fix: "`shoal identity create --force` re-issues it over the same key (the peer id stays); with --ca-key/--ca-cert if CA-signed")
            }
            if left < 30 {
                return Check(name: "identity", outcome: .warn, detail: "\(label) (peer \(identity.peerID.short)) expires in \(left) days",
                             fix: "renew it before it expires (a self-signed one is renewed by the gateway; a CA-signed one from the CA)")
            }
            return Check(name: "identity", outcome: .pass, detail: "\(label): peer \(identity.peerID.short), valid \(left) more days")
        } catch {
            return Check(name: "identity", outcome: .fail, detail: "\(label): \(error)",
                         fix: "move the broken files in \(config.identityDirectory) aside and let `shoal run` create a new identity")
        }
    }

    /// Each MQTT broker of the site file: does its address accept a TCP connection now (within
    /// 2 s)? A warning if not (the bridge reconnects on its own). A reach check only: TLS, credentials and the broker's ACL show in `shoal mqtt status`
    /// once the gateway runs.
    static func mqttChecks(_ site: SiteConfig) -> [Check] {
        site.mqtt.brokers.enumerated().map { i, b in
            let name = "mqtt broker \(b.name)"
            let shown = b.host.contains(":") ? "[\(b.host)]:\(b.port)" : "\(b.host):\(b.port)"
            let fix = "start the broker (Debian: apt-get install mosquitto; systemctl start mosquitto), or correct mqtt.brokers[\(i)].url"
            switch reach(host: b.host, port: b.port) {
            case .unresolved(let why):
                return Check(name: name, outcome: .warn, detail: why, fix: "correct the host of mqtt.brokers[\(i)].url, or make \(b.host) resolvable (DNS, /etc/hosts)")
            case .accepts:
                return Check(name: name, outcome: .pass, detail: "\(shown) accepts connections\(b.useTLS ? " (TLS, credentials and ACL are checked when the gateway connects: `shoal mqtt status`)" : "")")
            case .refuses(let last):
                // A warning: the gateway runs without its broker and connects when the broker is up.
                return Check(name: name, outcome: .warn, detail: "\(shown) does not accept connections: \(last) (the gateway runs and connects once it does)", fix: fix)
            }
        }
    }

    /// The uplink's servers, as the MQTT brokers: each must resolve and accept a TCP connection
    /// (within 2 s), a warning if not (the uplink reconnects on its own, and one server of a
    /// cluster is enough to reach it). Then the files it reads: a failure if one cannot be read. A reach check only: TLS,
    /// credentials and the hub's permissions show in `shoal uplink status` once the gateway runs.
    static func uplinkChecks(_ site: SiteConfig, read: (String) throws -> String? = { path throws in try Files.read(path) }) -> [Check] {
        let u = site.uplink
        guard u.enabled else { return [] }
        var checks: [Check] = u.servers.enumerated().map { i, url in
            let authority = url.firstRange(of: "://").map { String(url[$0.upperBound...]) } ?? url
            let name = "uplink \(authority)"
            // The site file's reader normalised each server to scheme://host:port.
            guard let hp = HostPort(parsing: authority) else {
                return Check(name: name, outcome: .warn, detail: "\(url) names no host and port", fix: "correct uplink.servers[\(i)], e.g. nats://10.0.0.5:4222")
            }
            switch reach(host: hp.host, port: hp.port) {
            case .unresolved(let why):
                return Check(name: name, outcome: .warn, detail: why, fix: "correct uplink.servers[\(i)], or make \(hp.host) resolvable (DNS, /etc/hosts)")
            case .accepts:
                return Check(name: name, outcome: .pass, detail: "\(hp) accepts connections (the hub's TLS, login and JetStream are checked when the gateway connects: `shoal uplink status`)")
            case .refuses(let last):
                return Check(name: name, outcome: .warn, detail: "\(hp) does not accept connections: \(last) (the gateway runs and connects once it does)",
                             fix: "start the hub's nats-server (with JetStream: -js), open the port in the firewalls between, or correct uplink.servers[\(i)]")
            }
        }
        // The gateway refuses to start when one of these cannot be read, so a problem fails. The
        // CLI's load of the site file already fails on it, naming the line (the config check);
        // this says which files the uplink reads.
        let files = u.referencedFiles.map { "\($0.key) \($0.path)" }
        if let problem = u.fileProblems(read: read) {
            checks.append(Check(name: "uplink files", outcome: .fail, detail: problem.description,
                                fix: "make each file exist and readable by the gateway's user (mode 0600 for secrets), or correct the key named"))
        } else {
            checks.append(Check(name: "uplink files", outcome: .pass,
                                detail: files.isEmpty ? "the uplink names no files to read" : "readable: " + files.joined(separator: ", ")))
        }
        return checks
    }

    enum Reach { case unresolved(String), accepts, refuses(String) }

    /// Whether `host` resolves and one of its first four addresses accepts a TCP connection within 2 s.
    static func reach(host: String, port: UInt16) -> Reach {
        let addresses: [String]
        do { addresses = try SystemCall.addresses(of: host) } catch { return .unresolved("\(error)") }
        var last = "no address"
        for a in addresses.prefix(4) {
            do {
                let stream = try TCPStream.connect(host: a, port: port, timeoutMillis: 2000)
                stream.close()
                return .accepts
            } catch {
                last = "\(error)"
            }
        }
        return .refuses(last)
    }

    /// Whether this gateway can link to anyone: it must trust some peer (allowedPeers, roots, or
    /// its own CA when CA-signed) and have a way to find or reach one (discovery on a radio the
    /// board has, static peers, or a listen address others can dial). A gateway that will link to
    /// nobody still boots, so this warns rather than fails.
    static func linkCheck(_ config: LoadedConfig) -> Check {
        let site = config.site, board = config.board
        var problems: [String] = []
        var fixes: [String] = []
        let caSigned = ((try? IdentityStore(directory: config.identityDirectory).find(site.identityLabel))??.certificate.chainDER.count ?? 1) > 1
        if config.trustedRoots.isEmpty && config.allowedPeers.isEmpty && !caSigned && config.adminKeys.isEmpty {
            problems.append("it trusts no peer (authenticator.allowedPeers is empty, no rootCertificates, its identity is self-signed): every link will be refused")
            fixes.append("list your gateways' peer ids (`shoal identity show` on each) in authenticator.allowedPeers, or give rootCertificates")
        }
        var ways: [String] = []
        var why: [String] = []
        if site.transports.contains(.wifi) {
            if let i = board.wifiInterface { ways.append("DNS-SD on \(i)") } else { why.append("Wi-Fi: the board names no interface (no discovery)") }
            if !site.staticPeers.isEmpty { ways.append("\(site.staticPeers.count) static peer\(site.staticPeers.count == 1 ? "" : "s")") }
            if let l = site.listenAddress { ways.append("listening on \(l)") }
        }
        if site.transports.contains(.bluetooth) {
            if let a = board.bluetoothAdapter { ways.append("Bluetooth LE on \(a)") } else { why.append("Bluetooth: the board names no adapter") }
        }
        if ways.isEmpty {
            problems.append("it has no way to find or reach a peer (\((why.isEmpty ? ["no transport"] : why).joined(separator: "; ")); no replication.peers, no replication.listen)")
            fixes.append("give replication.peers (host:port of other gateways) or replication.listen, or a board with a Wi-Fi interface or Bluetooth adapter")
        } else if let own = site.allowedPeers.first, site.allowedPeers.count == 1, config.trustedRoots.isEmpty,
                  let me = (try? IdentityStore(directory: config.identityDirectory).find(site.identityLabel))??.peerID.description, own == me {
            problems.append("authenticator.allowedPeers lists only this gateway's own peer id")
            fixes.append("list the other gateways' peer ids (`shoal identity show` on each)")
        }
        guard problems.isEmpty else {
            return Check(name: "links", outcome: .warn, detail: "this gateway will link to nobody: " + problems.joined(separator: "; "),
                         fix: fixes.joined(separator: "; "))
        }
        let trust = [config.allowedPeers.isEmpty ? nil : "\(config.allowedPeers.count) allowed peer\(config.allowedPeers.count == 1 ? "" : "s")",
                     config.trustedRoots.isEmpty ? nil : "\(config.trustedRoots.count) trusted root\(config.trustedRoots.count == 1 ? "" : "s")",
                     caSigned && config.trustedRoots.isEmpty ? "its own CA" : nil,
                     config.adminKeys.isEmpty ? nil : "the peers the fleet's signed trust entries allow"].compactMap { $0 }
        return Check(name: "links", outcome: .pass, detail: "trusts \(trust.joined(separator: ", ")); reaches peers by \(ways.joined(separator: ", "))")
    }

    /// The fleet's trust as the store holds it: admin keys given, entries that verify under them,
    /// and the checkpoint's deadline (warn within `trust.warnDays`, fail past it).
    static func trustCheck(_ config: LoadedConfig, _ env: Environment) -> Check {
        var docs: [(id: String, body: String)] = []
        if Files.exists(config.storePath) {
            do { docs = try DocumentStore.readLiveDocuments(path: config.storePath, collection: .trust) } catch {
                return Check(name: "trust", outcome: .warn, detail: "cannot read the trust entries from \(config.storePath): \(error)", fix: "see the store check")
            }
        }
        if config.adminKeys.isEmpty {
            let held = docs.isEmpty ? "" : "; the \(docs.count.counted("entry", plural: "entries")) in the store count for nothing without one"
            return Check(name: "trust", outcome: docs.isEmpty ? .pass : .warn,
                         detail: "no admin key (trust.adminKeys): trust is the site file's alone\(held)",
                         fix: docs.isEmpty ? nil : "add the fleet's admin key to trust.adminKeys (`shoal trust keygen` printed it)")
        }
        var ledger = TrustLedger(siteKeys: config.adminKeys)
        let refused = ledger.load(docs, now: env.nowSeconds + TrustLedger.skewSeconds)
        var detail = "\(config.adminKeys.count.counted("admin key")), \(ledger.entries.count.counted("entry", plural: "entries")): "
            + "\(ledger.allowedPeers.count) allowed, \(ledger.revokedPeers.count) revoked"
        if !refused.isEmpty { detail += "; \(refused.count) refused (\(refused[0].id): \(refused[0].reason))" }
        let warnSeconds = config.site.trust.warnDays * 86_400
        if let next = ledger.checkpoint?.nextUpdate {
            if next <= env.nowSeconds {
                return Check(name: "trust", outcome: .fail, detail: detail + "; the checkpoint's next update (\(IdentityText.date(next))) has passed: the list is stale",
                             fix: "sign a new checkpoint: `shoal trust checkpoint --admin-key FILE` (it replicates to every gateway)")
            }
            if next - env.nowSeconds <= warnSeconds {
                return Check(name: "trust", outcome: .warn, detail: detail + "; the checkpoint runs out on \(IdentityText.date(next))",
                             fix: "sign a new checkpoint before: `shoal trust checkpoint --admin-key FILE`")
            }
            detail += "; checkpoint good until \(IdentityText.date(next))"
        }
        return Check(name: "trust", outcome: refused.isEmpty ? .pass : .warn, detail: detail,
                     fix: refused.isEmpty ? nil : "an entry signed by a key the site file does not list, or damaged: compare trust.adminKeys with the fleet's")
    }

    static func storeCheck(_ path: String) -> Check {
        guard Files.exists(path) else {
            return Check(name: "store", outcome: .pass, detail: "\(path) does not exist yet (made at first run)")
        }
        let r = DocumentStore.inspect(path: path)
        return r.sound
            ? Check(name: "store", outcome: .pass, detail: "\(path): \(r.detail)")
            : Check(name: "store", outcome: .fail, detail: "\(path): \(r.detail)",
                    fix: "`shoal run` moves a corrupt store aside and refills it from the mesh; copy it away first if you need it")
    }

    static func clockCheck(_ env: Environment) -> Check {
        if env.nowSeconds < env.buildSeconds {
            return Check(name: "clock", outcome: .fail, detail: "the clock says \(IdentityText.date(env.nowSeconds)), before this shoal was built",
                         fix: "set the time (NTP: `timedatectl set-ntp true`, or an RTC); certificates and conflict resolution need it")
        }
        if env.nowSeconds > env.buildSeconds + 20 * 365 * 86_400 {
            return Check(name: "clock", outcome: .warn, detail: "the clock says \(IdentityText.date(env.nowSeconds))", fix: "check the time (`timedatectl`)")
        }
        return Check(name: "clock", outcome: .pass, detail: IdentityText.date(env.nowSeconds))
    }

    static func spaceCheck(_ storePath: String, _ env: Environment) -> Check {
        var dir = Files.directory(of: storePath)
        while !Files.exists(dir) && dir != "/" { dir = Files.directory(of: dir) }
        guard let free = env.freeBytes(dir) else {
            return Check(name: "free space", outcome: .warn, detail: "cannot read the free space of \(dir)", fix: nil)
        }
        let mb = free / 1_048_576
        if mb < 16 { return Check(name: "free space", outcome: .fail, detail: "\(mb) MB free on \(dir)", fix: "free space on the data partition; writes will fail") }
        if mb < 200 { return Check(name: "free space", outcome: .warn, detail: "\(mb) MB free on \(dir)", fix: "free space on the data partition soon") }
        return Check(name: "free space", outcome: .pass, detail: "\(mb) MB free on \(dir)")
    }
}
