import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalThreads

/// Group commit for the HTTP API's one-document writes (PUT, DELETE). With durability full every
/// commit waits for an fsync (about 0.8 ms on the CI disk), and the store takes one transaction at
/// a time, so writes committed one by one top out near 1,200/s however many clients wait. Here
/// the writes that arrive while a commit is under way queue up, and the next thread to commit
/// (the leader) writes all of them in ONE transaction; each caller still gets its answer only
/// after the commit that holds its write has returned, so an acknowledged write is as durable as
/// before. What a reader would get wrong: a write in a group sees the writes before it in the same
/// group (as it would have, one after the other), and a write that fails its precondition writes
/// nothing and fails alone; only an error from the store itself sends the group back to one
/// transaction per write, so that error reaches only the write that caused it.
final class HTTPCommitQueue: @unchecked Sendable {  // queue state only under `lock`
    /// One write: `body` nil deletes. `check` sees the document as it is in the group's
    /// transaction (nil: never existed) and throws to refuse the write (412, 404).
    struct Write: Sendable {
        let collection: CollectionName
        let id: DocumentID
        let body: String?
        let check: @Sendable (StoredDocument?) throws(StoreError) -> Void
    }

    /// What a write did: its change, and the document before it (nil: it did not exist).
    struct Outcome: Sendable {
        let change: Change
        let before: StoredDocument?
    }

    final class Ticket: @unchecked Sendable {  // `result` only under the queue's lock
        let write: Write
        var result: Result<Outcome, StoreError>?
        init(_ write: Write) { self.write = write }
    }

    /// Writes in one group at most (the rest wait for the next).
    static let groupMax = 256
    private let lock = ConditionLock()
    /// Under `lock`: the writes waiting, and whether a leader is committing now.
    private nonisolated(unsafe) var queued: [Ticket] = []
    private nonisolated(unsafe) var committing = false
    private nonisolated(unsafe) var groups = 0

    /// Writes queued and not yet taken by a leader (tests wait on it).
    var waiting: Int { lock.withLock { queued.count } }
    /// Transactions the queue has committed (a group that fell back counts once).
    var groupsCommitted: Int { lock.withLock { groups } }

    init() {}

    /// Commits `write`, alone or in a group with others queued meanwhile; returns once it is.
    func commit(_ write: Write, writer: LocalWriter) throws(StoreError) -> Outcome {
        let ticket = Ticket(write)
        lock.withLock { queued.append(ticket) }
        while true {
            // Wait until our write is done, or until no one commits: then lead the next group
            // (ours is in it unless more than groupMax were ahead of it).
            let group = lock.withLock { () -> [Ticket]? in
                while ticket.result == nil {
                    if !committing {
                        committing = true
                        let n = min(queued.count, HTTPCommitQueue.groupMax)
                        defer { queued.removeFirst(n) }
                        return Array(queued.prefix(n))
                    }
                    lock.wait()
                }
                return nil
            }
            guard let group else { break }
            let results = HTTPCommitQueue.run(group.map(\.write), writer: writer)
            lock.withLock {
                for (t, r) in zip(group, results) { t.result = r }
                groups += 1
                committing = false
                lock.broadcast()
            }
        }
        let result = lock.withLock { ticket.result }
        guard let result else { preconditionFailure("a write left the commit queue without a result") }
        return try result.get()
    }

    /// The group in one transaction; if the store itself fails, each write in its own.
    static func run(_ writes: [Write], writer: LocalWriter) -> [Result<Outcome, StoreError>] {
        if writes.count > 1, let grouped = try? writer.store.transaction({ (tx) throws(StoreError) -> [Result<Outcome, StoreError>] in
            try writes.map { (w) throws(StoreError) -> Result<Outcome, StoreError> in try apply(w, tx, writer) }
        }) {
            return grouped
        }
        return writes.map { w in
            do throws(StoreError) {
                return try writer.store.transaction { (tx) throws(StoreError) -> Result<Outcome, StoreError> in try apply(w, tx, writer) }
            } catch {
                return .failure(error)
            }
        }
    }

    /// One write in the group's transaction: a refused precondition is this write's answer and
    /// writes nothing; a store error throws (and ends the transaction).
    private static func apply(_ w: Write, _ tx: StoreTransaction, _ writer: LocalWriter) throws(StoreError) -> Result<Outcome, StoreError> {
        let before = try tx.get(w.collection, id: w.id.rawValue)
        do throws(StoreError) { try w.check(before) } catch { return .failure(error) }
        return .success(Outcome(change: try writer.write(tx, w.collection, w.id, w.body), before: before))
    }
}
