import Synchronization
import Testing
import ShoalCore
import ShoalGateway
import ShoalMesh
import ShoalReplication
import ShoalRuntime
import ShoalStore
import ShoalSupervision
import ShoalTesting
import ShoalTLS

/// A transport the runtime has never seen, written here against `Transport` alone: two drivers
/// find each other and replicate over it, so adding a transport needs no change in the driver.
@Suite("Transport interface")
struct TransportDoubleTests {
    /// Where the double's peers meet: who advertises, and each one's transport.
    final class Wire: Sendable {
        let members = Mutex<[PeerID: PipeTransport]>([:])
    }

    /// Links as memory pipes; discovery by a registry instead of a radio. It records what the
    /// driver asked of it.
    final class PipeTransport: Transport, @unchecked Sendable {  // host set once in start(), before any thread
        let kinds: Set<MeshTransport> = [.wifi]
        let wire: Wire
        let serverTLS: TLSContext
        let clientTLS: TLSContext
        var host: (any TransportHost)?
        let asked = Mutex<[String]>([])
        /// Our ends of the links to each peer (`breakLinks` fails them).
        let ends = Mutex<[PeerID: [BreakableStream]]>([:])

        convenience init(wire: Wire, identity: Identity, authenticator: PeerAuthenticator) throws {
            try self.init(wire: wire, credentials: TLSCredentials(identity), authenticator: authenticator)
        }

        init(wire: Wire, credentials: TLSCredentials, authenticator: PeerAuthenticator) throws {
            self.wire = wire
            serverTLS = try TLSContext(role: .server, credentials: credentials, authenticator: authenticator)
            clientTLS = try TLSContext(role: .client, credentials: credentials, authenticator: authenticator)
        }

        func start(host: any TransportHost) throws { self.host = host }

        func advertise(_ kind: MeshTransport, _ on: Bool) {
            guard let host else { return }
            asked.withLock { $0.append("advertise \(on)") }
            wire.members.withLock { $0[host.me] = on ? self : nil }
            if on { host.post(.advertising(kind, ok: true, reason: nil)) }
        }

        func scan(_ kind: MeshTransport, _ on: Bool) {
            guard let host, on else { return }
            asked.withLock { $0.append("scan") }
            // Whoever advertises now is heard; one who starts later is heard on our next phase,
            // or dials us itself.
            for peer in wire.members.withLock({ Array($0.keys) }) where peer != host.me {
                host.post(.discovered(peer, kind, probe: nil))
            }
        }

        func dial(_ peer: PeerID, over kind: MeshTransport) {
            guard let host else { return }
            asked.withLock { $0.append("dial") }
            guard let callee = wire.members.withLock({ $0[peer] }), let calleeHost = callee.host else {
                return host.post(.dialFailed(peer, kind, reason: "not on the wire"))
            }
            let (a, b) = MemoryPipe.pair()
            let mine = BreakableStream(a), theirs = BreakableStream(b)
            ends.withLock { $0[peer, default: []].append(mine) }
            callee.ends.withLock { $0[host.me, default: []].append(theirs) }
            calleeHost.spawn("test-accept") { calleeHost.acceptAndRun(theirs, over: kind, from: "over the test wire", context: callee.serverTLS) }
            host.spawn("test-dial") {
                guard let session = host.handshake(mine, expecting: peer, over: kind, at: "the test wire", context: self.clientTLS) else { return }
                host.run(LinkIO(id: host.newLinkID(), session: session, stream: mine, address: nil, transport: kind), outgoing: true)
            }
        }

        func stop() {
            if let host { wire.members.withLock { $0[host.me] = nil } }
        }

        /// Our links to `peer` fail with an I/O error at their next read or write.
        func breakLinks(to peer: PeerID) {
            for end in ends.withLock({ $0.removeValue(forKey: peer) ?? [] }) { end.broken.store(true, ordering: .relaxed) }
        }
    }

    /// A pipe end that fails on demand, as a link whose radio or TCP connection broke.
    final class BreakableStream: LinkStream {
        let pipe: MemoryPipeEnd
        let broken = Atomic<Bool>(false)
        init(_ pipe: MemoryPipeEnd) { self.pipe = pipe }

        func read(into buffer: UnsafeMutableRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
            if broken.load(ordering: .relaxed) { throw .failed("connection reset (test)") }
            let n = try pipe.read(into: buffer, timeoutMillis: timeoutMillis)
            if broken.load(ordering: .relaxed) { throw .failed("connection reset (test)") }
            return n
        }

        func write(_ bytes: UnsafeRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
            if broken.load(ordering: .relaxed) { throw .failed("connection reset (test)") }
            return try pipe.write(bytes, timeoutMillis: timeoutMillis)
        }

        func close() { pipe.close() }
        func wake() { pipe.wake() }
    }

    /// A gateway core with quick mesh timings (dials and discovery phases in tens of ms).
    static func core(_ peer: PeerID, store: DocumentStore, seed: UInt64) throws -> GatewayCore {
        var mesh = MeshSettings()
        mesh.advertisingDelayMillis = 20
        mesh.connectDelayMillis = 20
        mesh.discoveryPauseMillis = 200
        mesh.discoveryPauseJitterMillis = 0
        mesh.discoveryMillis = 200
        mesh.initialDiscoveryMillis = 200
        return GatewayCore(peer: peer, group: "transport.double", store: store, clock: try NodeClock(store: store),
                           collections: [CollectionPolicy(name: .default)], replication: ReplicationSettings(), mesh: mesh,
                           sequenceBase: 1, fallbackSeed: seed)
    }

    /// One gateway on the test transport, started, with `documents` written before it starts.
    static func gateway(_ id: Identity, store: DocumentStore, seed: UInt64, documents: Int, wire: Wire,
                        authenticator: PeerAuthenticator, report: SupervisionReport? = nil) throws -> (ReplicationDriver, PipeTransport) {
        let core = try Self.core(id.peerID, store: store, seed: seed)
        for n in 0..<documents { _ = try core.node.writer.put(.default, id: DocumentID("d\(n)"), body: #"{"n":\#(n)}"#) }
        let transport = try PipeTransport(wire: wire, identity: id, authenticator: authenticator)
        let driver = try ReplicationDriver(core: core, host: QuietHost(), serverTLS: transport.serverTLS, clientTLS: transport.clientTLS,
                                           children: report.map { ($0, "root/replication-\(id.peerID.short)") })
        try driver.start(transports: [transport], missing: [.bluetooth: "not in this test"])
        return (driver, transport)
    }

    @Test("two drivers find each other and replicate over a transport written in the test")
    func newTransportNeedsNoDriverChange() async throws {
        let tmp = TemporaryDirectory(prefix: "shoal-transport-double")
        defer { tmp.remove() }
        let ids = try ["a", "b"].map { try Identity.createSelfSigned(.init(commonName: "double-\($0)")) }
        let auth = PeerAuthenticator.trust(allowedPeers: Set(ids.map(\.peerID)))
        let wire = Wire()
        var drivers: [ReplicationDriver] = []
        var transports: [PipeTransport] = []
        var stores: [DocumentStore] = []
        for (i, id) in ids.enumerated() {
            let store = try DocumentStore.open(StoreOptions(path: tmp.file("\(i).db")), logger: Logger(sink: MemoryLogSink(), level: .none))
            try store.createCollection(.default)
            let (driver, transport) = try Self.gateway(id, store: store, seed: UInt64(i + 1), documents: i == 1 ? 25 : 0, wire: wire, authenticator: auth)
            drivers.append(driver)
            transports.append(transport)
            stores.append(store)
        }
        let replicated = await eventually(within: 60) { ((try? stores[0].stats().documents) ?? 0) == 25 }
        for d in drivers { d.stop() }
        #expect(replicated, "a pulled b's 25 documents over the test transport")
        let asked = transports.flatMap { t in t.asked.withLock { $0 } }
        #expect(asked.contains("advertise true") && asked.contains("scan") && asked.contains("dial"), "\(asked)")
        for s in stores { s.close() }
    }
}
