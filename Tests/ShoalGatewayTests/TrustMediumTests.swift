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
import ShoalThreads
import ShoalTLS
import ShoalTrust

/// Revocation through the runtime's own driver on the in-process medium, which carries both of
/// the mesh's radios: a revoke entry imported at one gateway reaches the others through `_trust`,
/// each closes its links to the revoked peer at once, and the revoked peer — its Wi-Fi turned off
/// so it falls back to Bluetooth LE — is refused over Bluetooth LE too, by every gateway.
@Suite("Fleet trust over the in-process medium")
struct TrustMediumTests {
    final class Gateway: Sendable {
        let identity: Identity
        let book: TrustBook
        let store: DocumentStore
        let driver: ReplicationDriver
        let follower: (task: Task<Void, Never>, feed: AsyncStream<TrustBook.Change>.Continuation)
        /// Links opened to each peer and whether the core closed it in the same step (revoked).
        let opened = Locked<[(peer: PeerID, transport: MeshTransport, atMillis: UInt64, closedAtOnce: Bool)]>([])
        let closedRevoked = Locked<[(peer: PeerID, atMillis: UInt64)]>([])
        /// Its dials that the other side refused or that failed, by transport.
        let refusals = Locked<[MeshTransport]>([])

        init(_ identity: Identity, dir: String, key: AdminPublicKey, medium: LocalMedium) throws {
            self.identity = identity
            book = TrustBook(site: .init(adminKeys: [key]))
            store = try DocumentStore.open(StoreOptions(path: dir + "/shoal.db"), logger: Logger(sink: MemoryLogSink(), level: .none))
            try store.createCollection(.trust)
            try store.createCollection(.default)
            var policy = CollectionPolicy(name: .trust)
            policy.pullFilter = book.trustFilter
            policy.resolver = TrustBook.resolver
            var user = CollectionPolicy(name: .default)
            user.pullFilter = book.writerFilter(nil)
            var mesh = MeshSettings()
            mesh.transports = [.wifi, .bluetooth]
            mesh.advertisingDelayMillis = 50
            mesh.connectDelayMillis = 50
            mesh.backoffMillis = 300
            mesh.wifiAttemptsBeforeFallback = 1
            mesh.initialDiscoveryMillis = 2_000
            mesh.discoveryMillis = 2_000
            mesh.discoveryPauseMillis = 200
            mesh.discoveryPauseJitterMillis = 50
            let core = GatewayCore(peer: identity.peerID, group: "trust.medium", store: store, clock: try NodeClock(store: store),
                                   collections: [policy, user], replication: ReplicationSettings(), mesh: mesh,
                                   sequenceBase: 1_000, fallbackSeed: UInt64(identity.peerID.description.prefix(12), radix: 16) ?? 1)
            let opened = self.opened, closedRevoked = self.closedRevoked, refusals = self.refusals
            driver = try ReplicationDriver(core: core, host: QuietHost(),
                                           serverTLS: try TLSContext(role: .server, identity: identity, authenticator: book.authenticator),
                                           clientTLS: try TLSContext(role: .client, identity: identity, authenticator: book.authenticator),
                                           tap: { input, now, actions in
                                               let closes = actions.compactMap { a -> LinkID? in
                                                   if case .close(let id, let why) = a, why == "the peer is revoked" { return id }
                                                   return nil
                                               }
                                               if case .linkOpened(let id, let peer, let t, _) = input {
                                                   opened.withLock { $0.append((peer, t, now, closes.contains(id))) }
                                               }
                                               if case .refused(_, let t, _) = input { refusals.withLock { $0.append(t) } }
                                               if case .dialFailed(_, let t, _) = input { refusals.withLock { $0.append(t) } }
                                               if case .peersRevoked(let peers) = input, !closes.isEmpty {
                                                   closedRevoked.withLock { for p in peers { $0.append((p, now)) } }
                                               }
                                           })
            follower = driver.follow(book)
            driver.start(medium: medium)
        }

        /// Records an entry here as `shoal trust import` does (judged, then written to `_trust`).
        func record(_ entry: TrustEntry) throws {
            let writer = LocalWriter(peer: identity.peerID, store: store, clock: try NodeClock(store: store))
            _ = try book.record(entry) { id, body in _ = try writer.put(.trust, id: try DocumentID(id), body: body) }
        }

        func stop() async {
            driver.stop()
            follower.feed.finish()
            await follower.task.value
            store.close()
        }
    }

    @Test("a revoke reaches every gateway through _trust; links to the revoked peer close on both radios and never reopen")
    func revokeOverBothRadios() async throws {
        let tmp = TemporaryDirectory(prefix: "shoal-trust-medium")
        defer { tmp.remove() }
        let admin = try AdminSigningKey.generate()
        let ids = try (0..<3).map { try Identity.createSelfSigned(.init(commonName: "trust-\($0)")) }
        let medium = LocalMedium()
        var serial: UInt64 = 0
        func sign(_ kind: TrustEntry.Kind, _ peer: PeerID) throws -> TrustEntry {
            serial += 1
            return try TrustEntry.signed(kind, subject: peer.description, serial: serial, issuedAt: Identity.now(), by: admin)
        }
        let allows = try ids.map { try sign(.allow, $0.peerID) }
        var gateways: [Gateway] = []
        for (i, id) in ids.enumerated() {
            let dir = tmp.file("g\(i)")
            mkdir(dir, 0o700)
            let g = try Gateway(id, dir: dir, key: admin.publicKey, medium: medium)
            for e in allows { try g.record(e) }
            gateways.append(g)
        }
        let (a, b, victim) = (gateways[0], gateways[1], gateways[2])
        // Everyone links to everyone (three gateways, three links at most each).
        let linked = await eventually(within: 30) {
            [a, b].allSatisfy { g in g.opened.withLock { $0.contains { $0.peer == victim.identity.peerID && !$0.closedAtOnce } } }
        }
        #expect(linked, "both gateways linked to the victim before the revocation")

        // The revoke is imported at A only; B learns it through _trust.
        let revoke = try sign(.revoke, victim.identity.peerID)
        let signedAt = monotonicMillis()
        try a.record(revoke)
        // Within 30 s, not 10: most runs take under 0.5 s from signing to both closes, but two CI
        // runs of 2026-12-07 took 13.6 s and (under ThreadSanitizer) 16.9 s; why is not known yet.
        let reached = await eventually(within: 30) { b.book.current().revokedPeers.contains(victim.identity.peerID) }
        #expect(reached, "B took the revoke entry from A")
        let closed = await eventually(within: 30) {
            [a, b].allSatisfy { g in g.closedRevoked.withLock { $0.contains { $0.peer == victim.identity.peerID } } }
        }
        #expect(closed, "both A and B closed their links to the victim")
        let afterRevocation = monotonicMillis()
        print("trust over the medium: signing → both gateways closed in \(afterRevocation - signedAt) ms (polled)")

        // The victim loses Wi-Fi: it falls back to Bluetooth LE, and is refused there too.
        medium.setTransport(victim.identity.peerID, .wifi, up: false)
        let triedBluetooth = await eventually(within: 20) { victim.refusals.withLock { $0.contains(.bluetooth) } }
        #expect(triedBluetooth, "the revoked gateway tried Bluetooth LE and was refused (its attempts: \(victim.refusals.withLock { $0 }))")
        for g in [a, b] {
            let reopened = g.opened.withLock { $0.filter { $0.peer == victim.identity.peerID && UInt64($0.atMillis) > UInt64(afterRevocation) && !$0.closedAtOnce } }
            #expect(reopened.isEmpty, "a link to the revoked peer stayed open after its revocation: \(reopened.map { "\($0.transport)" })")
        }
        // Its writes after the revocation reach no one.
        _ = try LocalWriter(peer: victim.identity.peerID, store: victim.store, clock: try NodeClock(store: victim.store))
            .put(.default, id: try DocumentID("after-revocation"), body: #"{"x":1}"#)
        // A and B still replicate with each other.
        _ = try LocalWriter(peer: a.identity.peerID, store: a.store, clock: try NodeClock(store: a.store))
            .put(.default, id: try DocumentID("from-a"), body: #"{"y":1}"#)
        let flowing = await eventually(within: 15) { (try? b.store.get(.default, id: try DocumentID("from-a"))) != nil }
        #expect(flowing, "A and B keep replicating")
        try await Task.sleep(for: .seconds(1))
        for g in [a, b] { #expect(try g.store.get(.default, id: try DocumentID("after-revocation")) == nil) }
        for g in gateways { await g.stop() }
    }
}
