import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// Hostile peers against a real gateway `g` on loopback, each attack from an address of its
    /// own: a flood of connections held open (127.0.0.2), slow-loris handshakes one byte at a time
    /// (127.0.0.3), garbage and an oversize TLS record (127.0.0.4), a replay of an honest peer's
    /// recorded bytes (127.0.0.5), and a gateway with a trusted certificate in another group. While
    /// they run, the honest peer `h` keeps writing and a second honest peer joins: both must sync,
    /// and `g`'s threads, descriptors and memory must stay bounded.
    @Suite("Hostile peers", .serialized)
    struct HostilePeerTests {
        /// A TCP connection from `source` (a loopback address) to 127.0.0.1:port, or -1.
        static func connect(from source: String, port: Int) -> Int32 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { return -1 }
            // connect() and send() give up after 1 s (a flooded listener's full backlog would
            // otherwise hold an attacker thread for minutes of SYN retries).
            var limit = timeval(tv_sec: 1, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            inet_pton(AF_INET, source, &local.sin_addr)
            var remote = sockaddr_in()
            remote.sin_family = sa_family_t(AF_INET)
            remote.sin_port = in_port_t(UInt16(port).bigEndian)
            inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr)
            let ok = withUnsafePointer(to: &local) { l in
                l.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            } && withUnsafePointer(to: &remote) { r in
                r.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            if !ok { close(fd); return -1 }
            return fd
        }

        static func send(_ fd: Int32, _ bytes: [UInt8]) {
            _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }

        /// Forwards 127.0.0.1:listenPort to 127.0.0.1:target and records what the first client sent.
        final class RecordingProxy: @unchecked Sendable {
            let listener: Int32
            let port: Int
            private let lock = NSLock()
            private var recorded: [UInt8] = []
            private var first = true
            init(target: Int) throws {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                var one: Int32 = 1
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
                var a = sockaddr_in()
                a.sin_family = sa_family_t(AF_INET)
                inet_pton(AF_INET, "127.0.0.1", &a.sin_addr)
                _ = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
                listen(fd, 8)
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                _ = withUnsafeMutablePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
                listener = fd
                port = Int(UInt16(bigEndian: a.sin_port))
                let listening = fd
                Thread.detachNewThread { [self] in
                    while true {
                        let client = accept(listening, nil, nil)
                        if client < 0 { return }
                        let server = HostilePeerTests.connect(from: "127.0.0.1", port: target)
                        let record = lock.withLock { () -> Bool in defer { first = false }; return first }
                        // Each side's socket closes when both directions have ended.
                        let ended = DispatchGroup()
                        ended.enter(); ended.enter()
                        Thread.detachNewThread { self.pump(from: client, to: server, record: record); ended.leave() }
                        Thread.detachNewThread { self.pump(from: server, to: client, record: false); ended.leave() }
                        ended.notify(queue: .global()) { Glibc.close(client); if server >= 0 { Glibc.close(server) } }
                    }
                }
            }
            func pump(from: Int32, to: Int32, record: Bool) {
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let n = buffer.withUnsafeMutableBytes { recv(from, $0.baseAddress, $0.count, 0) }
                    if n <= 0 { shutdown(to, Int32(SHUT_WR)); return }
                    if record { lock.withLock { if recorded.count < 4 << 20 { recorded += buffer[0..<n] } } }
                    HostilePeerTests.send(to, Array(buffer[0..<n]))
                }
            }
            var bytes: [UInt8] { lock.withLock { recorded } }
            /// Stops accepting (the accept loop ends); links already forwarded end with their peers.
            func close() { shutdown(listener, Int32(SHUT_RDWR)); Glibc.close(listener) }
        }

        static func stat(_ pid: pid_t) -> (threads: Int, fds: Int, rssKB: Int) {
            let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
            func field(_ name: String) -> Int {
                for line in status.split(separator: "\n") where line.hasPrefix(name) {
                    let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                    return parts.count > 1 ? Int(parts[1]) ?? 0 : 0
                }
                return 0
            }
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
            return (field("Threads:"), fds, field("VmRSS:"))
        }

        /// What the attack threads share.
        final class Attacks: @unchecked Sendable {
            let lock = NSLock()
            var stopped = false
            var held: [Int32] = []
            var floodCount = 0
            let group = DispatchGroup()
            var running: Bool { lock.withLock { !stopped } }
            func start(_ body: @escaping @Sendable () -> Void) {
                group.enter()
                Thread.detachNewThread { body(); self.group.leave() }
            }
            func stopAll() {
                lock.withLock { stopped = true }
                group.wait()
                lock.withLock { for fd in held { close(fd) }; held = [] }
            }
        }

        @Test("floods, slow-loris handshakes, garbage, an oversize record, a replay and a wrong group: g stays bounded and honest peers keep syncing")
        func hostilePeers() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let names = ["g", "h", "w", "j"]
            let ids = try names.map { try ReplicationProcessTests.peerID(base.path + "/" + $0) }
            let port = 40_000 + Int(getpid() % 10_000)
            let proxy = try RecordingProxy(target: port)
            defer { proxy.close() }
            func site(_ name: String, group: String = "test.hostile", listen: Bool = false, peer: Int? = nil) throws -> String {
                let path = base.path + "/\(name).yaml"
                try """
                group: \(group)
                collections:
                  - name: sensors.readings
                authenticator:
                  allowedPeers: [\(ids.joined(separator: ", "))]
                replication:
                \(listen ? "  listen: 127.0.0.1:\(port)" : "")
                \(peer.map { "  peers: [127.0.0.1:\($0)]" } ?? "")
                mesh:
                  backoffMillis: 500
                """.write(toFile: path, atomically: true, encoding: .utf8)
                return path
            }
            let g = try RunningGateway(dataDir: base.path + "/g", extraArgs: ["--config", try site("g", listen: true)])
            // h reaches g through the recording proxy: its bytes are replayed later.
            let h = try RunningGateway(dataDir: base.path + "/h", extraArgs: ["--config", try site("h", peer: proxy.port)])
            #expect(try h.cli(["doc", "put", "sensors.readings", "h-0", #"{"n":0}"#]).status == 0)
            #expect(eventuallyBlocking(within: 20) { (try? g.cli(["doc", "get", "sensors.readings", "h-0"]).status) == 0 })
            let pid = g.process.processIdentifier
            let before = Self.stat(pid)

            // The attacks, each on threads of its own, until h's writes are done.
            let attacks = Attacks()
            attacks.start {  // a flood: connections opened as fast as possible and held
                while attacks.running && attacks.lock.withLock({ attacks.floodCount }) < 2000 {
                    let fd = Self.connect(from: "127.0.0.2", port: port)
                    if fd >= 0 { attacks.lock.withLock { attacks.held.append(fd); attacks.floodCount += 1 } } else { usleep(1000) }
                }
            }
            attacks.start {  // slow-loris: a TLS handshake record header, one byte every 0.5 s
                let fds: [Int32] = (0..<20).map { _ in Self.connect(from: "127.0.0.3", port: port) }
                let header: [UInt8] = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03]
                var i = 0
                while attacks.running {
                    for fd in fds where fd >= 0 { Self.send(fd, [header[i % header.count]]) }
                    i += 1
                    usleep(500_000)
                }
                for fd in fds where fd >= 0 { close(fd) }
            }
            attacks.start {  // garbage, and a TLS record header that claims 16 MB
                var rng = SystemRandomNumberGenerator()
                while attacks.running {
                    let fd = Self.connect(from: "127.0.0.4", port: port)
                    if fd >= 0 {
                        Self.send(fd, (0..<65_536).map { _ in UInt8.random(in: 0...255, using: &rng) })
                        close(fd)
                    }
                    let big = Self.connect(from: "127.0.0.4", port: port)
                    if big >= 0 { Self.send(big, [0x16, 0x03, 0x03, 0xFF, 0xFF] + [UInt8](repeating: 0x41, count: 4096)); close(big) }
                    usleep(20_000)
                }
            }
            let replay = proxy.bytes
            attacks.start {  // h's recorded bytes, replayed from another address
                while attacks.running {
                    let fd = Self.connect(from: "127.0.0.5", port: port)
                    if fd >= 0 { Self.send(fd, replay); usleep(300_000); close(fd) }
                }
            }
            // A gateway with a certificate g trusts, in another group.
            let w = try RunningGateway(dataDir: base.path + "/w", extraArgs: ["--config", try site("w", group: "test.other", peer: port)])

            // Meanwhile h keeps writing, and j (honest, new) joins.
            Thread.sleep(forTimeInterval: 1)
            let j = try RunningGateway(dataDir: base.path + "/j", extraArgs: ["--config", try site("j", peer: port)])
            var peak = before
            var lags: [Double] = []
            for i in 1...10 {
                let written = Date()
                #expect(try h.cli(["doc", "put", "sensors.readings", "h-\(i)", "{\"n\":\(i)}"]).status == 0)
                let arrived = eventuallyBlocking(within: 15, every: 0.05) { (try? g.cli(["doc", "get", "sensors.readings", "h-\(i)"]).status) == 0 }
                #expect(arrived, "h-\(i) did not reach g during the attacks")
                lags.append(Date().timeIntervalSince(written))
                let now = Self.stat(pid)
                peak = (max(peak.threads, now.threads), max(peak.fds, now.fds), max(peak.rssKB, now.rssKB))
                Thread.sleep(forTimeInterval: 0.5)
            }
            let jSynced = eventuallyBlocking(within: 20) { (try? j.cli(["doc", "get", "sensors.readings", "h-10"]).status) == 0 }
            #expect(jSynced, "j, an honest peer that joined during the attacks, did not get h's documents")
            let during = Self.stat(pid)
            peak = (max(peak.threads, during.threads), max(peak.fds, during.fds), max(peak.rssKB, during.rssKB))
            let floodCount = attacks.lock.withLock { attacks.floodCount }
            attacks.stopAll()

            // Bounded: at most 32 handshakes at once (4 per address), each a thread and a socket.
            #expect(peak.threads <= before.threads + 40, "threads \(before.threads) → \(peak.threads)")
            #expect(peak.fds <= before.fds + 48, "descriptors \(before.fds) → \(peak.fds)")
            // Not under AddressSanitizer: its quarantine keeps freed memory resident (RSS grew by
            // 140 MB there with the same thread and descriptor figures).
            if ProcessInfo.processInfo.environment["SHOAL_SANITIZER"] != "address" {
                #expect(peak.rssKB <= before.rssKB + 64 * 1024, "RSS \(before.rssKB) → \(peak.rssKB) KB")
            }
            #expect(try g.cli(["status"]).status == 0, "g is not answering after the attacks")
            let counters = (try Shoal.json(g.cli(["status", "--json"])) as? [String: Any])?["counters"] as? [String: Any]
            let failed = counters?["failedConnectionAttempts"] as? Int ?? 0
            #expect(failed > 0, "no failed connection attempts counted")
            let wEnd = w.stop(), jEnd = j.stop(), hEnd = h.stop(), gEnd = g.stop()
            for (name, end) in [("g", gEnd), ("h", hEnd), ("j", jEnd), ("w", wEnd)] {
                #expect(end.status == 0, "\(name) stopped with status \(end.status): \(end.stderr.suffix(2000))")
            }
            #expect(gEnd.stderr.contains("refusing connections from 127.0.0.2"), "no refusal of the flood in g's log")
            #expect(gEnd.stderr.contains("refused an incoming replication link from 127.0.0.5"), "no refusal of the replay in g's log")
            #expect(gEnd.stderr.contains("not ours"), "the wrong group was not refused: \(gEnd.stderr.suffix(1500))")
            print(String(format: "hostile peers: %d flood connections held, replay of %d bytes; g: threads %d → peak %d, descriptors %d → %d, RSS %d → %d KB; %d failed connections counted; h's writes reached g in %.2f s at worst (median %.2f s)",
                         floodCount, replay.count, before.threads, peak.threads, before.fds, peak.fds, before.rssKB, peak.rssKB, failed,
                         lags.max() ?? 0, lags.sorted()[lags.count / 2]))
        }
    }
}
