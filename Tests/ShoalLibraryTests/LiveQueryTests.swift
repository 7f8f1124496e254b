import Shoal
import ShoalTesting
import Testing

/// What a live query delivered so far, read by a task of its own (cancelled by `stop()`).
final class LiveRecorder: Sendable {
    let items = Guarded<[LiveQueryResult]>([])
    let failure = Guarded<String?>(nil)
    let task = Guarded<Task<Void, Never>?>(nil)
    init(_ stream: AsyncThrowingStream<LiveQueryResult, any Error>) {
        let t = Task { [items, failure] in
            do { for try await r in stream { items.withLock { $0.append(r) } } } catch { failure.withLock { $0 = "\(error)" } }
        }
        task.withLock { $0 = t }
    }
    var all: [LiveQueryResult] { items.withLock { $0 } }
    var last: LiveQueryResult? { all.last }
    func stop() { task.withLock { $0?.cancel() } }
}

@Suite("Library live queries", .serialized)
struct LiveQueryLibraryTests {
    @Test("live(): the whole result first, then an update per insert, update and delete that alters it; cancelling ends its thread")
    func localWrites() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let db = try Database(directory: dir.path, identity: try TLSIdentity.createIdentity(commonName: "live"), fullDurability: false)
        defer { db.close() }
        let readings = try db.collection("sensors.readings")
        try readings.put("a", json: #"{"site":"east","p":1}"#)
        try readings.put("w", json: #"{"site":"west","p":1}"#)
        let query = db.query("sensors.readings").where(.field("site") == "east").order(by: "-p").limit(10)
        let live = LiveRecorder(try query.live())
        #expect(await timeUntil(within: 5) { live.all.count == 1 } != nil)
        #expect(live.last?.number == 1 && live.last?.documents.map(\.id) == ["a"] && live.last?.added == ["a"])

        try readings.put("b", json: #"{"site":"east","p":5}"#)
        #expect(await timeUntil(within: 5) { live.last?.documents.map(\.id) == ["b", "a"] } != nil)
        #expect(live.last?.added == ["b"])
        try readings.put("a", json: #"{"site":"east","p":9}"#)
        #expect(await timeUntil(within: 5) { live.last?.documents.map(\.id) == ["a", "b"] } != nil)
        #expect(live.last?.changed == ["a"])
        let count = live.all.count
        try readings.put("w", json: #"{"site":"west","p":2}"#)  // outside the result: nothing pushed
        #expect(try readings.delete("b"))
        #expect(await timeUntil(within: 5) { live.last?.removed == ["b"] } != nil)
        #expect(live.all.count == count + 1, "\(live.all.map { ($0.number, $0.added, $0.changed, $0.removed) })")
        #expect(live.last?.documents.map(\.id) == ["a"])
        #expect(query.liveQueryCount == 1)

        live.stop()
        #expect(await timeUntil(within: 5) { query.liveQueryCount == 0 } != nil, "the live query's thread did not end when its task was cancelled")
        #expect(live.failure.withLock { $0 } == nil)
    }

    @Test("a malformed live query throws at once; beyond Database.maxLiveQueries the next is refused with the reason")
    func refusals() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let db = try Database(directory: dir.path, identity: try TLSIdentity.createIdentity(commonName: "cap"), fullDurability: false)
        defer { db.close() }
        _ = try db.collection("c")
        #expect(throws: ShoalError.self) { _ = try db.query("c").where("site = east").live() }
        var open: [LiveRecorder] = []
        for _ in 0..<Database.maxLiveQueries { open.append(LiveRecorder(try db.query("c").live())) }
        do {
            _ = try db.query("c").live()
            Issue.record("live query \(Database.maxLiveQueries + 1) was not refused")
        } catch {
            #expect(error.description.contains("too many live queries"))
        }
        for r in open { r.stop() }
        #expect(await timeUntil(within: 5) { db.query("c").liveQueryCount == 0 } != nil)
        let again = LiveRecorder(try db.query("c").live())
        #expect(await timeUntil(within: 5) { again.all.count == 1 } != nil)
        again.stop()
    }

    @Test("a replicated write and a replicated delete update a live query on the other gateway")
    func replicatedChange() async throws {
        let medium = SimulatedMedium()
        let ids = Guarded<Set<PeerID>>([])
        let a = try Peer.make("live-a", medium: medium, allowed: { ids.withLock { $0 } })
        let b = try Peer.make("live-b", medium: medium, allowed: { ids.withLock { $0 } })
        defer { a.close(); b.close() }
        ids.withLock { $0 = [a.id, b.id] }
        try a.replicator.start()
        try b.replicator.start()
        #expect(await timeUntil { a.replicator.neighborPeers == [b.id] && b.replicator.neighborPeers == [a.id] } != nil)
        _ = try b.database.collection("fleet.readings")
        let live = LiveRecorder(try b.database.query("fleet.readings").where(.field("hot") == true).live())
        defer { live.stop() }
        #expect(await timeUntil(within: 5) { live.all.count == 1 } != nil)
        #expect(live.last?.documents.isEmpty == true)

        let readingsA = try a.database.collection("fleet.readings")
        try readingsA.put("t1", json: #"{"hot":true}"#)
        #expect(await timeUntil { live.last?.documents.map(\.id) == ["t1"] } != nil, "B's live query never saw A's write")
        #expect(live.last?.added == ["t1"])
        #expect(try readingsA.delete("t1"))
        #expect(await timeUntil { live.last?.removed == ["t1"] } != nil, "B's live query never saw A's delete")
        #expect(live.last?.documents.isEmpty == true)
    }
}
