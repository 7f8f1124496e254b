// Transport switching over the simulated medium, through the public API only.
import Glibc
import Shoal
import ShoalTesting
import Testing

@Suite("Transport switching (Wi-Fi preferred, Bluetooth LE fallback, handover back)", .serialized)
struct SwitchingTests {
    /// Two replicators with both transports that trust each other.
    static func pair(_ name: String, medium: SimulatedMedium, change: (inout MeshOptions) -> Void = { _ in }) throws -> (Peer, Peer) {
        let ids = Guarded<Set<PeerID>>([])
        let a = try Peer.make("\(name)-a", medium: medium, allowed: { ids.withLock { $0 } }, transports: [.wifi, .bluetooth], mesh: change)
        let b = try Peer.make("\(name)-b", medium: medium, allowed: { ids.withLock { $0 } }, transports: [.wifi, .bluetooth], mesh: change)
        ids.withLock { $0 = [a.id, b.id] }
        return (a, b)
    }

    @Test("Wi-Fi down: the peers move to Bluetooth LE; Wi-Fi back: a Wi-Fi link opens beside it and the LE link closes after; nothing lost or sent twice in a loop")
    func downAndBack() async throws {
        let medium = SimulatedMedium()
        let (a, b) = try Self.pair("sw", medium: medium)
        defer { a.close(); b.close() }
        let events = Recorder(b.replicator.peerReplicatorStatusChanges())
        let docsB = Recorder(b.replicator.documentReplications())
        try a.replicator.start()
        try b.replicator.start()
        let ra = try a.database.collection("fleet.readings"), rb = try b.database.collection("fleet.readings")
        #expect(await timeUntil { b.replicator.peerInfo(for: a.id)?.replicatorTransport == .wifi } != nil, "not on Wi-Fi first")
        #expect(await timeUntil { b.replicator.peerInfo(for: a.id)?.transports == [.wifi, .bluetooth] } != nil)
        var written = 0
        func write(_ n: Int) throws { for _ in 0..<n { try ra.put("d\(written)", json: #"{"n":\#(written)}"#); written += 1 } }
        try write(20)
        #expect(await timeUntil { (try? rb.count()) == written } != nil)

        // Wi-Fi goes away under a: its Wi-Fi link closes; Bluetooth LE carries on.
        medium.setTransport(.wifi, up: false, for: a.id)
        let fallback = await timeUntil { b.replicator.peerInfo(for: a.id)?.replicatorTransport == .bluetooth }
        #expect(fallback != nil, "no fallback to Bluetooth LE: \(String(describing: b.replicator.peerInfo(for: a.id)?.replicatorTransport))")
        print("FIGURE switching: Wi-Fi down → replicating over Bluetooth LE after \(fallback.map { "\(($0 * 100).rounded() / 100)" } ?? "-") s (simulated medium)")
        try write(50)
        #expect(await timeUntil { (try? rb.count()) == written } != nil, "writes over Bluetooth LE did not arrive")

        // Wi-Fi comes back: a Wi-Fi link opens beside the LE one; the LE link closes after it
        // replicates. Writes keep coming during the handover.
        let beforeBack = events.all.count
        medium.setTransport(.wifi, up: true, for: a.id)
        let upAt = ContinuousClock.now
        var handedOver: Duration?
        for _ in 0..<10 {
            try write(10)
            try? await Task.sleep(for: .milliseconds(50))
            if handedOver == nil, b.replicator.peerInfo(for: a.id)?.replicatorTransport == .wifi { handedOver = ContinuousClock.now - upAt }
        }
        let back = await timeUntil { b.replicator.peerInfo(for: a.id)?.replicatorTransport == .wifi && b.replicator.neighborPeers == [a.id] }
        #expect(back != nil, "did not return to Wi-Fi")
        if handedOver == nil, back != nil { handedOver = ContinuousClock.now - upAt }
        print("FIGURE switching: Wi-Fi back → replicating over Wi-Fi (LE link closed) after \(handedOver.map { "\($0)" } ?? "-"), 10 writes of 10 going on (simulated medium; polled every 50 ms)")
        #expect(await timeUntil { (try? rb.count()) == written } != nil, "lost writes in the handover: \((try? rb.count()) ?? -1) of \(written)")
        let after = Array(events.all.dropFirst(beforeBack))
        // The Wi-Fi link came up (connecting/idle over wifi) before the LE one went offline — or the
        // LE link was closed as replaced, never reported offline first.
        let wifiUp = after.firstIndex { $0.transport == .wifi && ($0.activity == .idle || $0.activity == .busy || $0.activity == .connecting) }
        let bleOffline = after.firstIndex { $0.transport == .bluetooth && $0.activity == .offline }
        #expect(wifiUp != nil)
        if let w = wifiUp, let o = bleOffline { #expect(w < o, "Bluetooth LE went offline before Wi-Fi was up: \(after)") }
        // Nothing sent twice in a loop: what b received is what a wrote, give or take the few a
        // handover can carry on both links at once.
        try? await Task.sleep(for: .seconds(1))
        let received = docsB.all.filter { !$0.isPush }.flatMap(\.documents).count
        #expect(received >= written && received <= written + 20, "b received \(received) documents for \(written) written")
        print("FIGURE switching: b received \(received) documents for \(written) written across fallback and handover")
    }

    @Test("Wi-Fi heard but failing: after wifiAttemptsBeforeFallback failures the peers link over Bluetooth LE; Wi-Fi working again brings them back")
    func failingWifi() async throws {
        let medium = SimulatedMedium()
        let (a, b) = try Self.pair("fail", medium: medium) { m in
            m.wifiAttemptsBeforeFallback = 2
            m.wifiRetryAfterFallbackMillis = 1500
            m.backoffMillis = 200
        }
        defer { a.close(); b.close() }
        medium.setConnectionsFail(.wifi, true, for: a.id)
        try a.replicator.start()
        try b.replicator.start()
        let linked = await timeUntil { a.replicator.peerInfo(for: b.id)?.replicatorTransport == .bluetooth }
        #expect(linked != nil, "no Bluetooth LE link after Wi-Fi failures")
        #expect(a.replicator.counters.failedConnectionAttempts + b.replicator.counters.failedConnectionAttempts >= 2)
        try a.database.collection("fleet.readings").put("x", json: #"{"v":1}"#)
        #expect(await timeUntil { try b.database.collection("fleet.readings").get("x") != nil } != nil)
        medium.setConnectionsFail(.wifi, false, for: a.id)
        #expect(await timeUntil { a.replicator.peerInfo(for: b.id)?.replicatorTransport == .wifi && a.replicator.neighborPeers.count == 1 } != nil, "did not return to Wi-Fi")
    }
}
