import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalThreads

/// The HTTP API's one-document writes (PUT, DELETE) with their preconditions: each is one
/// `store.transaction`, read (the document as it is), checked (412, 404), written. They share
/// commits with each other and with every other writer through the store's group commit
/// (`DocumentStore.transaction`: writes that arrive while a commit runs go in the next one
/// together, each answered once that commit returned). A write that fails its precondition, or
/// names an unknown collection, writes nothing and fails alone.
final class HTTPCommitQueue: Sendable {
    /// One write: `body` nil deletes. `check` sees the document as it is in the transaction (nil:
    /// never existed) and throws to refuse the write (412, 404).
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

    init() {}

    /// Commits `write` (alone or in the store's next group); returns once it is durable.
    func commit(_ write: Write, writer: LocalWriter) throws(StoreError) -> Outcome {
        try writer.store.transaction { (tx) throws(StoreError) -> Outcome in
            let before = try tx.get(write.collection, id: write.id.rawValue)
            try write.check(before)
            return Outcome(change: try writer.write(tx, write.collection, write.id, write.body), before: before)
        }
    }
}
