import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalTesting
import Testing

/// Issue 22, the site file's `uplink:` section: the contract's example reads as written, the
/// defaults fill in, and each mistake is an error at its key and line that says what to write.
@Suite("Uplink site settings")
struct UplinkConfigTests {
    static let nkey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"

    /// The contract's example (COMMON.md), with one way to log in (it lists all three as options).
    static let example = """
        group: g
        collections:
          - name: sensors.state
          - name: sensors.readings
        uplink:
          servers: [nats://10.0.0.5:4222, nats://10.0.0.6]
          replicas: 3
          credentialsFile: /etc/shoal/hub.creds
          tls:
            caFile: /etc/shoal/hub-ca.pem
            identity: true
          reconnect: {minMillis: 1000, maxMillis: 60000}
          collections:
            - name: sensors.state
              push: true
              pull: false
              pushFilter: {idPrefix: boiler-}
              pullFilter: {field: {site: east}}
        """

    func load(_ text: String) throws -> SiteConfig { try repoLoader.loadSite(text: text, file: "site.yaml") }

    @Test("the contract's example reads into the settings it describes")
    func fullExample() throws {
        let u = try load(UplinkConfigTests.example).uplink
        #expect(u.enabled && u.useTLS)
        #expect(u.servers == ["nats://10.0.0.5:4222", "nats://10.0.0.6:4222"])
        #expect(u.replicas == 3)
        #expect(u.credentialsFile == "/etc/shoal/hub.creds" && u.username == nil && u.nkey == nil)
        var tls = UplinkTLSSettings()
        tls.caFile = "/etc/shoal/hub-ca.pem"
        tls.identity = true
        #expect(u.tls == tls)
        #expect(u.reconnectMinMillis == 1000 && u.reconnectMaxMillis == 60_000)
        let state = try CollectionName(parsing: "sensors.state")
        var c = UplinkCollection(name: state)
        c.pull = false
        var push = FilterSpec()
        push.idPrefixes = ["boiler-"]
        var pull = FilterSpec()
        pull.fieldEquals = ["site": .string("east")]
        (c.pushFilter, c.pullFilter) = (push, pull)
        #expect(u.collections == [c])
        #expect(u.collection(state) == c)
        #expect(u.collection(try CollectionName(parsing: "sensors.readings")) == nil, "listed collections only")
        #expect(u.referencedFiles.map(\.key) == ["uplink.credentialsFile", "uplink.tls.caFile"])
        #expect(u.referencedFiles.map(\.kind) == [.credentialsFile, .caFile])
        #expect(u.referencedFiles.map(\.mark.line) == [8, 10])
    }

    @Test("no uplink: section, or no servers: no uplink")
    func disabled() throws {
        #expect(!(try load("group: g\n")).uplink.enabled)
        #expect(!(try load("group: g\nuplink:\n")).uplink.enabled)
        let empty = try load("group: g\nuplink:\n  servers: []\n").uplink
        #expect(!empty.enabled && empty.collections.isEmpty)
        #expect(!(try load("group: g\nuplink:\n  replicas: 3\n")).uplink.enabled)
    }

    @Test("defaults: port 4222, one replica, reconnect 500…30000 ms, every collection both ways, no TLS")
    func defaults() throws {
        let site = try load("group: g\ncollections: [{name: sensors.state}, {name: other}]\nuplink:\n  servers: nats://Hub.Example.com\n")
        let u = site.uplink
        #expect(u.servers == ["nats://hub.example.com:4222"], "a single string is a list of one; names in lower case")
        #expect(u.replicas == 1 && u.reconnectMinMillis == 500 && u.reconnectMaxMillis == 30_000)
        #expect(!u.useTLS && u.tls == nil && u.referencedFiles.isEmpty)
        #expect(u.collections.map(\.name) == site.collections.map(\.name))
        #expect(u.collections.map(\.name.description) == ["_default._default", "sensors.state", "_default.other"])
        #expect(u.collections.allSatisfy { $0.push && $0.pull && $0.pushFilter == nil && $0.pullFilter == nil })
    }

    @Test("an empty collections list means nothing syncs, without a complaint")
    func emptyCollections() throws {
        let u = try load("group: g\ncollections: [{name: a}]\nuplink:\n  servers: [nats://h]\n  collections: []\n").uplink
        #expect(u.enabled && u.collections.isEmpty)
    }

    @Test("tls:// servers turn TLS on with the defaults; IPv6 in brackets; tls: under nats:// servers turns it on too")
    func serversAndTLS() throws {
        let v6 = try load("group: g\nuplink:\n  servers: [\"tls://[::1]\", \"tls://[FE80::2%eth0]:7422\", tls://10.0.0.1:4443]\n").uplink
        #expect(v6.servers == ["tls://[::1]:4222", "tls://[fe80::2%eth0]:7422", "tls://10.0.0.1:4443"])
        #expect(v6.useTLS && v6.tls == UplinkTLSSettings())
        let plain = try load("group: g\nuplink:\n  servers: [nats://h:5222]\n  tls: {certFile: /c.pem, keyFile: /c.key}\n").uplink
        #expect(plain.useTLS && plain.tls?.certFile == "/c.pem" && plain.tls?.keyFile == "/c.key" && plain.tls?.identity == false)
        #expect(plain.referencedFiles.map(\.kind) == [.certFile, .keyFile])
    }

    @Test("the three ways to log in each read with their files")
    func logins() throws {
        let user = try load(UplinkConfigTests.site(["username: gw1", "passwordFile: /etc/shoal/hub.pass"])).uplink
        #expect(user.username == "gw1" && user.passwordFile == "/etc/shoal/hub.pass")
        #expect(user.referencedFiles.map(\.kind) == [.passwordFile] && user.referencedFiles.map(\.mark.line) == [7])
        let bare = try load(UplinkConfigTests.site(["username: gw1"])).uplink
        #expect(bare.username == "gw1" && bare.passwordFile == nil, "a user without a password is allowed (no_auth_user, token-less servers)")
        let nk = try load(UplinkConfigTests.site(["nkey: \(UplinkConfigTests.nkey)", "nkeySeedFile: /etc/shoal/hub.nk"])).uplink
        #expect(nk.nkey == UplinkConfigTests.nkey && nk.nkeySeedFile == "/etc/shoal/hub.nk")
        #expect(nk.referencedFiles.map(\.kind) == [.nkeySeedFile] && nk.referencedFiles.map(\.key) == ["uplink.nkeySeedFile"])
    }

    /// A site file whose uplink has one server and `lines` (at the uplink's indentation).
    static func site(_ lines: [String]) -> String {
        "group: g\ncollections:\n  - name: sensors.state\nuplink:\n  servers: [nats://10.0.0.5]\n" + lines.map { "  " + $0 + "\n" }.joined()
    }

    /// A site file with `servers:` written as `value`.
    static func servers(_ value: String) -> String { "group: g\nuplink:\n  servers: \(value)\n" }

    static let manyServers = "[" + (1...33).map { "nats://h\($0)" }.joined(separator: ", ") + "]"

    static let serverCases: [(String, String, String, Int)] = [
        (servers("[http://h:4222]"), "uplink.servers[0]", #""http://" is not supported; expected nats:// or tls://, e.g. nats://10.0.0.5:4222"#, 3),
        (servers("[tcp://h]"), "uplink.servers[0]", "tcp:// is written nats:// here", 3),
        (servers("[ssl://h]"), "uplink.servers[0]", "ssl:// is written tls:// here", 3),
        (servers("10.0.0.5:4222"), "uplink.servers", "is not a server url; expected nats://host[:port] or tls://host[:port]", 3),
        (servers("[nats://:4222]"), "uplink.servers[0]", "names no host", 3),
        (servers("[\"nats://\"]"), "uplink.servers[0]", "names no host", 3),
        (servers("[nats://h:0]"), "uplink.servers[0]", "a port is 1 to 65535", 3),
        (servers("[nats://h:65536]"), "uplink.servers[0]", "a port is 1 to 65535", 3),
        (servers("[nats://h:port]"), "uplink.servers[0]", "\"port\" is not a port", 3),
        (servers("[nats://fe80::1:4222]"), "uplink.servers[0]", "an IPv6 address is written in brackets, e.g. nats://[::1]:4222", 3),
        (servers("[\"nats://[::1\"]"), "uplink.servers[0]", "no closing ']'", 3),
        (servers("[nats://u:pw@h]"), "uplink.servers[0]", "write username: and passwordFile: beside it", 3),
        (servers("[nats://h/path]"), "uplink.servers[0]", "a server url has no path or query", 3),
        (servers("[nats://bad_host]"), "uplink.servers[0]", "not a host name or address", 3),
        (servers("[{url: nats://h}]"), "uplink.servers[0]", "expected a server url, found a mapping", 3),
        (servers("{url: nats://h}"), "uplink.servers", "expected a server url or a list of them", 3),
        ("group: g\nuplink:\n  servers:\n    - nats://10.0.0.5\n    - nats://10.0.0.5:4222\n", "uplink.servers[1]",
         "nats://10.0.0.5:4222 is listed twice (line 4); name each server once", 5),
        ("group: g\nuplink:\n  servers:\n    - nats://H\n    - tls://h:4222\n", "uplink.servers[1]", "nats://h:4222 is listed twice (line 4)", 5),
        ("group: g\nuplink:\n  servers:\n    - nats://a\n    - tls://b\n", "uplink.servers[1]",
         "tls://b:4222 and nats://a:4222 mix nats:// and tls://", 5),
        (servers(manyServers), "uplink.servers", "33 servers; at most 32", 3),
    ]

    @Test("each mistake in servers: is an error at its item and line that says what is expected", arguments: serverCases)
    func serverMistake(_ text: String, _ key: String, _ needle: String, _ line: Int) throws {
        let e = try #require(configError { _ = try load(text) })
        #expect(e.all.map(\.key) == [key], "\(e)\n---\n\(text)")
        #expect(e.message.contains(needle), "\(e.message)")
        #expect(e.mark.file == "site.yaml" && e.mark.line == line, "\(e)")
    }

    static let cases: [([String], String, String, Int)] = [
        (["replicas: 0"], "uplink.replicas", "0 is out of range 1...5", 6),
        (["replicas: 7"], "uplink.replicas", "7 is out of range 1...5", 6),
        (["replicas: three"], "uplink.replicas", "expected a whole number", 6),
        (["passwordFile: /etc/shoal/hub.pass"], "uplink.passwordFile", "a password needs a user: add username (e.g. username: gw1)", 6),
        (["username: \"\""], "uplink.username", "may not be empty", 6),
        (["credentialsFile: \"\""], "uplink.credentialsFile", "may not be empty, e.g. credentialsFile: /etc/shoal/hub.creds", 6),
        (["nkey: \(nkey)"], "uplink.nkeySeedFile", "NKey authentication needs both nkey", 6),
        (["nkeySeedFile: /etc/shoal/hub.nk"], "uplink.nkey", "nkey is missing", 6),
        (["nkey: UABC", "nkeySeedFile: /n"], "uplink.nkey", "\"UABC\" is not a user's public NKey: 56 characters of A-Z and 2-7 starting with U", 6),
        (["nkey: N\(nkey.dropFirst())", "nkeySeedFile: /n"], "uplink.nkey", "starting with U", 6),
        (["nkey: \(nkey.dropLast())1", "nkeySeedFile: /n"], "uplink.nkey", "A-Z and 2-7", 6),
        (["nkey: \(nkey.lowercased())", "nkeySeedFile: /n"], "uplink.nkey", "is not a user's public NKey", 6),
        (["nkey: SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QMDU3GTIUWEI5LDNOXD43IZY", "nkeySeedFile: /n"], "uplink.nkey", "this is a seed, a secret", 6),
        (["username: gw1", "credentialsFile: /c.creds"], "uplink.credentialsFile", "username and credentialsFile are two ways to log in; choose one", 7),
        (["credentialsFile: /c.creds", "username: gw1"], "uplink.username", "credentialsFile and username are two ways to log in", 7),
        (["nkey: \(nkey)", "nkeySeedFile: /n", "credentialsFile: /c.creds"], "uplink.credentialsFile", "nkey and credentialsFile", 8),
        (["username: gw1", "nkey: \(nkey)", "nkeySeedFile: /n"], "uplink.nkey", "username and nkey", 7),
        (["username: gw1", "credentialsFile: /c", "nkey: \(nkey)", "nkeySeedFile: /n"], "uplink.nkey", "username and credentialsFile and nkey are three ways", 8),
        (["tls: {certFile: /c.pem}"], "uplink.tls.keyFile", "a client certificate needs both certFile and keyFile", 6),
        (["tls: {keyFile: /c.key}"], "uplink.tls.certFile", "both certFile and keyFile (or identity: true for the gateway's own); certFile is missing", 6),
        (["tls: {identity: true, certFile: /c.pem, keyFile: /c.key}"], "uplink.tls.identity", "leave out certFile and keyFile", 6),
        (["tls: {insecure: true}"], "uplink.tls.insecure", "unknown key", 6),
        (["tls: {caFile: \"\"}"], "uplink.tls.caFile", "may not be empty, e.g. caFile: /etc/shoal/hub-ca.pem", 6),
        (["tls: {identity: maybe}"], "uplink.tls.identity", "expected true or false", 6),
        (["tls: [x]"], "uplink.tls", "expected a mapping", 6),
        (["reconnect: {minMillis: 5000, maxMillis: 1000}"], "uplink.reconnect.maxMillis", "below minMillis", 6),
        (["reconnect: {minMillis: 5}"], "uplink.reconnect.minMillis", "out of range 10...600000", 6),
        (["reconnect: {maxMillis: 4000000}"], "uplink.reconnect.maxMillis", "out of range 10...3600000", 6),
        (["reconnect: {min: 10}"], "uplink.reconnect.min", "unknown key", 6),
        (["server: nats://h"], "uplink.server", "unknown key (known here:", 6),
        (["collections: [{name: nowhere}]"], "uplink.collections[0].name",
         #"_default.nowhere is not a collection of the site file (its collections: _default._default, sensors.state); add "- name: _default.nowhere" under collections: or remove it here"#, 6),
        (["collections: [{push: true}]"], "uplink.collections[0].name", "is required, e.g. name: sensors.state", 6),
        (["collections: [{name: \"bad name\"}]"], "uplink.collections[0].name", "A-Z a-z 0-9", 6),
        (["collections: [sensors.state]"], "uplink.collections[0]", "expected a mapping, found a scalar", 6),
        (["collections: {name: sensors.state}"], "uplink.collections", "expected a list", 6),
        (["collections:", "  - name: sensors.state", "  - name: sensors.state"], "uplink.collections[1].name",
         "sensors.state is listed twice; give each collection one entry", 8),
        (["collections: [{name: sensors.state, push: sometimes}]"], "uplink.collections[0].push", "expected true or false", 6),
        (["collections: [{name: sensors.state, filter: {idPrefix: a}}]"], "uplink.collections[0].filter", "unknown key", 6),
        (["collections:", "  - name: sensors.state", "    pushFilter:", "      idPrefix: a", "      peers: [\(String(repeating: "ab", count: 32))]"],
         "uplink.collections[0].pushFilter.peers", "the hub is not a peer: peers: applies to mesh filters only", 10),
        (["collections: [{name: sensors.state, pullFilter: {peers: []}}]"], "uplink.collections[0].pullFilter.peers", "the hub is not a peer", 6),
        (["collections: [{name: sensors.state, pullFilter: {}}]"], "uplink.collections[0].pullFilter", "an empty filter: give idPrefix, field or fieldIn", 6),
        (["collections: [{name: sensors.state, pushFilter: {fieldIn: {kind: []}}}]"], "uplink.collections[0].pushFilter.fieldIn.kind", "non-empty list", 6),
    ]

    @Test("each other mistake is an error at its key and line that says what is expected", arguments: cases)
    func mistake(_ lines: [String], _ key: String, _ needle: String, _ line: Int) throws {
        let text = UplinkConfigTests.site(lines)
        let e = try #require(configError { _ = try load(text) })
        #expect(e.all.map(\.key) == [key], "\(e)\n---\n\(text)")
        #expect(e.message.contains(needle), "\(e.message)")
        #expect(e.mark.file == "site.yaml" && e.mark.line == line, "\(e)")
    }

    @Test("every mistake in the uplink section is reported at once, each at its line")
    func everyMistakeReported() throws {
        let text = """
            group: g
            collections:
              - name: sensors.state
            uplink:
              servers:
                - mqtt://h
                - nats://h:0
              replicas: 9
              passwordFile: /p
              tls: {certFile: /c.pem}
              collections:
                - name: sensors.nope
                - name: sensors.state
                  pullFilter: {peers: [x]}
              colections: []
            """
        let e = try #require(configError { _ = try load(text) })
        #expect(e.all.map(\.key) == ["uplink.servers[0]", "uplink.servers[1]", "uplink.replicas", "uplink.passwordFile",
                                     "uplink.tls.keyFile", "uplink.collections[0].name", "uplink.collections[1].pullFilter.peers",
                                     "uplink.colections"], "\(e)")
        #expect(e.all.map(\.mark.line) == [6, 7, 8, 9, 10, 12, 14, 15])
    }

    @Test("README's uplink: block in the site file's options reads as written")
    func readmeBlock() throws {
        let readme = try #require(readFile(repoBoards.replacingFirst("/board-configs", with: "/README.md")))
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false)
        let section = try #require(lines.firstIndex { $0 == "### The site file" }, "README.md: no \"### The site file\"")
        let start = try #require(lines[section...].firstIndex { $0.hasPrefix("uplink:") }, "README.md: no uplink: block in the site file's options")
        let end = try #require(lines[(start + 1)...].firstIndex { $0.hasPrefix("```") || !($0.hasPrefix(" ") || $0.isEmpty) })
        let text = "group: g\ncollections: [{name: sensors.state}, {name: sensors.readings}]\n" + lines[start..<end].joined(separator: "\n")
        let u = try load(text).uplink
        #expect(u.enabled && u.servers.count == 2)
        #expect(u.collections.map(\.name.description) == ["sensors.state"])
        #expect(u.referencedFiles.count >= 2)
    }

    @Test("the files the uplink names are checked with the site: missing or of the wrong kind, each at its line")
    func filesChecked() throws {
        let dir = TemporaryDirectory(prefix: "shoal-uplink-files")
        defer { dir.remove() }
        let jwt = "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.e30.sig\n------END NATS USER JWT------\n"
        let seed = "-----BEGIN USER NKEY SEED-----\nSUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QMDU3GTIUWEI5LDNOXD43IZY\n------END USER NKEY SEED------\n"
        try Files.write(dir.file("good.creds"), jwt + "\n" + seed)
        try Files.write(dir.file("jwt-only.creds"), jwt)
        try Files.write(dir.file("good.nk"), "SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QMDU3GTIUWEI5LDNOXD43IZY\n")
        try Files.write(dir.file("public.nk"), "\(UplinkConfigTests.nkey)\n")
        try Files.write(dir.file("cert.pem"), "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n")
        let check = ConfigurationLoading.referencedFileProblem
        func site(_ lines: [String]) -> String { UplinkConfigTests.site(lines) }

        let creds = try #require(configError {
            _ = try repoLoader.loadSite(text: site(["credentialsFile: \(dir.file("jwt-only.creds"))", "tls: {caFile: \(dir.file("missing.pem"))}"]),
                                        file: "site.yaml", checkFiles: check)
        })
        #expect(creds.all.map(\.key) == ["uplink.credentialsFile", "uplink.tls.caFile"], "\(creds)")
        #expect(creds.all.map(\.mark.line) == [6, 7])
        #expect(creds.all[0].message.contains("not a NATS credentials file: no \"-----BEGIN USER NKEY SEED-----\" block"), "\(creds)")
        #expect(creds.all[1].message.contains("no such file (the PEM of the CA"), "\(creds)")

        let seedIsCreds = try #require(configError {
            _ = try repoLoader.loadSite(text: site(["nkey: \(UplinkConfigTests.nkey)", "nkeySeedFile: \(dir.file("good.creds"))"]),
                                        file: "site.yaml", checkFiles: check)
        })
        #expect(seedIsCreds.line.hasSuffix("does not start with SU; a credentials file (JWT and seed) goes in credentialsFile instead"), "\(seedIsCreds)")
        #expect(seedIsCreds.mark.line == 7 && seedIsCreds.key == "uplink.nkeySeedFile")
        let publicKey = try #require(configError {
            _ = try repoLoader.loadSite(text: site(["nkey: \(UplinkConfigTests.nkey)", "nkeySeedFile: \(dir.file("public.nk"))"]),
                                        file: "site.yaml", checkFiles: check)
        })
        #expect(publicKey.message.contains("that is the public key (it goes in nkey:)"), "\(publicKey)")
        let noSeed = try #require(configError {
            _ = try repoLoader.loadSite(text: site(["nkey: \(UplinkConfigTests.nkey)", "nkeySeedFile: \(dir.file("missing.nk"))"]),
                                        file: "site.yaml", checkFiles: check)
        })
        #expect(noSeed.message.contains("no such file (the user's NKey seed (SU…)"), "\(noSeed)")

        // Good files: no error.
        for lines in [["credentialsFile: \(dir.file("good.creds"))", "tls: {caFile: \(dir.file("cert.pem"))}"],
                      ["nkey: \(UplinkConfigTests.nkey)", "nkeySeedFile: \(dir.file("good.nk"))"]] {
            _ = try repoLoader.loadSite(text: site(lines), file: "site.yaml", checkFiles: check)
        }
    }

    @Test("the file check goes through the reader it is given, and a read error names the file")
    func fileReadError() throws {
        struct Unreadable: Error, CustomStringConvertible { var description: String { "permission denied" } }
        let site = try load(UplinkConfigTests.site(["username: u", "passwordFile: /p"]))
        let e = try #require(site.uplink.fileProblems { _ throws in throw Unreadable() })
        #expect(e.line == "site.yaml:7: uplink.passwordFile: /p: cannot be read (permission denied)", "\(e)")
        #expect(site.uplink.fileProblems { _ in "pw\n" } == nil)
    }
}
