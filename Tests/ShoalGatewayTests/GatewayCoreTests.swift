import Glibc
import Synchronization
import Testing
import ShoalCore
import ShoalGateway
import ShoalMedium
import ShoalMesh
import ShoalReplication
import ShoalRuntime
import ShoalStore
import ShoalTesting
import ShoalTLS

/// The runtime and the simulator run one gateway core: what the runtime's driver fed its core in
/// a real run (threads, mutual TLS, the in-process medium) replays through a fresh core built as
/// the simulator builds its nodes', and gives the same actions, one for one.
@Suite("Gateway core")
struct GatewayCoreTests {
    final class Recording: Sendable {
        let calls = Mutex<[(input: GatewayCore.Input, now: UInt64, actions: [String])]>([])
    }

    static let collection = CollectionName.default

    /// A gateway's parts: its store (under `dir`), clock and core. `wall` fixes the wall clock, so
    /// a replay reads the same time.
    static func core(_ identity: Identity, dir: String, wall: UInt64?) throws -> GatewayCore {
        let store = try DocumentStore.open(StoreOptions(path: dir + "/shoal.db"), logger: Logger(sink: MemoryLogSink(), level: .none))
        try store.createCollection(collection)
        let clock = if let wall { try NodeClock(store: store, wallMillis: { wall }) } else { try NodeClock(store: store) }
        var mesh = MeshSettings()
        mesh.randomSeed = 7
        mesh.advertisingDelayMillis = 50
        mesh.connectDelayMillis = 50
        return GatewayCore(peer: identity.peerID, group: "core.replay", store: store, clock: clock,
                           collections: [CollectionPolicy(name: collection)], replication: ReplicationSettings(), mesh: mesh,
                           sequenceBase: 1_000, fallbackSeed: 1)
    }

    static func copy(_ from: String, to: String) throws {
        let input = try #require(fopen(from, "rb"))
        defer { fclose(input) }
        let output = try #require(fopen(to, "wb"))
        defer { fclose(output) }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = fread(&buffer, 1, buffer.count, input)
            if n == 0 { break }
            #expect(fwrite(buffer, 1, n, output) == n)
        }
    }

    @Test("a runtime run, replayed through a fresh core, gives the same actions one for one")
    func runtimeRunReplays() async throws {
        let tmp = TemporaryDirectory(prefix: "shoal-core-replay")
        defer { tmp.remove() }
        let a = try Identity.createSelfSigned(.init(commonName: "replay-a"))
        let b = try Identity.createSelfSigned(.init(commonName: "replay-b"))
        let auth = PeerAuthenticator.trust(allowedPeers: [a.peerID, b.peerID])
        let wall = NodeClock.systemWallMillis()
        // A's store as it is before the run, copied for the replay (same epoch, same contents).
        for d in ["a", "replay", "b"] { mkdir(tmp.file(d), 0o700) }
        let fresh = try Self.core(a, dir: tmp.file("a"), wall: wall)
        fresh.node.store.close()
        try Self.copy(tmp.file("a/shoal.db"), to: tmp.file("replay/shoal.db"))

        let coreA = try Self.core(a, dir: tmp.file("a"), wall: wall)
        let coreB = try Self.core(b, dir: tmp.file("b"), wall: nil)
        for i in 0..<40 { _ = try coreB.node.writer.put(Self.collection, id: DocumentID("doc-\(i)"), body: #"{"n":\#(i)}"#) }

        let medium = LocalMedium()
        let recording = Recording()
        let host = QuietHost()
        let storeA = coreA.node.store
        let driverA = try ReplicationDriver(core: coreA, host: host, serverTLS: try TLSContext(role: .server, identity: a, authenticator: auth),
                                            clientTLS: try TLSContext(role: .client, identity: a, authenticator: auth),
                                            tap: { input, now, actions in recording.calls.withLock { $0.append((input, now, actions.map { "\($0)" })) } })
        let driverB = try ReplicationDriver(core: coreB, host: host, serverTLS: try TLSContext(role: .server, identity: b, authenticator: auth),
                                        clientTLS: try TLSContext(role: .client, identity: b, authenticator: auth))
        driverA.start(medium: medium)
        driverB.start(medium: medium)
        let pulled = await eventually(within: 60) { ((try? storeA.stats().documents) ?? 0) >= 40 }
        driverA.stop()
        driverB.stop()
        #expect(pulled, "A pulled B's 40 documents over the in-process medium")

        let calls = recording.calls.withLock { $0 }
        #expect(calls.count >= 5, "a run has at least start, discovery, a link, frames and a close")
        #expect(calls.contains { if case .linkOpened = $0.input { return true }; return false })
        #expect(calls.contains { if case .frames = $0.input { return true }; return false })
        storeA.close()

        let replay = try Self.core(a, dir: tmp.file("replay"), wall: wall)
        var differences: [String] = []
        for (i, call) in calls.enumerated() {
            let actions = replay.handle(call.input, now: call.now).map { "\($0)" }
            if actions != call.actions && differences.count < 3 {
                differences.append("call \(i) (\(call.input)) at \(call.now): runtime \(call.actions), replay \(actions)")
            }
        }
        #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
        #expect(try replay.node.store.stats().documents == 40)
        replay.node.store.close()
    }
}
