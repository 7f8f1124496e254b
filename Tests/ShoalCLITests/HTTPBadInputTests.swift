import Foundation
import Glibc
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The local API against bad input (issue 20, "Bad input"), on a real `shoal run`: the cases of
    /// Tests/HTTP/bad_input.py (raw sockets from Python), a port taken at start, and SIGTERM with
    /// SSE clients connected. Each gateway listens on ports of its own (8470 may be another test's).
    @Suite("HTTP bad input", .serialized)
    struct HTTPBadInputTests {
        static let scripts = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("HTTP").path

        @Test("every bad input gets a clear 4xx, leaves the store untouched, keeps RSS bounded and lets other clients in")
        func badInput() throws {
            let port = try BadInputGateway.freePort(), tokenPort = try BadInputGateway.freePort()
            let gateway = try BadInputGateway(listen: ["127.0.0.1:\(port)", "0.0.0.0:\(tokenPort)"])
            defer { gateway.stop() }
            let token = try Shoal.run(["http", "token", "--data-dir", gateway.dir.path + "/data"])
            #expect(token.status == 0, "\(token.stderr)")
            let tokenText = token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(tokenText.count == 64, "\(token.stdout)")
            let started = Date()
            let r = try Shoal.run(["\(HTTPBadInputTests.scripts)/bad_input.py", "--port", "\(port)", "--token-port", "\(tokenPort)",
                                   "--token", tokenText, "--pid", "\(gateway.pid)"], timeout: 120, executable: "/usr/bin/python3")
            print("bad_input.py (\(String(format: "%.1f", Date().timeIntervalSince(started))) s):\n\(r.stdout)\(r.stderr)")
            #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)")
            #expect(r.stdout.contains("all bad input refused"))
            #expect(gateway.isRunning, "the gateway died: \(gateway.log())")
        }

        @Test("review cases: long polls stay JSON past keepalives and do not spin on other collections' writes; text/plain bulk 415; foreign Host 403; If-Match strong; cursors past the end restart")
        func reviewCases() throws {
            let port = try BadInputGateway.freePort()
            let gateway = try BadInputGateway(listen: ["127.0.0.1:\(port)"], env: ["SHOAL_HTTP_KEEPALIVE_MILLIS": "300"])
            defer { gateway.stop() }
            let r = try Shoal.run(["\(HTTPBadInputTests.scripts)/review_cases.py", "--port", "\(port)", "--pid", "\(gateway.pid)"],
                                  timeout: 60, executable: "/usr/bin/python3")
            print("review_cases.py:\n\(r.stdout)\(r.stderr)")
            #expect(r.status == 0 && r.stdout.contains("review cases: all passed"), "\(r.stdout)\n\(r.stderr)")
            #expect(gateway.isRunning, "the gateway died: \(gateway.log())")
        }

        @Test("a port in use at start: a warning, the Unix socket and the other address serve, and the port is bound once free")
        func portInUse() throws {
            let taken = try HeldPort()
            let other = try BadInputGateway.freePort()
            let gateway = try BadInputGateway(listen: ["127.0.0.1:\(taken.port)", "127.0.0.1:\(other)"],
                                          env: ["SHOAL_HTTP_RETRY_BIND_MILLIS": "500"])
            defer { gateway.stop() }
            #expect(eventuallyBlocking(within: 10) { gateway.log().contains("cannot listen on 127.0.0.1:\(taken.port) now") }, "\(gateway.log())")
            #expect(gateway.isRunning)
            #expect(BadInputGateway.get(port: other, path: "/v1/status")?.status == 200)
            let unix = try Shoal.run(["--unix-socket", gateway.dir.path + "/data/http.sock", "-s", "http://localhost/v1/health"], executable: "/usr/bin/curl")
            #expect(unix.status == 0 && unix.stdout.contains("\"healthy\""), "curl exited \(unix.status): \(unix.stdout) \(unix.stderr)")
            // Retried (quietly: one warning, then verbose lines) while the port stays taken.
            #expect(eventuallyBlocking(within: 10) { gateway.log().contains("still cannot listen on 127.0.0.1:\(taken.port)") }, "\(gateway.log())")
            #expect(gateway.log().components(separatedBy: "WARNING http: HTTP API cannot listen").count == 2, "\(gateway.log())")
            taken.close()
            let freed = Date()
            #expect(eventuallyBlocking(within: 10) { BadInputGateway.get(port: taken.port, path: "/v1/status")?.status == 200 }, "\(gateway.log())")
            #expect(gateway.log().contains("HTTP API on http://127.0.0.1:\(taken.port)/"))
            print("port \(taken.port) served \(String(format: "%.2f", Date().timeIntervalSince(freed))) s after it was freed (retry every 0.5 s)")
        }

        @Test("SIGTERM with SSE clients connected: the gateway stops cleanly within a few seconds and the clients see the end")
        func sigtermWithStreams() throws {
            // Round 0 signals once every stream is open; the others while they are being opened
            // (libmicrohttpd aborts the process if stopped with a connection still suspended).
            for round in 0..<4 {
                let port = try BadInputGateway.freePort()
                let gateway = try BadInputGateway(listen: ["127.0.0.1:\(port)"])
                var clients: [Int32] = []
                defer { for fd in clients { Glibc.close(fd) } }
                for path in ["/v1/changes?feed=sse", "/v1/changes?feed=sse&include_docs=true", "/v1/events?feed=sse", "/v1/changes?feed=longpoll&timeout=60000&since=999999"] {
                    for _ in 0..<3 {
                        let fd = try BadInputGateway.connect(port: port)
                        BadInputGateway.send(fd, "GET \(path) HTTP/1.1\r\nHost: localhost\r\n\r\n")
                        clients.append(fd)
                    }
                }
                if round == 0 {
                    for fd in clients.prefix(9) { #expect(BadInputGateway.read(fd, until: "\r\n\r\n", timeout: 5).contains("200 OK")) }
                } else {
                    usleep(UInt32(round) * 3_000)
                }
                let t0 = Date()
                let stopped = gateway.stop()
                let took = Date().timeIntervalSince(t0)
                print("SIGTERM with \(clients.count) streams \(round == 0 ? "open" : "opening"): exited \(stopped.status) in \(String(format: "%.2f", took)) s")
                #expect(stopped.status == 0, "\(stopped.log)")
                #expect(took < 5, "\(stopped.log)")
                for fd in clients { #expect(BadInputGateway.readsEnd(fd, timeout: 2), "a client's stream did not end") }
            }
        }
    }
}

/// A `shoal run` with a site file of its own `http:` section, its stderr in a file (a client
/// flood logs a lot; a pipe nobody reads would block the gateway on its log).
final class BadInputGateway {
    let dir = TemporaryDirectory()
    let process = Process()
    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }
    private var logPath: String { dir.path + "/gateway.log" }
    private var result: (status: Int32, log: String)?

    init(listen: [String], env: [String: String] = [:]) throws {
        let site = dir.path + "/site.yaml"
        try "group: g\ncollections:\n  - name: sensors.readings\nhttp:\n  listen: [\(listen.map { "\"\($0)\"" }.joined(separator: ", "))]\n".write(toFile: site, atomically: true, encoding: .utf8)
        FileManager.default.createFile(atPath: logPath, contents: nil)
        var environment = ProcessInfo.processInfo.environment
        for (k, v) in env { environment[k] = v }
        process.environment = environment
        process.executableURL = URL(fileURLWithPath: Shoal.binary)
        process.arguments = ["run", "--board", "sim", "--data-dir", dir.path + "/data", "--config", site, "--log-level", "verbose"]
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = FileHandle(forWritingAtPath: logPath)
        try process.run()
        let sock = dir.path + "/data/http.sock"
        if !eventuallyBlocking(within: 30, every: 0.05, { FileManager.default.fileExists(atPath: sock) && log().contains("gateway running") }) {
            Issue.record("the gateway did not come up: \(log())")
        }
    }

    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// SIGTERM, then waits (SIGKILL after 30 s); the exit status and the log.
    @discardableResult
    func stop() -> (status: Int32, log: String) {
        if let result { return result }
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(30)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        result = (process.terminationStatus, log())
        dir.remove()
        return result!
    }

    static func freePort() throws -> UInt16 {
        let l = try HeldPort()
        defer { l.close() }
        return l.port
    }

    static func connect(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else {
            Glibc.close(fd)
            throw POSIXError(.ECONNREFUSED)
        }
        var tv = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    static func send(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    static func read(_ fd: Int32, until marker: String, timeout: Double) -> String {
        var out = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 8192)
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline, !String(decoding: out, as: UTF8.self).contains(marker) {
            let n = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, 8192, 0) }
            if n > 0 { out += buffer.prefix(n) } else if n == 0 { break }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// True when the server ends the connection (EOF or reset) within `timeout`.
    static func readsEnd(_ fd: Int32, timeout: Double) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 8192)
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let n = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, 8192, 0) }
            if n == 0 { return true }
            if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR { return true }
        }
        return false
    }

    /// One GET with `Connection: close`: the status and body, or nil when nothing answered.
    static func get(port: UInt16, path: String) -> (status: Int, body: String)? {
        guard let fd = try? connect(port: port) else { return nil }
        defer { Glibc.close(fd) }
        send(fd, "GET \(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        var out = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 8192)
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            let n = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, 8192, 0) }
            if n > 0 { out += buffer.prefix(n) } else if n == 0 { break }
        }
        let text = String(decoding: out, as: UTF8.self)
        let parts = text.split(separator: " ", maxSplits: 2)
        guard text.hasPrefix("HTTP/1.1 "), parts.count > 1, let status = Int(parts[1]) else { return nil }
        return (status, text.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n"))
    }
}

/// A listening TCP socket on 127.0.0.1 and a port the kernel picked (to hold a port taken).
final class HeldPort {
    let fd: Int32
    let port: UInt16
    private var open = true

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bind(fd, sa, len) == 0 && listen(fd, 16) == 0 && getsockname(fd, sa, &len) == 0
            }
        }
        guard ok else {
            Glibc.close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        self.fd = fd
        port = UInt16(bigEndian: addr.sin_port)
    }

    func close() {
        if open { Glibc.close(fd) }
        open = false
    }

    deinit { close() }
}
