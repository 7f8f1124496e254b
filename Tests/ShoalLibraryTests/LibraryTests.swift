// Only the public API: no @testable, no internal module.
import Glibc
import Shoal
import ShoalTesting
import Testing

/// A value behind a pthread mutex (ThreadSanitizer cannot see Synchronization's Mutex on Linux;
/// the runtime uses ShoalCore's Locked for the same reason, which the public API does not export).
final class Guarded<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var value: Value
    init(_ value: Value) { self.value = value; pthread_mutex_init(mutex, nil) }
    deinit { pthread_mutex_destroy(mutex); mutex.deallocate() }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}

/// What a stream delivered so far.
final class Recorder<T: Sendable>: Sendable {
    let items = Guarded<[T]>([])
    let task = Guarded<Task<Void, Never>?>(nil)
    init(_ stream: AsyncStream<T>) {
        let t = Task { [weak self] in for await e in stream { self?.items.withLock { $0.append(e) } } }
        task.withLock { $0 = t }
    }
    var all: [T] { items.withLock { $0 } }
    func contains(where p: (T) -> Bool) -> Bool { items.withLock { $0.contains(where: p) } }
    deinit { task.withLock { $0?.cancel() } }
}

func temporaryDirectory(_ name: String) -> String { TemporaryDirectory(prefix: "shoal-lib-\(name)").path }

func removeTree(_ path: String) { TemporaryDirectory.removeTree(path) }

/// Fast mesh timings for tests (the defaults wait seconds before advertising and connecting).
func fastMesh() -> MeshOptions {
    var m = MeshOptions()
    m.advertisingDelayMillis = 0
    m.connectDelayMillis = 50
    m.initialDiscoveryDurationSeconds = 0
    m.backoffMillis = 500
    return m
}

/// One gateway made with the library: identity, database, replicator.
struct Peer {
    let identity: TLSIdentity
    let database: Database
    let replicator: MultipeerReplicator
    let directory: String
    var id: PeerID { identity.peerID }

    static func make(_ name: String, medium: SimulatedMedium, allowed: @escaping @Sendable () -> Set<PeerID>,
                     transports: Set<MultipeerTransport> = [.wifi], identity: TLSIdentity? = nil,
                     collections: (Database) throws -> [MultipeerCollectionConfiguration] = { _ in [MultipeerCollectionConfiguration(collection: "fleet.readings")] },
                     mesh change: (inout MeshOptions) -> Void = { _ in }) throws -> Peer {
        let dir = temporaryDirectory(name)
        let identity = try identity ?? TLSIdentity.createIdentity(commonName: name)
        let db = try Database(directory: dir, identity: identity, fullDurability: false)
        var config = MultipeerReplicatorConfiguration(
            peerGroupID: "com.example.fleet", identity: identity,
            authenticator: MultipeerCertificateAuthenticator { peer, certs in allowed().contains(peer) && !certs.isEmpty },
            collections: try collections(db), database: db)
        config.transports = transports
        config.mesh = fastMesh()
        change(&config.mesh)
        config.medium = .simulated(medium)
        return Peer(identity: identity, database: db, replicator: try MultipeerReplicator(config: config), directory: dir)
    }

    func close() {
        replicator.stop()
        database.close()
        removeTree(directory)
    }
}

/// Merges top-level fields of both sides (the remote's value where both have one), and counts calls.
final class FieldMerger: MultipeerConflictResolver {
    let calls = Guarded(0)
    func resolve(peerID: PeerID, conflict: Conflict) -> ConflictResolution {
        calls.withLock { $0 += 1 }
        guard let l = conflict.localDocument?.json, let r = conflict.remoteDocument?.json else { return .takeRemote }
        // Both are small flat objects in this test: {"a":1} + {"b":2} → {"a":1,"b":2}.
        let inner = [l, r].map { String($0.dropFirst().dropLast()) }.filter { !$0.isEmpty }
        return .merged(json: "{" + inner.joined(separator: ",") + "}")
    }
}

final class ResolverBox: Sendable {
    let merger = FieldMerger()
}

@Suite("import Shoal: the public API over the simulated medium", .serialized)
struct LibraryTests {
    @Test("two replicators discover, authenticate, replicate, resolve a conflict with a custom resolver, filter, and report on all four listeners")
    func twoReplicators() async throws {
        let medium = SimulatedMedium()
        let ids = Guarded<Set<PeerID>>([])
        let box = ResolverBox()
        let collections: (Database) throws -> [MultipeerCollectionConfiguration] = { db in
            var c = MultipeerCollectionConfiguration(collection: try db.collection("fleet.readings"))
            c.conflictResolver = box.merger
            // Documents marked private stay on the gateway that wrote them.
            c.pushFilter = { _, doc, flags in flags.contains(.deleted) || doc.bool(forKey: "private") != true }
            return [c]
        }
        let a = try Peer.make("a", medium: medium, allowed: { ids.withLock { $0 } }, collections: collections)
        let b = try Peer.make("b", medium: medium, allowed: { ids.withLock { $0 } }, collections: collections)
        defer { a.close(); b.close() }
        ids.withLock { $0 = [a.id, b.id] }
        #expect(a.replicator.peerID == a.identity.peerID)
        #expect(a.replicator.state == .created)

        let statusA = Recorder(a.replicator.statusChanges())
        let discoveryB = Recorder(b.replicator.peerDiscoveryChanges())
        let replicatorA = Recorder(a.replicator.peerReplicatorStatusChanges())
        let docsA = Recorder(a.replicator.documentReplications())
        let docsB = Recorder(b.replicator.documentReplications())

        try a.replicator.start()
        try b.replicator.start()
        let linked = await timeUntil { a.replicator.neighborPeers == [b.id] && b.replicator.neighborPeers == [a.id] }
        #expect(linked != nil, "the two replicators never linked")

        let readingsA = try a.database.collection("fleet.readings")
        let readingsB = try b.database.collection("fleet.readings")
        let changesB = Recorder(readingsB.changes())
        try readingsA.put("t1", json: #"{"celsius":21,"room":"boiler"}"#)
        try readingsA.put("secret", json: #"{"private":true}"#)
        try readingsA.put("t2", json: #"{"celsius":19}"#)
        #expect(await timeUntil { try readingsB.get("t2") != nil } != nil)
        #expect(try readingsB.get("t1")?.int(forKey: "celsius") == 21)
        #expect(try readingsB.get("secret") == nil, "the push filter let a private document through")
        #expect(await timeUntil { changesB.contains { $0.id == "t1" } && changesB.contains { $0.id == "t2" } } != nil)

        // Status: Wi-Fi active, then the aggregate; the mesh is running.
        #expect(statusA.contains { $0.transport == .wifi && $0.active && $0.error == nil })
        #expect(statusA.contains { $0.transport == nil && $0.active })
        #expect([.discovering, .fullyConnected].contains(a.replicator.state))
        #expect(a.replicator.status.contains { $0.transport == nil && $0.active })
        // Discovery: B heard A on Wi-Fi.
        #expect(discoveryB.contains { $0.peerID == a.id && $0.transport == .wifi && $0.online })
        // Peer replicator: A saw B's replicator connect, then idle or busy, over Wi-Fi.
        #expect(replicatorA.contains { $0.peerID == b.id && $0.transport == .wifi && ($0.activity == .idle || $0.activity == .busy) })
        // Document replication: A pushed t1 and t2 (not the private one); B pulled them.
        #expect(await timeUntil { docsA.contains { $0.isPush && $0.peerID == b.id && $0.documents.contains { $0.id == "t2" } } } != nil)
        #expect(!docsA.contains { $0.documents.contains { $0.id == "secret" } })
        #expect(docsB.contains { !$0.isPush && $0.peerID == a.id && $0.documents.contains { $0.id == "t1" && $0.scope == "fleet" && $0.collection == "readings" && $0.flags == [] } })

        // PeerInfo with neighbours, transports and the certificate.
        let info = try #require(a.replicator.peerInfo(for: b.id))
        #expect(info.online)
        #expect(info.transports == [.wifi])
        #expect(info.replicatorTransport == .wifi)
        #expect(info.certificate?.peerID == b.id)
        #expect(info.certificate?.subject.contains("b") == true)
        #expect(await timeUntil { a.replicator.peerInfo(for: b.id)?.neighborPeers == [a.id] } != nil, "gossip did not tell A that B links to A")

        // A conflict: cut the radio, write the same document on both sides, heal.
        medium.setReachable(a.id, b.id, false)
        #expect(await timeUntil { a.replicator.neighborPeers.isEmpty && b.replicator.neighborPeers.isEmpty } != nil)
        try readingsA.put("cfg", json: #"{"fan":"on"}"#)
        try readingsB.put("cfg", json: #"{"pump":"off"}"#)
        medium.setReachable(a.id, b.id, true)
        let merged = await timeUntil {
            let x = try readingsA.get("cfg"), y = try readingsB.get("cfg")
            return x == y && x?.string(forKey: "fan") == "on" && x?.string(forKey: "pump") == "off"
        }
        let cfgA = try readingsA.get("cfg"), cfgB = try readingsB.get("cfg")
        #expect(merged != nil, "the custom resolver's merge did not reach both sides: \(String(describing: cfgA)) / \(String(describing: cfgB))")
        #expect(box.merger.calls.withLock { $0 } >= 1)
        #expect(a.replicator.counters.conflicts + b.replicator.counters.conflicts >= 1)

        // Deletes replicate and are reported with the deleted flag.
        #expect(try readingsA.delete("t1"))
        #expect(await timeUntil { try readingsB.get("t1") == nil } != nil)
        #expect(await timeUntil { docsB.contains { $0.documents.contains { $0.id == "t1" && $0.flags.contains(.deleted) } } } != nil)

        // Figures are published a few times a second.
        #expect(await timeUntil { a.replicator.counters.documentsSent >= 3 && a.replicator.counters.connectedPeers == 1 } != nil, "\(a.replicator.counters)")
        let counters = a.replicator.counters
        #expect(counters.messagesSent > 0 && counters.bytesReceived > 0)

        a.replicator.stop()
        #expect(await timeUntil { statusA.contains { $0.transport == nil && $0.state == .stopped && !$0.active } } != nil)
        #expect(await timeUntil { b.replicator.neighborPeers.isEmpty } != nil)
        #expect(a.replicator.retryRadios() == false)
        // It starts again and links again.
        try a.replicator.start()
        #expect(a.replicator.retryRadios())
        #expect(await timeUntil { a.replicator.neighborPeers == [b.id] } != nil)
    }

    @Test("Bluetooth LE only on the simulated medium: peers link over bluetooth and say so")
    func bluetoothOnly() async throws {
        let medium = SimulatedMedium()
        let ids = Guarded<Set<PeerID>>([])
        let a = try Peer.make("ble-a", medium: medium, allowed: { ids.withLock { $0 } }, transports: [.bluetooth])
        let b = try Peer.make("ble-b", medium: medium, allowed: { ids.withLock { $0 } }, transports: [.bluetooth])
        defer { a.close(); b.close() }
        ids.withLock { $0 = [a.id, b.id] }
        let discovery = Recorder(a.replicator.peerDiscoveryChanges())
        try a.replicator.start()
        try b.replicator.start()
        try a.database.collection("fleet.readings").put("x", json: #"{"v":1}"#)
        #expect(await timeUntil { try b.database.collection("fleet.readings").get("x") != nil } != nil)
        #expect(await timeUntil { a.replicator.peerInfo(for: b.id)?.replicatorTransport == .bluetooth } != nil)
        #expect(discovery.contains { $0.transport == .bluetooth && $0.peerID == b.id && $0.online })
        #expect(a.replicator.status.first?.transport == .bluetooth)
    }

    @Test("a peer the authenticator rejects never links and gets nothing")
    func rejectedPeer() async throws {
        let medium = SimulatedMedium()
        let ids = Guarded<Set<PeerID>>([])
        let a = try Peer.make("auth-a", medium: medium, allowed: { ids.withLock { $0 } })
        let b = try Peer.make("auth-b", medium: medium, allowed: { ids.withLock { $0 } })
        let stranger = try Peer.make("auth-x", medium: medium, allowed: { ids.withLock { $0 } })
        defer { a.close(); b.close(); stranger.close() }
        ids.withLock { $0 = [a.id, b.id] }  // the stranger trusts them; they do not trust it
        let discovery = Recorder(a.replicator.peerDiscoveryChanges())
        let strangerStatus = Recorder(stranger.replicator.peerReplicatorStatusChanges())
        // Each refusal the stranger was told of: the refusing peer, and whether it had dialled.
        let refusals = Guarded<[(PeerID, Bool)]>([])
        let statuses = stranger.replicator.peerReplicatorStatusChanges()
        let watch = Task {
            for await s in statuses where s.error?.contains("refused us") == true { refusals.withLock { $0.append((s.peerID, s.outgoing)) } }
        }
        defer { watch.cancel() }
        let started = ContinuousClock.now
        for p in [a, b, stranger] { try p.replicator.start() }
        try a.database.collection("fleet.readings").put("x", json: #"{"v":1}"#)
        #expect(await timeUntil { try b.database.collection("fleet.readings").get("x") != nil } != nil)
        #expect(await timeUntil { discovery.contains { $0.peerID == stranger.id && $0.online } } != nil, "A never heard the stranger")
        // It was heard and dialled: let it try to get in a few times (refused attempts counted).
        #expect(await timeUntil { a.replicator.counters.failedConnectionAttempts + stranger.replicator.counters.failedConnectionAttempts >= 3 } != nil)
        #expect(try stranger.database.collection("fleet.readings").get("x") == nil)
        #expect(!a.replicator.neighborPeers.contains(stranger.id))
        // The stranger learns why, per peer, in its status listener and its PeerInfo; it counts
        // each refusal and redials only after backoffMillis (500 ms here).
        #expect(await timeUntil { refusals.withLock { r in r.filter { $0.0 == a.id }.count >= 3 } } != nil, "the stranger was not told of a's refusals")
        // Spacing of the stranger's own redials: a also dials the stranger (and refuses it as
        // its client), and those refusals interleave with the stranger's dials.
        // Each redial waits backoffMillis (500 ms) after the last failure, so the stranger's
        // fourth refused dial to a comes at least three backoffs after the first. The listener
        // stamps a refusal when the status stream delivers it, and a loaded machine delivers
        // several at once (CI saw three within 20 µs), so gaps between deliveries prove nothing;
        // a delivery can only be late, though, so the time from the start to the fourth one can
        // only grow. Checked against half the three backoffs (handshakes' length varies); with no
        // backoff the four dials take a few handshakes, tens of milliseconds.
        #expect(await timeUntil { refusals.withLock { r in r.filter { $0.0 == a.id && $0.1 }.count >= 4 } } != nil, "the stranger redialled a")
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(750), "four refused dials to a within \(elapsed)")
        let reason = stranger.replicator.peerInfo(for: a.id)?.replicatorStatus.error
        #expect(reason?.contains("not in its allowedPeers") == true, "\(String(describing: reason))")
        #expect(stranger.replicator.counters.failedConnectionAttempts >= 3)
        // It never shows a link: the refusal happens inside the handshake (before, its handshake
        // completed and its view showed a link for a moment on each redial).
        #expect(!strangerStatus.contains { $0.activity == .idle || $0.activity == .busy }, "\(strangerStatus.all)")
        #expect(stranger.replicator.neighborPeers.isEmpty)
    }

    @Test("the network medium: two replicators over TCP + TLS on loopback, one naming the other as a static peer")
    func network() async throws {
        var peers: [Peer] = []
        let ids = Guarded<Set<PeerID>>([])
        defer { for p in peers { p.close() } }
        var port: UInt16 = 0
        for n in ["net-a", "net-b"] {
            let dir = temporaryDirectory(n)
            let identity = try TLSIdentity.createIdentity(commonName: n)
            let db = try Database(directory: dir, identity: identity, fullDurability: false)
            var config = MultipeerReplicatorConfiguration(
                peerGroupID: "com.example.net", identity: identity,
                authenticator: MultipeerCertificateAuthenticator { peer, _ in ids.withLock { $0.contains(peer) } },
                collections: [MultipeerCollectionConfiguration(collection: "fleet.readings")], database: db)
            config.mesh = fastMesh()
            config.medium = .network(port == 0 ? NetworkOptions(listen: "127.0.0.1:0", dnssd: false)
                                                : NetworkOptions(staticPeers: ["127.0.0.1:\(port)"], dnssd: false))
            let p = Peer(identity: identity, database: db, replicator: try MultipeerReplicator(config: config), directory: dir)
            peers.append(p)
            ids.withLock { _ = $0.insert(identity.peerID) }
            try p.replicator.start()
            if port == 0 { port = try #require(p.replicator.listenPort) }
        }
        try peers[1].database.collection("fleet.readings").put("from-b", json: #"{"v":2}"#)
        try peers[0].database.collection("fleet.readings").put("from-a", json: #"{"v":1}"#)
        #expect(await timeUntil { try peers[0].database.collection("fleet.readings").get("from-b") != nil } != nil)
        #expect(await timeUntil { try peers[1].database.collection("fleet.readings").get("from-a") != nil } != nil)
        #expect(await timeUntil { peers[1].replicator.peerInfo(for: peers[0].id)?.replicatorTransport == .wifi } != nil)
        #expect(peers[1].replicator.peerInfo(for: peers[0].id)?.outgoing == true)
    }

    @Test("identities: self-signed and CA-signed, stored by label, found, deleted; a root-certificate authenticator")
    func identities() async throws {
        let dir = temporaryDirectory("ids")
        defer { removeTree(dir) }
        let made = try TLSIdentity.createIdentity(commonName: "gw-7", validDays: 30, label: "gateway", in: dir)
        let found = try #require(try TLSIdentity.identity(withLabel: "gateway", in: dir))
        #expect(found.peerID == made.peerID)
        #expect(found.expiration > Int64(time(nil)) + 29 * 86400)
        #expect(found.certificate.subject.contains("gw-7"))
        // Renewed over the same key: the same peer id, a later expiration, stored in place.
        let renewed = try found.renewed(validDays: 365, label: "gateway", in: dir)
        #expect(renewed.peerID == made.peerID)
        #expect(renewed.expiration > found.expiration + 300 * 86400)
        #expect(renewed.certificate.subject == found.certificate.subject)
        #expect(try TLSIdentity.identity(withLabel: "gateway", in: dir)?.expiration == renewed.expiration)
        #expect(throws: ShoalError.self) { try found.renewed(caKey: Array(found.privateKeyPEM.utf8)) }
        #expect(try TLSIdentity.deleteIdentity(withLabel: "gateway", in: dir))
        #expect(try TLSIdentity.identity(withLabel: "gateway", in: dir) == nil)
        #expect(throws: ShoalError.self) { try TLSIdentity.identity(withLabel: "../etc", in: dir) }
        #expect(throws: ShoalError.self) { try TLSIdentity.createIdentity(commonName: "x", label: "l") }

        // A fleet CA signs two gateways; they trust each other through the CA's certificate only.
        let ca = try TLSIdentity.createCertificateAuthority(commonName: "Fleet CA")
        let caCert = try TLSCertificate(pem: Array(ca.certificateChainPEM.utf8))
        let medium = SimulatedMedium()
        var peers: [Peer] = []
        for n in ["ca-a", "ca-b"] {
            let id = try TLSIdentity.createSignedIdentity(commonName: n, caKey: Array(ca.privateKeyPEM.utf8), caCertificate: Array(ca.certificateChainPEM.utf8), label: n, in: dir)
            #expect(id.certificate.issuer.contains("Fleet CA"))
            let reissued = try id.renewed(validDays: 60, caKey: Array(ca.privateKeyPEM.utf8), caCertificate: Array(ca.certificateChainPEM.utf8))
            #expect(reissued.peerID == id.peerID && reissued.certificate.issuer.contains("Fleet CA"))
            let pdir = temporaryDirectory(n)
            let db = try Database(directory: pdir, identity: id, fullDurability: false)
            var config = MultipeerReplicatorConfiguration(peerGroupID: "com.example.ca", identity: id,
                                                          authenticator: MultipeerCertificateAuthenticator(rootCertificates: [caCert]),
                                                          collections: [MultipeerCollectionConfiguration(collection: "notes")], database: db)
            config.mesh = fastMesh()
            config.medium = .simulated(medium)
            peers.append(Peer(identity: id, database: db, replicator: try MultipeerReplicator(config: config), directory: pdir))
        }
        defer { for p in peers { p.close() } }
        for p in peers { try p.replicator.start() }
        try peers[0].database.collection("notes").put("n1", json: #"{"text":"hello"}"#)
        #expect(await timeUntil { try peers[1].database.collection("_default.notes").get("n1") != nil } != nil)
    }

    @Test("documents: put, get, delete, query, changes; bad input is a clear error")
    func documents() async throws {
        let dir = temporaryDirectory("docs")
        defer { removeTree(dir) }
        let id = try TLSIdentity.createIdentity(commonName: "docs")
        let db = try Database(directory: dir, identity: id)
        defer { db.close() }
        let c = try db.collection("plant.sensors")
        let changes = Recorder(c.changes())
        for i in 0..<25 { try c.put("s\(i)", json: #"{"n":\#(i),"kind":"\#(i % 2 == 0 ? "even" : "odd")"}"#) }
        #expect(try c.get("s3")?.int(forKey: "n") == 3)
        #expect(try c.get("s3")?.string(forKey: "kind") == "odd")
        #expect(try c.query { $0.string(forKey: "kind") == "even" }.count == 13)
        #expect(try c.query(limit: 5).map(\.id) == ["s0", "s1", "s10", "s11", "s12"])
        #expect(try c.delete("s3"))
        #expect(try !c.delete("s3"))
        #expect(try c.get("s3") == nil)
        #expect(try c.count() == 24)
        #expect(await timeUntil(within: 10) { changes.all.count == 26 } != nil, "changes: \(changes.all.count)")
        let last = try #require(changes.all.last)
        #expect(last.collection == "plant.sensors" && last.id == "s3" && last.isDeleted)
        #expect(try db.collectionNames().contains("plant.sensors"))

        let notJSON = #expect(throws: ShoalError.self) { try c.put("bad", json: "{not json") }
        #expect(notJSON?.message.contains("plant.sensors/bad") == true)
        #expect(throws: ShoalError.self) { try c.put("arr", json: "[1,2]") }
        #expect(throws: ShoalError.self) { try db.collection("a.b.c") }
        #expect(throws: ShoalError.self) { try db.collection("") }
        // The failed writes lost nothing.
        #expect(try c.count() == 24)
    }

    @Test("a configuration the replicator cannot run is refused with a reason")
    func badConfigurations() throws {
        let dir = temporaryDirectory("cfg")
        defer { removeTree(dir) }
        let id = try TLSIdentity.createIdentity(commonName: "cfg")
        let other = try TLSIdentity.createIdentity(commonName: "other")
        let db = try Database(directory: dir, identity: id)
        defer { db.close() }
        let auth = MultipeerCertificateAuthenticator(allowedPeers: [])
        func config(_ change: (inout MultipeerReplicatorConfiguration) -> Void) -> MultipeerReplicatorConfiguration {
            var c = MultipeerReplicatorConfiguration(peerGroupID: "g", identity: id, authenticator: auth,
                                                     collections: [MultipeerCollectionConfiguration(collection: "x")], database: db)
            change(&c)
            return c
        }
        let cases: [(String, MultipeerReplicatorConfiguration)] = [
            ("peerGroupID is empty", config { $0.peerGroupID = "" }),
            ("transports is empty", config { $0.transports = [] }),
            ("configured twice", config { $0.collections = [.init(collection: "x"), .init(collection: "_default.x")] }),
            ("no collections", config { $0.collections = [] }),
            ("bad collection name", config { $0.collections = [.init(collection: "a..b")] }),
            ("maxConnectionCount", config { $0.mesh.maxConnectionCount = 0 }),
            ("listen address", config { $0.medium = .network(NetworkOptions(listen: "localhost")) }),
            ("static peer", config { $0.medium = .network(NetworkOptions(staticPeers: ["10.0.0.1"])) }),
            ("another identity", config { $0.identity = other }),
        ]
        for (expected, c) in cases {
            let e = #expect(throws: ShoalError.self) { try MultipeerReplicator(config: c) }
            #expect(e?.message.contains(expected) == true, "\(expected): got \(e?.message ?? "nothing")")
        }
    }
}
