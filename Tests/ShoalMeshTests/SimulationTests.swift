import ShoalCore
import ShoalMesh
import ShoalSim
import Glibc
import Testing

/// Where simulated stores go: a tmpfs when there is one.
let simDirectory: String = {
    var st = stat()
    return stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp"
}()

func simConfig(nodes: Int, topology: SimTopology, seed: UInt64) -> SimConfig {
    var c = SimConfig()
    c.nodes = nodes
    c.topology = topology
    c.seed = seed
    c.directory = simDirectory
    return c
}

@Suite("Simulation smoke")
struct SimulationSmokeTests {
    @Test func tenNodesFormAMeshAndAWriteReachesAll() throws {
        let sim = try Simulation(simConfig(nodes: 10, topology: .full, seed: 7))
        sim.keepLog = true
        defer { sim.cleanUp() }
        sim.run(until: 20_000)
        print(sim.links, sim.meshConnected)
        try sim.write(on: 0, id: "a", body: #"{"v":1}"#)
        let t0 = sim.now
        let at = sim.run(until: 60_000) { !sim.converged || !sim.countsMatch }
        print("converged after", at.map { $0 - t0 } as Any, "bytes", sim.bytesSent)
        for l in sim.log.prefix(40) { print(l) }
        #expect(sim.meshConnected)
        #expect(at != nil)
        #expect(sim.lostWrites().isEmpty)
        #expect(sim.budgetViolations.isEmpty)
        #expect(sim.duplicateLinks.isEmpty)
    }
}
