import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalStore
import ShoalWire

/// Answers one control-socket request. Runs on a connection's own thread, so it may call the store
/// directly. Every request is checked field by field; a bad one gets a `bad_request` naming the
/// field, and nothing is written.
struct ControlHandler {
    let gateway: Gateway
    let opened: OpenedStore

    func handle(_ request: [String: JSONValue]) -> JSONValue {
        do {
            return ControlMessage.success(try dispatch(request))
        } catch let error as ControlError {
            return ControlMessage.failure(error)
        } catch let error as StoreError {
            return ControlMessage.failure(ControlHandler.translate(error))
        } catch {
            return ControlMessage.failure(ControlError(code: .internalError, message: "\(error)"))
        }
    }

    static func translate(_ error: StoreError) -> ControlError {
        switch error {
        case .notFound: ControlError(code: .notFound, message: error.description)
        case .unknownCollection: ControlError(code: .notFound, message: error.description)
        case .invalidDocument, .invalidName: ControlError(code: .invalidDocument, message: error.description)
        case .invalidQuery: ControlError(code: .badRequest, message: error.description)
        case .blob(.notFound): ControlError(code: .notFound, message: error.description)
        case .blob(.io): ControlError(code: .internalError, message: error.description)
        case .blob: ControlError(code: .badRequest, message: error.description)
        case .closed: ControlError(code: .unavailable, message: "the store is restarting; try again")
        default: ControlError(code: .internalError, message: error.description)
        }
    }

    func dispatch(_ r: [String: JSONValue]) throws -> JSONValue {
        guard let op = r["op"]?.stringValue else { throw bad("missing \"op\"") }
        switch op {
        case "ping": return ["pong": true]
        case "status":
            // The effective mesh options (board, then site) ride along: what this gateway runs with.
            guard case .object(var o) = gateway.statusSnapshot(store: opened.store).json else { return gateway.statusSnapshot(store: opened.store).json }
            o["meshOptions"] = ControlHandler.meshOptions(gateway.board.mesh)
            return .object(o)
        case "identity": return gateway.identityJSON
        case "http":
            // Where the local API listens, and the data directory its token file is in (the
            // client reads the file itself, with its own permissions).
            return ["addresses": .array(gateway.httpAddresses.map(JSONValue.string)), "enabled": .bool(gateway.site.http.enabled),
                    "dataDirectory": .string(Files.absolute(Files.directory(of: gateway.storePath)))]
        case "mqtt":
            // The bridge's brokers (empty when the site has no mqtt: section).
            return ["brokers": gateway.mqtt.json["brokers"] ?? .array([]), "configured": .int(gateway.site.mqtt.brokers.count)]
        case "uplink":
            // The uplink's state (null when the site has no uplink: section).
            return ["uplink": gateway.uplink.json, "configured": .bool(gateway.site.uplink.enabled)]
        case "changes":
            let store = try openStore()
            let since = r["since"]?.int64Value ?? 0
            let limit = Int(r["limit"]?.int64Value ?? 1000)
            guard limit >= 1 && limit <= 10_000 else { throw bad("\"limit\" is 1 to 10000") }
            let page = ControlHandler.page(try store.changes(since: since, limit: limit), ControlHandler.json)
            return ["changes": .array(page.items), "more": .bool(page.more), "lastSequence": .int(store.lastSequence)]
        case "conflicts":
            // Newest first; `before` (an entry's number) continues a page that said more.
            let store = try openStore()
            let limit = Int(r["limit"]?.int64Value ?? 100)
            guard limit >= 1 && limit <= 10_000 else { throw bad("\"limit\" is 1 to 10000") }
            let page = try ControlHandler.page(try store.conflicts(limit: limit, before: r["before"]?.int64Value), ControlHandler.json)
            return ["conflicts": .array(page.items), "more": .bool(page.more)]
        case "collections":
            let store = try openStore()
            return .array(try store.collections().map { .string($0.description) })
        case "log.level":
            guard let levelName = r["level"]?.stringValue else { throw bad("missing \"level\"") }
            guard let level = LogLevel(name: levelName) else {
                throw bad("unknown level \"\(levelName.prefix(40))\" (debug, verbose, info, warning, error, none)")
            }
            let domainName = r["domain"]?.stringValue ?? "all"
            if domainName == "all" {
                gateway.logger.setLevel(level)
            } else {
                guard let domain = LogDomain(rawValue: domainName) else {
                    throw bad("unknown domain \"\(domainName)\" (all, \(LogDomain.allCases.map(\.rawValue).joined(separator: ", ")))")
                }
                gateway.logger.setLevel(level, for: domain)
            }
            gateway.logger.info(.control, "log level of \(domainName) set to \(level.name)")
            return levels()
        case "log.levels":
            return levels()
        default:
            if let answer = try dispatchDocument(op, r) { return answer }
            if let answer = try dispatchExpiry(op, r) { return answer }
            if let answer = try dispatchQuery(op, r) { return answer }
            if let answer = try dispatchMesh(op, r) { return answer }
            if let answer = try dispatchTrust(op, r) { return answer }
            if let answer = try dispatchBackup(op, r) { return answer }
            if let answer = try dispatchBlob(op, r) { return answer }
            if let answer = try dispatchRelease(op, r) { return answer }
            throw bad("unknown op \"\(op.prefix(40))\"")
        }
    }

    /// `doc.*`: one document's put, get and delete; a batch put; a page of a collection.
    func dispatchDocument(_ op: String, _ r: [String: JSONValue]) throws -> JSONValue? {
        switch op {
        case "doc.put":
            let (_, collection, id) = try target(r)
            guard let body = r["body"], body.isObject else { throw bad("\"body\" must be a JSON object") }
            let change = try writer().put(collection, id: id, body: body.compactText)
            gateway.logger.verbose(.control, "put \(collection)/\(id) at sequence \(change.sequence)")
            return ControlHandler.json(change)
        case "doc.putMany":
            // Many documents of one collection in one transaction (`shoal doc import`).
            let collection = try collectionName(r)
            guard let items = r["documents"]?.arrayValue, !items.isEmpty, items.count <= 1000 else {
                throw bad("\"documents\" is an array of 1 to 1000 {\"id\", \"body\"} objects")
            }
            var docs: [(DocumentID, String)] = []
            for (i, item) in items.enumerated() {
                guard let idText = item["id"]?.stringValue, let body = item["body"], body.isObject else {
                    throw bad("documents[\(i)] needs \"id\" (a string) and \"body\" (a JSON object)")
                }
                do { docs.append((try DocumentID(idText), body.compactText)) } catch { throw bad("documents[\(i)]: document id \(error)") }
            }
            let changes = try writer().putAll(collection, docs)
            gateway.logger.verbose(.control, "put \(changes.count.counted("document")) into \(collection) up to sequence \(changes.last?.sequence ?? 0)")
            return ["count": .int(Int64(changes.count)), "lastSequence": .int(changes.last?.sequence ?? 0)]
        case "doc.get":
            let (store, collection, id) = try target(r)
            guard let doc = try store.get(collection, id: id) else {
                throw ControlError(code: .notFound, message: "no document \"\(id)\" in \(collection)")
            }
            guard !doc.isDeleted || r["includeDeleted"]?.boolValue == true else { throw ControlHandler.deleted(doc, collection) }
            return try ControlHandler.json(doc)
        case "doc.delete":
            let (store, collection, id) = try target(r)
            if let doc = try store.get(collection, id: id), doc.isDeleted { throw ControlHandler.deleted(doc, collection) }
            let change = try writer().delete(collection, id: id)
            gateway.logger.verbose(.control, "deleted \(collection)/\(id) at sequence \(change.sequence)")
            return ControlHandler.json(change)
        case "doc.list":
            let store = try openStore()
            let collection = try collectionName(r)
            let limit = Int(r["limit"]?.int64Value ?? 100)
            guard limit >= 1 && limit <= 10_000 else { throw bad("\"limit\" is 1 to 10000") }
            let docs = try store.list(collection, after: r["after"]?.stringValue, limit: limit, includeDeleted: r["includeDeleted"]?.boolValue ?? false)
            let page = try ControlHandler.page(docs, ControlHandler.json)
            return ["collection": .string(collection.description), "documents": .array(page.items), "more": .bool(page.more)]
        default:
            return nil
        }
    }

    func levels() -> JSONValue {
        var out: [String: JSONValue] = [:]
        for d in LogDomain.allCases { out[d.rawValue] = .string(gateway.logger.level(for: d).name) }
        return .object(out)
    }

    func bad(_ message: String) -> ControlError { ControlError(code: .badRequest, message: message) }

    func openStore() throws -> DocumentStore { opened.store }

    /// Versioned local writes, in the name of the gateway's identity.
    func writer() throws -> LocalWriter {
        guard let identity = gateway.identity else {
            throw ControlError(code: .unavailable, message: "the gateway has no usable identity yet (starting, or see `shoal status`); try again")
        }
        return LocalWriter(peer: identity.peerID, store: opened.store, clock: opened.clock)
    }

    func collectionName(_ r: [String: JSONValue]) throws -> CollectionName {
        guard let text = r["collection"]?.stringValue else { throw bad("missing \"collection\"") }
        do { return try CollectionName(parsing: text) } catch { throw ControlError(code: .badRequest, message: "collection \(error)") }
    }

    /// A tombstone asked for as a document: not found (exit 4), saying it was there and when it went.
    static func deleted(_ doc: StoredDocument, _ collection: CollectionName) -> ControlError {
        ControlError(code: .notFound, message: "document \"\(doc.id)\" in \(collection) is deleted (a tombstone since sequence \(doc.sequence); `doc list --deleted` shows tombstones)")
    }

    func target(_ r: [String: JSONValue]) throws -> (DocumentStore, CollectionName, DocumentID) {
        let store = try openStore()
        let collection = try collectionName(r)
        guard let idText = r["id"]?.stringValue else { throw bad("missing \"id\"") }
        do { return (store, collection, try DocumentID(idText)) } catch { throw ControlError(code: .badRequest, message: "document id \(error)") }
    }

    /// As many of `items` as fit in one answer (`ControlMessage.pageBudgetBytes`; at least one):
    /// `more` says the list was cut, and the client asks again after the last item it got.
    static func page<T>(_ items: [T], _ encode: (T) throws -> JSONValue) rethrows -> (items: [JSONValue], more: Bool) {
        var out: [JSONValue] = []
        var bytes = 0
        for item in items {
            let value = try encode(item)
            bytes += value.compactText.utf8.count + 1
            if bytes > ControlMessage.pageBudgetBytes && !out.isEmpty { return (out, true) }
            out.append(value)
        }
        return (out, false)
    }

    static func json(_ c: ConflictRecord) throws -> JSONValue {
        func body(_ text: String?) throws -> JSONValue { try text.map { try JSONValue.parse($0) } ?? .null }
        return [
            "number": .int(c.number),
            "collection": .string(c.collection.description), "id": .string(c.id), "peer": .string(c.peer),
            "resolver": .string(c.resolver), "outcome": .string(c.outcome), "atMillis": .int(c.atMillis),
            "at": .string(IdentityText.date(c.atMillis / 1000)),
            "localVersion": .string((try? DocumentVersion(decoding: c.localVersion))?.description ?? "?"),
            "remoteVersion": .string((try? DocumentVersion(decoding: c.remoteVersion))?.description ?? "?"),
            "localBody": try body(c.localBody), "remoteBody": try body(c.remoteBody),
        ]
    }

    static func json(_ c: Change) -> JSONValue {
        ["sequence": .int(c.sequence), "collection": .string(c.collection.description), "id": .string(c.id),
         "deleted": .bool(c.deleted), "revision": .int(c.revision)]
    }

    static func json(_ d: StoredDocument) throws -> JSONValue {
        var body: JSONValue = .null
        if let text = d.body { body = try JSONValue.parse(text) }
        return ["collection": .string(d.collection.description), "id": .string(d.id), "body": body,
                "deleted": .bool(d.isDeleted), "revision": .int(d.revision), "sequence": .int(d.sequence),
                "updatedAtMillis": .int(d.updatedAtMillis),
                // The version (vector and body digest; field stamps left out, as a protocol-1 peer
                // and the hub get it) hashed: equal on every gateway that holds the same version.
                "version": .string(SHA256.hex(DocumentVersion.documentLevel(d.version)))]
    }
}
