import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalYAML
import ShoalTesting
import Testing

/// Issue 19, "Config and checks": a file is read to its end and every error reported; a duplicate
/// key names its path; a board names itself; host names are accepted as static peers.
@Suite("Config checks")
struct ConfigCheckTests {
    @Test("every error in a board file is reported, not only the first, and at most 20 of them")
    func everyErrorReported() throws {
        let dir = BoardDir(["b": """
            board:
              name: B
              support: sometimes
            led:
              driver: gpiod
              chip: gpiochip0
              line: 99999
            console:
              baud: 12345
            mesh:
              maxConnectionCount: 0
              backoffMillis: -5
            wifii: {interface: wlan0}
            """])
        defer { dir.remove() }
        let e = try #require(configError { _ = try dir.loader.loadBoard("b") })
        let keys = e.all.map(\.key)
        #expect(keys == ["board.support", "led.line", "console.baud", "mesh.maxConnectionCount", "mesh.backoffMillis", "wifii"], "\(e)")
        #expect(e.description.split(separator: "\n").count == 6)
        #expect(e.all.map(\.mark.line) == [3, 7, 9, 11, 12, 13])

        // 30 unknown keys: 20 are listed, then how many more.
        let many = (1...30).map { "k\($0): 1" }.joined(separator: "\n")
        let big = BoardDir(["b": "board:\n  name: B\n" + many + "\n"])
        defer { big.remove() }
        let f = try #require(configError { _ = try big.loader.loadBoard("b") })
        #expect(f.all.count == ConfigError.maxReported)
        #expect(f.omitted == 10)
        #expect(f.description.hasSuffix("and 10 more errors"), "\(f)")
    }

    @Test("every error in a site file is reported")
    func siteErrorsAllReported() throws {
        let text = """
            group: g
            identity: {label: "bad label", validDays: 0}
            collections:
              - name: a.b
                resolver: sometimes
              - name: c.d
                push: maybe
            authenticator:
              allowedPeers: [abc, def]
            replication:
              listen: gw.local:4984
              peers: ["no port", "gw2.local:4984"]
            mesh: {maxConnectionCount: 99}
            """
        let e = try #require(configError { _ = try repoLoader.loadSite(text: text, file: "site.yaml") })
        #expect(e.all.map(\.key) == ["identity.label", "identity.validDays", "collections[0].resolver", "collections[1].push",
                                     "authenticator.allowedPeers[0]", "authenticator.allowedPeers[1]", "replication.listen",
                                     "replication.peers[0]", "mesh.maxConnectionCount"], "\(e)")
    }

    @Test("a duplicate key names its path, not only its leaf", arguments: [
        ("board:\n  name: x\n  name: y\n", "board.name", 3),
        ("collections:\n  - name: a\n  - name: b\n    push: true\n    push: false\n", "collections[1].push", 5),
        ("a: 1\na: 2\n", "a", 2),
    ])
    func duplicateKeyPath(_ text: String, _ key: String, _ line: Int) throws {
        let e = try #require(configError { _ = try YAMLParser.parse(text, file: "f.yaml") })
        #expect(e.key == key, "\(e)")
        #expect(e.mark.line == line)
        #expect(e.message.contains("duplicate key"))
    }

    @Test("every duplicate key in a file is reported at once")
    func everyDuplicateReported() throws {
        let e = try #require(configError { _ = try YAMLParser.parse("board:\n  name: x\n  name: y\nled:\n  driver: none\n  driver: gpiod\n", file: "f.yaml") })
        #expect(e.all.map(\.key) == ["board.name", "led.driver"], "\(e)")
        #expect(e.all.map(\.mark.line) == [3, 6])
    }

    @Test("a board file must name itself: board.name is not inherited through extends")
    func boardNameRequired() throws {
        let dir = BoardDir(["base": "board:\n  name: Base\n  support: abstract\n",
                            "nameless": "extends: base\nboard:\n  support: community\n",
                            "named": "extends: base\nboard:\n  name: Named\n"])
        defer { dir.remove() }
        let e = try #require(configError { _ = try dir.loader.loadBoard("nameless") })
        #expect(e.key == "board.name" && e.mark.file.hasSuffix("nameless.yaml"), "\(e)")
        #expect(e.message.contains("not inherited"))
        #expect(try dir.loader.loadBoard("named").name == "Named")
        #expect(try dir.loader.loadBoard("base").name == "Base")
    }

    @Test("static peers may be host names; the listen address must be numeric")
    func hostNamePeers() throws {
        let site = try repoLoader.loadSite(text: "group: g\nreplication:\n  peers: [gw2.local:4984, localhost:5000, 10.0.0.2:4984, \"[fe80::2%eth0]:4984\"]\n", file: "s.yaml")
        #expect(site.staticPeers.map(\.description) == ["gw2.local:4984", "localhost:5000", "10.0.0.2:4984", "[fe80::2%eth0]:4984"])
        #expect(site.staticPeers.map(\.isName) == [true, true, false, false])
        for bad in ["gw2.local", "-gw:1", "gw_2:1", "1.2.3:4984", "a..b:1", "gw2.local:0", "gw2.local:70000"] {
            #expect(configError { _ = try repoLoader.loadSite(text: "group: g\nreplication:\n  peers: [\"\(bad)\"]\n", file: "s.yaml") } != nil, "\(bad)")
        }
    }

    @Test("rootCertificates is read at check time: a missing file or one without a certificate names file:line:key")
    func rootsChecked() throws {
        let dir = TemporaryDirectory(prefix: "shoal-roots")
        defer { dir.remove() }
        try Files.write(dir.path + "/key.pem", "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n")
        for (path, needle) in [("/nonexistent.pem", "no such file"), (dir.path + "/key.pem", "no certificate in it")] {
            let text = "group: g\nauthenticator:\n  rootCertificates: \(path)\n"
            let e = try #require(configError {
                _ = try repoLoader.loadSite(text: text, file: "site.yaml", checkFiles: ConfigurationLoading.referencedFileProblem)
            })
            #expect(e.description.hasPrefix("site.yaml:3: authenticator.rootCertificates: \(path): \(needle)"), "\(e)")
        }
    }

    @Test("errors come in line order within each file, files in the order first named")
    func errorsInLineOrder() {
        var errors = ConfigErrors()
        func at(_ file: String, _ line: Int) -> ConfigError {
            ConfigError(mark: SourceMark(file: file, line: line, column: 1), key: "k\(line)", message: "bad")
        }
        for e in [at("board.yaml", 5), at("board.yaml", 2), at("site.yaml", 1), at("board.yaml", 4)] { errors.add(e) }
        let combined = errors.combined
        let order = ([combined].compactMap { $0 } + (combined?.also ?? [])).map { "\($0.mark.file):\($0.mark.line)" }
        #expect(order == ["board.yaml:2", "board.yaml:4", "board.yaml:5", "site.yaml:1"])
    }
}
