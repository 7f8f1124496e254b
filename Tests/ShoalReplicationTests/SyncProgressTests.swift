import ShoalCore
@testable import ShoalReplication
import ShoalStore
import ShoalTesting
import Testing

@Suite("Sync progress")
struct SyncProgressTests {
    @Test("the meter counts received of announced, measures the rate over its window in virtual time, and estimates what is left")
    func meterArithmetic() {
        var m = ProgressMeter()
        #expect(m.progress(now: 0) == nil)
        m.announce(10_000, batchCount: 10_000, fullBatch: 1_000, now: 1_000)
        // Too early for a rate.
        m.receive(500, now: 1_250)
        #expect(m.progress(now: 1_250) == SyncProgress(received: 500, announced: 10_000, perSecond: nil, moreMayCome: true))
        // 500 documents every 250 ms: 2,000/s.
        var t: UInt64 = 1_250
        while t < 3_000 {
            t += 250
            m.receive(500, now: t)
        }
        let p = m.progress(now: 3_000)
        #expect(p == SyncProgress(received: 4_000, announced: 10_000, perSecond: 2_000, moreMayCome: true))
        #expect(p?.estimateSeconds == 3)
        #expect(p?.text == "4,000/10,000+ docs 2,000/s ~3 s+", "a full batch: more may come")
        // The pusher announces the next batches: the total grows, the sync goes on; a short batch
        // was its last.
        m.announce(2_000, batchCount: 2_000, fullBatch: 5_000, now: 3_000)
        #expect(m.progress(now: 3_000)?.announced == 12_000)
        #expect(m.progress(now: 3_000)?.text == "4,000/12,000 docs 2,000/s ~4 s")
        // The rate is over the last 5 s: after 4 s at 1,000/s it reads between the two rates...
        while t < 7_000 {
            t += 250
            m.receive(250, now: t)
        }
        let mixed = m.progress(now: 7_000)?.perSecond ?? 0
        #expect(mixed > 1_000 && mixed < 2_000, "rate \(mixed)")
        // ...and a while later only the recent one counts.
        while t < 13_000 {
            t += 250
            m.receive(10, now: t)
        }
        #expect(m.progress(now: 13_000)?.perSecond == 40)
        #expect(m.samples.count <= ProgressMeter.maxSamples)
        // A stall brings the rate to 0: no estimate.
        let stalled = m.progress(now: 20_000)
        #expect(stalled?.perSecond == 0)
        #expect(stalled?.estimateSeconds == nil)
        // Done: no progress to show.
        let left = m.outstanding
        m.receive(left + 5, now: 20_000)
        #expect(m.progress(now: 20_000) == nil)
        #expect(m.received == 12_000)
        // A batch announced within the linger continues the same sync (an acknowledgement's round trip)...
        m.announce(100, batchCount: 100, fullBatch: 1_000, now: 20_000 + ProgressMeter.lingerMillis - 1)
        #expect(m.progress(now: 21_000)?.announced == 12_100)
        m.receive(100, now: 21_000)
        // ...one later starts a new one.
        m.announce(300, batchCount: 300, fullBatch: 1_000, now: 21_000 + ProgressMeter.lingerMillis)
        #expect(m.progress(now: 23_000) == SyncProgress(received: 0, announced: 300, perSecond: nil))
        m.receive(300, now: 23_000)
        #expect(m.progress(now: 23_000) == nil, "a short batch done: the sync is over")
        // A full batch done: more may come, so it stays shown between batches until the linger passes.
        m.announce(1_000, batchCount: 1_000, fullBatch: 1_000, now: 30_000)
        m.receive(1_000, now: 30_500)
        #expect(m.progress(now: 31_000)?.text == "1,000/1,000+ docs 1,000/s")
        #expect(m.progress(now: 30_500 + ProgressMeter.lingerMillis) == nil)
    }

    @Test("progress reads as a console segment and as JSON, and several links add up")
    func formatting() {
        #expect(SyncProgress.grouped(0) == "0")
        #expect(SyncProgress.grouped(999) == "999")
        #expect(SyncProgress.grouped(1_000) == "1,000")
        #expect(SyncProgress.grouped(1_234_567) == "1,234,567")
        #expect(SyncProgress.roughDuration(42) == "42 s")
        #expect(SyncProgress.roughDuration(150) == "3 min")
        #expect(SyncProgress.roughDuration(4_000) == "1 h 7 min")
        let a = SyncProgress(received: 100, announced: 1_000, perSecond: 50)
        let b = SyncProgress(received: 200, announced: 500, perSecond: nil)
        #expect(SyncProgress.combined([a, b]) == SyncProgress(received: 300, announced: 1_500, perSecond: 50))
        #expect(SyncProgress.combined([]) == nil)
        #expect(b.text == "200/500 docs")
        #expect(SyncProgress(json: a.json) == a)
        #expect(a.json["estimateSeconds"]?.int64Value == 18)
        #expect(SyncProgress(json: .null) == nil)
        let more = SyncProgress(received: 4_120, announced: 10_000, perSecond: 2_050, moreMayCome: true)
        #expect(more.text == "4,120/10,000+ docs 2,050/s ~3 s+")
        #expect(SyncProgress(json: more.json) == more)
        #expect(SyncProgress.combined([a, more])?.moreMayCome == true)
    }

    @Test("a real pull reports its progress mid-sync, growing as batches are announced, and none once done")
    func progressDuringPull() throws {
        var settings = ReplicationSettings()
        settings.batchMaxCount = 100
        settings.batchWindow = 2
        let nodes = try makeNodes(["a", "b"], settings: settings)
        defer { nodes.forEach { $0.close() } }
        // 20 full batches of 100, then one of 70 (over eagerMaxCount: announced, not pushed).
        let total = 2_070
        _ = try nodes[0].node.writer.putAll(readings, (0..<total).map { (try! DocumentID("d-\($0)"), "{\"i\":\($0)}") })
        let net = Network(nodes, seed: 7)
        net.connect(0, 1)
        var seen: [SyncProgress] = []
        var steps = 0
        while net.step() {
            steps += 1
            precondition(steps < 1_000_000)
            net.now += 20
            let now = net.now
            #expect(nodes[0].node.syncProgress(now: now).isEmpty, "the pusher pulls nothing")
            let p = nodes[1].node.syncProgress(now: now)
            #expect(p.count <= 1)
            if let first = p.first {
                #expect(first.peer == nodes[0].peer)
                #expect(first.progress.received < first.progress.announced || first.progress.moreMayCome, "shown with nothing left only between full batches")
                #expect(first.progress.announced <= total)
                seen.append(first.progress)
            }
        }
        net.settle()
        #expect(try nodes[1].snapshot().count == total)
        #expect(nodes[1].node.syncProgress(now: net.now).isEmpty, "no progress once the sync is done")
        // It was shown mid-sync, with counts that only grow, a total that grew batch by batch
        // (announced ahead of what was acknowledged, not all at once), and a rate once measured.
        #expect(seen.count > 10)
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.received <= $1.received && $0.announced <= $1.announced })
        #expect(seen.first.map { $0.announced <= settings.batchMaxCount * settings.batchWindow } == true)
        #expect(seen.last?.announced == total)
        #expect(seen.contains { ($0.perSecond ?? 0) > 0 && $0.estimateSeconds != nil })
        // Full batches of 100 said more may come; the short last one that it was the end.
        #expect(seen.first?.moreMayCome == true)
        #expect(seen.last?.moreMayCome == false)
        // Between batches (everything announced held, the next not announced yet) it stayed shown.
        #expect(seen.contains { $0.received == $0.announced && $0.moreMayCome })
    }
}
