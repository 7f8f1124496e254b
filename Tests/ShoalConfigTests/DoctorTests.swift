import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalTLS
import ShoalTesting
import Testing

@Suite("shoal doctor")
struct DoctorTests {
    /// A healthy setup on the given board, in a fresh directory, with every probe injected.
    static let linkedSite = "group: g\nauthenticator:\n  allowedPeers: [\(String(repeating: "ab", count: 32))]\n"

    func setup(board name: String = "pi4b", site: String = DoctorTests.linkedSite) throws -> (LoadedConfig, Doctor.Environment, String) {
        let path = TemporaryDirectory(prefix: "shoal-doctor").path
        var board = try repoLoader.applying(try repoLoader.loadSite(text: site, file: "site.yaml"), to: try repoLoader.loadBoard(name))
        board.led.driver = .sysfs
        board.led.name = "ACT"
        try Files.makeDirectories(path + "/leds/ACT")
        try Files.write(path + "/leds/ACT/brightness", "0")
        let loadedSite = try repoLoader.loadSite(text: site, file: "site.yaml")
        let config = LoadedConfig(board: board, site: loadedSite, storePath: path + "/data/shoal.db",
                                  socketPath: path + "/control.sock", trustedRoots: [], allowedPeers: Set(loadedSite.allowedPeers.compactMap(PeerID.init(hex:))))
        try Files.makeDirectories(path + "/data")
        var env = Doctor.Environment()
        env.deviceTreeModel = "Raspberry Pi 4 Model B Rev 1.5"
        env.nowSeconds = 1_800_000_000
        env.interfaceState = { _ in .up }
        env.bluetoothAdapter = { _ in 0 }
        env.avahi = { (true, "avahi 0.8") }
        env.sysfsLEDs = path + "/leds"
        let identity = try Identity.createSelfSigned(.init(commonName: "doctor", notBefore: env.nowSeconds - 3600, validDays: 365))
        try IdentityStore(directory: config.identityDirectory).save(identity, label: "shoal")
        return (config, env, path)
    }

    func outcome(_ checks: [Doctor.Check], _ name: String) -> Doctor.Outcome? { checks.first { $0.name == name }?.outcome }

    @Test("a healthy gateway passes every check")
    func healthy() throws {
        let (config, env, _) = try setup()
        let checks = Doctor.run(config: config, configError: nil, environment: env)
        #expect(checks.allSatisfy { $0.outcome == .pass }, "\(checks.filter { $0.outcome != .pass })")
        #expect(Set(checks.map(\.name)).isSuperset(of: ["config", "board model", "status LED", "wifi interface", "avahi-daemon", "bluetooth adapter", "identity", "links", "store", "clock", "free space"]))
    }

    @Test("an MQTT broker that accepts connections passes; one that refuses warns (the gateway reconnects) and says what to do")
    func mqttBrokers() throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        let closed = try TCPListener(host: "127.0.0.1", port: 0)
        let closedPort = closed.port
        closed.close()
        let site = DoctorTests.linkedSite + """
            collections: [{name: sensors.state}]
            mqtt:
              brokers:
                - {name: up, url: "mqtt://127.0.0.1:\(listener.port)", inbound: [{topic: "a/+x", collection: sensors.state, id: "{x}"}]}
                - {name: down, url: "mqtt://127.0.0.1:\(closedPort)", inbound: [{topic: "b/+x", collection: sensors.state, id: "{x}"}]}

            """
        let (config, env, _) = try setup(site: site)
        let checks = Doctor.run(config: config, configError: nil, environment: env)
        #expect(outcome(checks, "mqtt broker up") == .pass, "\(checks.map { "\($0.name): \($0.detail)" })")
        let down = try #require(checks.first { $0.name == "mqtt broker down" })
        #expect(down.outcome == .warn && down.detail.contains("127.0.0.1:\(closedPort)") && down.fix?.contains("mqtt.brokers[1].url") == true, "\(down)")
        withExtendedLifetime(listener) {}
    }

    @Test("each uplink server that accepts connections passes, one that refuses warns naming uplink.servers[i]; the files it reads are named, a missing one fails")
    func uplinkServers() throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        let closed = try TCPListener(host: "127.0.0.1", port: 0)
        let closedPort = closed.port
        closed.close()
        let dir = TemporaryDirectory(prefix: "shoal-doctor-uplink").path
        try Files.write(dir + "/hub.pass", "secret\n")
        let site = DoctorTests.linkedSite + """
            collections: [{name: sensors.state}]
            uplink:
              servers: [nats://127.0.0.1:\(listener.port), nats://127.0.0.1:\(closedPort)]
              username: gw1
              passwordFile: \(dir)/hub.pass

            """
        let (config, env, _) = try setup(site: site)
        let checks = Doctor.run(config: config, configError: nil, environment: env)
        #expect(outcome(checks, "uplink 127.0.0.1:\(listener.port)") == .pass, "\(checks.map { "\($0.name): \($0.detail)" })")
        let down = try #require(checks.first { $0.name == "uplink 127.0.0.1:\(closedPort)" })
        #expect(down.outcome == .warn && down.detail.contains("does not accept connections") && down.fix?.contains("uplink.servers[1]") == true, "\(down)")
        let files = try #require(checks.first { $0.name == "uplink files" })
        #expect(files.outcome == .pass && files.detail == "readable: uplink.passwordFile \(dir)/hub.pass", "\(files)")

        // Loaded without looking at its files (the CLI's load fails on them first): the check fails, as `shoal run` would.
        unlink(dir + "/hub.pass")
        let missing = try #require(Doctor.run(config: config, configError: nil, environment: env).first { $0.name == "uplink files" })
        #expect(missing.outcome == .fail && missing.detail.contains("uplink.passwordFile") && missing.detail.contains("no such file"), "\(missing)")
        withExtendedLifetime(listener) {}
    }

    @Test("without an uplink: section there is no uplink check")
    func noUplink() throws {
        let (config, env, _) = try setup()
        #expect(!Doctor.run(config: config, configError: nil, environment: env).contains { $0.name.hasPrefix("uplink") })
    }

    @Test("each check fails on a broken setup, and says what to do")
    func broken() throws {
        // A board file that did not load.
        let none = Doctor.run(config: nil, configError: "board.yaml:3: led.driver: expected gpiod, sysfs, console or none")
        #expect(outcome(none, "config") == .fail && none[0].detail.contains("board.yaml:3") && none[0].fix != nil)

        let (config, env0, path) = try setup()
        var env = env0
        env.deviceTreeModel = "Raspberry Pi 5 Model B Rev 1.0"
        env.sysfsLEDs = path + "/no-leds"
        env.interfaceState = { _ in .missing }
        env.avahi = { (false, "Daemon not running") }
        env.bluetoothAdapter = { _ in nil }
        env.nowSeconds = 1_700_000_000  // before this shoal was built
        try Files.write(config.storePath, String(repeating: "not a database ", count: 500))
        var checks = Doctor.run(config: config, configError: nil, environment: env)
        for name in ["board model", "status LED", "wifi interface", "avahi-daemon", "store", "clock"] {
            #expect(outcome(checks, name) == .fail, "\(name): \(checks.first { $0.name == name }.map { "\($0)" } ?? "missing")")
            #expect(checks.first { $0.name == name }?.fix?.isEmpty == false)
        }
        #expect(outcome(checks, "bluetooth adapter") == .warn, "BLE is not a transport of this site: a warning")
        // The data partition nearly full, then low.
        env.freeBytes = { _ in 8 << 20 }
        #expect(outcome(Doctor.run(config: config, configError: nil, environment: env), "free space") == .fail)
        env.freeBytes = { _ in 100 << 20 }
        #expect(outcome(Doctor.run(config: config, configError: nil, environment: env), "free space") == .warn)
        #expect(Files.exists(config.storePath), "the doctor moved nothing aside")

        // The identity: expired, then close to expiry.
        env = Doctor.Environment()
        env.nowSeconds = 1_800_000_000 + 400 * 86_400
        checks = Doctor.run(config: config, configError: nil, environment: env)
        #expect(outcome(checks, "identity") == .fail)
        env.nowSeconds = 1_800_000_000 + 350 * 86_400
        checks = Doctor.run(config: config, configError: nil, environment: env)
        #expect(outcome(checks, "identity") == .warn)
        // No identity yet: a warning (the first run makes one).
        _ = try IdentityStore(directory: config.identityDirectory).delete("shoal")
        #expect(outcome(Doctor.run(config: config, configError: nil, environment: env), "identity") == .warn)
    }

    @Test("a gateway that will link to nobody warns: it trusts no peer, or it has no way to find or reach one")
    func linksToNobody() throws {
        // deploy/shoal.yaml as shipped: empty allowedPeers, no roots, a self-signed identity.
        let (lonely, env, _) = try setup(site: "group: g\nauthenticator:\n  allowedPeers: []\n")
        let trust = try #require(Doctor.run(config: lonely, configError: nil, environment: env).first { $0.name == "links" })
        #expect(trust.outcome == .warn && trust.detail.contains("trusts no peer") && trust.fix != nil, "\(trust)")

        // Wi-Fi on a board without an interface, no static peers, no listen address.
        let (unreachable, env2, _) = try setup(board: "sim")
        let reach = try #require(Doctor.run(config: unreachable, configError: nil, environment: env2).first { $0.name == "links" })
        #expect(reach.outcome == .warn && reach.detail.contains("no way to find or reach a peer"), "\(reach)")
        // Bluetooth only, on a board without an adapter.
        let (noRadio, env3, _) = try setup(board: "sim", site: DoctorTests.linkedSite + "transports: [bluetooth]\n")
        let radio = try #require(Doctor.run(config: noRadio, configError: nil, environment: env3).first { $0.name == "links" })
        #expect(radio.outcome == .warn && radio.detail.contains("no adapter"), "\(radio)")
        // The same board with a static peer by name links.
        let (wired, env4, _) = try setup(board: "sim", site: DoctorTests.linkedSite + "replication:\n  peers: [gw2.local:4984]\n")
        let ok = try #require(Doctor.run(config: wired, configError: nil, environment: env4).first { $0.name == "links" })
        #expect(ok.outcome == .pass, "\(ok)")
    }
}
