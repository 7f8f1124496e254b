/// ShoalStore: the gateway's crash-safe SQLite store — collections, documents with tombstones, the
/// per-node change feed, per-peer checkpoints, metadata — and the only module that writes SQL or
/// imports SQLite. Every call blocks: call it from a `BlockingThread` or a thread of your own,
/// never from a task on Swift's cooperative pool.
import ShoalCore

/// What went wrong in the store, with the SQLite call or the rule that failed.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    case sqlite(call: String, code: Int32, message: String)
    case invalidDocument(String)
    case invalidName(NameError)
    case notFound(collection: String, id: String)
    case unknownCollection(String)
    case schemaTooNew(found: Int, supported: Int, path: String)
    case closed
    /// A conditional write (HTTP If-Match / If-None-Match) found another revision; nothing written.
    case preconditionFailed(String)
    /// A query or index that is malformed or over a limit; nothing was run.
    case invalidQuery(QueryError)
    /// A blob, chunk or reference that is refused or missing.
    case blob(BlobError)

    public var description: String {
        switch self {
        case .sqlite(let call, let code, let message): "SQLite \(call) failed (\(code)): \(message)"
        case .invalidDocument(let why): "invalid document: \(why)"
        case .invalidName(let e): "invalid name \(e)"
        case .notFound(let c, let id): "no document \"\(id)\" in \(c)"
        case .unknownCollection(let c): "no collection \(c) (declare it in the site file's collections)"
        case .schemaTooNew(let found, let supported, let path):
            "store \(path) has schema version \(found), newer than this shoal supports (\(supported)); upgrade shoal or point storage.path elsewhere"
        case .closed: "the store is closed"
        case .preconditionFailed(let why): why
        case .invalidQuery(let e): "invalid query: \(e)"
        case .blob(let e): e.description
        }
    }

    /// SQLite said the file is damaged or not a database at all.
    public var isCorruption: Bool {
        if case .sqlite(_, let code, _) = self { return code & 0xFF == 11 || code & 0xFF == 26 }
        return false
    }
}
