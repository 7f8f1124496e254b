import Synchronization
import Testing
import ShoalCore
import ShoalGateway
import ShoalMesh
import ShoalReplication
import ShoalRuntime
import ShoalStore
import ShoalTesting
import ShoalTLS

/// Three running drivers that trust each other by peer id, on the test transport, all with their
/// clocks forced past one gateway's certificate: its renewed certificate (same key) reaches its
/// running driver through its credentials, and the others accept it on the next links.
@Suite("Identity renewal between running gateways")
struct IdentityRenewalTests {
    typealias Wire = TransportDoubleTests.Wire
    typealias PipeTransport = TransportDoubleTests.PipeTransport

    @Test("clocks forced past b's expiry: b's old certificate is refused, its renewed one (same peer id) is accepted on new links, and documents flow through all three again")
    func renewedCertificateKeepsReplicating() async throws {
        let tmp = TemporaryDirectory(prefix: "shoal-renewal")
        defer { tmp.remove() }
        let names = ["a", "b", "c"]
        let b = try Identity.createSelfSigned(.init(commonName: "renew-b", validDays: 2))
        let ids = ["a": try Identity.createSelfSigned(.init(commonName: "renew-a")), "b": b,
                   "c": try Identity.createSelfSigned(.init(commonName: "renew-c"))]
        let wall = ForcedWallClock(Identity.now())
        let wire = Wire()
        var drivers: [String: ReplicationDriver] = [:], transports: [String: PipeTransport] = [:]
        var stores: [String: DocumentStore] = [:], hosts: [String: LoggingHost] = [:]
        var writers: [String: LocalWriter] = [:]
        let bCredentials = TLSCredentials(b)
        for (i, name) in names.enumerated() {
            let id = ids[name]!
            let others = Set(names.filter { $0 != name }.map { ids[$0]!.peerID })
            let auth = PeerAuthenticator.trust(allowedPeers: others).checkingDates { wall.now }
            let store = try DocumentStore.open(StoreOptions(path: tmp.file("\(name).db")), logger: Logger(sink: MemoryLogSink(), level: .none))
            try store.createCollection(.default)
            let core = try TransportDoubleTests.core(id.peerID, store: store, seed: UInt64(i + 1))
            let writer = core.node.writer  // a Sendable value: the store and clock the driver shares
            let transport = try PipeTransport(wire: wire, credentials: name == "b" ? bCredentials : TLSCredentials(id), authenticator: auth)
            let host = LoggingHost()
            let driver = try ReplicationDriver(core: core, host: host, serverTLS: transport.serverTLS, clientTLS: transport.clientTLS)
            try driver.start(transports: [transport], missing: [.bluetooth: "not in this test"])
            drivers[name] = driver
            transports[name] = transport
            stores[name] = store
            hosts[name] = host
            writers[name] = writer
        }
        defer {
            for d in drivers.values { d.stop() }
            for s in stores.values { s.close() }
        }
        func everywhere(_ doc: String) async -> Bool {
            await eventually(within: 60) { stores.values.allSatisfy { (try? $0.get(.default, id: DocumentID(doc))) != nil } }
        }
        _ = try writers["b"]!.put(.default, id: DocumentID("before"), body: #"{"n":1}"#)
        #expect(await everywhere("before"))

        // A day and more later by every clock: b's certificate has expired. Its links break, and
        // the others refuse the old certificate when it dials again.
        wall.set(b.certificate.notAfter + 3600)
        for other in ["a", "c"] { transports["b"]!.breakLinks(to: ids[other]!.peerID) }
        _ = try writers["b"]!.put(.default, id: DocumentID("after"), body: #"{"n":2}"#)
        #expect(await eventually(within: 60) { hosts["a"]!.sink.contains("has expired") || hosts["c"]!.sink.contains("has expired") })

        // b renews over its key (as its identity service does) and hands it to its running driver.
        let renewed = try b.renewed(validDays: 365, now: wall.now)
        try bCredentials.present(renewed)
        #expect(renewed.peerID == b.peerID)
        _ = try writers["a"]!.put(.default, id: DocumentID("from-a"), body: #"{"n":3}"#)
        #expect(await everywhere("after"))
        #expect(await everywhere("from-a"))
        #expect(!hosts["b"]!.sink.contains("not in allowedPeers"))
    }
}
