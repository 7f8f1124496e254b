import ShoalCore
import ShoalHTTP
import ShoalReplication
import ShoalStore
import ShoalWire

/// Documents and the change feed over HTTP: one document's GET/PUT/DELETE with its revision as
/// the ETag (If-Match and If-None-Match checked in the write's own transaction, which it may
/// share commits with every other writer: `HTTPCommitQueue`), a page of a
/// collection, a bulk write in one transaction, and `/v1/changes` as a page, a long poll or SSE.
extension HTTPAPI {
    func collection(_ text: String) throws -> CollectionName {
        do { return try CollectionName(parsing: text) } catch { throw HTTPFailure.badRequest("collection \(error)") }
    }

    func documentID(_ text: String) throws -> DocumentID {
        do { return try DocumentID(text) } catch { throw HTTPFailure.badRequest("document id \(error)") }
    }

    /// A page of a collection. `more` says whether documents follow the page (the control
    /// socket's `more` only says the answer was cut to its byte budget): one more than `limit` is
    /// read to know.
    func list(_ c: String, _ r: HTTPRequest) throws -> HTTPResponse {
        let name = try collection(c)
        let limit = Int(try r.query["limit"].map { try int($0, "limit", 1...10_000) } ?? 100)
        let includeDeleted = try bool(r.query["deleted"], "deleted")
        _ = try opened.store.count(name)  // an unknown collection says so
        // Read 200 at a time and stop at the page budget (3 MiB): 10,000 documents of 1 MiB each
        // must not all be in memory for one answer.
        var items: [JSONValue] = []
        var bytes = 0
        var after = r.query["after"]
        var more = false
        reading: while items.count < limit {
            let want = min(200, limit - items.count)
            let chunk = try opened.store.list(name, after: after, limit: want, includeDeleted: includeDeleted)
            for d in chunk {
                let item = try ControlHandler.json(d)
                bytes += item.compactText.utf8.count + 1
                if bytes > ControlMessage.pageBudgetBytes && !items.isEmpty { more = true; break reading }
                items.append(item)
                after = d.id
            }
            if chunk.count < want { break }
        }
        if !more && items.count == limit {
            more = !(try opened.store.list(name, after: after, limit: 1, includeDeleted: includeDeleted)).isEmpty
        }
        return json(["collection": .string(name.description), "documents": .array(items), "more": .bool(more)])
    }

    static func etag(_ revision: Int64) -> String { "\"\(revision)\"" }

    func getDocument(_ c: String, _ idText: String, _ r: HTTPRequest) throws -> HTTPResponse {
        let name = try collection(c), id = try documentID(idText)
        guard let doc = try opened.store.get(name, id: id) else {
            _ = try opened.store.count(name)  // an unknown collection says so
            throw ControlError(code: .notFound, message: "no document \"\(id)\" in \(name)")
        }
        let wantsMeta = try bool(r.query["meta"], "meta")
        let showDeleted = try bool(r.query["deleted"], "deleted")
        guard !doc.isDeleted || (wantsMeta && showDeleted) else {
            throw ControlError(code: .notFound, message: "document \"\(doc.id)\" in \(name) is deleted (a tombstone since sequence \(doc.sequence); ?meta=true&deleted=true shows it)")
        }
        let etag = HTTPAPI.etag(doc.revision)
        var headers = [("ETag", etag), ("X-Shoal-Sequence", String(doc.sequence)), ("Cache-Control", "no-cache")]
        if let v = try? DocumentVersion(decoding: doc.version) { headers.append(("X-Shoal-Version", v.description)) }
        if let inm = r.header("if-none-match"), HTTPAPI.matches(inm, revision: doc.revision) {
            return HTTPResponse(status: 304, headers: headers)
        }
        if wantsMeta { return json(try ControlHandler.json(doc), headers: headers) }
        return HTTPResponse(status: 200, headers: [("Content-Type", "application/json; charset=utf-8")] + headers,
                            body: .bytes(Array((doc.body ?? "{}").utf8) + [0x0A]))
    }

    /// An If-Match / If-None-Match list (`"3"`, `W/"3"`, `"3", "4"`, `*`) against a revision.
    /// If-Match compares strongly (RFC 9110 13.1.1: a weak tag never matches), If-None-Match
    /// weakly; Shoal's tags are all strong.
    static func matches(_ header: String, revision: Int64?, weak: Bool = true) -> Bool {
        for part in header.split(separator: ",") {
            var t = part.trimmingCharacters(in: " ")
            if t == "*" { return revision != nil }
            if t.hasPrefix("W/") {
                guard weak else { continue }
                t.removeFirst(2)
            }
            if t.hasPrefix("\"") && t.hasSuffix("\"") && t.count >= 2 { t = String(t.dropFirst().dropLast()) }
            if let revision, Int64(t) == revision { return true }
        }
        return false
    }

    /// The preconditions of a write, checked against the document in the write's transaction.
    func check(_ r: HTTPRequest, _ existing: StoredDocument?) throws(StoreError) {
        let live = existing.flatMap { $0.isDeleted ? nil : $0.revision }
        if let im = r.header("if-match"), !HTTPAPI.matches(im, revision: live, weak: false) {
            throw .preconditionFailed(live.map { "If-Match: the document is at revision \($0) (ETag \"\($0)\"), not \(im)" } ?? "If-Match: the document does not exist")
        }
        if let inm = r.header("if-none-match"), HTTPAPI.matches(inm, revision: live) {
            throw .preconditionFailed("If-None-Match: the document exists (revision \(live ?? 0))")
        }
    }

    func body(_ r: HTTPRequest) throws -> JSONValue {
        guard let text = String(validating: r.body, as: UTF8.self) else { throw HTTPFailure.badRequest("the body is not UTF-8") }
        guard !text.isEmpty else { throw HTTPFailure.badRequest("the body is empty; send the document, a JSON object") }
        let value: JSONValue
        do { value = try JSONValue.parse(text) } catch { throw HTTPFailure.badRequest("the body is not JSON: \(error)") }
        guard value.isObject else { throw HTTPFailure.badRequest("a document body is a JSON object") }
        return value
    }

    func putDocument(_ c: String, _ idText: String, _ r: HTTPRequest) throws -> HTTPResponse {
        let name = try collection(c), id = try documentID(idText)
        let text = try body(r).compactText
        let writer = try control.writer()
        try opened.store.validateBody(text)
        let done = try conditional { () throws(StoreError) -> HTTPCommitQueue.Outcome in
            try commits.commit(.init(collection: name, id: id, body: text) { (existing) throws(StoreError) in try check(r, existing) }, writer: writer)
        }
        let change = done.change, created = done.before == nil || done.before?.isDeleted == true
        gateway.logger.verbose(.http, "put \(name)/\(id) at sequence \(change.sequence)")
        return json(ControlHandler.json(change), status: created ? 201 : 200, headers: [("ETag", HTTPAPI.etag(change.revision))])
    }

    func deleteDocument(_ c: String, _ idText: String, _ r: HTTPRequest) throws -> HTTPResponse {
        let name = try collection(c), id = try documentID(idText)
        let writer = try control.writer()
        let change = try conditional { () throws(StoreError) -> Change in
            try commits.commit(.init(collection: name, id: id, body: String?.none) { (existing) throws(StoreError) in
                try check(r, existing)
                guard let existing, !existing.isDeleted else { throw .notFound(collection: name.description, id: id.rawValue) }
            }, writer: writer).change
        }
        gateway.logger.verbose(.http, "deleted \(name)/\(id) at sequence \(change.sequence)")
        return json(ControlHandler.json(change), headers: [("ETag", HTTPAPI.etag(change.revision))])
    }

    /// A store write whose precondition failure becomes 412.
    func conditional<T>(_ body: () throws(StoreError) -> T) throws -> T {
        do { return try body() } catch {
            if case .preconditionFailed(let why) = error { throw HTTPFailure.precondition(why) }
            throw error
        }
    }

    /// NDJSON: each line `{"id", "body"}` or `{"id", "deleted": true}`; the valid lines in one
    /// transaction, a result per line.
    func bulk(_ c: String, _ r: HTTPRequest) throws -> HTTPResponse {
        let name = try collection(c)
        _ = try opened.store.count(name)  // an unknown collection is 404 before anything else
        // A type a web page cannot send without asking first (CORS preflight, which this server
        // never grants): so a page in a browser on the gateway, or behind an ssh tunnel to its
        // loopback port, cannot post documents the way an HTML form posts text/plain.
        let type = r.header("content-type")?.split(separator: ";").first.map { $0.trimmingCharacters(in: " ").lowercased() } ?? ""
        guard ["application/x-ndjson", "application/jsonl", "application/json"].contains(type) else {
            throw HTTPFailure(response: HTTPServer.error(415, "unsupported_media_type",
                "a bulk write is NDJSON: send it with Content-Type: application/x-ndjson (got \(type.isEmpty ? "none" : String(type.prefix(60))))"))
        }
        guard let text = String(validating: r.body, as: UTF8.self) else { throw HTTPFailure.badRequest("the body is not UTF-8") }
        if text.first(where: { !$0.isWhitespace }) == "[" {
            throw HTTPFailure.badRequest("a bulk write is NDJSON, one {\"id\", \"body\"} object per line, not a JSON array")
        }
        enum Line { case put(Int, DocumentID, String), delete(Int, DocumentID), bad(Int, String?, String) }
        var lines: [Line] = []
        var number = 0
        // Line by line without splitting the body first, and refused at the 10,001st line before
        // it is parsed: a body of 2 million empty-ish lines must not cost a result each.
        var rest = Substring(text)
        while !rest.isEmpty {
            let end = rest.firstIndex(of: "\n") ?? rest.endIndex
            let raw = rest[..<end]
            rest = end == rest.endIndex ? rest[end...] : rest[rest.index(after: end)...]
            number += 1
            let line = raw.hasSuffix("\r") ? raw.dropLast() : raw
            if line.allSatisfy(\.isWhitespace) { continue }
            guard lines.count < HTTPAPI.maxBulkLines else { throw HTTPFailure.badRequest("at most \(HTTPAPI.maxBulkLines) lines per request (line \(number) is one more); split the file") }
            guard line.utf8.count <= HTTPService.bodyLimit + 1024 else { lines.append(.bad(number, nil, "the line is over 1 MiB")); continue }
            let value: JSONValue
            do { value = try JSONValue.parse(String(line)) } catch {
                lines.append(.bad(number, nil, "not JSON: \(error) (NDJSON is one object per line; curl -d drops newlines: use --data-binary @file)"))
                continue
            }
            guard let idText = value["id"]?.stringValue else { lines.append(.bad(number, nil, "each line needs \"id\" (a string)")); continue }
            let id: DocumentID
            do { id = try DocumentID(idText) } catch { lines.append(.bad(number, idText, "document id \(error)")); continue }
            if value["deleted"]?.boolValue == true { lines.append(.delete(number, id)); continue }
            guard let body = value["body"], body.isObject else { lines.append(.bad(number, idText, "each line needs \"body\" (a JSON object) or \"deleted\": true")); continue }
            let compact = body.compactText
            do { try opened.store.validateBody(compact) } catch { lines.append(.bad(number, idText, error.description)); continue }
            lines.append(.put(number, id, compact))
        }
        guard !lines.isEmpty else { throw HTTPFailure.badRequest("no lines: send NDJSON, one {\"id\", \"body\"} object per line") }
        let writer = try control.writer()
        let results = try opened.store.transaction { (tx) throws(StoreError) -> [JSONValue] in
            var out: [JSONValue] = []
            for line in lines {
                switch line {
                case .put(let n, let id, let body):
                    let ch = try writer.write(tx, name, id, body)
                    out.append(["line": .int(Int64(n)), "id": .string(id.rawValue), "revision": .int(ch.revision), "sequence": .int(ch.sequence)])
                case .delete(let n, let id):
                    guard let existing = try tx.get(name, id: id.rawValue), !existing.isDeleted else {
                        out.append(["line": .int(Int64(n)), "id": .string(id.rawValue), "error": "not_found", "reason": .string("no document \"\(id)\" in \(name) to delete")])
                        continue
                    }
                    let ch = try writer.write(tx, name, id, nil)
                    out.append(["line": .int(Int64(n)), "id": .string(id.rawValue), "revision": .int(ch.revision), "sequence": .int(ch.sequence), "deleted": true])
                case .bad(let n, let id, let why):
                    out.append(["line": .int(Int64(n)), "id": id.map(JSONValue.string) ?? .null, "error": "bad_request", "reason": .string(why)])
                }
            }
            return out
        }
        let failed = results.filter { $0["error"] != nil }.count
        let last = results.compactMap { $0["sequence"]?.int64Value }.max() ?? 0
        gateway.logger.verbose(.http, "bulk into \(name): \(results.count - failed) written, \(failed) refused")
        var answer: [String: JSONValue] = ["written": .int(Int64(results.count - failed)), "failed": .int(Int64(failed)), "lastSequence": .int(last),
                                           "results": .array(results)]
        if failed == results.count {
            // Nothing written: an error like any other 400, with the lines' reasons beside it.
            answer["error"] = "bad_request"
            answer["reason"] = .string("no line was valid (\(failed) refused; see results)")
        }
        return json(.object(answer), status: failed == results.count ? 400 : 200)
    }

    static let maxBulkLines = 10_000

    func changes(_ r: HTTPRequest) throws -> HTTPResponse {
        let store = opened.store
        var since = try r.query["since"].map { try int($0, "since", 0...Int64.max) } ?? 0
        let limit = Int(try r.query["limit"].map { try int($0, "limit", 1...10_000) } ?? 1000)
        let includeDocs = try bool(r.query["include_docs"], "include_docs")
        let filter = try r.query["collection"].map { try collection($0) }
        if let filter { _ = try store.count(filter) }
        let feedKind = r.query["feed"] ?? (HTTPAPI.wantsEventStream(r) ? "sse" : "normal")
        let timeout = try r.query["timeout"].map { try int($0, "timeout", 0...300_000) } ?? 60_000
        switch feedKind {
        case "normal", "longpoll":
            if since > store.lastSequence { since = 0 }  // a cursor from before the store was replaced
            let head = store.lastSequence
            let page = try filter.map { try store.changes(in: $0, since: since, limit: limit) } ?? store.changes(since: since, limit: limit)
            if !page.isEmpty || feedKind == "normal" {
                return json(HTTPFeed.page(page, includeDocs: includeDocs, store: store, head: head, requested: limit))
            }
            let stream = HTTPStream()
            feed.addChanges(HTTPFeed.ChangeSubscriber(stream: stream, cursor: since, collection: filter, includeDocs: includeDocs,
                                                      longPoll: (ContinuousClock.now + .milliseconds(timeout), limit)))
            return HTTPResponse(status: 200, headers: [("Content-Type", "application/json; charset=utf-8"), ("Cache-Control", "no-cache")], body: .stream(stream))
        case "sse":
            if let resume = try lastEventID(r) { since = resume }
            // An id from before the store was replaced (restored, or a new data directory): all of it.
            if since > store.lastSequence { since = 0 }
            let stream = HTTPStream()
            stream.send(": shoal change feed after sequence \(since)\nretry: 2000\n\n")
            feed.addChanges(HTTPFeed.ChangeSubscriber(stream: stream, cursor: since, collection: filter, includeDocs: includeDocs, longPoll: nil))
            return HTTPAPI.eventStream(stream)
        default:
            throw HTTPFailure.badRequest("\"feed\" is normal, longpoll or sse")
        }
    }
}
