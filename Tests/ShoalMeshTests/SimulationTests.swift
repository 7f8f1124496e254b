import Glibc
import ShoalCore
import ShoalMesh
import ShoalSim
import Testing
import ShoalThreads

/// Where simulated stores go: a tmpfs when there is one.
let simDirectory: String = {
    var st = stat()
    return stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp"
}()

func scenario(nodes: Int, topology: SimTopology = .full, seed: UInt64, seconds: UInt64 = 60, _ edit: (inout SimScenario) -> Void = { _ in }) -> SimScenario {
    var s = SimScenario()
    s.config.nodes = nodes
    s.config.topology = topology
    s.config.seed = seed
    s.config.directory = simDirectory
    s.seconds = seconds
    s.writes = 10
    edit(&s)
    return s
}

/// Simulations take seconds of CPU: they run on a thread of their own, never on Swift's
/// cooperative pool (other suites' timers need it; with two cores it is two threads).
func offPool(_ s: SimScenario) async throws -> SimReport {
    let thread = BlockingThread(name: "sim-test")
    defer { thread.shutdown() }
    return try await thread.run { try s.run() }
}

/// A few seeds of each property in the debug build; `make test` runs 200 seeds of each on the
/// release build (scripts/sim-check.sh).
@Suite("Simulated mesh")
struct SimulationTests {
    @Test("20 nodes in range, maxConnectionCount 3: connected, within budget, every write everywhere", arguments: [UInt64(1), 2])
    func twentyInRange(seed: UInt64) async throws {
        let r = try await offPool(scenario(nodes: 20, seed: seed))
        #expect(r.failures.isEmpty, "\(r.failures)")
        #expect(r.linksPerNode.max()! <= 3)
    }

    @Test("line and grid: writes cross the hops, in about the sum of per-hop latencies")
    func lineAndGrid() async throws {
        let line = try await offPool(scenario(nodes: 12, topology: .line, seed: 3) { $0.probeLatency = true })
        #expect(line.failures.isEmpty, "\(line.failures)")
        #expect(line.probeHops == 11)
        // Each hop: latency + transmission (+ 1 ms rounding): well under twice the latencies.
        #expect(line.probeMillis! <= 2 * line.probePathLatencyMillis!)
        let grid = try await offPool(scenario(nodes: 16, topology: .grid, seed: 4))
        #expect(grid.failures.isEmpty, "\(grid.failures)")
    }

    @Test("loss, partitions, crashes, clock skew, duplicated and reordered frames: converge once faults stop, nothing acknowledged lost, no delete back", arguments: [UInt64(5), 6])
    func faults(seed: UInt64) async throws {
        let r = try await offPool(scenario(nodes: 8, seed: seed, seconds: 200) {
            $0.config.loss = 0.05
            $0.config.partitions = true
            $0.config.crashes = true
            $0.config.maxSkewMillis = 90_000
            $0.config.duplicate = 0.01
            $0.config.reorder = 0.01
            $0.config.faultsUntilMillis = 100_000
            $0.writes = 40
        })
        #expect(r.failures.isEmpty, "\(r.failures)")
        #expect(r.crashes > 0 && r.partitions > 0 && r.faultyFrames > 0)
        #expect(r.bytesRatio <= SimScenario.trafficBound(faults: true) && r.maxFramesInFlight <= SimScenario.maxFramesInFlightBound)
    }

    @Test("BLE: control per link direction and second, against the link's capacity: the gossip pace keeps it under a tenth; an unpaced mesh goes over and fails the bound")
    func controlPerLink() async throws {
        func run(entriesPerInterval: Int) async throws -> SimReport {
            try await offPool(scenario(nodes: 60, topology: .random, seed: 11, seconds: 120) {
                $0.config.kind = .ble
                $0.config.mesh.transports = [.bluetooth]
                $0.config.mesh.maxConnectionCount = 3
                $0.config.mesh.gossipPerIntervalBluetooth = entriesPerInterval
                $0.maxControlShare = 0.1
            })
        }
        let paced = try await run(entriesPerInterval: 2)
        #expect(paced.failures.isEmpty, "\(paced.failures)")
        #expect(paced.controlLoad.percentile(1) > 0.01 && paced.controlLoad.percentile(1) <= 0.1)
        #expect(paced.controlLoad.directions > 0 && paced.controlLoad.worstLifeShare <= paced.controlLoad.percentile(1) + 0.01)
        let unpaced = try await run(entriesPerInterval: 10_000)
        #expect(unpaced.controlLoad.percentile(1) > 0.1)
        #expect(unpaced.failures.contains { $0.hasPrefix("control took") }, "\(unpaced.failures)")
    }

    @Test("a seed replays exactly")
    func replay() async throws {
        let a = try await offPool(scenario(nodes: 10, seed: 9) { $0.config.partitions = true; $0.config.faultsUntilMillis = 30_000 })
        let b = try await offPool(scenario(nodes: 10, seed: 9) { $0.config.partitions = true; $0.config.faultsUntilMillis = 30_000 })
        #expect(a.bytesDuringWrites == b.bytesDuringWrites)
        #expect(a.dot == b.dot)
        #expect(a.formedAtMillis == b.formedAtMillis && a.convergedAfterMillis == b.convergedAfterMillis)
    }

    @Test("advertising that fails at first backs off, then the mesh forms")
    func advertisingFailures() async throws {
        let r = try await offPool(scenario(nodes: 5, seed: 6, seconds: 200) { $0.config.advertisingFailures = 3 })
        #expect(r.failures.isEmpty, "\(r.failures)")
        // 2 s delay, then retries after 5, 10 and 20 s: nobody advertises before 37 s.
        #expect(r.formedAtMillis! >= 37_000)
    }

    @Test("real TLS on every simulated link: the mesh forms and converges; bytes are ciphertext")
    func tls() async throws {
        let r = try await offPool(scenario(nodes: 5, topology: .ring, seed: 7) { $0.config.tls = true })
        #expect(r.failures.isEmpty, "\(r.failures)")
        #expect(r.bytesDuringWrites > r.idealBytes)
    }
}
