import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalWire

/// `doc.expire`: a document's local expiry (`shoal doc expire`). This gateway only: it is not
/// replicated, and the purge it leads to is no delete (see `DocumentStore+Expiry`).
extension ControlHandler {
    /// Longest expiry accepted, from now: ten years.
    static let expiryMaxSeconds: Int64 = 10 * 365 * 86_400

    func dispatchExpiry(_ op: String, _ r: [String: JSONValue]) throws -> JSONValue? {
        guard op == "doc.expire" else { return nil }
        let (store, collection, id) = try target(r)
        let nowSeconds = Int64(NodeClock.systemWallMillis() / 1000)
        let given = [r["at"], r["inSeconds"], r["never"]].compactMap { $0 }.filter { $0 != .null }
        guard given.count == 1 else { throw bad("give exactly one of \"at\" (unix seconds), \"inSeconds\" or \"never\": true") }
        var atMillis: Int64?
        if let at = r["at"], at != .null {
            guard let s = at.int64Value, s >= 0, s <= nowSeconds + ControlHandler.expiryMaxSeconds else {
                throw bad("\"at\" is a unix time in seconds, at most ten years from now")
            }
            atMillis = s * 1000
        } else if let after = r["inSeconds"], after != .null {
            guard let s = after.int64Value, s >= 0, s <= ControlHandler.expiryMaxSeconds else {
                throw bad("\"inSeconds\" is 0 to \(ControlHandler.expiryMaxSeconds) (ten years)")
            }
            atMillis = (nowSeconds + s) * 1000
        } else {
            guard r["never"]?.boolValue == true else { throw bad("\"never\" can only be true") }
        }
        guard try store.setExpiration(collection, id: id, atMillis: atMillis) else {
            if let doc = try store.get(collection, id: id), doc.isDeleted { throw ControlHandler.deleted(doc, collection) }
            throw ControlError(code: .notFound, message: "no document \"\(id)\" in \(collection)")
        }
        gateway.logger.verbose(.control, "expiry of \(collection)/\(id): \(atMillis.map { "\($0 / 1000)" } ?? "never")")
        // Already due (`--in 0s`, a past `--at`): purged now rather than at the next pass.
        let now = Int64(NodeClock.systemWallMillis())
        var purged = false
        if let atMillis, atMillis <= now {
            _ = try store.purgeExpired([], nowMillis: now)
            purged = try store.get(collection, id: id) == nil
        }
        return ["collection": .string(collection.description), "id": .string(id.rawValue),
                "expiresAt": atMillis.map { .int($0 / 1000) } ?? .null, "purged": .bool(purged)]
    }
}
