import Foundation
import ShoalLinux
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

        /// A sim gateway whose HTTP server listens on a free loopback port.
        struct Site {
            let dir: TemporaryDirectory
            let gateway: RunningGateway
            let base: String
            var unixSocket: String { gateway.dir.path + "/http.sock" }

            init() throws {
                dir = TemporaryDirectory(prefix: "shoal-http")
                let listener = try TCPListener(port: 0)
                let port = listener.port
                listener.close()
                base = "http://127.0.0.1:\(port)"
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
                      listen: ["127.0.0.1:\(port)"]

                    """.write(toFile: site, atomically: true, encoding: .utf8)
                gateway = try RunningGateway(extraArgs: ["--config", site])
                try waitForHTTP()
            }

            /// The control socket is up when RunningGateway returns; the HTTP part may follow it.
            func waitForHTTP() throws {
                let deadline = Date().addingTimeInterval(15)
                while Date() < deadline {
                    let r = try curl(["-s", "-o", "/dev/null", "-w", "%{http_code}", "\(base)/v1/health"])
                    if r.stdout == "200" { return }
                    Thread.sleep(forTimeInterval: 0.05)
                }
                Issue.record("the gateway's HTTP server did not answer at \(base) within 15 s")
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
