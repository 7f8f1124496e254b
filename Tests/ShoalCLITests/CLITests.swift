import Foundation
import ShoalLinux
import ShoalTesting
import Testing

extension ProcessSuites {
    @Suite("shoal command line")
    struct CLITests {
        @Test("--help lists every command and the exit codes")
        func help() throws {
            let r = try Shoal.run(["--help"])
            #expect(r.status == 0)
            for word in ["run", "status", "doc", "changes", "log", "board", "bench", "version", "release", "update", "Exit codes"] {
                #expect(r.stdout.contains(word), "help lacks \(word)")
            }
        }

        @Test("every command has its own --help", arguments: ["run", "status", "doc", "changes", "conflicts", "log", "identity", "board", "bench", "version", "uplink", "blob", "release", "update"])
        func subcommandHelp(_ command: String) throws {
            let r = try Shoal.run([command, "--help"])
            #expect(r.status == 0)
            #expect(r.stdout.contains("Usage: shoal \(command)"))
        }

        @Test("unknown commands, unknown flags and missing arguments exit 2 with a message that names them", arguments: [
            (["frobnicate"], "unknown command"), (["status", "--bogus"], "unknown option --bogus"),
            (["run", "--boad", "sim"], "unknown option --boad"), (["doc", "put", "x"], "missing arguments"),
            (["doc", "get", "a", "b", "c"], "unexpected argument"), (["doc", "fly"], "unknown subcommand"),
            (["changes", "--since", "-3"], "--since"), (["run", "--board"], "needs a value"), (["version", "--json=yes"], "takes no value"),
            (["uplink"], "missing subcommand: status"), (["blob"], "missing subcommand: put, get, ls or gc"),
            (["blob", "put"], "missing arguments"), (["blob", "get", "not-a-digest"], "not a blob digest"), (["uplink", "stats"], "unknown subcommand \"stats\"; uplink has: status"),
            (["release", "roll"], "unknown subcommand \"roll\"; release has: keygen, sign, publish, status"),
            (["release", "sign", "--key", "k"], "--binary FILE is required"), (["release", "publish", "m.json"], "--binary FILE is required"),
            (["release", "sign", "--key", "k", "--binary", "b", "--version", "two", "--out", "o"], "--version two: dotted whole numbers"),
            (["release", "sign", "--key", "k", "--binary", "b", "--version", "1.0", "--rollout", "120%", "--out", "o"], "a percentage from 1% to 100%"),
            (["release", "sign", "--key", "k", "--binary", "b", "--version", "1.0", "--peers", "abc", "--out", "o"], "--peers: 1 to 256 peer ids"),
            (["release", "sign", "--key", "k", "--binary", "b", "--version", "1.0", "--peers", String(repeating: "a", count: 64), "--rollout", "5%", "--out", "o"], "exclude each other"),
            (["update", "reboot"], "update has: boot-check"),
        ])
        func usageErrors(_ args: [String], _ needle: String) throws {
            let r = try Shoal.run(args)
            #expect(r.status == 2)
            #expect(r.stderr.contains(needle), "stderr: \(r.stderr)")
        }

        @Test("a bad option value is named in the error, and lists of choices are whole", arguments: [
            (["doc", "list", "c", "--limit", "0"], "--limit must be a whole number from 1 to 10000, not \"0\""),
            (["changes", "--since", "x"], "--since must be a whole number 0 or more, not \"x\""),
            (["sim", "--topology", "star"], "not \"star\""), (["sim", "--kind", "lora"], "--kind is wifi or ble, not \"lora\""),
            (["sim", "--loss", "2"], "not \"2\""), (["sim", "--edits", "maybe"], "not \"maybe\""),
            (["doc", "frob"], "put, import, get, delete, list, query, index or indexes"), (["peer", "74"], "at least its first 4 hex digits (as `shoal peers` shows them), not \"74\""),
            (["peer", "zzzz"], "not \"zzzz\""), (["mesh", "--dot", "--json"], "--dot and --json go one at a time"), (["help", "nosuch"], "no command \"nosuch\" (see `shoal --help`)"),
        ])
        func badValuesNamed(_ args: [String], _ needle: String) throws {
            let r = try Shoal.run(args)
            #expect(r.status == 2)
            #expect(r.stderr.contains(needle), "stderr: \(r.stderr)")
        }

        @Test("doctor's last line counts in the right number (1 check failed, never check(s)); --json has it as verdict")
        func doctorCountsFailures() throws {
            let r = try Shoal.run(["doctor", "--board", "nosuch", "--board-dir", "/nonexistent"])
            #expect(r.status == 1)
            #expect(r.stdout.hasSuffix("doctor: 1 check failed\n"), "\(r.stdout)")
            let json = try Shoal.json(Shoal.run(["doctor", "--board", "nosuch", "--board-dir", "/nonexistent", "--json"])) as? [String: Any]
            #expect(json?["verdict"] as? String == "1 check failed" && json?["failed"] as? Int == 1 && json?["ok"] as? Bool == false, "\(String(describing: json))")
        }

        @Test("identity create --force --new-key says the identity was replaced and names the old and the new peer id")
        func identityNewKeySaysReplaced() throws {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let first = try Shoal.json(Shoal.run(["identity", "create", "--dir", dir.path, "--json"])) as? [String: Any]
            let old = try #require(first?["peerID"] as? String)
            let r = try Shoal.run(["identity", "create", "--dir", dir.path, "--force", "--new-key"])
            #expect(r.status == 0, "\(r.stderr)")
            let now = try Shoal.json(Shoal.run(["identity", "show", "--dir", dir.path, "--json"])) as? [String: Any]
            let new = try #require(now?["peerID"] as? String)
            #expect(new != old)
            #expect(r.stdout.contains("replaced identity shoal in \(dir.path) with a new key"), "\(r.stdout)")
            #expect(r.stdout.contains("peer id \(old) → \(new) (update the other gateways' allowedPeers)"), "\(r.stdout)")
        }

        @Test("help names every option the command takes and says what --json prints")
        func helpMatchesOptions() throws {
            let sim = try Shoal.run(["help", "sim"]).stdout
            for option in ["--duplicate P", "--reorder P", "--quiet"] { #expect(sim.contains(option), "sim help lacks \(option)") }
            // Each is accepted (exit 0 with --help, not "unknown option").
            #expect(try Shoal.run(["sim", "--duplicate", "0.1", "--reorder", "0.1", "--quiet", "--help"]).status == 0)
            let changes = try Shoal.run(["help", "changes"]).stdout
            #expect(changes.contains("{changes, lastSequence}"), "\(changes)")
            #expect(!changes.contains("With --json, one JSON object per line."))
        }

        @Test("board check of a site file says it looks like one and how to check it")
        func boardCheckOfASiteFile() throws {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let site = dir.path + "/site.yaml"
            try "group: com.example\nreplication:\n  listen: none\n".write(toFile: site, atomically: true, encoding: .utf8)
            let r = try Shoal.run(["board", "check", site, "--board-dir", "/nonexistent"])
            #expect(r.status == 3)
            #expect(r.stderr.contains("\(site) looks like a site file (group:, replication:); check it with `shoal board check BOARD --config \(site)`"), "\(r.stderr)")
            let board = dir.path + "/b.yaml"
            try "extends: sim\nboard:\n  name: X\nfrob: 1\n".write(toFile: board, atomically: true, encoding: .utf8)
            let plain = try Shoal.run(["board", "check", board, "--board-dir", "/nonexistent"])
            #expect(plain.status == 3 && !plain.stderr.contains("looks like a site file"), "\(plain.stderr)")
        }

        @Test("board show lines its origin column up even when a value is longer than the column (sim's name)")
        func boardShowAligned() throws {
            let r = try Shoal.run(["board", "show", "sim", "--board-dir", "/nonexistent"])
            #expect(r.status == 0)
            let rows = r.stdout.split(separator: "\n").dropFirst()
            let starts = Set(rows.compactMap { row in row.range(of: "<built-in>").map { row.distance(from: row.startIndex, to: $0.lowerBound) } ?? row.range(of: "default").map { row.distance(from: row.startIndex, to: $0.lowerBound) } })
            #expect(starts.count == 1, "\(r.stdout)")
        }

        @Test("an unset board value reads (not set), a site check names its collections, and help --help is help's own text")
        func smallWording() throws {
            let shown = try Shoal.run(["board", "show", "sim", "--board-dir", "/nonexistent"])
            #expect(shown.stdout.contains("(not set)") && !shown.stdout.contains(" null "), "\(shown.stdout)")
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            try "group: com.example.x\ncollections:\n  - name: a.b\n".write(toFile: dir.file("s.yaml"), atomically: true, encoding: .utf8)
            let checked = try Shoal.run(["board", "check", "sim", "--board-dir", "/nonexistent", "--config", dir.file("s.yaml")])
            #expect(checked.status == 0 && checked.stdout.contains("2 collections: _default._default, a.b"), "\(checked.stdout)\(checked.stderr)")
            let help = try Shoal.run(["help", "--help"])
            #expect(help.status == 0 && help.stdout.hasPrefix("Usage: shoal help"), "\(help.stdout.prefix(200))")
        }

        @Test("with no command it prints help and exits 2")
        func noCommand() throws {
            let r = try Shoal.run([])
            #expect(r.status == 2)
            #expect(r.stdout.contains("Usage: shoal"))
        }

        @Test("version and board list give JSON with --json")
        func jsonOutput() throws {
            let v = try Shoal.json(Shoal.run(["version", "--json"])) as? [String: String]
            #expect(v?["shoal"] != nil && v?["sqlite"]?.hasPrefix("3.") == true && v?["mbedtls"]?.hasPrefix("2.28") == true)
            #expect(v?["libnats"]?.first?.isNumber == true, "\(v ?? [:])")
            let boards = try Shoal.json(Shoal.run(["board", "list", "--json", "--board-dir", "/nonexistent"])) as? [[String: Any]]
            let ids = boards?.compactMap { $0["id"] as? String } ?? []
            #expect(ids == ["base", "cm4", "generic-linux", "pi-zero-2w", "pi4b", "pi5", "sim"])
            let pi5 = try Shoal.json(Shoal.run(["board", "show", "pi5", "--json"])) as? [String: Any]
            #expect((pi5?["led"] as? [String: Any])?["chip"] as? String == "gpiochip4")
        }

        @Test("a broken board or site file exits 3 and names file:line: key")
        func configErrors() throws {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            try "extends: base\nboard:\n  name: X\nled:\n  driver: gpiod\n  chip: gpiochip0\n  line: 99999\n".write(toFile: dir.path + "/bad.yaml", atomically: true, encoding: .utf8)
            let r = try Shoal.run(["board", "check", dir.path + "/bad.yaml"])
            #expect(r.status == 3)
            #expect(r.stderr.contains("\(dir.path)/bad.yaml:7: led.line:"), "\(r.stderr)")
            try "group: g\ncolections: []\n".write(toFile: dir.path + "/site.yaml", atomically: true, encoding: .utf8)
            let run = try Shoal.run(["run", "--board", "sim", "--config", dir.path + "/site.yaml", "--data-dir", dir.path])
            #expect(run.status == 3)
            #expect(run.stderr.contains("site.yaml:2: colections: unknown key"), "\(run.stderr)")
            try "garbage".write(toFile: dir.path + "/roots.pem", atomically: true, encoding: .utf8)
            try "group: g\nauthenticator:\n  rootCertificates: \(dir.path)/roots.pem\n".write(toFile: dir.path + "/site2.yaml", atomically: true, encoding: .utf8)
            let roots = try Shoal.run(["run", "--board", "sim", "--config", dir.path + "/site2.yaml", "--data-dir", dir.path])
            #expect(roots.status == 3)
            #expect(roots.stderr.contains("site2.yaml:3: authenticator.rootCertificates: \(dir.path)/roots.pem: no certificate in it"), "\(roots.stderr)")
            let abstract = try Shoal.run(["run", "--board", "base", "--data-dir", dir.path])
            #expect(abstract.status == 3)
            #expect(abstract.stderr.contains("abstract"))
        }

        @Test("board check --config reads the files the site names: a missing rootCertificates is exit 3 with file:line: key, as in shoal run")
        func referencedFilesChecked() throws {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let site = dir.path + "/site.yaml"
            try "group: g\nauthenticator:\n  rootCertificates: /nonexistent.pem\n".write(toFile: site, atomically: true, encoding: .utf8)
            let check = try Shoal.run(["board", "check", "sim", "--config", site])
            #expect(check.status == 3)
            #expect(check.stderr.contains("\(site):3: authenticator.rootCertificates: /nonexistent.pem: no such file"), "\(check.stderr)")
            let run = try Shoal.run(["run", "--board", "sim", "--config", site, "--data-dir", dir.path])
            #expect(run.status == 3)
            #expect(run.stderr.contains("\(site):3: authenticator.rootCertificates: /nonexistent.pem: no such file"), "\(run.stderr)")
        }

        @Test("board check reports every error of the board and the site file at once")
        func everyErrorReported() throws {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            try "extends: base\nboard:\n  name: X\n  support: sometimes\nconsole:\n  baud: 7\n".write(toFile: dir.path + "/b.yaml", atomically: true, encoding: .utf8)
            try "group: g\nmesh: {maxConnectionCount: 99, bogus: 1}\n".write(toFile: dir.path + "/site.yaml", atomically: true, encoding: .utf8)
            let r = try Shoal.run(["board", "check", dir.path + "/b.yaml", "--config", dir.path + "/site.yaml"])
            #expect(r.status == 3)
            for needle in ["b.yaml:4: board.support:", "b.yaml:6: console.baud:", "site.yaml:2: mesh.maxConnectionCount:", "site.yaml:2: mesh.bogus: unknown key"] {
                #expect(r.stderr.contains(needle), "\(needle) in \(r.stderr)")
            }
        }

        @Test("an unknown board is exit 4 (not found) listing the known boards; a missing file says no such file", arguments: [
            (["board", "show", "nosuch"], "no board \"nosuch\" (known boards: base, cm4"),
            (["board", "show", "./nosuch.yaml"], "./nosuch.yaml: no such file"),
            (["board", "check", "/nonexistent/my-board.yaml"], "/nonexistent/my-board.yaml: no such file"),
            (["run", "--board", "nosuch", "--data-dir", "/nonexistent/shoal-data"], "no board \"nosuch\""),
        ])
        func unknownBoard(_ args: [String], _ needle: String) throws {
            let r = try Shoal.run(args + ["--board-dir", "/nonexistent"])
            #expect(r.status == 4, "\(r.stderr)")
            #expect(r.stderr.contains(needle), "\(r.stderr)")
            #expect(!r.stderr.contains("--board:0"))
        }

        @Test("board show --config shows the effective values and where each came from")
        func boardShowWithSite() throws {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let site = dir.path + "/site.yaml"
            try "group: g\nmesh:\n  maxConnectionCount: 5\nlog: {level: verbose}\n".write(toFile: site, atomically: true, encoding: .utf8)
            let j = try Shoal.json(Shoal.run(["board", "show", "sim", "--config", site, "--json", "--board-dir", "/nonexistent"])) as? [String: Any]
            #expect((j?["mesh"] as? [String: Any])?["maxConnectionCount"] as? Int == 5)
            #expect((j?["log"] as? [String: Any])?["level"] as? String == "verbose")
            let origins = j?["origins"] as? [String: String]
            #expect(origins?["mesh.maxConnectionCount"] == "\(site):3 (site)")
            #expect(origins?["log.level"] == "\(site):4 (site)")
            #expect(origins?["console.device"] == "<built-in>/sim.yaml:8")
            #expect(origins?["mesh.backoffMillis"] == "default")
            let text = try Shoal.run(["board", "show", "sim", "--config", site, "--board-dir", "/nonexistent"])
            #expect(text.status == 0)
            #expect(text.stdout.contains("mesh.maxConnectionCount") && text.stdout.contains("\(site):3 (site)"), "\(text.stdout)")
        }

        @Test("identity create, show, delete: self-signed and CA-signed, refusing to replace without --force")
        func identityCommands() throws {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let ids = dir.path + "/ids"
            #expect(try Shoal.run(["identity", "show", "--dir", ids]).status == 4)
            let created = try Shoal.run(["identity", "create", "--dir", ids, "--label", "gw", "--cn", "gw-7", "--days", "10", "--json"])
            #expect(created.status == 0, "\(created.stderr)")
            let info = try Shoal.json(created) as? [String: Any]
            #expect(info?["subject"] as? String == "CN=gw-7, O=Shoal")
            #expect(info?["extendedKeyUsages"] as? [String] == ["serverAuth", "clientAuth"])
            let again = try Shoal.run(["identity", "create", "--dir", ids, "--label", "gw"])
            #expect(again.status == 6 && again.stderr.contains("--force"))
            // --force re-issues the certificate over the same key: the peer id stays, the CN too.
            let firstID = try #require(info?["peerID"] as? String)
            let forced = try Shoal.json(Shoal.run(["identity", "create", "--dir", ids, "--label", "gw", "--days", "40", "--force", "--json"])) as? [String: Any]
            #expect(forced?["peerID"] as? String == firstID)
            #expect(forced?["subject"] as? String == "CN=gw-7, O=Shoal")
            #expect(forced?["notAfter"] as? String != info?["notAfter"] as? String)
            // --new-key makes a new key: a new peer id.
            let rekeyed = try Shoal.json(Shoal.run(["identity", "create", "--dir", ids, "--label", "gw", "--force", "--new-key", "--json"])) as? [String: Any]
            #expect((rekeyed?["peerID"] as? String).map { $0 != firstID && $0.count == 64 } == true)
            let attrs = try FileManager.default.attributesOfItem(atPath: ids + "/gw.key.pem")
            #expect((attrs[.posixPermissions] as? Int) == 0o600)

            // A CA made elsewhere (here: by openssl, when present) signs a gateway identity.
            if FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl") {
                let ca = dir.path + "/ca"
                for step in [["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", ca + ".key"],
                             ["req", "-x509", "-new", "-key", ca + ".key", "-subj", "/CN=Field CA", "-days", "30", "-out", ca + ".pem",
                              "-addext", "basicConstraints=critical,CA:TRUE"]] {
                    let p = Process()
                    p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
                    p.arguments = step
                    p.standardError = FileHandle.nullDevice
                    try p.run()
                    p.waitUntilExit()
                    #expect(p.terminationStatus == 0)
                }
                let signed = try Shoal.run(["identity", "create", "--dir", ids, "--label", "field", "--ca-key", ca + ".key", "--ca-cert", ca + ".pem", "--json"])
                #expect(signed.status == 0, "\(signed.stderr)")
                #expect((try Shoal.json(signed) as? [String: Any])?["issuer"] as? String == "CN=Field CA")
                let signedID = (try Shoal.json(signed) as? [String: Any])?["peerID"] as? String
                // --force alone would drop the CA: refused, the identity untouched; with the CA it
                // is re-issued over the key; --self-signed drops the CA on purpose.
                let dropped = try Shoal.run(["identity", "create", "--dir", ids, "--label", "field", "--force"])
                #expect(dropped.status == 6 && dropped.stderr.contains("is signed by CN=Field CA"), "\(dropped.stderr)")
                let still = try Shoal.json(Shoal.run(["identity", "show", "--dir", ids, "--label", "field", "--json"])) as? [String: Any]
                #expect(still?["issuer"] as? String == "CN=Field CA")
                let reissued = try Shoal.run(["identity", "create", "--dir", ids, "--label", "field", "--force", "--ca-key", ca + ".key", "--ca-cert", ca + ".pem", "--json"])
                let reissuedID = (try Shoal.json(reissued) as? [String: Any])?["peerID"] as? String
                #expect(reissued.status == 0 && reissuedID == signedID, "\(reissued.stderr)")
                let selfSigned = try Shoal.run(["identity", "create", "--dir", ids, "--label", "field", "--force", "--self-signed", "--json"])
                let selfIssuer = (try Shoal.json(selfSigned) as? [String: Any])?["issuer"] as? String
                #expect(selfSigned.status == 0 && selfIssuer != "CN=Field CA", "\(selfSigned.stderr)")
                let mismatch = try Shoal.run(["identity", "create", "--dir", ids, "--label", "x", "--ca-key", ids + "/gw.key.pem", "--ca-cert", ca + ".pem"])
                #expect(mismatch.status == 6 && mismatch.stderr.contains("does not belong"))
            }
            let garbage = dir.path + "/garbage.pem"
            try "not a key".write(toFile: garbage, atomically: true, encoding: .utf8)
            let bad = try Shoal.run(["identity", "create", "--dir", ids, "--label", "y", "--ca-key", garbage, "--ca-cert", garbage])
            #expect(bad.status == 6 && bad.stderr.contains("not a valid private key"))
            #expect(try Shoal.run(["identity", "delete", "--dir", ids, "--label", "gw"]).status == 0)
            #expect(try Shoal.run(["identity", "delete", "--dir", ids, "--label", "gw"]).status == 4)
        }

        @Test("client commands with no gateway running exit 5 and say how to fix it")
        func unreachable() throws {
            let r = try Shoal.run(["status", "--socket", "/tmp/shoal-no-such.sock"])
            #expect(r.status == 5)
            #expect(r.stderr.contains("cannot reach a running shoal"))
        }
    }

    @Suite("A running gateway", .serialized)
    struct GatewayTests {
        @Test("boots on the sim board, stores and serves documents, streams changes, and stops cleanly on SIGTERM")
        func endToEnd() throws {
            let gw = try RunningGateway()
            let status = try Shoal.json(gw.cli(["status", "--json"])) as? [String: Any]
            #expect(status?["state"] as? String == "running")
            #expect((status?["board"] as? [String: Any])?["id"] as? String == "sim")
            let tree = (status?["supervision"] as? [[String: Any]])?.compactMap { $0["path"] as? String }
            #expect(tree == ["root/store", "root/control", "root/identity", "root/replication", "root/status", "root/radios", "root/http", "root/update"])
            // The identity service made a self-signed identity on first boot; status shows its peer id.
            let peerID = try #require(status?["peerID"] as? String)
            #expect(peerID.count == 64)
            // No uplink: section: the uplink has nothing to show, and says where to read about it.
            let uplink = try gw.cli(["uplink", "status"])
            #expect(uplink.status == 0 && uplink.stdout == "no uplink: the site file has no uplink: section (see README, \"When one site is not enough\")\n", "\(uplink)")
            let uplinkJSON = try Shoal.json(gw.cli(["uplink", "status", "--json"])) as? [String: Any]
            #expect(uplinkJSON?["configured"] as? Bool == false && uplinkJSON?["uplink"] is NSNull, "\(uplinkJSON ?? [:])")
            let shown = try Shoal.json(Shoal.run(["identity", "show", "--json", "--board", "sim", "--data-dir", gw.dir.path])) as? [String: Any]
            #expect(shown?["peerID"] as? String == peerID)

            // With no flags, `identity show` asks the gateway found as `status` finds it ($SHOAL_SOCKET
            // here), not the stock board's /var/lib/shoal.
            let asked = try Shoal.run(["identity", "show", "--json"], env: ["SHOAL_SOCKET": gw.socket])
            #expect(asked.status == 0, "\(asked.stderr)")
            let askedJSON = try Shoal.json(asked) as? [String: Any]
            #expect(askedJSON?["peerID"] as? String == peerID)
            #expect(askedJSON?["directory"] as? String == gw.dir.path + "/identities")
            let askedText = try Shoal.run(["identity", "show"], env: ["SHOAL_SOCKET": gw.socket])
            #expect(askedText.stdout.contains("peer id      \(peerID)") && askedText.stdout.contains("running (\(gw.socket))"), "\(askedText.stdout)")
            // No gateway at the socket: it reads the files instead (and says nothing of the socket);
            // an explicit --socket that does not answer is an error.
            let fallback = try Shoal.run(["identity", "show"], env: ["SHOAL_SOCKET": gw.dir.path + "/none.sock"])
            #expect(fallback.status != 5 && !fallback.stderr.contains("cannot reach"), "\(fallback.stderr)")
            #expect(try Shoal.run(["identity", "show", "--socket", gw.dir.path + "/none.sock"]).status == 5)

            // changes --follow in the background sees writes as they commit.
            let follower = Process()
            follower.executableURL = URL(fileURLWithPath: Shoal.binary)
            follower.arguments = ["changes", "--follow", "--json", "--socket", gw.socket]
            let followOut = Pipe()
            follower.standardOutput = followOut
            try follower.run()

            let put = try gw.cli(["doc", "put", "sensors.readings", "r1", #"{"t": 21.5, "unit": "C"}"#, "--json"])
            #expect(put.status == 0)
            #expect((try Shoal.json(put) as? [String: Any])?["sequence"] as? Int == 1)
            #expect(try gw.cli(["doc", "put", "sensors.readings", "r2", "-"], stdin: #"{"t": 19}"#).status == 0)
            let got = try Shoal.json(gw.cli(["doc", "get", "sensors.readings", "r1"])) as? [String: Any]
            #expect(got?["unit"] as? String == "C")
            #expect(try gw.cli(["doc", "delete", "sensors.readings", "r1"]).status == 0)
            #expect(try gw.cli(["doc", "get", "sensors.readings", "r1"]).status == 4)
            let list = try gw.cli(["doc", "list", "sensors.readings", "--deleted"])
            #expect(list.stdout.contains("r1\tdeleted") && list.stdout.contains("r2\trev 1"))
            let changes = try Shoal.json(gw.cli(["changes", "--json"])) as? [String: Any]
            #expect((changes?["changes"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == ["r2", "r1"])

            // Bad input is refused with a clear error and changes nothing.
            let bad = try gw.cli(["doc", "put", "sensors.readings", "r3", "[1,2]"])
            #expect(bad.status == 6)
            let unknown = try gw.cli(["doc", "put", "nope", "r3", "{}"])
            #expect(unknown.status == 4 && unknown.stderr.contains("no collection _default.nope"))
            let longID = try gw.cli(["doc", "put", "sensors.readings", String(repeating: "x", count: 251), "{}"])
            #expect(longID.status == 6 && longID.stderr.contains("250"))

            // Log levels change at run time.
            #expect(try gw.cli(["log", "level", "store", "debug"]).status == 0)
            let levels = try Shoal.json(gw.cli(["log", "levels", "--json"])) as? [String: String]
            #expect(levels?["store"] == "debug")
            #expect(try gw.cli(["log", "level", "radio", "debug"]).status == 6)

            // The follower saw the three changes in order.
            let deadline = Date().addingTimeInterval(20)
            var seen = ""
            while Date() < deadline {
                seen += String(decoding: followOut.fileHandleForReading.availableData, as: UTF8.self)
                if seen.split(separator: "\n").count >= 3 { break }
            }
            follower.terminate()
            follower.waitUntilExit()
            let lines = seen.split(separator: "\n")
            #expect(lines.count >= 3)
            #expect(lines.first?.contains(#""sequence":1"#) == true)
            #expect(lines.dropFirst(2).first?.contains(#""deleted":true"#) == true)

            let end = gw.stop()
            #expect(end.status == 0)
            #expect(end.stdout.contains("shoal sim \(peerID.prefix(8)) running"))   // the console status line
            _ = 0
            #expect(end.stderr.contains("SIGTERM: stopping gracefully"))
            #expect(end.stderr.contains("stopped cleanly"))
        }

        @Test("an uplink whose hub does not answer: the gateway runs, and shoal uplink status says so and why")
        func uplinkHubAway() throws {
            let closed = try TCPListener(host: "127.0.0.1", port: 0)
            let port = closed.port
            closed.close()
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let site = dir.path + "/site.yaml"
            try "group: g\ncollections: [{name: sensors.state}]\nuplink:\n  servers: [nats://127.0.0.1:\(port)]\n"
                .write(toFile: site, atomically: true, encoding: .utf8)
            let gw = try RunningGateway(extraArgs: ["--config", site])
            var text = ""
            let failed = eventuallyBlocking(within: 60) {
                text = (try? gw.cli(["uplink", "status"]).stdout) ?? ""
                return text.contains("last error")
            }
            #expect(failed, "\(text)")
            #expect(text.hasPrefix("uplink  nats://127.0.0.1:\(port)  NATS JetStream\n"), "\(text)")
            #expect(text.contains("  last error     connect to nats://127.0.0.1:\(port): No server available for connection — nothing answers at"), "\(text)")
            #expect(text.contains("  last success   never\n") && text.contains("_sensors_2Estate  push on, lag 0 (0 s), checkpoint seq 0  pull on"), "\(text)")
            let json = try Shoal.json(gw.cli(["uplink", "status", "--json"])) as? [String: Any]
            #expect(json?["configured"] as? Bool == true && (json?["uplink"] as? [String: Any])?["connects"] as? Int == 0, "\(json ?? [:])")
            #expect(gw.stop().status == 0)
        }

        @Test("garbage on the control socket closes that connection only; the gateway keeps serving")
        func garbageOnControlSocket() throws {
            let gw = try RunningGateway()
            for payload: [UInt8] in [[0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3], [0, 0, 0, 3, 0x7B, 0x7B, 0x7B], [0, 0, 0, 0], Array("hello\n".utf8), [0, 0, 0, 2, 0x5B, 0x5D]] {
                let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
                var addr = sockaddr_un()
                addr.sun_family = sa_family_t(AF_UNIX)
                withUnsafeMutableBytes(of: &addr.sun_path) { raw in for (i, b) in gw.socket.utf8.enumerated() { raw[i] = b } }
                let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
                #expect(rc == 0)
                _ = payload.withUnsafeBytes { write(fd, $0.baseAddress, payload.count) }
                shutdown(fd, Int32(SHUT_WR))
                var buf = [UInt8](repeating: 0, count: 4096)
                _ = read(fd, &buf, buf.count)
                close(fd)
            }
            #expect(try gw.cli(["status"]).status == 0)
            #expect(try gw.cli(["doc", "put", "_default", "still", "{}"]).status == 0)
            let end = gw.stop()
            #expect(end.status == 0)
        }

        @Test("a second gateway on the same control socket refuses to start instead of sharing the store")
        func secondGatewayRefused() throws {
            let gw = try RunningGateway()
            let second = try Shoal.run(["run", "--board", "sim", "--data-dir", gw.dir.path + "/other", "--socket", gw.socket], timeout: 30)
            #expect(second.status == 1)
            #expect(second.stderr.contains("another shoal is already serving"))
            #expect(try gw.cli(["status"]).status == 0)
            _ = gw.stop()
        }

        @Test("under systemd it sends READY=1 once up, feeds the watchdog while healthy, and STOPPING=1 on SIGTERM")
        func systemdNotify() throws {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let path = dir.path + "/notify.sock"
            let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            defer { close(fd) }
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &addr.sun_path) { raw in for (i, b) in path.utf8.enumerated() { raw[i] = b } }
            let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
            #expect(rc == 0)
            var tv = timeval(tv_sec: 0, tv_usec: 200_000)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))

            let gw = try RunningGateway(env: ["NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"])
            var messages: [String] = []
            let deadline = Date().addingTimeInterval(20)
            func drain() {
                var buf = [UInt8](repeating: 0, count: 4096)
                let n = recv(fd, &buf, buf.count, 0)
                if n > 0 { messages.append(String(decoding: buf.prefix(n), as: UTF8.self)) }
            }
            while Date() < deadline, messages.filter({ $0 == "WATCHDOG=1" }).count < 3 { drain() }
            let end = gw.stop()
            for _ in 0..<10 { drain() }
            #expect(end.status == 0)
            #expect(messages.first?.hasPrefix("READY=1\nSTATUS=running") == true, "\(messages)")
            #expect(messages.filter { $0 == "WATCHDOG=1" }.count >= 3)
            #expect(messages.contains("STOPPING=1"))
        }
    }
}
