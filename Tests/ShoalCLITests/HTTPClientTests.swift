import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The local HTTP API against a real `shoal run`, through the clients people use: curl,
    /// Python's requests with sseclient-py, schemathesis, and README's Python example as README has
    /// it. The clients are scripts in Tests/HTTP/ (each exits non-zero and prints what failed);
    /// `make deps` installs curl and the PyPI packages.
    @Suite("HTTP API with real clients", .serialized)
    struct HTTPClientTests {
        static let repo: String = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

        /// A sim gateway whose HTTP server listens on a loopback port the kernel picks (`:0`),
        /// read back from `shoal status --json` (no window in which another process takes it).
        struct Site {
            let dir: TemporaryDirectory
            let gateway: RunningGateway
            let base: String
            var unixSocket: String { gateway.dir.path + "/http.sock" }

            init() throws {
                dir = TemporaryDirectory(prefix: "shoal-http")
                let site = dir.path + "/site.yaml"
                try """
                    group: shoal.http-test
                    identity:
                      label: shoal
                    collections:
                      - name: _default._default
                      - name: sensors.readings
                      - name: test.curl
                      - name: test.sse
                    http:
                      listen: ["127.0.0.1:0"]

                    """.write(toFile: site, atomically: true, encoding: .utf8)
                gateway = try RunningGateway(extraArgs: ["--config", site])
                base = "http://" + (try Site.listening(gateway) ?? "127.0.0.1:1")
            }

            /// The TCP address status lists once the HTTP part is up (nil after 20 s, recorded).
            static func listening(_ gateway: RunningGateway) throws -> String? {
                let deadline = Date().addingTimeInterval(20)
                while Date() < deadline {
                    let status = try? Shoal.json(gateway.cli(["status", "--json"])) as? [String: Any]
                    if let tcp = (status?["http"] as? [String])?.first(where: { $0.hasPrefix("127.0.0.1:") && !$0.hasSuffix(":0") }) {
                        return tcp
                    }
                    Thread.sleep(forTimeInterval: 0.05)
                }
                Issue.record("the gateway's status listed no HTTP address within 20 s")
                return nil
            }

            func curl(_ args: [String]) throws -> Shoal.Result {
                try Shoal.run(["--max-time", "20"] + args, timeout: 30, executable: "/usr/bin/curl")
            }

            func stop() {
                _ = gateway.stop()
                dir.remove()
            }
        }

        /// Runs a client script; it passes when it exits 0. Its output goes to the test log either way.
        static func client(_ args: [String], env: [String: String] = [:], timeout: Double) throws -> Shoal.Result {
            let r = try Shoal.run(args, cwd: repo, env: env, timeout: timeout, executable: "/usr/bin/env")
            print(r.stdout + r.stderr)
            return r
        }

        @Test("curl: a document's life with ETag and If-Match (412 when stale), bulk NDJSON, list paging, changes normal and long-polled, the Unix socket")
        func curlClient() throws {
            let site = try Site()
            defer { site.stop() }
            let r = try Self.client(["bash", "Tests/HTTP/curl_api.sh", site.base, site.unixSocket, "test.curl"], timeout: 120)
            #expect(r.status == 0, "Tests/HTTP/curl_api.sh: \(r.stdout.split(separator: "\n").last(where: { $0.hasPrefix("FAIL") }) ?? "exit \(r.status)")")
            #expect(r.stdout.contains("all curl checks passed"))
        }

        @Test("requests + sseclient-py: a write appears on the SSE change feed, and Last-Event-ID resumes with exactly the events after it")
        func sseClient() throws {
            let site = try Site()
            defer { site.stop() }
            let r = try Self.client(["python3", "Tests/HTTP/sse_resume.py", site.base, "test.sse"], timeout: 120)
            #expect(r.status == 0, "Tests/HTTP/sse_resume.py: \(r.stdout.split(separator: "\n").last(where: { $0.hasPrefix("FAIL") }) ?? "exit \(r.status)")")
            #expect(r.stdout.contains("all SSE checks passed"))
        }

        @Test("schemathesis against /v1/openapi.json: no server error, and every status, content type and body as the document says")
        func schemathesis() throws {
            let site = try Site()
            defer { site.stop() }
            let served = try site.curl(["-sS", "\(site.base)/v1/openapi.json"])
            let file = try String(contentsOfFile: Self.repo + "/docs/openapi.json", encoding: .utf8)
            #expect(served.stdout == file, "GET /v1/openapi.json is not docs/openapi.json")
            let r = try Self.client(["python3", "Tests/HTTP/schemathesis_run.py", site.base, "40"], timeout: 300)
            #expect(r.status == 0, "Tests/HTTP/schemathesis_run.py failed (its output is above)")
            #expect(r.stdout.contains("schemathesis passed"))
            let health = try site.curl(["-s", "-o", "/dev/null", "-w", "%{http_code}", "\(site.base)/v1/health"])
            #expect(health.stdout == "200", "the gateway is not healthy after the run: \(health.stdout)")
        }

        /// README's curl examples that cannot run here, and why. Each must still be in README.
        static let curlSkipped: [String: String] = [
            "192.168.1.20": "a non-loopback address with the token: this test's gateway listens on loopback only",
        ]

        @Test("README's curl examples run against a gateway (its port and socket in place of the defaults) and answer no error")
        func readmeCurlExamples() throws {
            let section = Readme.section("## The HTTP API", in: try Readme.text())
            let commands = Self.shellCommands(Readme.firstBlock("sh", in: section))
            try #require(commands.count >= 10, "README.md: no ```sh block of curl examples under \"## The HTTP API\"")
            let site = try Site()
            defer { site.stop() }
            var skipsSeen = Set<String>()
            for command in commands {
                if let skip = Self.curlSkipped.keys.first(where: { command.contains($0) }) {
                    skipsSeen.insert(skip)
                    print("skipped  \(command): \(Self.curlSkipped[skip]!)")
                    continue
                }
                let streams = command.contains("curl -N")
                let local = command
                    .replacingOccurrences(of: "localhost:8470", with: site.base.replacingOccurrences(of: "http://", with: ""))
                    .replacingOccurrences(of: "/var/lib/shoal/http.sock", with: site.unixSocket)
                    .replacingOccurrences(of: "curl -N", with: "curl -N --max-time 2")
                let r = try Shoal.run(["-o", "pipefail", "-c", local], cwd: site.dir.path, timeout: 30, executable: "/bin/bash")
                let ok = r.status == 0 || (streams && r.status == 28)  // 28: curl's --max-time ended the stream
                #expect(ok, "README: `\(command)` exited \(r.status): \(r.stderr)")
                // An error answer is a line `{"error":"…","reason":"…"}` (a status answer has "error" fields inside).
                let refused = r.stdout.split(separator: "\n").contains { $0.hasPrefix("{\"error\":\"") || $0.hasPrefix("HTTP/1.1 4") || $0.hasPrefix("HTTP/1.1 5") }
                #expect(!refused, "README: `\(command)` answered an error: \(r.stdout.prefix(600))")
                #expect(!r.stdout.isEmpty, "README: `\(command)` answered nothing")
                print("ran      \(command)")
            }
            #expect(skipsSeen == Set(Self.curlSkipped.keys), "the test skips examples README no longer has: \(Set(Self.curlSkipped.keys).subtracting(skipsSeen))")
        }

        /// A ```sh block's commands: comments dropped, a line ending in `\` or `|` joined with the next.
        static func shellCommands(_ block: [String]) -> [String] {
            var commands: [String] = []
            var pending = ""
            for line in block {
                var code = Readme.splitComment(line).code
                guard !code.isEmpty else { continue }
                if code.hasSuffix("\\") {
                    code.removeLast()
                    pending += code
                    continue
                }
                pending += code
                if code.hasSuffix("|") { pending += " "; continue }
                commands.append(pending)
                pending = ""
            }
            return commands
        }

        @Test("README's Python example (requests + SSE) runs as README has it")
        func readmePythonExample() throws {
            let section = Readme.section("## The HTTP API", in: try Readme.text())
            let example = Readme.firstBlock("python", in: section)
            try #require(!example.isEmpty, "README.md: no ```python block under \"## The HTTP API\"")
            #expect(example.count <= 20, "README's Python example has \(example.count) lines; the issue promises at most 20")
            let site = try Site()
            defer { site.stop() }
            let script = site.dir.path + "/example.py"
            try (example.joined(separator: "\n") + "\n").write(toFile: script, atomically: true, encoding: .utf8)
            let r = try Self.client(["python3", script], env: ["SHOAL_URL": site.base], timeout: 60)
            #expect(r.status == 0, "README's Python example exited \(r.status): \(r.stderr)")
            let lines = r.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first == "meter-1 at revision 2", "\(lines)")
            #expect(lines.count == 2 && lines[1].hasPrefix("change ") && lines[1].hasSuffix(" sensors.readings meter-2 revision 1"), "\(lines)")
        }
    }
}
