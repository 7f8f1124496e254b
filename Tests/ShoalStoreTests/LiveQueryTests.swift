import ShoalCore
@testable import ShoalStore
import ShoalTesting
import Testing

/// Live queries driven by hand (`poll` with the time given): which changes evaluate them again,
/// what each update says, and how a burst of writes is coalesced.
@Suite("Live queries (store)")
struct LiveQueryStoreTests {
    let east = try! Query(filter: QueryParser.parseFilter("site = \"east\""), order: [QueryOrderKey(.id)])

    @Test("the first poll pushes the whole result; inserts, updates and deletes push a diff; an unchanged result pushes nothing")
    func insertUpdateDelete() throws {
        try withStore(durability: .normal) { store, _ in
            _ = try store.createCollection(readings)
            _ = try store.put(readings, id: id("a"), body: #"{"site":"east","p":1}"#)
            _ = try store.put(readings, id: id("b"), body: #"{"site":"west","p":2}"#)
            var state = try LiveQueryState(store: store, query: east, in: readings)
            var t = ContinuousClock.now
            // A change is noticed at one poll and evaluated at the first poll past its pacing.
            func step() throws -> LiveQueryUpdate? {
                t += .seconds(1)
                if let u = try state.poll(store, now: t) { return u }
                t += .seconds(1)
                return try state.poll(store, now: t)
            }
            let first = try #require(try step())
            #expect(first.number == 1 && first.result.rows.map(\.id) == ["a"] && first.added == ["a"] && first.removed.isEmpty)
            #expect(try step() == nil, "nothing changed, yet it pushed")

            _ = try store.put(readings, id: id("c"), body: #"{"site":"east","p":3}"#)
            let insert = try #require(try step())
            #expect(insert.number == 2 && insert.added == ["c"] && insert.changed.isEmpty && insert.removed.isEmpty)
            #expect(insert.result.rows.map(\.id) == ["a", "c"])

            _ = try store.put(readings, id: id("a"), body: #"{"site":"east","p":9}"#)
            let update = try #require(try step())
            #expect(update.changed == ["a"] && update.added.isEmpty && update.removed.isEmpty)

            // A write that leaves the result as it was: evaluated, not pushed.
            let before = state.evaluations
            _ = try store.put(readings, id: id("b"), body: #"{"site":"west","p":5}"#)
            #expect(try step() == nil)
            #expect(state.evaluations == before + 1)
            #expect(state.due() == nil)

            _ = try store.put(readings, id: id("b"), body: #"{"site":"east","p":5}"#)  // moves into the result
            #expect(try step()?.added == ["b"])
            _ = try store.delete(readings, id: id("c"))
            let delete = try #require(try step())
            #expect(delete.removed == ["c"] && delete.result.rows.map(\.id) == ["a", "b"])
        }
    }

    @Test("changes of another collection do not evaluate the query again")
    func otherCollections() throws {
        try withStore(durability: .normal) { store, _ in
            let other = try CollectionName(parsing: "sensors.other")
            _ = try store.createCollection(readings)
            _ = try store.createCollection(other)
            var state = try LiveQueryState(store: store, query: east, in: readings)
            var t = ContinuousClock.now
            #expect(try state.poll(store, now: t) != nil)
            for i in 0..<50 {
                _ = try store.put(other, id: id("x\(i)"), body: #"{"site":"east"}"#)
                t += .seconds(1)
                #expect(try state.poll(store, now: t) == nil)
            }
            #expect(state.evaluations == 1)
            #expect(state.due() == nil)
        }
    }

    @Test("a burst of 1,000 writes over one second costs about ten evaluations, and the last result is right")
    func burstIsCoalesced() throws {
        try withStore(durability: .normal) { store, _ in
            _ = try store.createCollection(readings)
            let q = Query(filter: try QueryParser.parseFilter("site = \"east\" and p >= 500"), order: [QueryOrderKey(try FieldPath(segments: ["p"]), descending: true)], limit: 20)
            var state = try LiveQueryState(store: store, query: q, in: readings, pacing: LiveQueryPacing(coalesceMillis: 25, minIntervalMillis: 100))
            let start = ContinuousClock.now
            var last = try #require(try state.poll(store, now: start))
            var pushes = 1
            for i in 0..<1000 {
                _ = try store.put(readings, id: id("r\(i % 700)"), body: #"{"site":"\#(i % 3 == 0 ? "west" : "east")","p":\#(i)}"#)
                if let u = try state.poll(store, now: start + .milliseconds(i)) { last = u; pushes += 1 }
            }
            // Quiet afterwards: the last changes are evaluated once their time comes.
            if let u = try state.poll(store, now: start + .milliseconds(1200)) { last = u; pushes += 1 }
            #expect(state.evaluations <= 13, "\(state.evaluations) evaluations for 1,000 writes")
            #expect(state.evaluations >= 5)
            #expect(pushes <= state.evaluations)
            #expect(last.result == (try store.query(q, in: readings)))
            #expect(try state.poll(store, now: start + .milliseconds(5000)) == nil)
        }
    }

    @Test("a malformed query or an unknown collection is refused when the live query is made")
    func refusedUpFront() throws {
        try withStore(durability: .normal) { store, _ in
            #expect(throws: StoreError.self) { _ = try LiveQueryState(store: store, query: Query(), in: try CollectionName(parsing: "no.such")) }
            _ = try store.createCollection(readings)
            #expect(throws: StoreError.self) { _ = try LiveQueryState(store: store, query: Query(order: [QueryOrderKey(.id)], after: "garbage"), in: readings) }
        }
    }

    @Test("slots: at most the limit at once")
    func slots() {
        let s = LiveQuerySlots(limit: 2)
        #expect(s.take() && s.take())
        #expect(!s.take())
        s.release()
        #expect(s.take())
        #expect(s.count == 2)
        #expect(s.fullMessage.contains("at most 2"))
    }
}
