import Foundation
import ShoalCore
import ShoalMesh
import Testing
import ShoalThreads

/// Mesh managers linking over a model network where each end of a link learns what happened at its
/// own time, as over real links: the callee takes a dial before the caller's handshake ends, a
/// close reaches the other end later, gossip arrives late, links break. The simulator decides both
/// ends of a dial at one instant, so it cannot show these races (the budget race CI met in the
/// network lab was one).
/// SHOAL_DIALRACE_SEEDS: seeds per case (60 unless set); SHOAL_DIALRACE_TRACE="BUDGET SEED": print
/// that run's inputs and decisions.
enum Environment {
    static let seeds = UInt64(ProcessInfo.processInfo.environment["SHOAL_DIALRACE_SEEDS"] ?? "") ?? 60
    static let trace = ProcessInfo.processInfo.environment["SHOAL_DIALRACE_TRACE"]
}

@Suite("Mesh manager: dial races", .serialized)
struct DialRaceTests {
    /// One link: a dials b. Each end opens (its manager keeps it) or not, and later closes.
    struct Link {
        var a: Int, b: Int
        var transport: MeshTransport
        var openA = false, openB = false
        /// The caller has heard the outcome (opened or failed).
        var decidedA = false
        var closedA = false, closedB = false
    }

    final class Model {
        let managers: [MeshManager]
        let ids: [PeerID]
        let budget: Int
        /// With both transports: the chance that a Wi-Fi dial finds no path (so peers fall back to
        /// Bluetooth LE, and hand over to Wi-Fi again when a dial gets through).
        let wifiLoss: Double
        let transports: Set<MeshTransport>
        var queue: [(at: UInt64, order: Int, node: Int, input: MeshInput)] = []
        var order = 0
        var links: [ConnectionID: Link] = [:]
        var nextID: ConnectionID = 1
        var rng: SeededRandom
        var problems: [String] = []
        var dials = 0, refusals = 0, breaks = 0
        /// Ticks already queued, per gateway.
        var ticks: [Int: Set<UInt64>] = [:]
        var trace = false

        init(seed: UInt64, nodes: Int, budget: Int, transports: Set<MeshTransport> = [.wifi], wifiLoss: Double = 0) {
            rng = SeededRandom(seed: seed)
            self.budget = budget
            self.transports = transports
            self.wifiLoss = wifiLoss
            ids = (1...nodes).map { n in PeerID(bytes: [UInt8(n)] + Array(repeating: 0xCD, count: 31)) }
            managers = ids.map { me in
                var s = MeshSettings()
                s.randomSeed = seed &+ UInt64(me.bytes[0])
                s.maxConnectionCount = budget
                s.connectDelayMillis = 200
                s.backoffMillis = 2_000
                s.evictionBackoffMillis = 5_000
                s.transports = transports
                s.wifiRetryAfterFallbackMillis = 3_000
                return MeshManager(me: me, settings: s, sequenceBase: 1, fallbackSeed: seed)
            }
        }

        func delay(_ range: ClosedRange<UInt64>) -> UInt64 { UInt64.random(in: range, using: &rng) }

        func post(_ node: Int, at: UInt64, _ input: MeshInput) {
            order += 1
            queue.append((at, order, node, input))
        }

        func run(until end: UInt64) {
            for i in managers.indices {
                post(i, at: 0, .start)
                for j in managers.indices where j != i {
                    for t in transports.sorted() { post(i, at: delay(0...500), .discovered(ids[j], t, load: 0)) }
                }
            }
            var nextBreak = delay(500...3_000)
            while let k = queue.indices.min(by: { (queue[$0].at, queue[$0].order) < (queue[$1].at, queue[$1].order) }) {
                let e = queue.remove(at: k)
                guard e.at <= end else { break }
                // Now and then a link breaks under both ends (a radio fade): each end hears it late.
                while nextBreak <= e.at {
                    if let (id, l) = links.filter({ $0.value.openA && $0.value.openB && !$0.value.closedA && !$0.value.closedB }).min(by: { $0.key < $1.key }) {
                        breaks += 1
                        closeEnd(id, l.a, at: nextBreak + delay(1...300), tell: true)
                        closeEnd(id, l.b, at: nextBreak + delay(1...300), tell: true)
                    }
                    nextBreak += delay(500...3_000)
                }
                deliver(e.node, e.input, at: e.at)
            }
        }

        func deliver(_ n: Int, _ input: MeshInput, at now: UInt64) {
            let m = managers[n]
            let actions = m.handle(input, now: now)
            if trace { print("TRACE \(now) node \(n + 1) <- \(input) => \(actions.filter { if case .event = $0 { return false }; if case .sendTopology = $0 { return false }; return true }) links \(m.connectionCount) peers \(m.counters.connectedPeers)") }
            // Outcomes of this input for the link it names.
            switch input {
            case .incoming(let id, _, let t):
                links[id]!.openB = m.keeps(id)
                if !m.keeps(id) { refusals += 1 }
                // The caller's handshake ends a little later; a refusal reaches it as a failure.
                post(links[id]!.a, at: now + delay(1...300), m.keeps(id) ? .outgoingOpened(id, ids[n], t) : .outgoingFailed(ids[n], t, reason: "refused"))
                if m.keeps(id) { post(n, at: now + delay(300...600), .replicating(id)) }
            case .outgoingOpened(let id, _, _):
                links[id]!.decidedA = true
                links[id]!.openA = m.keeps(id)
                // The callee closed it while our handshake was ending: we hear that now.
                if m.keeps(id) && links[id]!.closedB { post(n, at: now + delay(1...100), .closed(id)) }
                if m.keeps(id) { post(n, at: now + delay(1...300), .replicating(id)) }
            case .outgoingFailed:
                break
            default:
                break
            }
            for a in actions {
                switch a {
                case .connect(let peer, let t):
                    dials += 1
                    if t == .wifi, wifiLoss > 0, Double.random(in: 0..<1, using: &rng) < wifiLoss {
                        post(n, at: now + delay(100...2_000), .outgoingFailed(peer, t, reason: "no route"))
                        continue
                    }
                    let id = nextID
                    nextID += 1
                    let b = ids.firstIndex(of: peer)!
                    links[id] = Link(a: n, b: b, transport: t)
                    post(b, at: now + delay(5...300), .incoming(id, ids[n], t))
                case .close(let id, _):
                    guard let l = links[id] else { continue }
                    // This end is closed now (its manager has dropped it); the other end hears later.
                    if l.a == n { links[id]!.closedA = true } else { links[id]!.closedB = true }
                    let other = l.a == n ? l.b : l.a
                    let otherOpen = l.a == n ? l.openB : (l.openA || !l.decidedA)
                    if otherOpen && (l.a == n ? !l.closedB : !l.closedA) {
                        // A caller still in its handshake hears the close after its open.
                        if other == l.a && !l.decidedA { continue }
                        closeEnd(id, other, at: now + delay(1...300), tell: true)
                    }
                case .sendTopology(let id, let origin, let sequence, let neighbours):
                    guard let l = links[id] else { continue }
                    let other = l.a == n ? l.b : l.a
                    post(other, at: now + delay(1...300), .topology(from: id, origin: origin, sequence: sequence, neighbours: neighbours))
                default:
                    break
                }
            }
            // A handover holds a Wi-Fi and a Bluetooth LE link to one peer for a while: the budget
            // counts peers.
            if transports == [.wifi], m.connectionCount > budget {
                problems.append("node \(n + 1) holds \(m.connectionCount) links (budget \(budget)) at \(now) ms")
            }
            if m.counters.connectedPeers > budget {
                problems.append("node \(n + 1) is linked to \(m.counters.connectedPeers) peers (budget \(budget)) at \(now) ms")
            }
            if case .tick = input { ticks[n]?.remove(now) }
            if let w = m.nextWake, w > now, ticks[n, default: []].insert(w).inserted { post(n, at: w, .tick) }
        }

        /// The end at `node` of link `id` closes: its manager is told (`tell`) at `at`.
        func closeEnd(_ id: ConnectionID, _ node: Int, at: UInt64, tell: Bool) {
            guard var l = links[id] else { return }
            if node == l.a { guard !l.closedA else { return }; l.closedA = true } else { guard !l.closedB else { return }; l.closedB = true }
            links[id] = l
            if tell { post(node, at: at, .closed(id)) }
        }
    }

    struct Outcome: Sendable {
        var dials = 0, refusals = 0, breaks = 0
        var failures: [String] = []
    }

    /// Runs `seeds` models: totals for the figures line, and what went wrong.
    static func check(budget: Int, seeds: ClosedRange<UInt64>, transports: Set<MeshTransport>, wifiLoss: Double) -> Outcome {
        var o = Outcome()
        for seed in seeds {
            let nodes = 4 + Int(seed % 4)
            let model = Model(seed: seed &* 7919 &+ UInt64(budget), nodes: nodes, budget: budget, transports: transports, wifiLoss: wifiLoss)
            model.trace = Environment.trace == "\(budget) \(seed)"
            model.run(until: 30_000)
            o.dials += model.dials
            o.refusals += model.refusals
            o.breaks += model.breaks
            if !model.problems.isEmpty { o.failures.append("seed \(seed), \(nodes) gateways: \(model.problems.prefix(3))") }
            // At the end (links still breaking), no gateway holds two links to one peer over one
            // transport.
            for (i, m) in model.managers.enumerated() {
                let mine = model.links.filter { m.keeps($0.key) }.map { "\($0.value.a == i ? $0.value.b : $0.value.a) \($0.value.transport)" }
                if Set(mine).count != mine.count { o.failures.append("seed \(seed): gateway \(i + 1) holds two links to one peer: \(mine.sorted())") }
            }
        }
        return o
    }

    /// Seconds of CPU: on a thread of its own, never on Swift's cooperative pool (the supervision
    /// suites' timers need it; with two cores it is two threads).
    static func offPool(budget: Int, transports: Set<MeshTransport>, wifiLoss: Double) async throws -> Outcome {
        let thread = BlockingThread(name: "dial-races")
        defer { thread.shutdown() }
        return try await thread.run { check(budget: budget, seeds: 1...Environment.seeds, transports: transports, wifiLoss: wifiLoss) }
    }

    @Test("random dial races, closes and breaks among 4–7 gateways: no gateway ever over maxConnectionCount, none with two links to one peer at the end",
          arguments: [1, 2, 3])
    func races(budget: Int) async throws {
        let o = try await Self.offPool(budget: budget, transports: [.wifi], wifiLoss: 0)
        #expect(o.failures.isEmpty, "\(o.failures.count) failed: \(o.failures.prefix(5))")
        print("dial races, budget \(budget): \(Environment.seeds) seeds, \(o.dials) dials, \(o.refusals) refused, \(o.breaks) links broken, \(o.failures.count) failed")
    }

    @Test("the same with Wi-Fi and Bluetooth LE, a third of Wi-Fi dials failing (fallbacks and handovers racing): never linked to more peers than maxConnectionCount",
          arguments: [1, 2, 3])
    func racesWhileSwitching(budget: Int) async throws {
        let o = try await Self.offPool(budget: budget, transports: [.wifi, .bluetooth], wifiLoss: 0.33)
        #expect(o.failures.isEmpty, "\(o.failures.count) failed: \(o.failures.prefix(5))")
        print("dial races with switching, budget \(budget): \(Environment.seeds) seeds, \(o.dials) dials, \(o.refusals) refused, \(o.breaks) links broken, \(o.failures.count) failed")
    }
}
