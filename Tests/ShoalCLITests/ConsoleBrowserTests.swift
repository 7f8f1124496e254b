import Foundation
import ShoalTesting
import Testing

/// Where Debian's headless-capable Chromium is, if installed.
private let consoleChromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }

extension ProcessSuites {
    /// The web console (`GET /`) in real headless Chromium against a 3-gateway lab on loopback:
    /// Tests/HTTP/console_browser.py drives the browser over the DevTools protocol, reads the DOM
    /// after live updates and saves screenshots in .build/artifacts/console-*.png.
    @Suite("Web console in headless Chromium", .serialized,
           .enabled(if: consoleChromium != nil, "needs Debian's chromium (make deps installs it)"))
    struct ConsoleBrowserTests {
        /// The package's root (the script and the artifacts are under it), from this file's path.
        static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

        @Test("the console shows the lab's linked peers in its mesh picture, a document written with the CLI reaches the browser's DOM live (figure printed), and edit, a stale edit, delete and create work from the page")
        func consoleInChromium() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let names = ["a", "b", "c"]
            var ids: [String: String] = [:]
            for n in names { ids[n] = try ReplicationProcessTests.peerID(base.path + "/" + n) }
            let port = 20_000 + Int((getpid() + 11) % 20_000)
            let ports = ["a": port, "b": port + 1, "c": port + 2]
            // a dials b and c (so both are its own links); all three trust each other. a's API on a
            // port the kernel picks; b's and c's on their Unix sockets only.
            func site(_ n: String) throws -> String {
                let others = names.filter { $0 != n }
                var replication = ["listen: 127.0.0.1:\(ports[n]!)"]
                if n == "a" { replication.append("peers: [\(others.map { "127.0.0.1:\(ports[$0]!)" }.joined(separator: ", "))]") }
                let path = try ReplicationProcessTests.writeSite(in: base.path, n, group: "test.console", allow: others.map { ids[$0]! },
                                                                 replication: replication)
                let http = n == "a" ? "http:\n  listen: [\"127.0.0.1:0\"]\n" : "http:\n  listen: []\n"
                try (try String(contentsOfFile: path, encoding: .utf8) + http).write(toFile: path, atomically: true, encoding: .utf8)
                return path
            }
            let b = try RunningGateway(dataDir: base.path + "/b", extraArgs: ["--config", try site("b")])
            let c = try RunningGateway(dataDir: base.path + "/c", extraArgs: ["--config", try site("c")])
            let a = try RunningGateway(dataDir: base.path + "/a", extraArgs: ["--config", try site("a")])
            defer { _ = c.stop(); _ = b.stop(); _ = a.stop() }
            #expect(try a.cli(["doc", "put", "sensors.readings", "before-the-browser", #"{"v":1}"#]).status == 0)

            var address = ""
            #expect(eventuallyBlocking(within: 20) {
                address = ((try? HTTPProcessTests.addresses(a)) ?? []).first { $0.hasPrefix("127.0.0.1:") } ?? ""
                return !address.isEmpty
            }, "a's HTTP address never showed in its status")
            // Both links up before the page loads: the picture must show them.
            var linked: [String] = []
            #expect(eventuallyBlocking(within: 45) {
                let peers = (try? Shoal.json(a.cli(["peers", "--json"]))) as? [[String: Any]] ?? []
                linked = peers.filter { !($0["connectedOn"] is NSNull) && $0["connectedOn"] != nil }.compactMap { $0["peer"] as? String }
                return Set(linked) == Set([ids["b"]!, ids["c"]!])
            }, "a linked only with \(linked)")

            let artifacts = Self.root + "/.build/artifacts"
            let run = try Shoal.run([Self.root + "/Tests/HTTP/console_browser.py", "--url", "http://\(address)", "--shoal", Shoal.binary,
                                     "--socket", a.socket, "--collection", "sensors.readings", "--me", ids["a"]!,
                                     "--peers", "\(ids["b"]!),\(ids["c"]!)", "--writes", "5", "--bound-ms", "5000", "--artifacts", artifacts],
                                    cwd: Self.root, timeout: 240, executable: "/usr/bin/python3")
            print(run.stdout)
            if !run.stderr.isEmpty { print(run.stderr) }
            #expect(run.status == 0, "console_browser.py failed:\n\(run.stdout.suffix(3000))\n\(run.stderr.suffix(2000))")
            let result = run.stdout.split(separator: "\n").last { $0.hasPrefix("RESULT ") }
            let parsed = try #require(result.flatMap { try? JSONSerialization.jsonObject(with: Data($0.dropFirst(7).utf8)) as? [String: Any] },
                                      "no RESULT line:\n\(run.stdout.suffix(2000))")
            #expect((parsed["failures"] as? [Any])?.isEmpty == true, "\(parsed["failures"] ?? "?")")
            #expect((parsed["latencyMs"] as? [Any])?.count == 5)
            for shot in ["console-desktop.png", "console-mesh.png", "console-phone.png"] {
                #expect(FileManager.default.fileExists(atPath: artifacts + "/" + shot), "no \(shot) in \(artifacts)")
            }
        }
    }
}
