import ShoalCore
import ShoalStore

/// Puts and deletes gathered inside `Database.inBatch`, written together when its closure
/// returns: in one store transaction, all or none, announced to peers once. Each call checks its
/// document at once (id, JSON object, size) and throws naming it; the writes themselves wait for
/// the closure to return, so a `get` inside the closure does not see them yet.
public final class WriteBatch {
    let database: Database
    var writes: [(collection: CollectionName, id: DocumentID, body: String?)] = []

    init(database: Database) { self.database = database }

    /// Writes a document (a JSON object) when the batch commits.
    public func put(_ id: String, json: String, in collection: Collection) throws(ShoalError) {
        let docID = try check(collection, id)
        do { try database.store.validateBody(json) } catch { throw ShoalError("cannot write \(collection.fullName)/\(id) in a batch: \(error)") }
        writes.append((collection.name, docID, json))
    }

    /// Deletes a document when the batch commits (nothing happens if it is missing or deleted by
    /// then; a put earlier in the same batch counts).
    public func delete(_ id: String, in collection: Collection) throws(ShoalError) {
        writes.append((collection.name, try check(collection, id), nil))
    }

    /// How many writes the batch holds so far.
    public var count: Int { writes.count }

    func check(_ collection: Collection, _ id: String) throws(ShoalError) -> DocumentID {
        guard collection.database === database else {
            throw ShoalError("\(collection.fullName)/\(id) belongs to another database (\(collection.database.path)) than this batch's (\(database.path))")
        }
        do { return try DocumentID(id) } catch { throw ShoalError("cannot write \(collection.fullName)/\(id) in a batch: \(error)") }
    }
}
