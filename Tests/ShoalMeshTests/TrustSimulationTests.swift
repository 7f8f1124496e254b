import ShoalSim
import Testing

/// Fleet trust in the simulator, a few seeds in the debug build; `make sim-check` runs 200 seeds
/// on the release build (scripts/sim-check.sh, scenario trust-10).
@Suite("Simulated fleet trust")
struct TrustSimulationTests {
    @Test("an operator revokes one node under partitions and crashes: nobody links to it again, every other node holds the same entries and revocations, its later writes are refused",
          arguments: [UInt64(1), 2, 3])
    func revokeUnderFaults(seed: UInt64) async throws {
        let r = try await offPool(scenario(nodes: 8, seed: seed, seconds: 200) {
            $0.config.partitions = true
            $0.config.crashes = true
            $0.config.loss = 0.02
            $0.config.faultsUntilMillis = 100_000
            $0.config.trust = true
            $0.writes = 30
        })
        #expect(r.failures.isEmpty, "\(r.failures)")
        let t = try #require(r.trust)
        #expect(t.revokedAtMillis != nil && t.allKnewAfterMillis != nil)
        #expect(t.linkViolations.isEmpty && t.lateAccepted.isEmpty)
        #expect(t.recorded >= 2)
    }

    @Test("with real mutual TLS the books' authenticators refuse the revoked node")
    func revokeOverTLS() async throws {
        let r = try await offPool(scenario(nodes: 5, seed: 4, seconds: 120) {
            $0.config.partitions = true
            $0.config.faultsUntilMillis = 60_000
            $0.config.tls = true
            $0.config.trust = true
        })
        #expect(r.failures.isEmpty, "\(r.failures)")
        #expect(r.trust?.allKnewAfterMillis != nil)
    }

    @Test("a run with TLS and trust replays exactly (keys from the seed); a short one without faults fits the operator's plan and forms before the revocation")
    func replayWithKeys() async throws {
        func run() async throws -> SimReport {
            try await offPool(scenario(nodes: 6, seed: 5, seconds: 60) {
                $0.config.tls = true
                $0.config.trust = true
            })
        }
        let a = try await run()
        let b = try await run()
        #expect(a.failures.isEmpty, "\(a.failures)")
        #expect(a.bytesDuringWrites == b.bytesDuringWrites && a.allBytes == b.allBytes && a.controlBytes == b.controlBytes)
        #expect(a.dot == b.dot)
        #expect(a.formedAtMillis == b.formedAtMillis && a.convergedAfterMillis == b.convergedAfterMillis)
        let revoked = try #require(a.trust?.revokedAtMillis)
        #expect(revoked == b.trust?.revokedAtMillis && a.trust?.allKnewAfterMillis == b.trust?.allKnewAfterMillis)
        // The victim's links do not hold the mesh back: it forms long before the operator acts.
        #expect(try #require(a.formedAtMillis) < revoked)
    }
}
