import ShoalCore
import ShoalStore
import ShoalWire

/// `doc.query` with `follow`: the connection becomes a stream of the query's updates (the first
/// with the whole result), each frame `{"update": {...}}`, until the client hangs up or shoal
/// stops. The connection's own thread evaluates the query (`LiveQueryState`).
extension ControlConnection {
    func followQuery(_ request: [String: JSONValue]) throws {
        let handler = ControlHandler(gateway: gateway, opened: opened)
        var state: LiveQueryState
        let collection: CollectionName
        do {
            collection = try handler.collectionName(request)
            let q = try ControlHandler.query(from: request)
            state = try LiveQueryState(store: opened.store, query: q, in: collection)
        } catch let e as ControlError {
            try send(ControlMessage.failure(e))
            return
        } catch let e as StoreError {
            try send(ControlMessage.failure(ControlHandler.translate(e)))
            return
        }
        let slots = gateway.liveQueries
        guard slots.take() else {
            try send(ControlMessage.failure(ControlError(code: .unavailable, message: slots.fullMessage)))
            return
        }
        defer { slots.release() }
        try send(ControlMessage.success(["following": true, "collection": .string(collection.description)]))
        gateway.logger.verbose(.control, "live query of \(collection) opened (\(slots.count) open)")
        var hungUp = false
        let store = opened.store
        while !hungUp && !context.isShuttingDown {
            let update: LiveQueryUpdate?
            do {
                update = try state.next(store) {
                    if context.isShuttingDown || hungUp { return true }
                    // A hang-up shows as readable-with-EOF; anything else the client sends is ignored.
                    do {
                        if try socket.waitReadable(timeoutMillis: 0), let bytes = try socket.read(timeoutMillis: 0), bytes.isEmpty { hungUp = true }
                    } catch { hungUp = true }
                    return hungUp
                }
            } catch {
                try? send(ControlMessage.failure(ControlHandler.translate(error)))
                return
            }
            guard let update else { break }
            try send(["update": try ControlHandler.json(update, state.query)])
        }
    }
}

extension ControlHandler {
    /// A live query's update as the control socket and HTTP show it: the result as `doc.query`
    /// answers it, plus `update` (its number), `sequence`, and `added`/`changed`/`removed` ids.
    static func json(_ u: LiveQueryUpdate, _ q: Query) throws -> JSONValue {
        guard case .object(var o) = try json(u.result, q) else { return .null }
        o["update"] = .int(Int64(u.number))
        o["sequence"] = .int(u.sequence)
        o["evaluations"] = .int(Int64(u.evaluations))
        if !u.result.isAggregate {
            o["added"] = .array(u.added.map(JSONValue.string))
            o["changed"] = .array(u.changed.map(JSONValue.string))
            o["removed"] = .array(u.removed.map(JSONValue.string))
        }
        return .object(o)
    }
}
