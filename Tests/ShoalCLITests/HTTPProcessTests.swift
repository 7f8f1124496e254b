import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The local API of a real `shoal run`, through curl: where it listens, and that what is written
    /// over HTTP on one gateway reaches another gateway's change feed over SSE.
    @Suite("HTTP API processes", .serialized)
    struct HTTPProcessTests {
        static let curl = "/usr/bin/curl"

        /// The gateway's HTTP addresses as `shoal status --json` lists them.
        static func addresses(_ g: RunningGateway) throws -> [String] {
            let status = try Shoal.json(g.cli(["status", "--json"])) as? [String: Any]
            return status?["http"] as? [String] ?? []
        }

        @Test("the API listens on the port the kernel gives for :0 and on the Unix socket; status shows both; shoal http token prints the 0600 token file")
        func listening() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let site = base.path + "/site.yaml"
            try "group: test.http\ncollections:\n  - name: sensors.readings\nhttp:\n  listen: [\"127.0.0.1:0\"]\n".write(toFile: site, atomically: true, encoding: .utf8)
            let g = try RunningGateway(dataDir: base.path + "/gw", extraArgs: ["--config", site])
            var shown: [String] = []
            #expect(eventuallyBlocking(within: 20) { shown = (try? Self.addresses(g)) ?? []; return shown.count == 2 }, "status http: \(shown)")
            let tcp = try #require(shown.first { $0.hasPrefix("127.0.0.1:") })
            #expect(!tcp.hasSuffix(":0"))
            #expect(shown.contains("unix:\(g.dir.path)/http.sock"))
            #expect(try g.cli(["status"]).stdout.contains("http        \(tcp), unix:") || g.cli(["status"]).stdout.contains("http        unix:"))
            let overTCP = try Shoal.run(["-s", "http://\(tcp)/v1/status"], executable: Self.curl)
            let status = try JSONSerialization.jsonObject(with: Data(overTCP.stdout.utf8)) as? [String: Any]
            #expect(status?["state"] as? String == "running", "\(overTCP)")
            let overSocket = try Shoal.run(["-s", "--unix-socket", g.dir.path + "/http.sock", "-X", "PUT", "-d", #"{"v":1}"#,
                                            "http://localhost/v1/collections/sensors.readings/docs/s1"], executable: Self.curl)
            #expect(overSocket.stdout.contains(#""revision":1"#), "\(overSocket)")
            #expect(try g.cli(["doc", "get", "sensors.readings", "s1"]).stdout.contains(#""v": 1"#) || g.cli(["doc", "get", "sensors.readings", "s1", "--json"]).stdout.contains(#""v":1"#))
            // curl at the control socket by mistake: told, in HTTP, where the API is.
            let wrong = try Shoal.run(["-s", "-w", "\n%{http_code}", "--unix-socket", g.socket, "http://localhost/v1/status"], executable: Self.curl)
            #expect(wrong.stdout.hasSuffix("400") && wrong.stdout.contains("the HTTP API is on \(g.dir.path)/http.sock"), "\(wrong)")
            #expect(try g.cli(["status"]).status == 0)
            let token = try Shoal.run(["http", "token", "--config", site, "--board", "sim", "--data-dir", g.dir.path])
            #expect(token.status == 0 && token.stdout.count == 65, "\(token)")
            let attributes = try FileManager.default.attributesOfItem(atPath: g.dir.path + "/http.token")
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
            #expect(try String(contentsOfFile: g.dir.path + "/http.token", encoding: .utf8) == token.stdout)
            let end = g.stop()
            #expect(end.status == 0, "\(end.stderr.suffix(1500))")
            #expect(!FileManager.default.fileExists(atPath: base.path + "/gw/http.sock"))
            // Before any start, there is no token yet: a clear not-found.
            let none = try Shoal.run(["http", "token", "--config", site, "--board", "sim", "--data-dir", base.path + "/never"])
            #expect(none.status == 4 && none.stderr.contains("first start"), "\(none)")
        }

        @Test("a document PUT over HTTP on one gateway arrives on the other gateway's SSE change feed, with its body")
        func putReplicatesToSSE() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let aDir = base.path + "/a", bDir = base.path + "/b"
            let aID = try ReplicationProcessTests.peerID(aDir), bID = try ReplicationProcessTests.peerID(bDir)
            let port = 20_000 + Int(getpid() % 20_000) + 7
            let bSite = try ReplicationProcessTests.writeSite(in: base.path, "b", group: "test.http", allow: [aID], replication: ["listen: 127.0.0.1:\(port)"])
            let aSite = try ReplicationProcessTests.writeSite(in: base.path, "a", group: "test.http", allow: [bID], replication: ["peers: [127.0.0.1:\(port)]"])
            for s in [aSite, bSite] { try (try String(contentsOfFile: s, encoding: .utf8) + "http:\n  listen: []\n").write(toFile: s, atomically: true, encoding: .utf8) }
            let b = try RunningGateway(dataDir: bDir, extraArgs: ["--config", bSite])
            let a = try RunningGateway(dataDir: aDir, extraArgs: ["--config", aSite])
            // b's change feed, from now on, read by curl -N as it streams.
            let sse = Process()
            sse.executableURL = URL(fileURLWithPath: Self.curl)
            sse.arguments = ["-sN", "--max-time", "40", "--unix-socket", bDir + "/http.sock", "http://localhost/v1/changes?feed=sse&include_docs=true&collection=sensors.readings"]
            let out = Pipe()
            sse.standardOutput = out
            try sse.run()
            defer { if sse.isRunning { sse.terminate() } }
            let received = LockedBox(Data())
            out.fileHandleForReading.readabilityHandler = { h in
                let d = h.availableData
                received.withLock { $0.append(d) }
            }
            let put = try Shoal.run(["-s", "-w", "\n%{http_code}", "--unix-socket", aDir + "/http.sock", "-X", "PUT", "-d", #"{"pressure":2.7,"site":"east"}"#,
                                     "http://localhost/v1/collections/sensors.readings/docs/pump-7"], executable: Self.curl)
            #expect(put.stdout.hasSuffix("201"), "\(put)")
            #expect(eventuallyBlocking(within: 30) { String(decoding: received.withLock { $0 }, as: UTF8.self).contains(#""id":"pump-7""#) },
                    "b's feed: \(String(decoding: received.withLock { $0 }, as: UTF8.self))")
            let text = String(decoding: received.withLock { $0 }, as: UTF8.self)
            #expect(text.contains("event: change") && text.contains(#""doc":{"pressure":2.7,"site":"east"}"#), "\(text)")
            out.fileHandleForReading.readabilityHandler = nil
            sse.terminate()
            let aEnd = a.stop(), bEnd = b.stop()
            #expect(aEnd.status == 0 && bEnd.status == 0)
        }
    }
}

/// A value behind a lock, for a pipe's handler thread and the test's.
final class LockedBox<T>: @unchecked Sendable {
    private var value: T
    private let lock = NSLock()
    init(_ value: T) { self.value = value }
    func withLock<R>(_ body: (inout T) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
