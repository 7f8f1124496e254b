import Foundation
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalReplication
@testable import ShoalRuntime
import ShoalStore
import ShoalThreads
import ShoalTesting
import ShoalUplink
import ShoalWire
import Testing

/// The uplink's bridge in-process against a real nats-server (JetStream on, a free loopback port):
/// gateways that never meet on a mesh converge through the hub, concurrent edits resolve alike on
/// both and on the hub, and messages that are not Shoal's are skipped and counted.
@Suite(.serialized) struct UplinkBridgeTests {
    static let collection = try! CollectionName(parsing: "sensors.state")

    /// One gateway without a mesh: a store, a writer and an uplink bridge on a thread.
    final class Node: @unchecked Sendable {  // used from the test's thread; the bridge runs on its own
        let store: DocumentStore
        let writer: LocalWriter
        let board = UplinkBoard()
        var bridge: UplinkBridge?
        var finished: Locked<Bool>?

        init(dir: String, name: String) throws {
            store = try DocumentStore.open(StoreOptions(path: "\(dir)/\(name).db"), logger: Logger(sink: MemoryLogSink(), level: .none))
            _ = try store.createCollection(UplinkBridgeTests.collection)
            let peer = PeerID(bytes: SHA256.hash(Array(name.utf8)))
            writer = LocalWriter(peer: peer, store: store, clock: try NodeClock(store: store))
        }

        func start(port: UInt16, settings: UplinkSettings? = nil) {
            var s = settings ?? UplinkSettings()
            if s.servers.isEmpty { s.servers = ["nats://127.0.0.1:\(port)"] }
            s.reconnectMinMillis = 100
            s.reconnectMaxMillis = 500
            if s.collections.isEmpty { s.collections = [UplinkCollection(name: UplinkBridgeTests.collection)] }
            let b = UplinkBridge(settings: s, group: "test.uplink", site: [SiteConfig.CollectionSettings(name: UplinkBridgeTests.collection)],
                                 writer: writer, options: NATSClient.Options(servers: s.servers, name: "test"),
                                 logger: Logger(sink: StderrLogSink(journal: false), level: .warning), board: board, events: MeshEventLog())
            bridge = b
            let finished = Locked(false)
            self.finished = finished
            Thread.detachNewThread { b.run(); finished.withLock { $0 = true } }
        }

        func stop() {
            guard let bridge, let finished else { return }
            bridge.stop()
            let deadline = Date().addingTimeInterval(20)
            while !finished.withLock({ $0 }), Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
            self.bridge = nil
        }

        func put(_ id: String, _ body: String) throws { try writer.put(UplinkBridgeTests.collection, id: try DocumentID(id), body: body) }
        func get(_ id: String) throws -> StoredDocument? { try store.get(UplinkBridgeTests.collection, id: try DocumentID(id)) }
    }

    static func eventually(_ what: String, within seconds: Double = 60, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        Issue.record("not within \(seconds) s: \(what)")
        throw CancellationError()
    }

    @Test func callbackBoxesAreReleased() throws {
        guard let hub = try JetStreamServer.start() else { return }
        try Self.eventually("no boxes from the server's start") { NATSClient.liveCallbackBoxes == 0 }
        for _ in 0..<3 { _ = try hub.client() }
        hub.stop()
        for _ in 0..<3 { _ = try? NATSClient.connect(NATSClient.Options(servers: ["nats://127.0.0.1:\(hub.port)"], name: "closed")) }
        try Self.eventually("every connection's callback boxes released, failed connects' too") { NATSClient.liveCallbackBoxes == 0 }
    }

    /// libnats calls back on its own threads around a connection's close: an ordered consumer that
    /// misses the server's heartbeats is recreated on a libnats thread, whose failure reaches the
    /// error handler; acknowledgements run on a delivery thread while the closed callback runs on
    /// another. The callbacks hold a token, not the address of what they reach, so one that comes
    /// late finds nothing (with addresses, a late one was a use after free that killed a gateway in
    /// the uplink lab). Here: heartbeats missed on a frozen server, the connection closed with the
    /// consumer open and its recreation under way; the process survives and nothing is left behind.
    @Test func callbacksAfterTheConnectionClosedReachNothingFreed() throws {
        guard let hub = try JetStreamServer.start() else { return }
        defer { hub.signal(SIGCONT); hub.stop() }
        var options = NATSClient.Options(servers: ["nats://127.0.0.1:\(hub.port)"], name: "late")
        options.requestTimeoutMillis = 2000
        var client: NATSClient? = try NATSClient.connect(options)
        let stream = "LATE"
        _ = try client!.ensureStream(name: stream, subjects: ["late.*"], replicas: 1, maxMessageBytes: 1 << 20)
        let delivered = Locked(0)
        var sub: NATSSubscription? = try client!.orderedConsumer(stream: stream, filter: "late.*", startSequence: 1) { _ in
            delivered.withLock { $0 += 1 }
        }
        #expect(client!.publish([PublishRequest(subject: "late.a", headers: [], payload: Array("1".utf8), expectedLastSubjectSequence: nil)]).count == 1)
        try Self.eventually("the consumer delivers") { delivered.withLock { $0 } == 1 }
        // Frozen, the server sends no heartbeat: within about two heartbeat intervals (5 s) libnats
        // finds them missed and starts recreating the consumer, which waits for the frozen server.
        hub.signal(SIGSTOP)
        try Self.eventually("libnats finds the heartbeats missed", within: 40) { client!.takeServerError()?.contains("Heartbeat") == true }
        client = nil
        sub?.close()
        sub = nil
        // The recreation's failure is told while the server stays frozen (on this machine it came
        // just before the closed callback: the order is libnats's, not promised).
        Thread.sleep(forTimeInterval: 4)
        hub.signal(SIGCONT)
        try Self.eventually("every connection's callback boxes released") { NATSClient.liveCallbackBoxes == 0 }
        #expect(delivered.withLock { $0 } == 1)
    }

    @Test func twoGatewaysConvergeThroughTheHub() throws {
        guard let hub = try JetStreamServer.start() else { return }
        defer { hub.stop() }
        let dir = TemporaryDirectory()
        let a = try Node(dir: dir.path, name: "a"), b = try Node(dir: dir.path, name: "b")
        a.start(port: hub.port)
        b.start(port: hub.port)
        defer { a.stop(); b.stop() }
        for i in 0..<200 { try a.put("doc-\(i)", "{\"n\":\(i)}") }
        try b.put("from-b", "{\"b\":true}")
        try Self.eventually("b holds a's 200 documents and a holds b's") {
            try b.store.count(Self.collection) == 201 && a.store.count(Self.collection) == 201
        }
        #expect(try b.get("doc-7")?.body == "{\"n\":7}")
        #expect(try b.get("doc-7")?.version == a.get("doc-7")?.version)
        // Nothing doubled: each version went up once; what came down was not sent back up.
        try Self.eventually("the boards settle") { (a.board.snapshot?.published ?? 0) == 200 && (b.board.snapshot?.published ?? 0) == 1 }
        let state = try hub.client().streamState(HubLayout(group: "test.uplink").streamName(Self.collection))
        #expect(state.messages == 201)
    }

    @Test func concurrentEditsResolveAlikeOnBothAndOnTheHub() throws {
        guard let hub = try JetStreamServer.start() else { return }
        defer { hub.stop() }
        let dir = TemporaryDirectory()
        let a = try Node(dir: dir.path, name: "a"), b = try Node(dir: dir.path, name: "b")
        a.start(port: hub.port)
        b.start(port: hub.port)
        for i in 0..<20 { try a.put("d\(i)", "{\"v\":0}") }
        try Self.eventually("b has the 20 documents") { try b.store.count(Self.collection) == 20 }
        a.stop()
        b.stop()
        // Both edit the same documents while apart; then both come back.
        for i in 0..<20 {
            try a.put("d\(i)", "{\"v\":\"a\(i)\"}")
            try b.put("d\(i)", "{\"v\":\"b\(i)\"}")
        }
        a.start(port: hub.port)
        b.start(port: hub.port)
        defer { a.stop(); b.stop() }
        let client = try hub.client()
        let layout = HubLayout(group: "test.uplink")
        try Self.eventually("a, b and the hub hold the same version of every document") {
            for i in 0..<20 {
                guard let x = try a.get("d\(i)"), let y = try b.get("d\(i)"), x.version == y.version, x.body == y.body,
                      let m = try client.lastMessage(stream: layout.streamName(Self.collection), subject: layout.subject(Self.collection, id: "d\(i)")),
                      m.headers[HubHeader.version] == HubHeader.hex(x.version), String(decoding: m.payload, as: UTF8.self) == x.body
                else { return false }
            }
            return true
        }
        let conflicts = (a.board.snapshot?.conflicts ?? 0) + (b.board.snapshot?.conflicts ?? 0)
        #expect(conflicts >= 20)
    }

    static func includes(_ a: [UInt8]?, _ b: [UInt8]?) -> Bool {
        guard let a, let b, let x = try? DocumentVersion(decoding: a), let y = try? DocumentVersion(decoding: b) else { return false }
        let order = x.vector.compare(y.vector)
        return order == .dominates || order == .equal
    }

    @Test func pushOnlyNeverOverwritesTheHubUnmerged() throws {
        guard let hub = try JetStreamServer.start() else { return }
        defer { hub.stop() }
        let dir = TemporaryDirectory()
        let a = try Node(dir: dir.path, name: "a"), b = try Node(dir: dir.path, name: "b")
        var pushOnly = UplinkSettings()
        var c = UplinkCollection(name: Self.collection)
        c.pull = false
        pushOnly.collections = [c]
        b.start(port: hub.port)
        defer { b.stop() }
        try b.put("d", "{\"b\":1}")
        try Self.eventually("b's version is on the hub") { (b.board.snapshot?.published ?? 0) == 1 }
        let bFirst = try b.get("d")?.version
        // a writes the same document without ever having seen b's: concurrent versions.
        try a.put("d", "{\"a\":1}")
        let aFirst = try a.get("d")?.version
        a.start(port: hub.port, settings: pushOnly)
        defer { a.stop() }
        try Self.eventually("the hub's version includes both, and b takes it") {
            let v = try b.get("d")?.version
            return Self.includes(v, bFirst) && Self.includes(v, aFirst)
        }
        #expect(try a.get("d")?.version == aFirst, "a, push only, keeps its own")
        try a.put("d", "{\"a\":2}")
        let aSecond = try a.get("d")?.version
        try Self.eventually("a's next write reaches b merged, b's part kept") {
            let v = try b.get("d")?.version
            return Self.includes(v, aSecond) && Self.includes(v, bFirst)
        }
    }

    @Test func foreignMessagesAreSkippedAndCounted() throws {
        guard let hub = try JetStreamServer.start() else { return }
        defer { hub.stop() }
        let dir = TemporaryDirectory()
        let a = try Node(dir: dir.path, name: "a")
        a.start(port: hub.port)
        defer { a.stop() }
        try a.put("mine", "{\"ok\":1}")
        try Self.eventually("a's document is on the hub") { (a.board.snapshot?.published ?? 0) == 1 }
        let layout = HubLayout(group: "test.uplink")
        let client = try hub.client()
        let good = HubHeader.hex(try a.get("mine")!.version)
        let origin = PeerID(bytes: SHA256.hash(Array("x".utf8))).description
        let bad: [PublishRequest] = [
            PublishRequest(subject: layout.subject(Self.collection, id: "no-headers"), headers: [], payload: Array("{}".utf8), expectedLastSubjectSequence: nil),
            PublishRequest(subject: layout.subject(Self.collection, id: "bad-version"), headers: [(HubHeader.version, "zz"), (HubHeader.origin, origin)],
                           payload: Array("{}".utf8), expectedLastSubjectSequence: nil),
            PublishRequest(subject: layout.subject(Self.collection, id: "not-json"), headers: [(HubHeader.version, good), (HubHeader.origin, origin)],
                           payload: Array("not json".utf8), expectedLastSubjectSequence: nil),
            PublishRequest(subject: layout.subject(Self.collection, id: "digest"), headers: [(HubHeader.version, good), (HubHeader.origin, origin)],
                           payload: Array("{\"other\":2}".utf8), expectedLastSubjectSequence: nil),
            PublishRequest(subject: layout.streamSubjects(Self.collection).replacingOccurrences(of: "*", with: "_ZZ"), headers: [],
                           payload: Array("{}".utf8), expectedLastSubjectSequence: nil),
        ]
        for r in client.publish(bad) { if case .stored = r {} else { Issue.record("the hub refused a test message: \(r)") } }
        try a.put("after", "{\"ok\":2}")
        try Self.eventually("the five foreign messages are skipped and counted") { (a.board.snapshot?.skipped["foreign"] ?? 0) == 5 }
        #expect(try a.store.count(Self.collection) == 2)
        #expect(try a.get("no-headers") == nil)
    }
}

/// Debian's nats-server with JetStream in a temporary directory, on a free loopback port.
final class JetStreamServer: @unchecked Sendable {  // one test's server
    let port: UInt16
    let dir: TemporaryDirectory
    private var process: ChildProcess?

    /// Nil (and the test passes vacuously, noting why) when nats-server is not installed.
    static func start() throws -> JetStreamServer? {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nats-server") else {
            print("skipped: /usr/sbin/nats-server is not installed (make deps)")
            return nil
        }
        return try JetStreamServer()
    }

    private init() throws {
        dir = TemporaryDirectory()
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(probe, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(probe, $0, &len) } }
        port = UInt16(bigEndian: addr.sin_port)
        close(probe)
        process = try ChildProcess(path: "/usr/sbin/nats-server", arguments: ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", dir.path + "/js"],
                                   output: dir.path + "/nats.log")
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if (try? NATSClient.connect(NATSClient.Options(servers: ["nats://127.0.0.1:\(port)"], name: "probe"))) != nil { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw NATSError(call: "start nats-server", status: (try? String(contentsOfFile: dir.path + "/nats.log", encoding: .utf8)) ?? "no log")
    }

    func client() throws -> NATSClient { try NATSClient.connect(NATSClient.Options(servers: ["nats://127.0.0.1:\(port)"], name: "test")) }

    func stop() { _ = process?.stop() }

    /// Sends `signal` to the server (SIGSTOP freezes it: connections stay open, nothing answers).
    func signal(_ signal: Int32) { if let pid = process?.pid { kill(pid, signal) } }
}
