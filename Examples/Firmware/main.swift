// An example of a team's own gateway firmware built on `import Shoal` alone: cold-room sensor
// gateways that share one document per room. It brings its own conflict resolver (per-field
// merge: the highest reading of each sensor wins), its own push filter (drafts stay local) and its
// own status LED hook (a pattern per replicator state).
//
//   shoal-example-firmware --simulate 3     three gateways on Shoal's in-process medium; exits 0
//                                           when every gateway holds the merged room (CI runs it)
//   shoal-example-firmware --dir D --listen 0.0.0.0:7700 [--peer HOST:PORT ...] [--trust PEER_ID ...]
//                                           one gateway on the network (TCP + TLS, DNS-SD)
import FoundationEssentials
import Glibc
import Shoal

/// Cold-room readings: field → value. Two gateways that wrote one room while apart merge field by
/// field; where both measured a field, the higher reading wins (a conservative alarm threshold).
struct HighestReadingMerge: MultipeerConflictResolver {
    func resolve(peerID: PeerID, conflict: Conflict) -> ConflictResolution {
        // A delete against an edit: keep the edit (rooms are not deleted in the field).
        guard let local = fields(conflict.localDocument) else { return .takeRemote }
        guard let remote = fields(conflict.remoteDocument) else { return .keepLocal }
        let merged = local.merging(remote) { a, b in max(a, b) }
        guard let data = try? JSONEncoder().encode(merged), let text = String(data: data, encoding: .utf8) else { return .keepLocal }
        return .merged(json: text)
    }

    func fields(_ d: Document?) -> [String: Double]? {
        guard let json = d?.json else { return nil }
        return try? JSONDecoder().decode([String: Double].self, from: Data(json.utf8))
    }
}

/// The firmware's status LED: a pattern per state. On the board this would drive a GPIO line;
/// here it prints the pattern when it changes.
final class StatusLED: Sendable {
    let name: String
    init(name: String) { self.name = name }

    static func pattern(for s: ReplicatorStatus) -> String {
        if let error = s.error, !s.active { return "red, fast blink (\(error))" }
        switch s.state {
        case .created: return "off"
        case .discovering: return "green, slow blink"
        case .fullyConnected: return "green, solid"
        case .stopped: return "off"
        case .dead: return "red, solid"
        }
    }

    /// Follows the replicator's aggregate status for as long as the stream runs.
    func follow(_ statuses: AsyncStream<ReplicatorStatus>) -> Task<Void, Never> {
        Task {
            var last = ""
            for await s in statuses where s.transport == nil {
                let p = StatusLED.pattern(for: s)
                if p != last { print("[\(name)] LED: \(p)"); last = p }
            }
        }
    }
}

func collectionConfig(_ db: Database) throws -> MultipeerCollectionConfiguration {
    var rooms = MultipeerCollectionConfiguration(collection: try db.collection("coldstore.rooms"))
    rooms.conflictResolver = HighestReadingMerge()
    // Drafts (ids starting "draft-") stay on the gateway that wrote them; deletes always go.
    rooms.pushFilter = { _, document, flags in flags.contains(.deleted) || !document.id.hasPrefix("draft-") }
    return rooms
}

func fail(_ message: String) -> Never {
    print("error: \(message)")
    exit(1)
}

/// N gateways on one in-process medium, in a line (each hears only its neighbours), so documents
/// travel hop by hop. Each writes its own readings into the same room while the line is cut in the
/// middle, then the line heals: every gateway must end with the merged room and no draft of
/// another's.
func simulate(_ count: Int) async throws {
    let medium = SimulatedMedium()
    let base = "/tmp/shoal-example-\(getpid())"
    defer { _ = system("rm -rf '\(base)'") }
    var identities: [TLSIdentity] = []
    for i in 0..<count { identities.append(try TLSIdentity.createIdentity(commonName: "coldroom-gw\(i + 1)")) }
    let fleet = Set(identities.map(\.peerID))
    var gateways: [(MultipeerReplicator, Collection, Task<Void, Never>)] = []
    for (i, identity) in identities.enumerated() {
        let db = try Database(directory: "\(base)/gw\(i + 1)", identity: identity, fullDurability: false)
        var config = MultipeerReplicatorConfiguration(
            peerGroupID: "com.example.coldstore", identity: identity,
            authenticator: MultipeerCertificateAuthenticator(allowedPeers: fleet),
            collections: [try collectionConfig(db)], database: db)
        config.medium = .simulated(medium)
        config.mesh.advertisingDelayMillis = 100
        config.mesh.connectDelayMillis = 100
        config.mesh.initialDiscoveryDurationSeconds = 0
        let replicator = try MultipeerReplicator(config: config)
        let led = StatusLED(name: "gw\(i + 1)")
        gateways.append((replicator, try db.collection("coldstore.rooms"), led.follow(replicator.statusChanges())))
    }
    // A line: gw1 – gw2 – … – gwN.
    for i in 0..<count { for j in (i + 2)..<max(i + 2, count) { medium.setReachable(identities[i].peerID, identities[j].peerID, false) } }
    // Cut the middle while everyone writes, so the writes conflict.
    let middle = count / 2
    medium.setReachable(identities[middle - 1].peerID, identities[middle].peerID, false)
    for (r, _, _) in gateways { try r.start() }
    for (i, (_, rooms, _)) in gateways.enumerated() {
        try rooms.put("room-1", json: #"{"probe\#(i + 1)": \#(Double(i) + 2.5), "door": \#(i)}"#)
        try rooms.put("draft-gw\(i + 1)", json: #"{"note": 1}"#)
    }
    medium.setReachable(identities[middle - 1].peerID, identities[middle].peerID, true)

    let start = ContinuousClock.now
    var done = false
    while !done && ContinuousClock.now - start < .seconds(60) {
        try await Task.sleep(for: .milliseconds(100))
        let rooms = try gateways.map { try $0.1.get("room-1")?.json }
        let merged = rooms.allSatisfy { text in
            guard let text, let f = try? JSONDecoder().decode([String: Double].self, from: Data(text.utf8)) else { return false }
            return (0..<count).allSatisfy { f["probe\($0 + 1)"] == Double($0) + 2.5 } && f["door"] == Double(count - 1)
        }
        done = merged && Set(rooms).count == 1
    }
    let took = ContinuousClock.now - start
    guard done else { fail("the gateways did not converge on the merged room in 60 s: \(try gateways.map { try $0.1.get("room-1")?.json ?? "none" })") }
    for (i, (_, rooms, _)) in gateways.enumerated() {
        let drafts = try rooms.query { $0.id.hasPrefix("draft-") }.map(\.id)
        guard drafts == ["draft-gw\(i + 1)"] else { fail("gw\(i + 1) holds drafts \(drafts): the push filter leaked") }
    }
    let room = try gateways[0].1.get("room-1")!.json!
    try await Task.sleep(for: .milliseconds(600))  // figures are published a few times a second
    print("all \(count) gateways hold the merged room after \(took): \(room)")
    for (i, (r, _, _)) in gateways.enumerated() {
        let c = r.counters
        print("gw\(i + 1): state \(r.state.rawValue), neighbours \(r.neighborPeers.map(\.short)), sent \(c.documentsSent) docs, received \(c.documentsReceived), conflicts \(c.conflicts)")
    }
    for (r, _, led) in gateways { r.stop(); led.cancel() }
}

/// One gateway on the network.
func runOnNetwork(_ args: [String]) async throws {
    var dir: String?, listen: String?, peers: [String] = [], trusted: Set<PeerID> = []
    var i = 0
    while i < args.count {
        let value = i + 1 < args.count ? args[i + 1] : nil
        switch args[i] {
        case "--dir": dir = value
        case "--listen": listen = value
        case "--peer": if let value { peers.append(value) }
        case "--trust":
            guard let value, let p = PeerID(hex: value) else { fail("--trust needs a peer id (64 hex digits)") }
            trusted.insert(p)
        default: fail("unknown option \(args[i]); see the comment at the top of Examples/Firmware/main.swift")
        }
        i += 2
    }
    guard let dir else { fail("--dir is required") }
    let identity = try TLSIdentity.identity(withLabel: "firmware", in: dir + "/identities")
        ?? TLSIdentity.createIdentity(commonName: "coldroom-gateway", validDays: 730, label: "firmware", in: dir + "/identities")
    print("peer id \(identity.peerID)")
    let db = try Database(directory: dir, identity: identity)
    var config = MultipeerReplicatorConfiguration(
        peerGroupID: "com.example.coldstore", identity: identity,
        authenticator: MultipeerCertificateAuthenticator(allowedPeers: trusted),
        collections: [try collectionConfig(db)], database: db)
    config.medium = .network(NetworkOptions(listen: listen, staticPeers: peers))
    config.log = { print($0) }
    let replicator = try MultipeerReplicator(config: config)
    let led = StatusLED(name: "gateway").follow(replicator.statusChanges())
    try replicator.start()
    for await d in replicator.documentReplications() {
        print("\(d.isPush ? "sent" : "received") \(d.documents.count) documents \(d.isPush ? "to" : "from") \(d.peerID.short) over \(d.transport.rawValue)")
    }
    led.cancel()
}

let args = Array(CommandLine.arguments.dropFirst())
do {
    if args.first == "--simulate" {
        let n = args.count > 1 ? Int(args[1]) ?? 0 : 3
        guard n >= 2 && n <= 16 else { fail("--simulate needs 2–16 gateways") }
        try await simulate(n)
    } else {
        try await runOnNetwork(args)
    }
} catch {
    fail("\(error)")
}
