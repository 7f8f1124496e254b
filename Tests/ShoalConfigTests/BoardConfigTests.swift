import Glibc
import ShoalConfig
import ShoalCore
import ShoalRuntime
import ShoalTLS
import ShoalYAML
import ShoalTesting
import Testing

/// The repository's board-configs/ directory.
let repoBoards: String = {
    var parts = #filePath.split(separator: "/").map(String.init)
    parts.removeLast(3)
    return "/" + parts.joined(separator: "/") + "/board-configs"
}()

let repoLoader = ConfigLoader(parse: YAMLParser.parse, source: BoardFiles(directories: [repoBoards]))

func readFile(_ path: String) -> String? {
    guard let f = fopen(path, "r") else { return nil }
    defer { fclose(f) }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = fread(&buf, 1, buf.count, f)
        if n <= 0 { break }
        out += buf.prefix(n)
    }
    return String(decoding: out, as: UTF8.self)
}

/// A directory of board files made for one test.
struct BoardDir {
    let path: String
    init(_ files: [String: String]) {
        path = TemporaryDirectory(prefix: "shoal-boards").path
        for (name, text) in files {
            let f = fopen("\(path)/\(name).yaml", "w")!
            fputs(text, f)
            fclose(f)
        }
    }
    var loader: ConfigLoader { ConfigLoader(parse: YAMLParser.parse, source: BoardFiles(directories: [path])) }
    func remove() {
        for name in (try? listNames()) ?? [] { unlink("\(path)/\(name)") }
        rmdir(path)
    }
    func listNames() throws -> [String] {
        guard let d = opendir(path) else { return [] }
        defer { closedir(d) }
        var names: [String] = []
        while let e = readdir(d) {
            let n = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if n != "." && n != ".." { names.append(n) }
        }
        return names
    }
}

func configError(_ body: () throws -> Void) -> ConfigError? {
    do { try body() } catch let e as ConfigError { return e } catch { Issue.record("unexpected error \(error)") }
    return nil
}

let shippedBoards = ["base", "pi4b", "pi5", "pi-zero-2w", "cm4", "generic-linux", "sim"]

@Suite("Board files")
struct BoardConfigTests {
    @Test("every shipped board file loads", arguments: shippedBoards)
    func shippedBoardLoads(_ name: String) throws {
        let board = try repoLoader.loadBoard(name)
        #expect(board.id == name)
        #expect(!board.name.isEmpty)
        #expect(board.sources.last?.hasSuffix("/\(name).yaml") == true)
        if name != "base" { #expect(board.sources.first?.hasSuffix("/base.yaml") == true) }
    }

    @Test("the binary's built-in boards are exactly the files in board-configs/ (run `make` after editing them)")
    func builtInsMatchFiles() throws {
        #expect(BoardFiles.builtInNames == shippedBoards.sorted())
        for name in shippedBoards {
            #expect(BoardFiles.builtIn(name) == readFile("\(repoBoards)/\(name).yaml"), "built-in \(name) differs from board-configs/\(name).yaml")
        }
    }

    @Test("extends merges a small delta over the base")
    func extendsMerges() throws {
        let zero = try repoLoader.loadBoard("pi-zero-2w")
        #expect(zero.support == .supported)
        #expect(zero.led.driver == .sysfs && zero.led.name == "ACT")
        #expect(zero.console.device == "/dev/serial0")
        #expect(zero.console.baud == 115_200)              // from base
        #expect(zero.wifiInterface == "wlan0")              // from base
        #expect(zero.storagePath == "/var/lib/shoal")       // from base
        #expect(zero.mesh.maxConnectionCount == 2)          // the board's override
        #expect(zero.mesh.backoffMillis == 10_000)          // the seed's default
        let pi5 = try repoLoader.loadBoard("pi5")
        #expect(pi5.led.driver == .gpiod && pi5.led.chip == "gpiochip4" && pi5.led.line == 17)
        let sim = try repoLoader.loadBoard("sim")
        #expect(sim.wifiInterface == nil && sim.bluetoothAdapter == nil && sim.console.device == "stdout")
        #expect(try repoLoader.loadBoard("base").support == .abstract)
    }

    @Test("a value of the wrong type names the file, the line and the key")
    func wrongTypeNamesFileLineKey() throws {
        let dir = BoardDir(["base": "board:\n  name: b\n  support: abstract\n",
                            "broken": "extends: base\nboard:\n  name: Broken\nled:\n  driver: gpiod\n  chip: gpiochip0\n  line: seventeen\n"])
        defer { dir.remove() }
        let e = try #require(configError { _ = try dir.loader.loadBoard("broken") })
        #expect(e.mark.file == "\(dir.path)/broken.yaml")
        #expect(e.mark.line == 7)
        #expect(e.key == "led.line")
        #expect(e.description.hasPrefix("\(dir.path)/broken.yaml:7: led.line: expected a whole number"))
    }

    @Test("an unknown key is an error, not ignored", arguments: [
        ("ledd:\n  driver: none\n", "ledd", 4), ("led:\n  drivr: none\n", "led.drivr", 5), ("mesh:\n  maxConnections: 4\n", "mesh.maxConnections", 5),
    ])
    func unknownKeyRejected(_ extra: String, _ key: String, _ line: Int) throws {
        let dir = BoardDir(["b": "board:\n  name: B\n  support: community\n" + extra])
        defer { dir.remove() }
        let e = try #require(configError { _ = try dir.loader.loadBoard("b") })
        #expect(e.key == key)
        #expect(e.mark.line == line)
        #expect(e.message.contains("unknown"))
    }

    @Test("values out of range and bad choices are refused with their key", arguments: [
        ("mesh:\n  maxConnectionCount: 0\n", "mesh.maxConnectionCount"),
        ("mesh:\n  discoveryPauseSeconds: 10\n  discoveryPauseJitterSeconds: 20\n", "mesh.discoveryPauseJitterSeconds"),
        ("led:\n  driver: laser\n", "led.driver"),
        ("led:\n  driver: gpiod\n", "led"),
        ("console:\n  baud: 12345\n", "console.baud"),
        ("storage:\n  path: /x\n  durability: maybe\n", "storage.durability"),
        ("log:\n  domains:\n    radio: debug\n", "log.domains.radio"),
    ])
    func badValues(_ extra: String, _ key: String) throws {
        let dir = BoardDir(["b": "board:\n  name: B\n" + extra])
        defer { dir.remove() }
        let e = try #require(configError { _ = try dir.loader.loadBoard("b") })
        #expect(e.key == key)
        #expect(e.mark.file.hasSuffix("b.yaml"))
    }

    @Test("YAML syntax errors, anchors, duplicate keys and extends loops give file:line errors", arguments: [
        ("board: [unclosed\n", "YAML"), ("board: &a\n  name: x\nled: *a\n", "anchors"),
        ("board:\n  name: x\n  name: y\n", "duplicate"), ("extends: loop2\nboard:\n  name: x\n", "loops"),
        ("extends: missing\nboard:\n  name: x\n", "no board"), ("- a\n- b\n", "mapping"),
    ])
    func malformedFiles(_ text: String, _ needle: String) throws {
        let dir = BoardDir(["b": text, "loop2": "extends: b\nboard:\n  name: l\n"])
        defer { dir.remove() }
        let e = try #require(configError { _ = try dir.loader.loadBoard("b") })
        #expect(e.description.contains(needle), "\(e)")
        #expect(e.mark.line >= 1 || e.mark.file == "--board")
    }

    @Test("--board auto picks the board whose model string prefixes the device-tree model")
    func autoMatch() {
        #expect(repoLoader.boardMatching(model: "Raspberry Pi 4 Model B Rev 1.4\0") == "pi4b")
        #expect(repoLoader.boardMatching(model: "Raspberry Pi 5 Model B Rev 1.0") == "pi5")
        #expect(repoLoader.boardMatching(model: "Raspberry Pi Zero 2 W Rev 1.0") == "pi-zero-2w")
        #expect(repoLoader.boardMatching(model: "Raspberry Pi Compute Module 4 Rev 1.1") == "cm4")
        #expect(repoLoader.boardMatching(model: "Some Other Board") == nil)
    }
}

@Suite("Site files")
struct SiteConfigTests {
    @Test("a site file sets group, identity and collections and overrides the board's mesh and log")
    func siteOverrides() throws {
        let text = """
            group: com.example.gateways
            identity:
              label: field-7
            collections:
              - name: sensors.readings
                push: true
                pull: false
              - name: alarms
                resolver: remoteWins
            authenticator:
              rootCertificates: /etc/shoal/fleet-ca.pem
              allowedPeers:
                - 0166E6E14225F81967C22FB0EF0F21DF4C6C52B3F4577EEC05F84C98B6391E2E
            mesh:
              maxConnectionCount: 4
            log:
              level: warning
              domains:
                replication: verbose
            """
        let site = try repoLoader.loadSite(text: text, file: "/etc/shoal/shoal.yaml")
        #expect(site.group == "com.example.gateways")
        #expect(site.identityLabel == "field-7")
        #expect(site.collections.map(\.name.description) == ["_default._default", "sensors.readings", "_default.alarms"])
        #expect(site.collections[1].pull == false)
        #expect(site.rootCertificatesPath == "/etc/shoal/fleet-ca.pem")
        #expect(site.allowedPeers == ["0166e6e14225f81967c22fb0ef0f21df4c6c52b3f4577eec05f84c98b6391e2e"])
        let board = try repoLoader.applying(site, to: try repoLoader.loadBoard("pi-zero-2w"))
        #expect(board.mesh.maxConnectionCount == 4)
        #expect(board.log.level == .warning && board.log.domains[.replication] == .verbose)
    }

    @Test("site errors name the site file, line and key", arguments: [
        ("identity:\n  label: x\n", "group"),
        ("group: g\ncollections:\n  - name: a.b.c\n", "collections[0].name"),
        ("group: g\ncollections:\n  - name: a\n  - name: _default.a\n", "collections[1].name"),
        ("group: g\ncollections:\n  - name: a\n    resolver: coinFlip\n", "collections[0].resolver"),
        ("group: g\nmesh:\n  txLogBatchMaxCount: 0\n", "mesh.txLogBatchMaxCount"),
        ("group: g\nwifi:\n  interface: wlan1\n", "wifi"),
        ("group: g\nauthenticator:\n  allowedPeers: [abc]\n", "authenticator.allowedPeers[0]"),
        ("group: g\nauthenticator:\n  rootCA: /x\n", "authenticator.rootCA"),
        ("group: g\nidentity:\n  validDays: 0\n", "identity.validDays"),
        ("group: g\ntransports: [wifi, lora]\n", "transports[1]"),
        ("group: g\ntransports: []\n", "transports"),
        ("group: g\nreplication:\n  listen: \"[fe80::1:4984\"\n", "replication.listen"),
        ("group: g\nreplication:\n  peers: [\"[10.0.0.1]:4984\"]\n", "replication.peers[0]"),
    ])
    func siteErrors(_ text: String, _ key: String) throws {
        let e = try #require(configError { _ = try repoLoader.loadSite(text: text, file: "site.yaml") })
        #expect(e.key == key, "\(e)")
        #expect(e.mark.file == "site.yaml")
    }

    @Test("transports and IPv6 addresses: the seed's default is Wi-Fi only; [::] and link-local with a zone parse")
    func transportsAndAddresses() throws {
        let plain = try repoLoader.loadSite(text: "group: g\n", file: "site.yaml")
        #expect(plain.transports == [.wifi])
        let site = try repoLoader.loadSite(text: """
            group: g
            transports: [bluetooth, wifi, wifi]
            replication:
              listen: "[::]:4984"
              peers: ["[fe80::2%eth0]:4984", 192.168.1.20:4984]
            """, file: "site.yaml")
        #expect(site.transports == [.bluetooth, .wifi])
        #expect(site.listenAddress == HostPort(host: "::", port: 4984))
        #expect(site.staticPeers == [HostPort(host: "fe80::2%eth0", port: 4984), HostPort(host: "192.168.1.20", port: 4984)])
        #expect(site.staticPeers[0].description == "[fe80::2%eth0]:4984" && site.staticPeers[1].description == "192.168.1.20:4984")
        #expect(HostPort(parsing: "[::1]") == nil && HostPort(parsing: "[zz::1]:80") == nil && HostPort(parsing: "1.2.3:80") == nil)
    }

    @Test("the built-in site file is valid")
    func embeddedSite() throws {
        let site = try repoLoader.loadSite(text: SiteConfig.embeddedDefault, file: "<built-in>")
        #expect(site.group == "shoal.demo")
    }

    @Test("the DNS-SD service type is derived from the group id as in the ObjectBox seed")
    func serviceType() {
        #expect(GroupID("com.example.myapp.mesh").serviceType == "_C17B206CE9F6._tcp")
    }

    @Test("the pure SHA-256 behind group names agrees with mbedTLS's on every padding edge and on known vectors")
    func sha256() {
        #expect(SHA256.hex(SHA256.hash([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(SHA256.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        var random = SeededRandom(seed: 7)
        for length in [1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000, 4096] {
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            #expect(SHA256.hash(bytes) == Digest.sha256(bytes), "length \(length)")
        }
    }

    @Test("every mesh option has the seed's default")
    func meshDefaults() {
        let m = MeshOptions()
        let expected: [(String, Int64)] = [
            ("maxConnectionCount", 3), ("backoffMillis", 10000), ("evictionBackoffMillis", 30000), ("randomSeed", 0),
            ("requestTimeoutMillis", 5000), ("advertisingDelayMillis", 2000), ("advertisingRetryMillis", 5000),
            ("advertisingRetryMaxMillis", 60000), ("connectDelayMillis", 1000), ("initialDiscoveryDurationSeconds", 30),
            ("discoveryDurationSeconds", 15), ("discoveryPauseSeconds", 45), ("discoveryPauseJitterSeconds", 15),
            ("txLogBatchSizeKb", 100), ("txLogBatchMaxCount", 1000), ("txLogMaxAgeSeconds", 28800),
        ]
        #expect(m.all.map(\.0) == expected.map(\.0))
        #expect(m.all.map(\.1) == expected.map(\.1))
    }
}

@Suite("Site files: the http section")
struct HTTPSiteConfigTests {
    @Test("defaults: enabled, 127.0.0.1:8470 and the Unix socket; a single address may be written alone, as replication.listen is")
    func defaultsAndScalar() throws {
        let plain = try repoLoader.loadSite(text: "group: g\n", file: "site.yaml")
        #expect(plain.http == HTTPSettings())
        #expect(plain.http.enabled && plain.http.unixSocket && plain.http.listen.map(\.description) == ["127.0.0.1:8470"])
        let scalar = try repoLoader.loadSite(text: "group: g\nhttp:\n  listen: 0.0.0.0:8480\n  maxConnections: 64\n", file: "site.yaml")
        #expect(scalar.http.listen.map(\.description) == ["0.0.0.0:8480"] && scalar.http.maxConnections == 64)
        #expect(!HTTPSettings.isLoopback(scalar.http.listen[0]) && HTTPSettings.isLoopback(HostPort(host: "::1", port: 1)))
    }

    @Test("mistakes name file:line and key: a bad address, one listed twice, an API reachable nowhere, an unknown key")
    func mistakes() {
        func error(_ http: String) -> String {
            do { _ = try repoLoader.loadSite(text: "group: g\nhttp:\n" + http, file: "site.yaml"); return "" } catch { return error.description }
        }
        #expect(error("  listen: [\"localhost:80\"]\n").contains("site.yaml:3"))
        #expect(error("  listen: [\"localhost:80\"]\n").contains("http.listen[0]"))
        #expect(error("  listen: [\"127.0.0.1:9\", \"127.0.0.1:9\"]\n").contains("127.0.0.1:9 is listed twice"))
        #expect(error("  listen: []\n  unixSocket: false\n").contains("reachable nowhere"))
        #expect(error("  listen: []\n  unixSocket: false\n  enabled: false\n").isEmpty)
        #expect(error("  port: 8470\n").contains("port"))
        #expect(error("  maxConnections: 0\n").contains("http.maxConnections"))
    }
}
