import ShoalCore
import ShoalMesh
import ShoalSim
import Testing
import ShoalThreads

/// Transport switching in the discrete-event simulator: nodes with a Wi-Fi-like and a BLE-like
/// radio (`secondKind`), real stores, replicators and mesh managers, virtual time.
@Suite("Simulated transport switching")
struct SwitchingSimulationTests {
    @Test("Wi-Fi down on one node: its links move to BLE; Wi-Fi back: handover to Wi-Fi; everything converges, no resend loop", arguments: [UInt64(301), 302])
    func downAndBack(seed: UInt64) async throws {
        let thread = BlockingThread(name: "sim-test")
        defer { thread.shutdown() }
        try await thread.run { try Self.run(seed: seed) }
    }

    static func run(seed: UInt64) throws {
        var c = SimConfig()
        c.nodes = 4
        c.kind = .wifi
        c.secondKind = .ble
        c.seed = seed
        c.directory = simDirectory  // seeds differ from the other suites': a store directory is named after pid and seed
        c.mesh.advertisingDelayMillis = 100
        c.mesh.connectDelayMillis = 200
        c.mesh.backoffMillis = 1000
        c.mesh.initialDiscoveryMillis = 0
        let sim = try Simulation(c)
        defer { sim.cleanUp() }
        func transports(of i: Int) -> [MeshTransport?] { (0..<c.nodes).filter { $0 != i }.compactMap { j in sim.linkTransport(i, j).map { Optional($0) } } }
        var written = 0
        func write(on i: Int, _ n: Int) throws {
            for _ in 0..<n { try sim.write(on: i, id: "d\(written)", body: "{\"n\":\(written)}"); written += 1 }
        }

        let formed = sim.run(until: 60_000) { !(sim.meshConnected && !sim.links.isEmpty && sim.links.allSatisfy { sim.linkTransport($0.0, $0.1) == .wifi }) }
        #expect(formed != nil, "the mesh did not form over Wi-Fi")
        try write(on: 1, 10)

        sim.setRadio(0, .wifi, up: false)
        let downAt = sim.now
        let fallback = sim.run(until: sim.now + 60_000) { !(!transports(of: 0).isEmpty && transports(of: 0).allSatisfy { $0 == .bluetooth }) }
        #expect(fallback != nil, "node 0 did not move to Bluetooth LE: \(transports(of: 0))")
        try write(on: 0, 10)
        try write(on: 2, 10)
        #expect(sim.run(until: sim.now + 60_000) { !sim.converged } != nil, "no convergence over BLE")

        sim.setRadio(0, .wifi, up: true)
        let upAt = sim.now
        try write(on: 0, 10)
        var sawParallel = false
        let back = sim.run(until: sim.now + 120_000, every: 1) {
            if sim.parallelLinks > 0 { sawParallel = true }
            return !(!transports(of: 0).isEmpty && transports(of: 0).allSatisfy { $0 == .wifi })
        }
        #expect(back != nil, "node 0 did not return to Wi-Fi: \(transports(of: 0))")
        #expect(sawParallel, "no Wi-Fi link ran beside the BLE one (not a handover)")
        #expect(sim.run(until: sim.now + 60_000) { !sim.converged } != nil, "no convergence after the handover")
        #expect(sim.lostWrites().isEmpty)
        #expect(sim.duplicateLinks.isEmpty, "\(sim.duplicateLinks)")
        // Each write applied once at each other node; a handover may carry a few twice, a resend
        // loop would carry many.
        let expected = written * (c.nodes - 1)
        #expect(sim.documentsAppliedTotal >= expected && sim.documentsAppliedTotal <= expected + expected / 10,
                "applied \(sim.documentsAppliedTotal) for \(expected) expected")
        print("FIGURE sim switching (seed \(seed)): BLE after \(fallback.map { $0 - downAt } ?? 0) ms, back on Wi-Fi after \(back.map { $0 - upAt } ?? 0) ms (virtual); applied \(sim.documentsAppliedTotal) for \(expected)")
    }
}
