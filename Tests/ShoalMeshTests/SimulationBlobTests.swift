import ShoalCore
import ShoalMesh
import ShoalSim
import Testing

/// A few seeds of the blob properties in the debug build; scripts/sim-check.sh runs 200 seeds on
/// the release build.
@Suite("Simulated mesh with blobs")
struct SimulationBlobTests {
    @Test("10 Wi-Fi nodes, no faults: every node holds every blob, about one copy per node sent, no chunk sent twice", arguments: [UInt64(1), 2])
    func wifi(seed: UInt64) async throws {
        let r = try await offPool(scenario(nodes: 10, seed: seed) {
            $0.config.blobs = true
            $0.blobs = 3
            $0.blobMaxBytes = 1_000_000
        })
        #expect(r.failures.isEmpty, "\(r.failures)")
        #expect(r.blobsHeld)
        #expect(r.blobRatio <= SimScenario.blobTrafficBound)
        #expect(r.blobChunksResent == 0)
    }

    @Test("10 nodes under loss, partitions and crashes: transfers resume, every node ends with every blob", arguments: [UInt64(3), 4])
    func faults(seed: UInt64) async throws {
        let r = try await offPool(scenario(nodes: 10, seed: seed, seconds: 150) {
            $0.config.blobs = true
            $0.blobs = 3
            $0.blobMaxBytes = 1_000_000
            $0.config.loss = 0.05
            $0.config.partitions = true
            $0.config.crashes = true
            $0.config.faultsUntilMillis = 60_000
        })
        #expect(r.failures.isEmpty, "\(r.failures)")
        #expect(r.crashes > 0)
        #expect(r.blobChunksResent == 0)
    }

    @Test("8 Bluetooth LE nodes: small pieces, every node holds every blob")
    func ble() async throws {
        let r = try await offPool(scenario(nodes: 8, seed: 5, seconds: 300) {
            $0.config.kind = .ble
            $0.config.mesh.transports = [.bluetooth]
            $0.config.blobs = true
            $0.blobs = 2
            $0.blobMaxBytes = 300_000
        })
        #expect(r.failures.isEmpty, "\(r.failures)")
        #expect(r.blobRatio <= SimScenario.blobTrafficBound)
    }
}
