import Glibc
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalRuntime
import ShoalStore
import ShoalUplink
import ShoalWire

/// `shoal bench uplink`: the NATS JetStream uplink against a nats-server of its own (JetStream in
/// a temporary directory, a free loopback port, its monitoring endpoint on another), all in one
/// run:
///
/// - baseline: a raw publish loop through `NATSClient.publish` (JetStream publish, each message
///   acknowledged; batches of 1,024, two in flight, as the bridge pushes) of the same bodies to a stream of
///   its own with the uplink's settings (file storage, one message per subject), run before and
///   after the gateways; the faster counts;
/// - end to end: gateway A (a store and the uplink's bridge, `UplinkRunner`) writes N documents
///   (batches of 100, one transaction each) while gateway B (another store and bridge) pulls:
///   N / (first write → B holds all N), and A's push alone: N / (first write → A's board says
///   published == N);
/// - bytes per document: each connection's in_bytes and out_bytes from the server's /connz
///   before and after, divided by N, against the body and the uplink's headers.
///
/// What a reader would get wrong: the server, both bridges and the writer share the machine's
/// cores (two on the CI machine); the CPU seconds of each part are printed beside the figures.
/// Both gateways push and pull (the uplink's default), so A also receives its own N messages back
/// from the stream (they are already held: counted `unchanged`).
public enum UplinkBenchmark {
    public struct Settings: Sendable {
        /// Documents written by gateway A (`--count`).
        public var count = 10_000
        /// Body size of each document in bytes (`--body-bytes`).
        public var bodyBytes = 1024
        /// The nats-server binary.
        public var server = "/usr/sbin/nats-server"
        /// A part that makes no progress for this long ends with what it has (marked incomplete).
        public var stallSeconds = 60
        public init() {}
    }

    /// Bytes one connection sent to the server (`inBytes`, as the server counts them) and received
    /// from it (`outBytes`) over a part of the run.
    public struct Traffic: Sendable {
        public var inBytes: Int64 = 0
        public var outBytes: Int64 = 0
        public var inMessages: Int64 = 0
        public var outMessages: Int64 = 0
        /// The same on the TCP connection, protocol included (`ss -ti` of the server's socket:
        /// bytes_received, bytes_sent); -1 when ss is missing or did not say.
        public var wireIn: Int64 = -1
        public var wireOut: Int64 = -1
    }

    public struct Baseline: Sendable {
        public var messages: Int
        public var stored: Int
        public var seconds: Double
        public var rate: Double { Double(stored) / max(0.000_001, seconds) }
    }

    public struct Result: Sendable {
        public var settings: Settings
        public var serverVersion = "?"
        public var bodyBytes = 0
        public var baselineRuns: [Baseline] = []
        public var baseline: Baseline? { baselineRuns.max { $0.rate < $1.rate } }
        /// A's writes (first → last commit).
        public var writeSeconds = 0.0
        /// First write → A's board says published == count (nil: it did not within the stall).
        public var pushSeconds: Double?
        /// First write → B holds every document (nil: it did not).
        public var endToEndSeconds: Double?
        public var published: Int64 = 0
        public var held: Int64 = 0
        /// A's board after the run: messages it received back from the stream, and applied.
        public var aReceived: Int64 = 0
        public var aUnchanged: Int64 = 0
        public var bApplied: Int64 = 0
        public var casRetries: Int64 = 0
        /// Per-connection traffic over the push (first write → B holds all).
        public var a = Traffic()
        public var b = Traffic()
        /// The uplink's headers on one document as published: name and bytes ("Name: value\r\n").
        public var headers: [(name: String, bytes: Int)] = []
        public var subjectBytes = 0
        /// CPU seconds over the end-to-end part: nats-server, the two bridges' threads, the whole
        /// bench process.
        public var cpu: [(part: String, seconds: Double)] = []

        /// Gateway C's uplink started over N documents already written: start → published == N.
        public var backlogSeconds: Double?
        public var backlogPublished: Int64 = 0
        public var backlogCPU = 0.0
        /// The same with the uplink's pull off (so it does not take its own messages back).
        public var pushOnlySeconds: Double?
        public var pushOnlyCPU = 0.0
        public var pushOnlyRate: Double? { pushOnlySeconds.map { Double(settings.count) / max(0.000_001, $0) } }

        public var backlogRate: Double? { backlogSeconds.map { Double(settings.count) / max(0.000_001, $0) } }
        public var pushRate: Double? { pushSeconds.map { Double(settings.count) / max(0.000_001, $0) } }
        public var endToEndRate: Double? { endToEndSeconds.map { Double(settings.count) / max(0.000_001, $0) } }
        public var headerBytes: Int { headers.reduce(0) { $0 + $1.bytes } }
    }

    static let collection = try! CollectionName(parsing: "bench.uplink")
    static let group = "shoal.bench.uplink"

    /// Runs the three parts; `progress` hears a line as each starts.
    public static func run(directory: String, settings: Settings = Settings(), progress: (String) -> Void = { _ in }) throws -> Result {
        guard Files.exists(settings.server) else {
            throw ConfigurationFailure(message: "\(settings.server) is not installed: `make deps` installs nats-server (apt-get install nats-server)")
        }
        try Files.makeDirectories(directory)
        var result = Result(settings: settings)
        result.serverVersion = serverVersion(settings.server, directory: directory)
        let server = try Server(directory: directory + "/nats", binary: settings.server)
        defer { server.stop() }
        let bodies = (0..<settings.count).map { StoreBenchmark.body($0, bytes: settings.bodyBytes) }
        result.bodyBytes = bodies[0].utf8.count

        progress("baseline: NATSClient.publish of \(settings.count) × \(result.bodyBytes) B, batches of 1,024 (two in flight, as the bridge pushes), each acknowledged, to a stream of its own")
        result.baselineRuns.append(try baseline(server, bodies: bodies, round: 1))

        progress("end to end: gateway A writes \(settings.count) documents, its uplink pushes, gateway B's uplink pulls")
        try endToEnd(server, bodies: bodies, directory: directory, settings: settings, into: &result)

        progress("backlog: gateway C writes \(settings.count) documents with its uplink stopped, then starts it: the push alone; again with pull off (gateway D)")
        try backlog(server, bodies: bodies, directory: directory, settings: settings, into: &result)

        progress("baseline again")
        result.baselineRuns.append(try baseline(server, bodies: bodies, round: 2))
        return result
    }

    // MARK: - Baseline

    static func baseline(_ server: Server, bodies: [String], round: Int) throws -> Baseline {
        let client = try NATSClient.connect(NATSClient.Options(servers: [server.url], name: "shoal-bench-baseline"))
        let stream = "SHOAL_BENCH_RAW_\(round)"
        _ = try client.ensureStream(name: stream, subjects: ["shoal-bench-raw.\(round).*"], replicas: 1, maxMessageBytes: bodies[0].utf8.count + 1024)
        let payloads = bodies.map { Array($0.utf8) }
        var stored = 0
        let started = ContinuousClock.now
        // As the bridge pushes: batches of 1,024, the next sent before the last one's
        // acknowledgements are awaited.
        var i = 0
        var inFlight: PublishTicket?
        while i < payloads.count || inFlight != nil {
            var next: PublishTicket?
            if i < payloads.count {
                let end = min(payloads.count, i + 1024)
                next = client.send((i..<end).map { PublishRequest(subject: "shoal-bench-raw.\(round).doc-\($0)", headers: [], payload: payloads[$0], expectedLastSubjectSequence: nil) })
                i = end
            }
            if let t = inFlight { for r in client.wait(t) { if case .stored = r { stored += 1 } } }
            inFlight = next
        }
        let seconds = (ContinuousClock.now - started).secondsDouble
        return Baseline(messages: payloads.count, stored: stored, seconds: seconds)
    }

    // MARK: - End to end

    static func endToEnd(_ server: Server, bodies: [String], directory: String, settings: Settings, into result: inout Result) throws {
        let quiet = Logger(sink: MemoryLogSink(), level: .none)
        func gateway(_ name: String) throws -> (LocalWriter, UplinkRunner) {
            let store = try DocumentStore.open(StoreOptions(path: "\(directory)/\(name).db", maxBodyBytes: max(1 << 20, settings.bodyBytes + 1024)), logger: quiet)
            _ = try store.createCollection(collection)
            let writer = LocalWriter(peer: PeerID(bytes: SHA256.hash(Array("shoal-bench-\(name)".utf8))), store: store, clock: try NodeClock(store: store))
            let runner = UplinkRunner(writer: writer, group: group, servers: [server.url], collections: [collection], name: "shoal-bench-\(name)",
                                      logger: Logger(sink: StderrLogSink(journal: false), level: .warning))
            return (writer, runner)
        }
        let (writerA, a) = try gateway("a")
        let (writerB, b) = try gateway("b")
        try a.start()
        try b.start()
        defer {
            a.stop()
            b.stop()
        }
        // Both connected, the stream made, B's consumer started.
        let ready = monotonicMillis() + settings.stallSeconds * 1000
        let layout = HubLayout(group: group)
        let probe = try NATSClient.connect(NATSClient.Options(servers: [server.url], name: "shoal-bench-probe"))
        while monotonicMillis() < ready {
            if a.board.snapshot?.state == "connected", b.board.snapshot?.state == "connected",
               (try? probe.streamState(layout.streamName(collection))) != nil { break }
            usleep(20_000)
        }
        guard a.board.snapshot?.state == "connected", b.board.snapshot?.state == "connected" else {
            throw ConfigurationFailure(message: "the uplinks did not connect to \(server.url) within \(settings.stallSeconds) s: A \(a.board.snapshot?.lastError ?? "?"), B \(b.board.snapshot?.lastError ?? "?")")
        }
        usleep(500_000)
        let before = try server.connections(directory: directory)
        // The bytes of B's ordered consumer's creation are before this; so are A's stream checks.
        let serverCPU0 = MQTTBenchmark.cpuSeconds(server.child.pid), uplinkCPU0 = MQTTBenchmark.cpuSeconds(getpid(), thread: "uplink")
        let selfCPU0 = MQTTBenchmark.cpuSeconds(getpid())

        let ids = try (0..<bodies.count).map { try DocumentID("doc-\($0)") }
        let started = ContinuousClock.now
        var i = 0
        while i < bodies.count {
            let end = min(bodies.count, i + 100)
            _ = try writerA.putAll(collection, (i..<end).map { (ids[$0], bodies[$0]) })
            i = end
        }
        result.writeSeconds = (ContinuousClock.now - started).secondsDouble
        var lastProgress = monotonicMillis()
        var lastSeen: (Int64, Int64) = (-1, -1)
        while result.endToEndSeconds == nil || result.pushSeconds == nil {
            let published = a.board.snapshot?.published ?? 0
            let held = (try? writerB.store.count(collection)) ?? 0
            let elapsed = (ContinuousClock.now - started).secondsDouble
            if result.pushSeconds == nil, published >= Int64(bodies.count) { result.pushSeconds = elapsed }
            if result.endToEndSeconds == nil, held >= Int64(bodies.count) { result.endToEndSeconds = elapsed }
            if (published, held) != lastSeen {
                lastSeen = (published, held)
                lastProgress = monotonicMillis()
            } else if monotonicMillis() - lastProgress > settings.stallSeconds * 1000 {
                break
            }
            usleep(5_000)
        }
        let after = try server.connections(directory: directory)
        result.cpu = [("nats-server", MQTTBenchmark.cpuSeconds(server.child.pid) - serverCPU0),
                      ("both uplink threads", MQTTBenchmark.cpuSeconds(getpid(), thread: "uplink") - uplinkCPU0),
                      ("bench process (writer, bridges, libnats)", MQTTBenchmark.cpuSeconds(getpid()) - selfCPU0)]
        // A settles: its own messages come back through its consumer (already held).
        let settle = monotonicMillis() + 5000
        while monotonicMillis() < settle, (a.board.snapshot?.received ?? 0) < Int64(bodies.count) { usleep(20_000) }
        let boardA = a.board.snapshot, boardB = b.board.snapshot
        result.published = boardA?.published ?? 0
        result.held = (try? writerB.store.count(collection)) ?? 0
        result.aReceived = boardA?.received ?? 0
        result.aUnchanged = boardA?.unchanged ?? 0
        result.bApplied = boardB?.applied ?? 0
        result.casRetries = (boardA?.casRetries ?? 0) + (boardB?.casRetries ?? 0)
        result.a = Traffic.delta(before["shoal-bench-a"], after["shoal-bench-a"])
        result.b = Traffic.delta(before["shoal-bench-b"], after["shoal-bench-b"])

        // The headers of one document as the hub holds them (plus the compare-and-set header,
        // which the server does not keep).
        let subject = layout.subject(collection, id: "doc-0")
        result.subjectBytes = subject.utf8.count
        if let m = try probe.lastMessage(stream: layout.streamName(collection), subject: subject) {
            for name in [HubHeader.version, HubHeader.origin, HubHeader.hlc, HubHeader.deleted] {
                if let v = m.headers[name] { result.headers.append((name, name.utf8.count + 2 + v.utf8.count + 2)) }
            }
            let cas = "Nats-Expected-Last-Subject-Sequence"
            result.headers.append((cas, cas.utf8.count + 2 + 1 + 2))
            result.headers.append(("NATS/1.0 line and blank line", 10 + 2))
        }
    }

    // MARK: - Backlog

    /// The push alone, without the writer beside it: the documents are in C's store before its
    /// uplink starts (a stream of its own: another group).
    static func backlog(_ server: Server, bodies: [String], directory: String, settings: Settings, into result: inout Result) throws {
        let both = try backlog(server, bodies: bodies, directory: directory, name: "c", pull: true, settings: settings)
        result.backlogSeconds = both.seconds
        result.backlogPublished = both.published
        result.backlogCPU = both.cpu
        let pushOnly = try backlog(server, bodies: bodies, directory: directory, name: "d", pull: false, settings: settings)
        result.pushOnlySeconds = pushOnly.seconds
        result.pushOnlyCPU = pushOnly.cpu
    }

    static func backlog(_ server: Server, bodies: [String], directory: String, name: String, pull: Bool,
                        settings: Settings) throws -> (seconds: Double?, published: Int64, cpu: Double) {
        let quiet = Logger(sink: MemoryLogSink(), level: .none)
        let store = try DocumentStore.open(StoreOptions(path: "\(directory)/\(name).db", maxBodyBytes: max(1 << 20, settings.bodyBytes + 1024)), logger: quiet)
        _ = try store.createCollection(collection)
        let writer = LocalWriter(peer: PeerID(bytes: SHA256.hash(Array("shoal-bench-\(name)".utf8))), store: store, clock: try NodeClock(store: store))
        var i = 0
        while i < bodies.count {
            let end = min(bodies.count, i + 100)
            _ = try writer.putAll(collection, try (i..<end).map { (try DocumentID("doc-\($0)"), bodies[$0]) })
            i = end
        }
        let c = UplinkRunner(writer: writer, group: group + ".backlog-\(name)", servers: [server.url], collections: [collection], name: "shoal-bench-\(name)", pull: pull,
                             logger: Logger(sink: StderrLogSink(journal: false), level: .warning))
        let cpu0 = MQTTBenchmark.cpuSeconds(getpid(), thread: "uplink")
        let started = ContinuousClock.now
        try c.start()
        defer { c.stop() }
        var last: Int64 = -1
        var lastProgress = monotonicMillis()
        var seconds: Double?
        while true {
            let published = c.board.snapshot?.published ?? 0
            if published >= Int64(bodies.count) {
                seconds = (ContinuousClock.now - started).secondsDouble
                break
            }
            if published != last {
                last = published
                lastProgress = monotonicMillis()
            } else if monotonicMillis() - lastProgress > settings.stallSeconds * 1000 {
                break
            }
            usleep(5_000)
        }
        return (seconds, c.board.snapshot?.published ?? 0, MQTTBenchmark.cpuSeconds(getpid(), thread: "uplink") - cpu0)
    }

    // MARK: - The server

    /// nats-server with JetStream in `directory`, on a free loopback port, monitoring on another.
    final class Server {
        let child: ChildProcess
        let port: UInt16
        let monitorPort: UInt16
        var url: String { "nats://127.0.0.1:\(port)" }

        init(directory: String, binary: String) throws {
            try Files.makeDirectories(directory + "/js")
            let p1 = try TCPListener(ipv4: "127.0.0.1", port: 0), p2 = try TCPListener(ipv4: "127.0.0.1", port: 0)
            port = p1.port
            monitorPort = p2.port
            p1.close()
            p2.close()
            let log = directory + "/nats.log"
            child = try ChildProcess(path: binary, arguments: ["-a", "127.0.0.1", "-p", String(port), "-m", String(monitorPort), "-js", "-sd", directory + "/js"],
                                     output: log)
            let deadline = monotonicMillis() + 20_000
            while monotonicMillis() < deadline {
                if child.exitStatus() != nil { break }
                if (try? NATSClient.connect(NATSClient.Options(servers: ["nats://127.0.0.1:\(port)"], name: "shoal-bench-probe"))) != nil,
                   (try? get("/varz")) != nil { return }
                usleep(50_000)
            }
            let out = (try? Files.read(log)) ?? ""
            _ = child.stop()
            throw ConfigurationFailure(message: "nats-server did not listen on 127.0.0.1:\(port) (monitoring \(monitorPort)) within 20 s; it printed:\n\(out.suffix(1500))")
        }

        func stop() { _ = child.stop() }

        /// One GET of the monitoring endpoint, its body as JSON.
        func get(_ path: String) throws -> JSONValue {
            let s = try TCPStream.connect(ipv4: "127.0.0.1", port: monitorPort, timeoutMillis: 2000)
            defer { s.close() }
            let request = Array("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
            var sent = 0
            while sent < request.count {
                sent += try request.withUnsafeBytes { try s.write(UnsafeRawBufferPointer(rebasing: $0[sent...]), timeoutMillis: 2000) }
            }
            var response: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = try buffer.withUnsafeMutableBytes { try s.read(into: $0, timeoutMillis: 5000) }
                if n <= 0 { break }
                response += buffer[0..<n]
            }
            guard let start = response.indices.first(where: { $0 + 3 < response.count && response[$0...($0 + 3)].elementsEqual([13, 10, 13, 10]) }) else {
                throw ConfigurationFailure(message: "nats-server's monitoring endpoint gave no HTTP response for \(path)")
            }
            return try JSONValue.parse(bytes: Array(response[(start + 4)...]))
        }

        /// Each named connection's counters: message bytes (headers and payloads, as nats-server
        /// counts them: /connz) and the TCP socket's bytes (protocol included: `ss -ti`).
        func connections(directory: String) throws -> [String: Traffic] {
            let wire = socketBytes(directory: directory)
            var out: [String: Traffic] = [:]
            for c in try get("/connz?limit=1024")["connections"]?.arrayValue ?? [] {
                guard let name = c["name"]?.stringValue else { continue }
                var t = Traffic(inBytes: c["in_bytes"]?.int64Value ?? 0, outBytes: c["out_bytes"]?.int64Value ?? 0,
                                inMessages: c["in_msgs"]?.int64Value ?? 0, outMessages: c["out_msgs"]?.int64Value ?? 0)
                if let port = c["port"]?.int64Value, let w = wire[port] {
                    t.wireIn = w.received
                    t.wireOut = w.sent
                }
                out[name] = t
            }
            return out
        }

        /// The server's established sockets by the client's port: bytes received and sent
        /// (`ss -tinH`, Linux ≥ 4.1 counters). Empty when ss is missing.
        func socketBytes(directory: String) -> [Int64: (received: Int64, sent: Int64)] {
            guard let ss = ChildProcess.find("ss") else { return [:] }
            let file = directory + "/ss.txt"
            guard let c = try? ChildProcess(path: ss, arguments: ["-tinH", "state", "established", "sport", "=", ":\(port)"], output: file) else { return [:] }
            _ = c.wait()
            var out: [Int64: (received: Int64, sent: Int64)] = [:]
            var peer: Int64?
            for line in ((try? Files.read(file, max: 4 << 20)) ?? "").split(separator: "\n") {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                if !line.contains("bytes_"), fields.count >= 4, let last = fields.last, let colon = last.lastIndex(of: ":") {
                    peer = Int64(last[last.index(after: colon)...])
                    continue
                }
                guard let p = peer else { continue }
                func value(_ key: String) -> Int64? {
                    fields.first { $0.hasPrefix(key + ":") }.flatMap { Int64($0.dropFirst(key.count + 1)) }
                }
                if let received = value("bytes_received"), let sent = value("bytes_sent") { out[p] = (received, sent) }
                peer = nil
            }
            return out
        }
    }

    /// `nats-server --version`'s line.
    static func serverVersion(_ binary: String, directory: String) -> String {
        let out = directory + "/nats-version.txt"
        guard let c = try? ChildProcess(path: binary, arguments: ["--version"], output: out) else { return "?" }
        _ = c.wait()
        return ((try? Files.read(out)) ?? "?").split(separator: "\n").first.map(String.init) ?? "?"
    }
}

extension UplinkBenchmark.Traffic {
    static func delta(_ before: Self?, _ after: Self?) -> Self {
        guard let after else { return Self() }
        let b = before ?? Self()
        let wired = after.wireIn >= 0 && b.wireIn >= 0
        return Self(inBytes: after.inBytes - b.inBytes, outBytes: after.outBytes - b.outBytes,
                    inMessages: after.inMessages - b.inMessages, outMessages: after.outMessages - b.outMessages,
                    wireIn: wired ? after.wireIn - b.wireIn : -1, wireOut: wired ? after.wireOut - b.wireOut : -1)
    }
}
