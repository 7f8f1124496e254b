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
    static func gateway(_ dir: String, sink: MemoryLogSink = MemoryLogSink()) throws -> Gateway {
        let loader = ConfigurationLoading.loader(directories: [])
        let board = try loader.loadBoard("sim")
        let site = try loader.loadSite(text: "group: identity.test\n", file: "<test>")
        return Gateway(board: board, site: site, logger: Logger(sink: sink, level: .debug), report: SupervisionReport(),
                       storePath: dir + "/shoal.db", socketPath: dir + "/control.sock")
    }

    @Test("first boot creates and provides an identity; one replaced on disk with a new key (`identity create --force --new-key`) is provided at the next look and the service returns")
    func providesAndHandsOver() async throws {
        let tmp = TemporaryDirectory()
        defer { tmp.remove() }
        let gateway = try Self.gateway(tmp.path)
        let provision = Provision<TLSCredentials>("the identity")
        let clock = ManualClock()
        let context = ServiceContext(name: "identity", path: "root/identity", logger: gateway.logger, clock: clock)
        let run = Task { try await IdentityService(gateway: gateway, provides: provision).run(context: context) }
        #expect(await context.waitUntilReady(timeout: .seconds(60)))
        let first = try #require(provision.current)
        #expect(gateway.identity?.peerID == first.peerID)

        // The operator makes a new one (a new key) while the gateway runs.
        let fresh = try Identity.createSelfSigned(.init(commonName: "replaced", validDays: 30))
        try IdentityStore(directory: gateway.identityDirectory).save(fresh, label: gateway.site.identityLabel)
        #expect(await eventually(within: 20) { clock.sleeperCount > 0 })
        clock.advance(by: .seconds(60))
        try await run.value  // returned by itself: the supervisor restarts it and those after it
        #expect(provision.current?.peerID == fresh.peerID)
        #expect(gateway.identity?.peerID == fresh.peerID)
    }

    @Test("clock forced past a self-signed identity's expiry: it is renewed over its key, the peer id stays, the log says renewed with both dates, replication is not restarted and the credentials present the new certificate")
    func renewsInPlace() async throws {
        let tmp = TemporaryDirectory()
        defer { tmp.remove() }
        let sink = MemoryLogSink()
        let gateway = try Self.gateway(tmp.path, sink: sink)
        let store = IdentityStore(directory: gateway.identityDirectory)
        let original = try Identity.createSelfSigned(.init(commonName: "gw-renew", validDays: 30))
        try store.save(original, label: gateway.site.identityLabel)
        let wall = ForcedWallClock(Identity.now())
        let provision = Provision<TLSCredentials>("the identity")
        let clock = ManualClock()
        let context = ServiceContext(name: "identity", path: "root/identity", logger: gateway.logger, clock: clock)
        var service = IdentityService(gateway: gateway, provides: provision)
        service.now = { wall.now }
        let run = Task { [service] in try await service.run(context: context) }
        #expect(await context.waitUntilReady(timeout: .seconds(60)))
        let credentials = try #require(provision.current)
        #expect(credentials.peerID == original.peerID)
        #expect(credentials.identity.certificate.der == original.certificate.der)

        // The gateway's clock jumps past the certificate's end; the next look renews it.
        let forced = original.certificate.notAfter + 3600
        wall.set(forced)
        #expect(await eventually(within: 20) { clock.sleeperCount > 0 })
        clock.advance(by: .seconds(60))
        #expect(await eventually(within: 20) { credentials.identity.certificate.der != original.certificate.der })
        let renewed = credentials.identity
        #expect(renewed.peerID == original.peerID)
        #expect(renewed.certificate.subject == original.certificate.subject)
        #expect(renewed.certificate.notAfter == forced - 3600 + Int64(gateway.site.identityValidDays) * 86_400)
        #expect(provision.current === credentials)  // the same credentials: nothing after it restarts
        #expect(gateway.identity?.certificate.der == renewed.certificate.der)
        #expect(try store.find(gateway.site.identityLabel)?.certificate.der == renewed.certificate.der)
        let line = try #require(sink.all.first { $0.message.contains("renewed identity") }?.message)
        #expect(line.contains(IdentityText.date(original.certificate.notAfter)) && line.contains(IdentityText.date(renewed.certificate.notAfter)), "\(line)")
        #expect(!sink.contains("restarting replication"))

        // Still running: it looks again a minute later, and keeps the renewed one.
        #expect(await eventually(within: 20) { clock.sleeperCount > 0 })
        clock.advance(by: .seconds(60))
        #expect(await eventually(within: 20) { clock.sleeperCount > 0 })
        #expect(credentials.identity.certificate.der == renewed.certificate.der)
        run.cancel()
        context.requestShutdown()
        _ = try? await run.value
    }
}

extension IdentityServiceTests {
    @Test("a site's identity.validDays of 1: a renewed certificate is kept at the next look, not renewed (and logged) again every minute")
    func shortValidityRenewsOnce() async throws {
        let tmp = TemporaryDirectory()
        defer { tmp.remove() }
        let loader = ConfigurationLoading.loader(directories: [])
        let site = try loader.loadSite(text: "group: identity.test\nidentity:\n  validDays: 1\n", file: "<test>")
        let gateway = Gateway(board: try loader.loadBoard("sim"), site: site, logger: Logger(sink: MemoryLogSink(), level: .debug),
                              report: SupervisionReport(), storePath: tmp.path + "/shoal.db", socketPath: tmp.path + "/control.sock")
        let original = try Identity.createSelfSigned(.init(commonName: "gw-short", validDays: 1))
        try IdentityStore(directory: gateway.identityDirectory).save(original, label: site.identityLabel)
        let wall = ForcedWallClock(original.certificate.notAfter + 60)
        var service = IdentityService(gateway: gateway, provides: Provision<TLSCredentials>("the identity"))
        service.now = { wall.now }
        guard case .success(let (renewed, .renewed)) = await service.look() else { Issue.record("not renewed"); return }
        #expect(renewed.peerID == original.peerID)
        wall.set(wall.now + 60)  // the next look, a minute later
        guard case .success(let (kept, outcome)) = await service.look() else { Issue.record("look failed"); return }
        guard case .kept = outcome else { Issue.record("renewed again a minute after renewal: \(outcome)"); return }
        #expect(kept.certificate.der == renewed.certificate.der)
    }
}

extension IdentityServiceTests {
    @Test("the control socket's `identity` answer names an absolute directory when `shoal run --data-dir` was relative (a client elsewhere would otherwise create or delete identities in its own working directory)")
    func identityDirectoryIsAbsolute() throws {
        let gateway = try Self.gateway("relative/data")
        let directory = try #require(gateway.identityJSON["directory"]?.stringValue)
        #expect(directory.hasPrefix("/") && directory.hasSuffix("/relative/data/identities"), "\(directory)")
        #expect(Gateway.absolute("/abs/x") == "/abs/x")
    }
}
