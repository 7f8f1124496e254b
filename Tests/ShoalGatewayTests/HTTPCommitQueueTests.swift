import Glibc
import Testing
import ShoalCore
import ShoalReplication
@testable import ShoalRuntime
import ShoalStore
import ShoalTesting
import ShoalThreads

/// The HTTP API's writes under the store's group commit: writes that wait while a commit runs go
/// in the next transaction together, each gets its own answer, a refused precondition or a store
/// error stays with its write.
/// Grouping is forced, not hoped for: the first write's check holds its transaction open until
/// the others are queued, so they all make the second group.
@Suite("HTTP commit queue")
struct HTTPCommitQueueTests {
    static let readings = try! CollectionName(parsing: "sensors.readings")

    struct Fixture {
        let dir = TemporaryDirectory(prefix: "shoal-commitq")
        let store: DocumentStore
        let writer: LocalWriter
        let queue = HTTPCommitQueue()

        init() throws {
            store = try DocumentStore.open(StoreOptions(path: dir.file("shoal.db")), logger: Logger(sink: MemoryLogSink(), level: .none))
            try store.createCollection(HTTPCommitQueueTests.readings)
            writer = LocalWriter(peer: PeerID(bytes: Array(repeating: 7, count: 32)), store: store, clock: try NodeClock(store: store))
        }

        func close() { store.close(); dir.remove() }
    }

    /// Commits a first write on a thread, and once its transaction is open,
    /// each of `others` on a thread of its own; waits for all. Results: the first's, then others'.
    static func commitAll(_ f: Fixture, first id: String = "first", _ others: [HTTPCommitQueue.Write]) -> [Result<HTTPCommitQueue.Outcome, StoreError>] {
        let results = Locked([Int: Result<HTTPCommitQueue.Outcome, StoreError>]())
        let entered = Locked(false)
        let done = ConditionLock()
        let queue = f.queue, writer = f.writer, store = f.store, count = others.count
        // The first write's check holds its transaction open until every other write is queued.
        let first = HTTPCommitQueue.Write(collection: readings, id: try! DocumentID(id), body: "{\"n\":0}") { _ in
            entered.withLock { $0 = true }
            while store.commitsWaiting < count { usleep(1000) }
        }
        func start(_ i: Int, _ w: HTTPCommitQueue.Write) {
            _ = DetachedThread.start(name: "commit-\(i)") {
                let r: Result<HTTPCommitQueue.Outcome, StoreError>
                do throws(StoreError) { r = .success(try queue.commit(w, writer: writer)) } catch { r = .failure(error) }
                done.withLock { results.withLock { $0[i] = r }; done.broadcast() }
            }
        }
        start(0, first)
        while !entered.withLock({ $0 }) { usleep(1000) }
        for (i, w) in others.enumerated() { start(i + 1, w) }
        done.withLock { while results.withLock({ $0.count }) < count + 1 { done.wait(timeoutMillis: 1000) } }
        return (0...count).map { i in results.withLock { $0[i]! } }
    }

    static func put(_ id: String, check: @escaping @Sendable (StoredDocument?) throws(StoreError) -> Void = { _ in }) -> HTTPCommitQueue.Write {
        HTTPCommitQueue.Write(collection: readings, id: try! DocumentID(id), body: "{\"id\":\"\(id)\"}", check: check)
    }

    @Test("writes queued while a commit runs are committed together in the next transaction, each with its own change")
    func groups() throws {
        let f = try Fixture()
        defer { f.close() }
        let others = (1...15).map { Self.put("doc-\($0)") }
        let before = f.store.commitCounts.withLock { $0.transactions }
        let results = Self.commitAll(f, others)
        let changes = try results.map { try $0.get().change }
        #expect(Set(changes.map(\.sequence)).count == 16)
        #expect(f.store.commitCounts.withLock { $0.transactions } - before == 2)
        #expect(f.store.lastSequence == 16)
        #expect(try f.store.get(Self.readings, id: DocumentID("doc-9"))?.body == "{\"id\":\"doc-9\"}")
    }

    @Test("of eight writes that each require revision 1 of one document, exactly one wins and the rest are refused")
    func preconditions() throws {
        let f = try Fixture()
        defer { f.close() }
        _ = try f.writer.put(Self.readings, id: DocumentID("shared"), body: "{}")
        let ifRevision1: @Sendable (StoredDocument?) throws(StoreError) -> Void = { (existing) throws(StoreError) in
            guard existing?.revision == 1 else { throw StoreError.preconditionFailed("not at revision 1") }
        }
        let results = Self.commitAll(f, (0..<8).map { _ in Self.put("shared", check: ifRevision1) })
        let wins = results.dropFirst().filter { if case .success = $0 { true } else { false } }
        let refused = results.dropFirst().filter { if case .failure(.preconditionFailed) = $0 { true } else { false } }
        #expect(wins.count == 1)
        #expect(refused.count == 7)
        #expect(try f.store.get(Self.readings, id: DocumentID("shared"))?.revision == 2)
    }

    @Test("a write to an unknown collection fails alone; the writes grouped with it commit")
    func storeErrorStaysWithItsWrite() throws {
        let f = try Fixture()
        defer { f.close() }
        let unknown = HTTPCommitQueue.Write(collection: try CollectionName(parsing: "no.such"), id: try DocumentID("x"), body: "{}") { _ in }
        let results = Self.commitAll(f, [Self.put("a"), unknown, Self.put("b")])
        #expect((try? results[1].get()) != nil)
        #expect((try? results[2].get()) == nil)
        #expect((try? results[3].get()) != nil)
        #expect(try f.store.get(Self.readings, id: DocumentID("b")) != nil)
    }
}
