import Glibc
import ShoalCore
import ShoalReplication
import ShoalStore
import Synchronization
import ShoalThreads

/// A JSON document of a collection. `json` is nil for a deleted document (a tombstone, kept so the
/// delete replicates).
public struct Document: Sendable, Equatable {
    /// `scope.collection`.
    public let collection: String
    public let id: String
    public let json: String?
    public var isDeleted: Bool { json == nil }

    public init(collection: String, id: String, json: String?) {
        self.collection = collection
        self.id = id
        self.json = json
    }

    func field(_ key: String) -> JSONValue? {
        guard let json, let v = try? JSONValue.parse(json) else { return nil }
        return v[key]
    }
    /// A top-level string field.
    public func string(forKey key: String) -> String? { field(key)?.stringValue }
    /// A top-level integer field (nil if absent or not an integer).
    public func int(forKey key: String) -> Int? { field(key)?.int64Value.map { Int($0) } }
    /// A top-level number field.
    public func double(forKey key: String) -> Double? { field(key)?.doubleValue }
    public func bool(forKey key: String) -> Bool? { field(key)?.boolValue }
    /// Whether the top-level field exists (null included).
    public func contains(key: String) -> Bool { field(key) != nil }
}

/// A change to a collection: a document written or deleted, here or by replication.
public struct DocumentChange: Sendable, Equatable {
    public let collection: String
    public let id: String
    public let isDeleted: Bool
    /// The store's sequence number of the change (grows with every write).
    public let sequence: Int64
}

/// A store of JSON documents in collections: one SQLite file, crash-safe (a write is on disk
/// when the call returns, at the `full` durability). A database belongs to one identity: its local
/// writes are versioned under that peer id, which is how replication tells writes apart.
///
/// Calls block on SQLite: from async code, call them off Swift's cooperative pool (a thread of
/// your own) when writes are large.
public final class Database: Sendable {
    let store: DocumentStore
    let clock: NodeClock
    let writer: LocalWriter
    let identity: TLSIdentity
    public let path: String
    /// Live queries open at once (`QueryBuilder.live()`): at most `maxLiveQueries`.
    let liveQueries = LiveQuerySlots(limit: Database.maxLiveQueries)
    public static let maxLiveQueries = 64

    /// Opens (or creates) `<directory>/shoal.db`. A corrupt file is moved aside (named in the
    /// log) and a fresh store started, as the stock gateway does.
    public init(directory: String, identity: TLSIdentity, fullDurability: Bool = true) throws(ShoalError) {
        path = directory + "/shoal.db"
        self.identity = identity
        do {
            try Database.makeDirectories(directory)
            let quiet = Logger(sink: MemoryLogSink(), level: .none)
            store = try DocumentStore.open(StoreOptions(path: path, durability: fullDurability ? .full : .normal), logger: quiet)
            clock = try NodeClock(store: store)
        } catch let e as ShoalError { throw e } catch { throw ShoalError("cannot open the database at \(path): \(error)") }
        writer = LocalWriter(peer: identity.raw.peerID, store: store, clock: clock)
    }

    /// The collection named `scope.name` (or `name` in the default scope), made if missing.
    public func collection(_ name: String) throws(ShoalError) -> Collection {
        let parsed = try Database.name(name)
        do { _ = try store.createCollection(parsed) } catch { throw ShoalError("cannot create collection \(name): \(error)") }
        return Collection(database: self, name: parsed)
    }

    /// The collections that exist.
    public func collectionNames() throws(ShoalError) -> [String] {
        do { return try store.collections().map(\.description) } catch { throw ShoalError("cannot list collections: \(error)") }
    }

    /// Writes several documents, of any of this database's collections, as one: `body` gathers
    /// puts and deletes in a `WriteBatch`, and when it returns they are committed in one store
    /// transaction and peers are told of them together. All or nothing: if `body` throws (a
    /// document the batch refused, or an error of your own) or the commit fails, nothing is
    /// written and the error is thrown on. Returns what `body` returns.
    ///
    ///     try db.inBatch { batch in
    ///         try batch.put("r1", json: #"{"t":21.5}"#, in: readings)
    ///         try batch.delete("r0", in: readings)
    ///     }
    @discardableResult
    public func inBatch<T>(_ body: (WriteBatch) throws -> T) throws -> T {
        let batch = WriteBatch(database: self)
        let result = try body(batch)
        guard !batch.writes.isEmpty else { return result }
        do { try writer.apply(batch.writes) } catch {
            throw ShoalError("cannot commit a batch of \(batch.writes.count) writes (nothing was written): \(error)")
        }
        return result
    }

    /// The purge horizon, in milliseconds since 1970 (0: nothing purged yet): tombstones last
    /// changed before it may be gone, so replication refuses documents whose newest write is
    /// older (a running replicator raises it every hour; see `MeshOptions.txLogMaxAgeSeconds`).
    public var purgeHorizonMillis: Int64 { store.purgeHorizonMillis }

    /// Purges now every document whose expiry (`Collection.setDocumentExpiration`) passed; returns
    /// how many went. (A running replicator does this every minute, with its collections' TTLs and budgets.)
    @discardableResult
    public func purgeExpiredDocuments() throws(ShoalError) -> Int {
        do { return Int(try store.purgeExpired([], nowMillis: Int64(NodeClock.systemWallMillis())).expired) } catch {
            throw ShoalError("cannot purge expired documents: \(error)")
        }
    }

    /// Closes the file. Stop replicators using it first.
    public func close() { store.close() }

    static func name(_ text: String) throws(ShoalError) -> CollectionName {
        do { return text.contains(".") ? try CollectionName(parsing: text) : try CollectionName(scope: CollectionName.defaultName, name: text) } catch {
            throw ShoalError("bad collection name \"\(text)\": \(error)")
        }
    }

    static func makeDirectories(_ path: String) throws(ShoalError) {
        var current = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            current += "/" + part
            if mkdir(current, 0o755) != 0 && errno != EEXIST { throw ShoalError("cannot make directory \(current): \(String(cString: strerror(errno)))") }
        }
    }
}

/// One collection of a database.
public struct Collection: Sendable {
    let database: Database
    let name: CollectionName

    /// `scope.collection`.
    public var fullName: String { name.description }

    /// Writes a document (a JSON object). Durable when this returns.
    public func put(_ id: String, json: String) throws(ShoalError) {
        do { try database.writer.put(name, id: DocumentID(id), body: json) } catch { throw ShoalError("cannot write \(fullName)/\(id): \(error)") }
    }

    /// The live document, or nil (missing or deleted).
    public func get(_ id: String) throws(ShoalError) -> Document? {
        do {
            guard let d = try database.store.get(name, id: DocumentID(id)), let body = d.body else { return nil }
            return Document(collection: fullName, id: d.id, json: body)
        } catch { throw ShoalError("cannot read \(fullName)/\(id): \(error)") }
    }

    /// Deletes a live document (a tombstone replicates the delete); false if there was none.
    @discardableResult
    public func delete(_ id: String) throws(ShoalError) -> Bool {
        do {
            guard let d = try database.store.get(name, id: DocumentID(id)), !d.isDeleted else { return false }
            try database.writer.delete(name, id: DocumentID(id))
            return true
        } catch { throw ShoalError("cannot delete \(fullName)/\(id): \(error)") }
    }

    /// Live documents in id order for which `matching` holds, at most `limit`.
    public func query(limit: Int = Int.max, where matching: (Document) -> Bool = { _ in true }) throws(ShoalError) -> [Document] {
        var out: [Document] = []
        var after: String?
        do {
            while out.count < limit {
                let page = try database.store.list(name, after: after, limit: 500)
                if page.isEmpty { break }
                for d in page {
                    guard let body = d.body else { continue }
                    let doc = Document(collection: fullName, id: d.id, json: body)
                    if matching(doc) { out.append(doc); if out.count == limit { break } }
                }
                after = page.last!.id
            }
        } catch { throw ShoalError("cannot query \(fullName): \(error)") }
        return out
    }

    /// Writes several documents (JSON objects) in one transaction, announced to peers once: all
    /// or none (a bad one is named and nothing is written). Durable when this returns.
    public func put(_ documents: [(id: String, json: String)]) throws(ShoalError) {
        do {
            try database.inBatch { batch in
                for d in documents { try batch.put(d.id, json: d.json, in: self) }
            }
        } catch let e as ShoalError { throw e } catch { throw ShoalError("\(error)") }
    }

    /// How many live documents the collection holds (counted by the store; none is read).
    public func count() throws(ShoalError) -> Int {
        do { return Int(try database.store.count(name)) } catch { throw ShoalError("cannot count \(fullName): \(error)") }
    }

    /// Sets when a live document is purged from this database (milliseconds since 1970; nil
    /// clears it), as the seed's `setDocumentExpiration`. The purge is local: no tombstone, nothing
    /// replicated, other gateways keep their copies, and a peer that sends this version again is
    /// refused. An update keeps the expiry, a delete clears it. A running replicator purges every
    /// minute; `Database.purgeExpiredDocuments()` does it now. False if there is no live document.
    @discardableResult
    public func setDocumentExpiration(_ id: String, atMillis: Int64?) throws(ShoalError) -> Bool {
        do { return try database.store.setExpiration(name, id: DocumentID(id), atMillis: atMillis) } catch {
            throw ShoalError("cannot set the expiration of \(fullName)/\(id): \(error)")
        }
    }

    /// A live document's expiry (milliseconds since 1970), or nil for none.
    public func documentExpiration(_ id: String) throws(ShoalError) -> Int64? {
        do { return try database.store.expiration(name, id: DocumentID(id)) } catch {
            throw ShoalError("cannot read the expiration of \(fullName)/\(id): \(error)")
        }
    }

    /// How many tombstones (deleted documents kept so the delete replicates) the collection holds
    /// until retention purges them (`MeshOptions.txLogMaxAgeSeconds`).
    public func tombstoneCount() throws(ShoalError) -> Int {
        do { return Int(try database.store.count(name, deleted: true)) } catch { throw ShoalError("cannot count \(fullName)'s tombstones: \(error)") }
    }

    /// Changes to this collection from now on (local writes and replicated ones), until the
    /// stream is dropped or the database closes. A thread of its own waits on the store.
    public func changes() -> AsyncStream<DocumentChange> {
        let (stream, continuation) = AsyncStream<DocumentChange>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        let store = database.store, name = self.name, fullName = self.fullName
        let flag = DoneFlag()
        continuation.onTermination = { _ in flag.set() }
        let start = store.lastSequence
        DetachedThread.start(name: "shoal-changes") {
            var since = start
            while !flag.isSet {
                _ = store.waitForChange(after: since, timeoutMillis: 250)
                let top = store.lastSequence
                guard let batch = try? store.changes(in: name, since: since, limit: 500) else { break }
                for c in batch {
                    continuation.yield(DocumentChange(collection: fullName, id: c.id, isDeleted: c.deleted, sequence: c.sequence))
                }
                // Other collections' changes move the sequence too.
                since = max(batch.last?.sequence ?? since, batch.count < 500 ? top : since)
            }
            continuation.finish()
        }
        return stream
    }
}

/// A flag set once from any thread.
final class DoneFlag: Sendable {
    let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .relaxed) }
    var isSet: Bool { value.load(ordering: .relaxed) }
}
