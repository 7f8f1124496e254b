/// ShoalReplication: the sync protocol between gateways, as a sans-IO state machine
/// (`ReplicationNode`): links, frames and time come in as calls, frames to send and events come out
/// as actions. It reads and writes the store directly (synchronously), so its driver calls it from a
/// thread of its own — never from Swift's cooperative pool.
import Glibc
import ShoalCore
import ShoalStore
import Synchronization
import ShoalThreads

/// The node's hybrid logical clock, shared by local writes and replication, persisted in the
/// store's metadata in the same transaction as each write that used it (so it never runs
/// backwards across restarts).
public final class NodeClock: Sendable {
    public static let metadataKey = "hlc"
    private let clock: Locked<HybridLogicalClock>
    private let wall: @Sendable () -> UInt64

    /// Restores the clock from the store (or starts at zero).
    public init(store: DocumentStore, maxDriftMillis: UInt64 = 60_000, wallMillis: @escaping @Sendable () -> UInt64 = NodeClock.systemWallMillis) throws(StoreError) {
        let saved = try store.metadata(NodeClock.metadataKey).flatMap(UInt64.init) ?? 0
        clock = Locked(HybridLogicalClock(restoring: HLCTimestamp(rawValue: saved), maxDriftMillis: maxDriftMillis))
        wall = wallMillis
    }

    public var wallMillis: UInt64 { wall() }
    public var last: HLCTimestamp { clock.withLock { $0.last } }

    /// A timestamp for a local write, persisted through `tx`.
    func tick(persistingIn tx: StoreTransaction) throws(StoreError) -> HLCTimestamp {
        let now = wall()
        let ts = clock.withLock { $0.tick(wallMillis: now) }
        try tx.setMetadata(NodeClock.metadataKey, String(ts.rawValue))
        return ts
    }

    /// Folds in a remote timestamp; false if the remote is too far ahead (not applied).
    public func observe(_ remote: HLCTimestamp) -> Bool {
        let now = wall()
        return clock.withLock { $0.observe(remote, wallMillis: now) }
    }

    public func persist(in tx: StoreTransaction) throws(StoreError) {
        try tx.setMetadata(NodeClock.metadataKey, String(last.rawValue))
    }

    public static let systemWallMillis: @Sendable () -> UInt64 = {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }
}

/// Local writes with versions: each put or delete adds this node's entry (a fresh HLC timestamp)
/// to the document's version vector, in the same transaction that reads the old version.
public struct LocalWriter: Sendable {
    public let peer: PeerID
    public let store: DocumentStore
    public let clock: NodeClock

    public init(peer: PeerID, store: DocumentStore, clock: NodeClock) {
        self.peer = peer
        self.store = store
        self.clock = clock
    }

    @discardableResult
    public func put(_ collection: CollectionName, id: DocumentID, body: String) throws(StoreError) -> Change {
        try store.validateBody(body)
        return try store.transaction { (tx) throws(StoreError) -> Change in
            try write(tx, collection, id, body)
        }
    }

    /// Writes many documents in one transaction (imports, benchmarks).
    public func putAll(_ collection: CollectionName, _ docs: [(DocumentID, String)]) throws(StoreError) -> [Change] {
        for (_, body) in docs { try store.validateBody(body) }
        return try store.transaction { (tx) throws(StoreError) -> [Change] in
            var out: [Change] = []
            for (id, body) in docs { out.append(try write(tx, collection, id, body)) }
            return out
        }
    }

    /// Puts (a body) and deletes (nil) of any collections, applied in order in one transaction:
    /// all of them or none, and peers hear of them together (one commit moves the change feed
    /// once). A delete of a document missing or already deleted by then writes nothing. Every body
    /// is checked before the transaction starts.
    @discardableResult
    public func apply(_ writes: [(collection: CollectionName, id: DocumentID, body: String?)]) throws(StoreError) -> [Change] {
        for w in writes { if let body = w.body { try store.validateBody(body) } }
        return try store.transaction { (tx) throws(StoreError) -> [Change] in
            var out: [Change] = []
            out.reserveCapacity(writes.count)
            for w in writes {
                if w.body == nil {
                    guard let existing = try tx.get(w.collection, id: w.id.rawValue), !existing.isDeleted else { continue }
                }
                out.append(try write(tx, w.collection, w.id, w.body))
            }
            return out
        }
    }

    /// Deletes (tombstones) a live document; a missing or deleted one is `notFound`.
    @discardableResult
    public func delete(_ collection: CollectionName, id: DocumentID) throws(StoreError) -> Change {
        try store.transaction { (tx) throws(StoreError) -> Change in
            guard let existing = try tx.get(collection, id: id.rawValue), !existing.isDeleted else {
                throw .notFound(collection: collection.description, id: id.rawValue)
            }
            return try write(tx, collection, id, nil)
        }
    }

    /// One versioned put (a body) or delete (nil) inside a transaction the caller holds (a
    /// conditional write reads the document first in the same transaction). The body is not
    /// checked here: call `store.validateBody` before the transaction.
    public func write(_ tx: StoreTransaction, _ collection: CollectionName, _ id: DocumentID, _ body: String?) throws(StoreError) -> Change {
        try write(tx, collection, id, body, existing: try tx.get(collection, id: id.rawValue))
    }

    /// As above, for a caller that has just read the document in the same transaction (`existing`,
    /// nil if there is none): the MQTT bridge reads it to compare bodies, so it is not read twice.
    public func write(_ tx: StoreTransaction, _ collection: CollectionName, _ id: DocumentID, _ body: String?, existing: StoredDocument?) throws(StoreError) -> Change {
        var previous: DocumentVersion?
        if let existing {
            do { previous = try DocumentVersion(decoding: existing.version) } catch {
                throw .invalidDocument("stored version of \(collection)/\(id) is unreadable: \(error)")
            }
        }
        let ts = try clock.tick(persistingIn: tx)
        // Which fields this write leaves as others set them (see FieldMerge): an update reads both
        // bodies. System collections resolve whole documents (their own resolvers): no stamps.
        let fields = collection.isSystem ? [:] : FieldMerge.stampsAfterWrite(previous: previous, previousBody: existing?.body, body: body, writer: peer, at: ts)
        let version = DocumentVersion(vector: (previous?.vector ?? VersionVector()).setting(peer, to: ts), bodyDigest: DocumentVersion.digest(of: body),
                                      fields: fields)
        return try tx.write(DocumentWrite(collection: collection, id: id, body: body, version: version.encoded))
    }
}
