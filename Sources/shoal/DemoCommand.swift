import Glibc
import ShoalCore
import ShoalMesh
import ShoalSim
import ShoalStatus
import ShoalStore

extension CLI {
    /// `shoal demo`: five gateways in this process on a simulated radio — real stores, real TLS,
    /// real replication, the real mesh manager — told as a story with a status view.
    static func demo(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "demo", valueOptions: ["--nodes", "--seed", "--dir"], flagOptions: ["--fast"])
        if helpIfAsked(a, "demo") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "demo", usage: "demo [--nodes N] [--seed X] [--fast]")
        var config = SimConfig()
        config.nodes = try a.int("--nodes", command: "demo", default: 5, range: 3...12)
        config.seed = UInt64(try a.int("--seed", command: "demo", default: 1, range: 0...Int.max))
        config.topology = .ring
        config.tls = true
        config.mesh.transports = [.wifi]
        var st = stat()
        config.directory = a.values["--dir"] ?? (stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp")
        // Paced for a person at a terminal; --fast (or output to a file) runs straight through.
        let paced = !a.flags.contains("--fast") && isatty(STDOUT_FILENO) == 1
        let started = ContinuousClock.now
        let demo = try Demo(config: config, paced: paced)
        defer { demo.sim.cleanUp() }
        return try demo.run(started: started)
    }
}

/// The demo's script and its status view.
final class Demo {
    let sim: Simulation
    let paced: Bool
    let n: Int
    var index: [PeerID: Int] = [:]

    init(config: SimConfig, paced: Bool) throws {
        sim = try Simulation(config)
        self.paced = paced
        n = config.nodes
        for node in sim.nodes { index[node.peer] = node.index }
    }

    func name(_ i: Int) -> String { "gw-\(i + 1)" }

    func pause(_ ms: UInt32 = 700) { if paced { usleep(ms * 1000) } }

    func say(_ text: String) {
        out(text)
        pause()
    }

    func run(started: ContinuousClock.Instant) throws -> Int32 {
        say("""
            Shoal demo: \(n) gateways in one process on a simulated Wi-Fi radio, placed in a ring (each
            hears the two next to it). Each has its own SQLite store (in \(sim.config.directory)), its own
            certificate and a real mutual-TLS session (mbedTLS) on every link; replication and the mesh
            manager are the ones `shoal run` uses. Time is virtual: a minute of mesh life takes moments.
            """)

        // 1. The mesh forms.
        guard sim.run(until: 60_000, while: { !sim.meshConnected }) != nil else {
            out("the mesh did not form within a minute of virtual time")
            return ExitCode.failure
        }
        say("\n[\(clock)] The gateways found each other (discovery, advertising) and linked up:")
        view()

        // 2. One write travels hop by hop.
        let far = n / 2
        say("\n[\(clock)] gw-1 writes document reading-1. Watch it travel (each hop: a TLS frame, a store commit):")
        try trace(writeOn: 0, id: "reading-1", body: #"{"temperature":21.5,"room":"boiler"}"#)
        view()

        // 3. A link breaks: the mesh reroutes, replication goes the long way round.
        let (x, y) = treeLinkNear(0)
        say("\n[\(clock)] The radio between \(name(x)) and \(name(y)) fails (interference, a closed door).")
        var before = sim.links
        sim.setBlocked(x, y, true)
        sim.run(until: sim.now + 3_000)
        describeChanges(from: before)
        say("[\(clock)] \(name(x)) writes document reading-2; it reaches \(name(y)) around the ring:")
        try trace(writeOn: x, id: "reading-2", body: #"{"temperature":22.0,"room":"hall"}"#)
        view()

        // 4. A second break splits the mesh in two; both halves keep writing, even the same document.
        let z = (far + 1) % n
        let w = (z + 1) % n
        say("[\(clock)] \(name(x)) writes document setpoint, and it reaches every gateway:")
        try sim.write(on: x, id: "setpoint", body: #"{"celsius":21,"fan":"auto"}"#)
        sim.run(until: sim.now + 2_000)
        out("  every gateway holds setpoint = \(body(y, "setpoint") ?? "-")")
        say("\n[\(clock)] The radio between \(name(z)) and \(name(w)) fails too: the mesh is now in two parts.")
        before = sim.links
        sim.setBlocked(z, w, true)
        sim.run(until: sim.now + 3_000)
        describeChanges(from: before)
        let sideA = component(of: x), sideB = component(of: y)
        say("[\(clock)] Parts: {\(sideA.map(name).joined(separator: ", "))} and {\(sideB.map(name).joined(separator: ", "))}. Both edit setpoint, different fields:")
        try sim.write(on: sideA.first!, id: "setpoint", body: #"{"celsius":19,"fan":"auto"}"#)
        sim.run(until: sim.now + 50)
        try sim.write(on: sideB.first!, id: "setpoint", body: #"{"celsius":21,"fan":"high"}"#)
        sim.run(until: sim.now + 2_000)
        for i in [sideA.first!, sideB.first!] { out("  \(name(i)) holds setpoint = \(body(i, "setpoint") ?? "-")") }
        view()

        // 5. The radio recovers: links come back, everything converges, the conflict is resolved.
        say("\n[\(clock)] The radio recovers. The mesh heals and the two parts reconcile:")
        before = sim.links
        sim.setBlocked(x, y, false)
        sim.setBlocked(z, w, false)
        let healStart = sim.now
        var lastLine = ""
        let healed = sim.run(until: sim.now + 120_000, every: 500) {
            let line = "  [\(clock)] links \(sim.links.count), converged: \(sim.converged ? "yes" : "not yet")"
            if line != lastLine { out(line); lastLine = line; pause(150) }
            return !(sim.converged && sim.meshConnected)
        }
        guard healed != nil else {
            out("the mesh did not heal within two minutes of virtual time")
            return ExitCode.failure
        }
        describeChanges(from: before)
        say("[\(clock)] Every gateway holds the same documents. setpoint everywhere: \(body(0, "setpoint") ?? "-")")
        let conflicts = (try? sim.nodes.compactMap(\.store).map { try $0.conflicts(limit: 100).count }.reduce(0, +)) ?? 0
        say("  (the concurrent edits were a conflict; the default resolver, field merge, kept both: celsius from one part, fan from the other,")
        say("   the same on every gateway — \(conflicts) resolution\(conflicts == 1 ? "" : "s") logged; an edit of the same field keeps the newer write)")
        view()

        // Summary.
        let lost = sim.lostWrites()
        out("""

            Summary
              gateways                 \(n), ring radio, real SQLite + mbedTLS + replication + mesh manager
              virtual time             \(CLI.fmt2(Double(sim.now) / 1000)) s in \(CLI.fmt2((ContinuousClock.now - started).secondsValue)) s of wall time
              TLS handshakes           \(sim.handshakes)
              frames / bytes on radio  \(sim.framesSent) / \(sim.bytesSent) (ciphertext)
              documents written        \(sim.writes.count), on every gateway: \(lost.isEmpty ? "yes" : "NO: \(lost.prefix(2))")
              mesh healed after cuts   \(CLI.fmt2(Double((healed ?? healStart) - healStart) / 1000)) s (virtual)
              invariants               \(sim.converged && lost.isEmpty && sim.meshConnected && sim.budgetViolations.isEmpty ? "converged, nothing lost, mesh connected, within the connection budget" : "FAILED")
            Plan a site of your own with `shoal sim` (see `shoal help sim`).
            """)
        return sim.converged && lost.isEmpty ? ExitCode.ok : ExitCode.failure
    }

    var clock: String {
        let t = sim.now / 100
        return "\(t / 10).\(t % 10) s"
    }

    /// Writes on one gateway and prints when each other gateway holds it.
    func trace(writeOn i: Int, id: String, body: String) throws {
        try sim.write(on: i, id: id, body: body)
        let t0 = sim.now
        var arrived: [Int: UInt64] = [i: 0]
        _ = sim.run(until: t0 + 30_000, every: 1) {
            for j in 0..<n where arrived[j] == nil && self.body(j, id) != nil { arrived[j] = sim.now - t0 }
            return arrived.count < n
        }
        let hops = sim.linkHops(from: i)
        for (j, ms) in arrived.sorted(by: { ($0.value, $0.key) < ($1.value, $1.key) }) where j != i {
            out("  \(name(j)) has it after \(ms) ms (\(hops[j].map { "\($0) hop\($0 == 1 ? "" : "s") away" } ?? "unreachable"))")
            pause(250)
        }
    }

    /// Says which links the mesh dropped and made since `before`.
    func describeChanges(from before: [(Int, Int)]) {
        let old = Set(before.map { [$0.0, $0.1] }), now = Set(sim.links.map { [$0.0, $0.1] })
        let gone = old.subtracting(now).sorted { $0.lexicographicallyPrecedes($1) }
        let made = now.subtracting(old).sorted { $0.lexicographicallyPrecedes($1) }
        let text = (gone.map { "lost \(name($0[0]))–\(name($0[1]))" } + made.map { "new link \(name($0[0]))–\(name($0[1]))" })
        if !text.isEmpty { out("  the mesh: " + text.joined(separator: ", ") + (made.isEmpty ? "" : " (healed by itself)")) }
    }

    func body(_ i: Int, _ id: String) -> String? {
        guard let s = sim.nodes[i].store, let docID = try? DocumentID(id) else { return nil }
        return (try? s.get(.default, id: docID))??.body
    }

    func component(of i: Int) -> [Int] {
        sim.linkHops(from: i).enumerated().compactMap { $0.element == nil ? nil : $0.offset }
    }

    /// A link next to node `i` (the one to its clockwise neighbour when linked).
    func treeLinkNear(_ i: Int) -> (Int, Int) {
        let links = sim.links
        let next = (i + 1) % n
        if links.contains(where: { $0 == (min(i, next), max(i, next)) }) { return (i, next) }
        return links.first(where: { $0.0 == i || $0.1 == i }) ?? (i, next)
    }

    /// The status view: one line per gateway.
    func view() {
        out("  gateway  state           links to          docs  LED")
        for node in sim.nodes {
            let m = node.mesh
            let state = m?.state.rawValue ?? "down"
            let neighbours = (m?.neighbours ?? []).compactMap { index[$0] }.sorted().map(name).joined(separator: " ")
            let docs = (try? node.store?.stats()).map { "\($0.documents)" } ?? "-"
            let signal: LEDSignal
            if !node.up { signal = .dead } else if let m, m.connectionCount > 0 { signal = .connected(peers: m.connectionCount) } else { signal = .discovering }
            let led = LEDPattern.pattern(for: signal)
            out("  \(pad(name(node.index), 8)) \(pad(state, 15)) \(pad(neighbours.isEmpty ? "-" : neighbours, 17)) \(pad(docs, 5)) \(led.sketch(tickMillis: 100)) \(led.name)")
        }
        pause(900)
    }

    func pad(_ s: String, _ w: Int) -> String { s.count >= w ? s : s + String(repeating: " ", count: w - s.count) }
}

extension Duration {
    var secondsValue: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
