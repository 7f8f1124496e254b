import Glibc
import ShoalCore
import ShoalMesh
import ShoalReplication
import ShoalWire

/// A standard run: let the mesh form, (optionally) time one write across it, write a workload
/// while faults come and go, stop the faults, and check every invariant once things settle.
/// `shoal sim` and the property tests both use it.
public struct SimScenario: Sendable {
    public var config = SimConfig()
    /// Virtual seconds the whole run may take.
    public var seconds: UInt64 = 120
    public var writes = 20
    public var bodyBytes = 1024
    /// Writes come in groups of this many at one instant (1: one at a time).
    public var burst = 1
    /// Share of writes (in tenths) that edit (2) or delete (1) an existing document.
    public var editTenths = 2
    public var deleteTenths = 1
    /// Edits set one of four top-level fields of the document as the writing node holds it (so
    /// concurrent edits of different fields happen), and the run checks that each field of every
    /// document never deleted ends with its newest write on every node (field-level merge only).
    public var fieldEdits = false
    /// Time one write from node 0 until every node holds it (no faults only).
    public var probeLatency = false
    /// Blobs written at the start of the workload (needs `config.blobs`), each of a seeded size
    /// between the two bounds, on a random node; every node must end holding all of them.
    public var blobs = 0
    public var blobMinBytes = 64_000
    public var blobMaxBytes = 4_000_000
    /// When set, an invariant: in no virtual second does control take more than this share of a
    /// link direction's capacity (0.1: a tenth).
    public var maxControlShare: Double?
    public init() {}
}

public struct SimReport: Sendable {
    public var seed: UInt64
    public var nodes: Int
    /// When the link graph first joined everything the radio graph joins.
    public var formedAtMillis: UInt64?
    /// The probe write: until every node held it, and the sum of per-hop link latencies on the
    /// longest path it took through the link graph.
    public var probeMillis: UInt64?
    public var probePathLatencyMillis: UInt64?
    public var probeHops: Int?
    /// From the end of faults and writes until every node held the same documents.
    public var convergedAfterMillis: UInt64?
    public var bytesDuringWrites: UInt64 = 0
    /// Over the whole run: every byte sent, and those of frames that carry no document or blob
    /// data (gossip, and other control frames), gossip alone too.
    public var allBytes: UInt64 = 0
    public var controlBytes: UInt64 = 0
    public var gossipBytes: UInt64 = 0
    public var controlShare: Double { allBytes == 0 ? 0 : Double(controlBytes) / Double(allBytes) }
    public var idealBytes: UInt64 = 0
    /// Control bytes per link direction against the link's capacity (see SimControlLoad).
    public var controlLoad = SimControlLoad()
    public var linksPerNode: [Int] = []
    public var crashes = 0
    public var partitions = 0
    public var maxFramesInFlight = 0
    /// Frames the fault injector duplicated or held back.
    public var faultyFrames = 0
    public var virtualMillis: UInt64 = 0
    public var wallSeconds: Double = 0
    /// Invariants that did not hold, in words (empty: all held).
    public var failures: [String] = []
    public var dot = ""
    /// With `config.trust`: what the revocation scenario saw.
    public var trust: SimTrustFigures?
    /// With blobs: how many, bytes of blob frames sent against one copy per node, chunks sent to a
    /// node that had verified them.
    public var blobCount = 0
    public var blobBytes: UInt64 = 0
    public var blobIdealBytes: UInt64 = 0
    public var blobChunksResent = 0
    public var blobsHeld = true
    public var blobRatio: Double { blobIdealBytes == 0 ? 0 : Double(blobBytes) / Double(blobIdealBytes) }

    public var bytesRatio: Double { idealBytes == 0 ? 0 : Double(bytesDuringWrites) / Double(idealBytes) }
    public var speed: Double { wallSeconds == 0 ? 0 : Double(virtualMillis) / 1000 / wallSeconds }
}

extension SimScenario {
    public func run() throws -> SimReport {
        let started = ContinuousClock.now
        var config = config
        config.runMillis = seconds * 1000
        let sim = try Simulation(config)
        defer { sim.cleanUp() }
        var report = SimReport(seed: config.seed, nodes: config.nodes)
        var rng = SeededRandom(seed: config.seed ^ 0x5EED)
        let limit = seconds * 1000
        let faults = config.partitions || config.crashes || config.maxSkewMillis > 0 || config.duplicate > 0 || config.reorder > 0

        // 1. The mesh forms.
        report.formedAtMillis = sim.run(until: min(limit, 120_000)) { !sim.meshConnected || sim.upNodes.count < config.nodes }

        // 2. One write, timed hop by hop.
        if probeLatency && !faults {
            try sim.write(on: 0, id: "probe", body: SimScenario.body(0, bytes: bodyBytes))
            let t0 = sim.now
            if let at = sim.run(until: min(limit, t0 + 60_000), every: 1, while: { !sim.allHold("probe") }) {
                report.probeMillis = at - t0
                let hops = sim.linkHops(from: 0).compactMap { $0 }.max() ?? 0
                report.probeHops = hops
                report.probePathLatencyMillis = UInt64(hops) * config.kind.latencyMillis
            }
        }

        // 3. The workload, while faults come and go (until faultsUntil).
        let bytesBefore = sim.bytesSent
        let writesEnd = faults ? max(sim.now + 1000, config.faultsUntilMillis) : sim.now + 1000
        var ids: [String] = []
        var fieldWrites = FieldWrites()
        var deletedIDs = Set<String>()
        var burstNode = 0
        for k in 0..<(config.blobs ? blobs : 0) {
            let up = sim.upNodes
            guard !up.isEmpty else { continue }
            let size = Int.random(in: blobMinBytes...max(blobMinBytes, blobMaxBytes), using: &rng)
            try sim.writeBlob(on: up[Int.random(in: 0..<up.count, using: &rng)], id: "blob-\(k)", bytes: size)
        }
        for k in 0..<writes {
            if k % max(1, burst) == 0 {
                let at = sim.now + (writesEnd - sim.now) / UInt64(max(1, (writes - k) / max(1, burst)))
                sim.run(until: at)
            }
            let up = sim.upNodes
            guard !up.isEmpty else { continue }
            // A burst is one gateway writing several documents at once.
            if k % max(1, burst) == 0 || !up.contains(burstNode) { burstNode = up[Int.random(in: 0..<up.count, using: &rng)] }
            let node = burstNode
            // Mostly new documents; some edits and deletes of existing ones (concurrent when the
            // mesh is cut), so conflicts get resolved too.
            let roll = Int.random(in: 0..<10, using: &rng)
            if roll < editTenths, let id = ids.randomElement(using: &rng) {
                if fieldEdits {
                    try fieldEdit(sim, on: node, id: id, field: "f\(Int.random(in: 0..<4, using: &rng))", value: "\(k)", into: &fieldWrites)
                } else {
                    try sim.write(on: node, id: id, body: SimScenario.body(k, bytes: bodyBytes))
                }
                report.idealBytes += UInt64(bodyBytes) * UInt64(config.nodes - 1)
            } else if roll < editTenths + deleteTenths, let id = ids.randomElement(using: &rng) {
                if try sim.delete(on: node, id: id) { deletedIDs.insert(id) }
            } else {
                let id = "doc-\(k)"
                ids.append(id)
                try sim.write(on: node, id: id, body: SimScenario.body(k, bytes: bodyBytes))
                report.idealBytes += UInt64(bodyBytes) * UInt64(config.nodes - 1)
            }
        }
        sim.run(until: max(sim.now, config.faultsUntilMillis))
        if sim.medium.partition != nil { sim.setPartition(nil) }  // faults over: the radio heals
        let quietFrom = sim.now

        // 4. Faults over: everything converges.
        if let at = sim.run(until: limit, while: { sim.upNodes.count < config.nodes || !sim.countsMatch || !sim.converged || !sim.meshConnected || !sim.trustConverged || (config.blobs && !sim.blobsConverged) }) {
            report.convergedAfterMillis = at - quietFrom
        }
        report.bytesDuringWrites = sim.bytesSent - bytesBefore - sim.blobBytesSent
        report.allBytes = sim.bytesSent
        for (tag, bytes) in sim.bytesByType {
            switch ReplicationMessage.frameClass(ofFirstByte: tag) {
            case .gossip: report.gossipBytes += bytes; report.controlBytes += bytes
            case .control: report.controlBytes += bytes
            case .documents, .blobData: break
            }
        }
        report.controlLoad = sim.controlLoad
        if config.blobs {
            report.blobCount = sim.blobsWritten.count
            report.blobBytes = sim.blobBytesSent
            report.blobIdealBytes = sim.blobIdealBytes
            report.blobChunksResent = sim.blobChunksResent
            report.blobsHeld = sim.blobsConverged
        }
        if getenv("SHOAL_SIM_BYTES") != nil { print(sim.bytesByType.sorted { $0.key < $1.key }, "pushed bodies", sim.pushedBodies, "changes", sim.pushedChanges, "frames", sim.framesSent, "held", sim.nodes.reduce(0) { $0 + ($1.replicator?.heldPushedBodies ?? 0) }) }
        report.linksPerNode = (0..<config.nodes).map { sim.linkCount($0) }
        report.crashes = sim.crashCount
        report.partitions = sim.partitionCount
        report.maxFramesInFlight = sim.maxFramesInFlight
        report.faultyFrames = sim.faultyFrames
        report.virtualMillis = sim.now

        // 5. Invariants.
        if report.formedAtMillis == nil { report.failures.append("the mesh never joined what the radio graph joins") }
        if report.convergedAfterMillis == nil { report.failures.append("no convergence within \(seconds) s") }
        if sim.upNodes.count < config.nodes { report.failures.append("nodes still down at the end") }
        if !sim.meshConnected { report.failures.append("the link graph is not connected where the radio graph is") }
        if !sim.converged { report.failures.append("nodes hold different documents") }
        let lost = sim.lostWrites()
        if !lost.isEmpty { report.failures.append("acknowledged writes lost: \(lost.prefix(3).joined(separator: "; "))") }
        if let v = sim.budgetViolations.first { report.failures.append("over the connection budget: \(v)") }
        if let d = sim.duplicateLinks.first { report.failures.append("two links for one pair: \(d)") }
        if let r = sim.resurrectedDeletes().first { report.failures.append("a delete came back: \(r)") }
        if fieldEdits, config.resolver.joinsFields, let f = lostFieldEdits(sim, fieldWrites, except: deletedIDs).first {
            report.failures.append("a field edit lost: \(f)")
        }
        // Bounded: frames queued on one side of a link, and bytes sent against one body per node.
        if sim.maxFramesInFlight > SimScenario.maxFramesInFlightBound {
            report.failures.append("\(sim.maxFramesInFlight) frames in flight on one link side (bound \(SimScenario.maxFramesInFlightBound))")
        }
        if report.idealBytes > 0, report.bytesRatio > SimScenario.trafficBound(faults: faults) {
            let ratio = Int(report.bytesRatio * 10)
            report.failures.append("\(ratio / 10).\(ratio % 10)× the ideal bytes sent (bound \(Int(SimScenario.trafficBound(faults: faults)))×)")
        }
        if let bound = maxControlShare, report.controlLoad.percentile(1) > bound {
            report.failures.append("control took \(Int(report.controlLoad.percentile(1) * 1000)) ‰ of a link direction's capacity in one second (bound \(Int(bound * 1000)) ‰)")
        }
        if config.blobs {
            if !report.blobsHeld { report.failures.append("a node lacks a blob") }
            if report.blobChunksResent > 0 { report.failures.append("\(report.blobChunksResent) blob chunks sent to a node that had verified them") }
            if !faults, report.blobIdealBytes > 0, report.blobRatio > SimScenario.blobTrafficBound {
                report.failures.append("blob bytes \(Int(report.blobRatio * 100)) % of one copy per node (bound \(Int(SimScenario.blobTrafficBound * 100)) %)")
            }
        }
        if sim.trustPlan != nil {
            var t = sim.trustFigures
            t.refusedByFilters = sim.nodes.map(\.filterRefusals.value).reduce(0, +)
            t.lateDocsHeld = sim.lateDocuments(sim.checkedNodes.map { sim.snapshot($0) }).count
            if t.revokedAtMillis == nil { report.failures.append("the operator's revoke was never recorded") }
            if let v = t.linkViolations.first { report.failures.append("a revoked peer stayed linked: \(v)\(t.linkViolations.count > 1 ? " (and \(t.linkViolations.count - 1) more)" : "")") }
            if let v = t.lateAccepted.first { report.failures.append("a revoked peer's later write was taken: \(v)") }
            let d = sim.trustDisagreements()
            if !d.isEmpty { report.failures.append("trust did not converge: \(d.prefix(3).joined(separator: "; "))") }
            report.trust = t
        }
        report.dot = sim.dot()
        if sim.keepLog {
            for l in sim.log { print(l) }
            for n in sim.nodes {
                let m = n.mesh
                print("node \(n.index) up \(n.up) state \(m?.state.rawValue ?? "-") links \(m?.connectionCount ?? -1) heard \(Set(n.heard.values.joined()).sorted()) adv \(n.advertising) scanning \(m?.isScanning ?? false) reach \(m?.reachable.count ?? -1) docs \((try? n.store?.stats().documents) ?? nil ?? -1)")
            }
        }
        report.wallSeconds = (ContinuousClock.now - started).secondsDouble
        return report
    }

    /// Invariant bounds, from the figures of many seeds with headroom (see README, "Proof").
    public static let maxFramesInFlightBound = 256
    public static func trafficBound(faults: Bool) -> Double { faults ? 16 : 3 }
    /// Blob frame bytes against one copy per node, without faults.
    public static let blobTrafficBound = 1.2

    /// A JSON body of about `bytes` bytes.
    public static func body(_ k: Int, bytes: Int) -> String {
        let head = #"{"n":\#(k),"pad":""#
        let pad = max(0, bytes - head.utf8.count - 2)
        return head + String(repeating: "x", count: pad) + #""}"#
    }
}

/// The newest write of one field of one document in a run: who, when (HLC), what.
struct FieldWrite {
    var node: Int
    var peer: PeerID
    var time: HLCTimestamp
    var value: String
}

/// The newest write of each field a run edited ("id.field") by a node that is not revoked, and
/// the revoked node's newest: where its write is the newer, what others end with depends on
/// whether that write left it before the revocation, so the check leaves the field out (as
/// `checkedWrites` leaves out the revoked node's writes); where it is older, the field must
/// end with the other write everywhere.
struct FieldWrites {
    var newest: [String: FieldWrite] = [:]
    var victimNewest: [String: FieldWrite] = [:]
}

extension SimScenario {
    /// Sets one top-level field of `id` as `node` holds it (a new document when it holds none or a
    /// tombstone), and remembers the write when it is the field's newest.
    func fieldEdit(_ sim: Simulation, on node: Int, id: String, field: String, value: String, into writes: inout FieldWrites) throws {
        guard let store = sim.nodes[node].store else { return }
        let held = try store.get(sim.collection, id: DocumentID(id))
        let fresh = try JSONValue.parse(SimScenario.body(0, bytes: bodyBytes)).objectValue ?? [:]
        var object = held?.body.flatMap { try? JSONValue.parse($0).objectValue } ?? fresh
        object[field] = .string(value)
        guard try sim.write(on: node, id: id, body: JSONValue.object(object).compactText), let w = sim.writes.last,
              let time = w.version.timestamp(of: sim.nodes[node].peer) else { return }
        let key = "\(id).\(field)"
        let peer = sim.nodes[node].peer
        let byVictim = node == sim.trustPlan?.victim
        if let old = byVictim ? writes.victimNewest[key] : writes.newest[key], (old.time, old.peer) > (time, peer) { return }
        let newest = FieldWrite(node: node, peer: peer, time: time, value: value)
        if byVictim { writes.victimNewest[key] = newest } else { writes.newest[key] = newest }
    }

    /// Fields of documents never deleted whose value on some checked node is not their newest
    /// write (with trust: not on the revoked node, nor fields whose newest write is the revoked
    /// node's, nor documents holding its late writes).
    func lostFieldEdits(_ sim: Simulation, _ writes: FieldWrites, except deleted: Set<String>) -> [String] {
        var lost: [String] = []
        let checked = sim.checkedNodes
        let late = sim.lateDocuments(checked.map { sim.snapshot($0) })
        for (key, w) in writes.newest.sorted(by: { $0.key < $1.key }) {
            if let v = writes.victimNewest[key], (v.time, v.peer) > (w.time, w.peer) { continue }
            let parts = key.split(separator: ".", maxSplits: 1).map(String.init)
            guard parts.count == 2, !deleted.contains(parts[0]), !late.contains(parts[0]), let docID = try? DocumentID(parts[0]) else { continue }
            for i in checked {
                let body = (try? sim.nodes[i].store?.get(sim.collection, id: docID))??.body
                let value = body.flatMap { try? JSONValue.parse($0).objectValue }?[parts[1]]?.stringValue
                if value != w.value {
                    lost.append("\(key) on node \(i) is \(value ?? "absent"), its newest write (node \(w.node)) set \(w.value)")
                    break
                }
            }
        }
        return lost
    }
}

extension Simulation {
    func allHold(_ id: String) -> Bool {
        guard let docID = try? DocumentID(id) else { return false }
        return checkedNodes.allSatisfy { i in (try? nodes[i].store?.get(collection, id: docID)) != nil }
    }

    /// Hops from `from` to every node through open links (nil: unreachable).
    public func linkHops(from: Int) -> [Int?] {
        var adjacency: [Int: [Int]] = [:]
        for (a, b) in links { adjacency[a, default: []].append(b); adjacency[b, default: []].append(a) }
        var d = [Int?](repeating: nil, count: nodes.count)
        d[from] = 0
        var queue = [from], head = 0
        while head < queue.count {
            let x = queue[head]; head += 1
            for y in adjacency[x] ?? [] where d[y] == nil { d[y] = d[x]! + 1; queue.append(y) }
        }
        return d
    }
}

extension Duration {
    var secondsDouble: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
