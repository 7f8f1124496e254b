import ShoalConfig
import ShoalCore
@testable import ShoalRuntime
import ShoalSupervision
import ShoalTesting
import ShoalTLS
import Testing

/// The identity service as the supervisor runs it, on the manual clock: it provides the identity
/// to the services after it, and hands over a new one by returning (so rest_for_one remakes them).
@Suite("Identity service")
struct IdentityServiceTests {
    static func gateway(_ dir: String) throws -> Gateway {
        let loader = ConfigurationLoading.loader(directories: [])
        let board = try loader.loadBoard("sim")
        let site = try loader.loadSite(text: "group: identity.test\n", file: "<test>")
        return Gateway(board: board, site: site, logger: Logger(sink: MemoryLogSink(), level: .debug), report: SupervisionReport(),
                       storePath: dir + "/shoal.db", socketPath: dir + "/control.sock")
    }

    @Test("first boot creates and provides an identity; one replaced on disk (`identity create --force`) is provided at the next look and the service returns")
    func providesAndHandsOver() async throws {
        let tmp = TemporaryDirectory()
        defer { tmp.remove() }
        let gateway = try Self.gateway(tmp.path)
        let provision = Provision<Identity>("the identity")
        let clock = ManualClock()
        let context = ServiceContext(name: "identity", path: "root/identity", logger: gateway.logger, clock: clock)
        let run = Task { try await IdentityService(gateway: gateway, provides: provision).run(context: context) }
        #expect(await context.waitUntilReady(timeout: .seconds(60)))
        let first = try #require(provision.current)
        #expect(gateway.identity?.peerID == first.peerID)

        // The operator makes a new one while the gateway runs.
        let fresh = try Identity.createSelfSigned(.init(commonName: "replaced", validDays: 30))
        try IdentityStore(directory: gateway.identityDirectory).save(fresh, label: gateway.site.identityLabel)
        #expect(await eventually(within: 20) { clock.sleeperCount > 0 })
        clock.advance(by: .seconds(60))
        try await run.value  // returned by itself: the supervisor restarts it and those after it
        #expect(provision.current?.peerID == fresh.peerID)
        #expect(gateway.identity?.peerID == fresh.peerID)
    }
}
