import Foundation
import ShoalTesting
import ShoalThreads
import Testing

extension ProcessSuites {
    /// README's promises about the command line, checked against the binary: every example of
    /// "Running a gateway" runs against a sim gateway, the exit-code table matches what commands
    /// exit with, and `shoal run`'s options are the ones README lists. README is read at test time.
    @Suite("README matches the binary", .serialized)
    struct ReadmeTests {
        /// Examples a test cannot run, and why. Each must still be in README (a stale entry fails).
        static let skipped: [String: String] = [
            "make release": "builds the binary; this test runs the one the test build made",
            "sudo dist/shoal run --board auto": "the gateway itself on real hardware; the test runs `shoal run --board sim` in its place",
        ]

        /// Examples whose documented outcome is not exit 0, and why. Each must still be in README.
        static let expected: [String: (codes: Set<Int32>, why: String)] = [
            "shoal peer 4eb7dd08": ([4], "README's peer id is an example: a lone gateway knows no such peer (4: not found)"),
            "shoal doctor": ([0, 1], "exit 1 when a check fails (README); this machine need not have the board's radios"),
        ]

        /// A sim gateway whose data directory is the sim board's own (`.shoal/sim`) under a
        /// temporary directory; client commands run from that directory find its socket as README
        /// says (`.shoal/sim/control.sock`), unless a gateway of this machine answers at
        /// /run/shoal/control.sock, which comes first: then SHOAL_SOCKET points at ours.
        struct Site {
            let cwd: TemporaryDirectory
            let gateway: RunningGateway
            let env: [String: String]

            init() throws {
                cwd = TemporaryDirectory(prefix: "shoal-readme")
                gateway = try RunningGateway(dataDir: cwd.path + "/.shoal/sim")
                env = FileManager.default.fileExists(atPath: "/run/shoal/control.sock") ? ["SHOAL_SOCKET": gateway.socket] : [:]
            }

            func shoal(_ args: [String], timeout: Double = 120) throws -> Shoal.Result {
                try Shoal.run(args, cwd: cwd.path, env: env, timeout: timeout)
            }

            func stop() {
                _ = gateway.stop()
                cwd.remove()
            }
        }

        @Test("every example in README's \"Running a gateway\" block runs against a sim gateway and exits as documented")
        func runningAGatewayExamples() throws {
            let section = Readme.section("## Running a gateway", in: try Readme.text())
            let examples = Readme.examples(Readme.firstBlock("sh", in: section))
            try #require(examples.count >= 10, "README.md: no ```sh block of examples under \"## Running a gateway\" (\(Readme.path))")
            let site = try Site()
            defer { site.stop() }
            try makeFixtures(in: site.cwd.path)

            var seen = Set<String>()
            var report: [String] = []
            for example in examples {
                for words in example.commands {
                    let command = words.joined(separator: " ")
                    seen.insert(command)
                    if let why = Self.skipped[command] {
                        report.append("skipped  \(command): \(why)")
                        continue
                    }
                    guard words.first == "shoal" else {
                        Issue.record("README: \"\(example.line)\": \(command) is not a shoal command and not in the test's skip list")
                        continue
                    }
                    let outcome = try run(Array(words.dropFirst()), command: command, site: site)
                    report.append(outcome)
                }
            }
            for stale in Set(Self.skipped.keys).union(Self.expected.keys) where !seen.contains(stale) {
                Issue.record("the test lists \"\(stale)\", which README's block no longer has: drop it from the list")
            }
            print("README examples:\n" + report.joined(separator: "\n"))
        }

        /// Runs one example; records an issue when it does not exit as documented. Returns a line
        /// for the report.
        func run(_ args: [String], command: String, site: Site) throws -> String {
            if args.contains("--follow") { return try follow(args, command: command, site: site) }
            if args.starts(with: ["identity", "create"]) {
                // Never re-issue an identity outside the test's gateway: only where `identity show`
                // finds the running gateway's own.
                let shown = try site.shoal(["identity", "show", "--json"])
                let directory = (try? Shoal.json(shown) as? [String: Any])?["directory"] as? String
                guard shown.status == 0, let directory, directory.hasPrefix(site.cwd.path) else {
                    Issue.record("\(command): not run, because `shoal identity show` does not find the running gateway's identity (exit \(shown.status), \(directory ?? shown.stderr.trimmingCharacters(in: .whitespacesAndNewlines))): it would re-issue another one")
                    return "not run  \(command)"
                }
            }
            var allowed: Set<Int32> = Self.expected[command]?.codes ?? [0]
            var why = Self.expected[command]?.why
            if args.contains("--svg") && !Self.onPath("dot") {
                allowed = [1]
                why = "Graphviz `dot` is not installed: exit 1 saying so"
            }
            let r = try site.shoal(args)
            #expect(allowed.contains(r.status), "README example `\(command)` exited \(r.status), documented \(allowed.sorted()): \(r.stderr)\(r.stdout.prefix(300))")
            if args.contains("--svg") && !Self.onPath("dot") { #expect(r.stderr.contains("Graphviz"), "\(command): \(r.stderr)") }
            // A list of live documents is empty after the block's delete; everything else prints.
            if r.status == 0 && !(args.starts(with: ["doc", "list"]) && !args.contains("--deleted")) {
                #expect(!r.stdout.isEmpty, "README example `\(command)` printed nothing")
            }
            return "exit \(r.status)   \(command)" + (why.map { " (\($0))" } ?? "")
        }

        /// A `--follow` example: it must print what it follows and keep running, until stopped.
        func follow(_ args: [String], command: String, site: Site) throws -> String {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Shoal.binary)
            p.arguments = args
            p.currentDirectoryURL = URL(fileURLWithPath: site.cwd.path)
            var environment = ProcessInfo.processInfo.environment
            environment.removeValue(forKey: "SHOAL_SOCKET")
            for (k, v) in site.env { environment[k] = v }
            p.environment = environment
            let out = Pipe(), err = Pipe()
            p.standardOutput = out
            p.standardError = err
            try p.run()
            let printed = Locked("")
            out.fileHandleForReading.readabilityHandler = { handle in
                let data = handle.availableData
                printed.withLock { $0 += String(decoding: data, as: UTF8.self) }
            }
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline && p.isRunning && printed.withLock({ !$0.contains("\n") }) {
                Thread.sleep(forTimeInterval: 0.02)
            }
            let running = p.isRunning
            if running { p.terminate() }
            p.waitUntilExit()
            out.fileHandleForReading.readabilityHandler = nil
            let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(running, "README example `\(command)` exited \(p.terminationStatus) instead of following: \(errors)")
            #expect(printed.withLock { $0.contains("\n") }, "README example `\(command)` printed nothing in 20 s")
            return "follows  \(command)"
        }

        /// What README's examples may name in the current directory: a board file, a site file and a CA.
        func makeFixtures(in dir: String) throws {
            try "extends: pi4b\nboard:\n  name: My Gateway Rev B\n".write(toFile: dir + "/my-board.yaml", atomically: true, encoding: .utf8)
            try "group: com.example.gateways\ncollections:\n  - name: sensors.readings\n".write(toFile: dir + "/site.yaml", atomically: true, encoding: .utf8)
            guard Self.onPath("openssl") else { return }   // then `identity create --ca-key` fails, saying why
            for step in [["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"],
                         ["req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=Site CA", "-days", "30", "-out", "ca.pem",
                          "-addext", "basicConstraints=critical,CA:TRUE"]] {
                let p = Process()
                p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                p.arguments = ["openssl"] + step
                p.currentDirectoryURL = URL(fileURLWithPath: dir)
                p.standardError = FileHandle.nullDevice
                try p.run()
                p.waitUntilExit()
                try #require(p.terminationStatus == 0, "openssl \(step.joined(separator: " ")) failed")
            }
        }

        static func onPath(_ tool: String) -> Bool {
            (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
                .contains { FileManager.default.isExecutableFile(atPath: "\($0)/\(tool)") }
        }

        /// Commands that provoke each code of README's table; a code no test can provoke is named
        /// here with the reason.
        static let unprovoked: [Int32: String] = [
            1: "the root supervisor giving up, or an unexpected error: nothing the command line can ask for on a healthy gateway",
            75: "installing a release over the mesh: ReleaseProcessTests exits with it (twice per gateway) under its supervisor loop",
        ]

        @Test("README's exit-code table is the binary's: --help lists the same codes and each one a test can provoke is exited with")
        func exitCodeTable() throws {
            let rows = Readme.section("### Exit codes", in: try Readme.text()).compactMap { line -> (Int32, String)? in
                let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count >= 2, let code = Int32(cells[0]) else { return nil }
                return (code, cells[1])
            }
            try #require(rows.count >= 5, "README.md: no exit-code table under \"### Exit codes\"")
            let table = Dictionary(rows, uniquingKeysWith: { a, _ in a })

            // `shoal --help` lists the same codes.
            let help = try Shoal.run(["--help"]).stdout
            let helpCodes = Set(help.split(separator: "\n").drop(while: { !$0.hasPrefix("Exit codes") }).dropFirst()
                .compactMap { Int32($0.trimmingCharacters(in: .whitespaces).prefix(while: \.isNumber)) })
            #expect(helpCodes == Set(table.keys), "README's exit codes \(table.keys.sorted()) vs `shoal --help`'s \(helpCodes.sorted())")

            let site = try Site()
            defer { site.stop() }
            try "extends: base\nboard:\n  name: X\n  colour: red\n".write(toFile: site.cwd.path + "/bad.yaml", atomically: true, encoding: .utf8)
            let provocations: [Int32: [[String]]] = [
                0: [["version"]],
                2: [["frobnicate"], ["status", "--bogus"], ["doc", "put", "x"]],
                3: [["board", "check", "bad.yaml"]],
                4: [["doc", "get", "sensors.readings", "no-such-document"], ["doc", "list", "no.such"], ["board", "show", "no-such-board"]],
                5: [["status", "--socket", site.cwd.path + "/nobody.sock"]],
                6: [["doc", "put", "sensors.readings", "x", "not json"]],
                // A second gateway on the running one's data directory (the sim board's .shoal/sim).
                7: [["run", "--board", "sim"]],
            ]
            for (code, meaning) in table.sorted(by: { $0.key < $1.key }) {
                if let why = Self.unprovoked[code] { print("exit \(code) (\(meaning)): not provoked: \(why)"); continue }
                let commands = try #require(provocations[code], "README's exit code \(code) (\(meaning)): the test has no command that provokes it; add one")
                for args in commands {
                    let r = try site.shoal(args)
                    #expect(r.status == code, "`shoal \(args.joined(separator: " "))` exited \(r.status); README: \(code) is \(meaning) (\(r.stderr.trimmingCharacters(in: .whitespacesAndNewlines)))")
                    if r.status != 0 { #expect(!r.stderr.isEmpty, "`shoal \(args.joined(separator: " "))` exited \(r.status) and said nothing") }
                }
            }
        }

        @Test("`shoal run` options in README are the ones `shoal run --help` lists")
        func runOptions() throws {
            let text = try Readme.text()
            let paragraph = Readme.section("## Running a gateway", in: text)
                .drop(while: { !$0.hasPrefix("`shoal run` options:") })
                .prefix(while: { !$0.isEmpty }).joined(separator: " ")
            try #require(!paragraph.isEmpty, "README.md: no \"`shoal run` options:\" paragraph under \"## Running a gateway\"")
            let help = try Shoal.run(["run", "--help"]).stdout
            func options(_ s: String) -> Set<String> {
                Set(Readme.shellWords(s.map { $0.isLetter || $0 == "-" ? $0 : " " }.reduce(into: "") { $0.append($1) })
                    .filter { $0.hasPrefix("--") && $0.count > 2 })
            }
            let usage = help.split(separator: "\n").prefix(while: { !$0.isEmpty }).joined(separator: " ")
            #expect(options(paragraph) == options(usage), "README's `shoal run` options \(options(paragraph).sorted()) vs `shoal run --help`'s \(options(usage).sorted())")
            // Every exit status `shoal run` itself returns is in its help (4: an unknown --board).
            let exits = help.split(separator: "\n").drop { !$0.contains("Exit:") }.joined(separator: " ")
            for code in [0, 1, 3, 4, 7] {
                #expect(exits.contains(" \(code) "), "`shoal run --help` does not name exit \(code): \(exits)")
            }
        }
    }
}
