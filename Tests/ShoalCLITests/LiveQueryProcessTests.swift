import Foundation
import ShoalTesting
import Testing

/// A process in the background whose standard output is collected as it comes.
final class BackgroundOutput: @unchecked Sendable {
    let process = Process()
    private let pipe = Pipe()
    private let lock = NSLock()
    private var text = ""

    init(_ executable: String, _ args: [String]) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = args
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        pipe.fileHandleForReading.readabilityHandler = { [weak self] h in
            let data = h.availableData
            guard let self, !data.isEmpty else { return }
            self.lock.lock()
            self.text += String(decoding: data, as: UTF8.self)
            self.lock.unlock()
        }
        try process.run()
    }

    var output: String { lock.lock(); defer { lock.unlock() }; return text }
    var lines: [String] { output.split(separator: "\n").map(String.init) }

    func stop() {
        // SIGKILL: a child started from the test's thread inherits its blocked signals, and curl
        // does not unblock SIGTERM.
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        pipe.fileHandleForReading.readabilityHandler = nil
    }
}

extension ProcessSuites {
    @Suite("Live queries: shoal doc query --follow and HTTP")
    struct LiveQueryProcessTests {
        static let curl = "/usr/bin/curl"

        static func updates(_ lines: [String]) -> [[String: Any]] {
            lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }

        @Test("doc query --follow --json prints the whole result, then a line per insert, update and delete that alters it")
        func cliFollow() throws {
            let gw = try RunningGateway()
            defer { _ = gw.stop() }
            #expect(try gw.cli(["doc", "put", "sensors.readings", "a", #"{"site":"east","p":1}"#]).status == 0)
            let follow = try BackgroundOutput(Shoal.binary, ["doc", "query", "sensors.readings", #"site = "east""#, "--order", "-p", "--follow", "--json", "--socket", gw.socket])
            defer { follow.stop() }
            #expect(eventuallyBlocking(within: 10) { Self.updates(follow.lines).count == 1 }, "no first update: \(follow.output)")
            let first = Self.updates(follow.lines).first
            #expect(first?["update"] as? Int == 1 && first?["added"] as? [String] == ["a"], "\(follow.output)")

            #expect(try gw.cli(["doc", "put", "sensors.readings", "w", #"{"site":"west"}"#]).status == 0)  // outside the result
            #expect(try gw.cli(["doc", "put", "sensors.readings", "b", #"{"site":"east","p":5}"#]).status == 0)
            #expect(eventuallyBlocking(within: 10) { Self.updates(follow.lines).count == 2 }, "\(follow.output)")
            #expect(try gw.cli(["doc", "put", "sensors.readings", "a", #"{"site":"east","p":2}"#]).status == 0)
            #expect(eventuallyBlocking(within: 10) { Self.updates(follow.lines).count == 3 }, "\(follow.output)")
            #expect(try gw.cli(["doc", "delete", "sensors.readings", "b"]).status == 0)
            #expect(eventuallyBlocking(within: 10) { Self.updates(follow.lines).count == 4 }, "\(follow.output)")
            let u = Self.updates(follow.lines)
            #expect(u.count == 4, "the write outside the result was pushed: \(follow.output)")
            guard u.count == 4 else { return }
            #expect(u[1]["added"] as? [String] == ["b"])
            #expect((u[1]["documents"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == ["b", "a"])
            #expect(u[2]["changed"] as? [String] == ["a"])
            #expect(u[3]["removed"] as? [String] == ["b"])

            // The text form, and a malformed follow refused before anything is sent.
            let text = try BackgroundOutput(Shoal.binary, ["doc", "query", "sensors.readings", #"site = "east""#, "--follow", "--socket", gw.socket])
            defer { text.stop() }
            #expect(eventuallyBlocking(within: 10) { text.output.contains("-- update 1: 1 document\na\t") }, "\(text.output)")
            #expect(try gw.cli(["doc", "put", "sensors.readings", "c", #"{"site":"east"}"#]).status == 0)
            #expect(eventuallyBlocking(within: 10) { text.output.contains("-- update 2: 1 added, 0 changed, 0 removed (2 documents)\n+ c\t{\"site\":\"east\"}") }, "\(text.output)")
            let bad = try gw.cli(["doc", "query", "sensors.readings", "site = east", "--follow"])
            #expect(bad.status == 6 && bad.stderr.contains("(character 8)"), "\(bad.stderr)")
            #expect(try gw.cli(["status"]).status == 0)

            // The gateway stops: --follow ends with exit 5 and says so.
            _ = gw.stop()
            #expect(eventuallyBlocking(within: 10) { !follow.process.isRunning }, "doc query --follow still running after the gateway stopped")
            if !follow.process.isRunning { #expect(follow.process.terminationStatus == 5) }
        }

        @Test("HTTP: a query as JSON, a malformed one as a 400 with its position, and a live query over SSE")
        func http() throws {
            let gw = try RunningGateway()
            defer { _ = gw.stop() }
            let sock = gw.dir.path + "/http.sock"
            #expect(eventuallyBlocking(within: 20) { FileManager.default.fileExists(atPath: sock) })
            for i in 1...5 {
                #expect(try gw.cli(["doc", "put", "sensors.readings", "r\(i)", #"{"site":"\#(i % 2 == 0 ? "east" : "west")","p":\#(i)}"#]).status == 0)
            }
            let base = "http://localhost/v1/collections/sensors.readings/query"
            let ok = try Shoal.run(["-s", "-w", "\n%{http_code}", "--unix-socket", sock, "-G", base, "--data-urlencode", #"q=site = "west" and p > 1"#,
                                    "--data-urlencode", "order=-p", "--data-urlencode", "limit=1", "--data-urlencode", "fields=p"], executable: Self.curl)
            #expect(ok.stdout.hasSuffix("\n200"), "\(ok)")
            let answer = try JSONSerialization.jsonObject(with: Data(ok.stdout.split(separator: "\n")[0].utf8)) as? [String: Any]
            let docs = answer?["documents"] as? [[String: Any]]
            #expect(docs?.compactMap { $0["id"] as? String } == ["r5"] && (docs?.first?["body"] as? [String: Any])?["p"] as? Int == 5, "\(ok.stdout)")
            #expect(answer?["next"] is String && answer?["collection"] as? String == "sensors.readings")

            let bad = try Shoal.run(["-s", "-w", "\n%{http_code}", "--unix-socket", sock, "-G", base, "--data-urlencode", "q=site = east"], executable: Self.curl)
            #expect(bad.stdout.hasSuffix("\n400"), "\(bad)")
            let error = try JSONSerialization.jsonObject(with: Data(bad.stdout.split(separator: "\n")[0].utf8)) as? [String: Any]
            #expect(error?["error"] as? String == "bad_request" && error?["parameter"] as? String == "q" && error?["position"] as? Int == 8, "\(bad.stdout)")
            let unknown = try Shoal.run(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", sock, "http://localhost/v1/collections/no.such/query"], executable: Self.curl)
            #expect(unknown.stdout == "404")

            let sse = try BackgroundOutput(Self.curl, ["-sN", "--unix-socket", sock, "-G", base, "--data-urlencode", #"q=site = "east""#, "--data-urlencode", "follow=1"])
            defer { sse.stop() }
            #expect(eventuallyBlocking(within: 10) { sse.output.contains("id: 1\nevent: update\ndata: ") }, "\(sse.output)")
            #expect(try gw.cli(["doc", "put", "sensors.readings", "r7", #"{"site":"east","p":7}"#]).status == 0)
            #expect(eventuallyBlocking(within: 10) { sse.output.contains("id: 2\nevent: update\ndata: ") }, "\(sse.output)")
            let second = sse.lines.first { $0.hasPrefix("data: ") && $0.contains(#""update":2"#) }.map { String($0.dropFirst(6)) }
            let update = second.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            #expect(update?["added"] as? [String] == ["r7"], "\(sse.output)")
            // Accept: text/event-stream alone asks for the stream too.
            let accept = try Shoal.run(["-sN", "--max-time", "1", "-H", "Accept: text/event-stream", "--unix-socket", sock, base], executable: Self.curl)
            #expect(accept.stdout.contains("event: update"), "\(accept)")
        }
    }
}
