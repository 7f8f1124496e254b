import ShoalCore

/// How hard a commit tries to survive power loss (SQLite's `synchronous` in WAL mode).
public enum Durability: String, Sendable, CaseIterable {
    /// Every commit is on disk when it returns: an acknowledged write survives power loss. Default.
    case full
    /// Commits are atomic and survive a crash of the process, but the last commits before a power
    /// loss may roll back. Faster on slow SD cards; replication refills what was lost from peers.
    case normal
}

public struct StoreOptions: Sendable {
    public var path: String
    public var durability: Durability
    /// Largest document body accepted, in bytes.
    public var maxBodyBytes: Int
    /// Largest blob accepted, in bytes (a local upload over it is refused and dropped; a blob
    /// from a peer over it is not begun).
    public var maxBlobBytes: Int64
    /// The SQLite VFS to open the file through, by name (nil: SQLite's default). Benchmarks and
    /// tests name a slow one (`SlowStorage`); a gateway never sets it.
    public var vfs: String?
    /// Concurrent transactions share commits (`DocumentStore.transaction`); false: one commit each
    /// (a benchmark's baseline).
    public var groupCommit = true

    public init(path: String, durability: Durability = .full, maxBodyBytes: Int = 1 << 20, maxBlobBytes: Int64 = BlobReference.maxLength, vfs: String? = nil) {
        self.path = path
        self.vfs = vfs
        self.durability = durability
        self.maxBodyBytes = maxBodyBytes
        self.maxBlobBytes = maxBlobBytes
    }
}

/// What group commit did since the store opened.
public struct CommitCounts: Sendable, Equatable {
    /// Transactions committed through `DocumentStore.transaction` (with group commit on).
    public var transactions = 0
    /// Bodies committed in a group of two or more.
    public var grouped = 0
    public var largestGroup = 0
    public init() {}
}

/// A document as stored: the body is nil for a tombstone.
public struct StoredDocument: Sendable, Equatable {
    public let collection: CollectionName
    public let id: String
    public let body: String?
    public let revision: Int64
    public let version: [UInt8]
    public let sequence: Int64
    public let updatedAtMillis: Int64
    public var isDeleted: Bool { body == nil }
}

/// One entry of the change feed: the latest change of a document, at its sequence.
public struct Change: Sendable, Equatable {
    public let sequence: Int64
    public let collection: CollectionName
    public let id: String
    public let deleted: Bool
    public let revision: Int64
    public let version: [UInt8]
}

/// One write of a batch: a body to store, or nil to delete (leave a tombstone).
public struct DocumentWrite: Sendable {
    public var collection: CollectionName
    public var id: DocumentID
    public var body: String?
    public var version: [UInt8]

    public init(collection: CollectionName, id: DocumentID, body: String?, version: [UInt8] = []) {
        self.collection = collection
        self.id = id
        self.body = body
        self.version = version
    }
}

public enum CheckpointDirection: String, Sendable { case push, pull }

/// What happened while opening: a migration, a corrupt file moved aside.
public struct OpenReport: Sendable {
    public var schemaVersionFound: Int
    public var schemaVersion: Int
    public var movedAsideTo: String?
    public var reason: String?
}

public struct StoreStats: Sendable {
    public var documents: Int64
    public var tombstones: Int64
    public var collections: Int64
    public var lastSequence: Int64
}

/// One resolved conflict, as the conflict log keeps it.
public struct ConflictRecord: Sendable, Equatable {
    public var collection: CollectionName
    public var id: String
    public var localVersion: [UInt8]
    public var remoteVersion: [UInt8]
    public var peer: String
    public var resolver: String
    /// What won: "local", "remote", "merged", "deleted".
    public var outcome: String
    public var atMillis: Int64
    /// Both sides' bodies as they were when the conflict was resolved (nil: a tombstone, or a
    /// refusal made before the body came).
    public var localBody: String?
    public var remoteBody: String?
    /// Its place in the log (increasing; 0 until stored): the cursor to page with.
    public var number: Int64 = 0

    public init(collection: CollectionName, id: String, localVersion: [UInt8], remoteVersion: [UInt8], peer: String,
                resolver: String, outcome: String, atMillis: Int64, localBody: String? = nil, remoteBody: String? = nil) {
        self.localBody = localBody
        self.remoteBody = remoteBody
        self.collection = collection
        self.id = id
        self.localVersion = localVersion
        self.remoteVersion = remoteVersion
        self.peer = peer
        self.resolver = resolver
        self.outcome = outcome
        self.atMillis = atMillis
    }
}
