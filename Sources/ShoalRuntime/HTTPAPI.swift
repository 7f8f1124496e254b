import ShoalCore
import ShoalHTTP
import ShoalStore
import ShoalThreads
import ShoalWire

/// The local API's routes (docs/http-api.md, docs/openapi.json): each answers from the same
/// requests the control socket serves (`ControlHandler`), so `shoal status` and `GET /v1/status`
/// can never disagree. Runs on libmicrohttpd's threads, so it may call the store directly; a
/// stream (SSE, long poll) is handed to the feed and holds no thread.
struct HTTPAPI: Sendable {
    let gateway: Gateway
    let opened: OpenedStore
    let feed: HTTPFeed
    /// PUT and DELETE of one document commit in groups (one fsync for the writes that wait).
    let commits = HTTPCommitQueue()
    /// The servers answering with this router (for /metrics' connection and stream figures);
    /// `HTTPService` adds each one it starts.
    let servers = Locked<[HTTPServer]>([])

    var control: ControlHandler { ControlHandler(gateway: gateway, opened: opened) }

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        guard let path = request.segments else {
            return HTTPServer.error(400, "bad_request", "the path is not valid percent-encoded UTF-8")
        }
        let method = request.method == "HEAD" ? "GET" : request.method
        do {
            return try route(method, path, request)
        } catch let error as ControlError {
            return HTTPAPI.failure(error)
        } catch let error as StoreError {
            return HTTPAPI.failure(ControlHandler.translate(error))
        } catch let error as HTTPFailure {
            return error.response
        } catch {
            gateway.logger.warning(.http, "\(request.method) \(request.rawPath.prefix(200)) failed: \(error)")
            return HTTPServer.error(500, "internal_error", "\(error)")
        }
    }

    func route(_ method: String, _ path: [String], _ r: HTTPRequest) throws -> HTTPResponse {
        switch path.count {
        case 0:
            return try only(method, "GET") { HTTPResponse(status: 200, contentType: ConsolePage.contentType, text: ConsolePage.html,
                                                         headers: [("Cache-Control", "no-cache")]) }
        case 1 where path[0] == "metrics":
            return try only(method, "GET") { try metrics() }
        default:
            break
        }
        guard path[0] == "v1", path.count >= 2 else { throw HTTPFailure.notFound(r.rawPath) }
        switch (path[1], path.count) {
        case ("status", 2): return try only(method, "GET") { json(try control.dispatch(["op": "status"])) }
        case ("health", 2): return try only(method, "GET") { health() }
        case ("identity", 2): return try only(method, "GET") { json(try control.dispatch(["op": "identity"])) }
        case ("collections", 2): return try only(method, "GET") { try collections() }
        case ("collections", 4) where path[3] == "docs":
            switch method {
            case "GET": return try list(path[2], r)
            case "POST": return try bulk(path[2], r)
            default: throw HTTPFailure.methodNotAllowed("GET, HEAD, POST")
            }
        case ("collections", 4) where path[3] == "query":
            return try only(method, "GET") { try query(path[2], r) }
        case ("collections", 5) where path[3] == "docs":
            switch method {
            case "GET": return try getDocument(path[2], path[4], r)
            case "PUT": return try putDocument(path[2], path[4], r)
            case "DELETE": return try deleteDocument(path[2], path[4], r)
            default: throw HTTPFailure.methodNotAllowed("GET, HEAD, PUT, DELETE")
            }
        case ("changes", 2): return try only(method, "GET") { try changes(r) }
        case ("blobs", 2):
            switch method {
            case "GET": return try listBlobs()
            case "POST": return try postBlob(r)
            default: throw HTTPFailure.methodNotAllowed("GET, HEAD, POST")
            }
        case ("blobs", 3): return try only(method, "GET") { try getBlob(path[2], r) }
        case ("conflicts", 2):
            return try only(method, "GET") { try conflicts(r) }
        case ("peers", 2): return try only(method, "GET") { json(["peers": try control.dispatch(["op": "peers"])]) }
        case ("peers", 3): return try only(method, "GET") { json(try control.dispatch(["op": "peer", "peer": .string(path[2])])) }
        case ("mesh", 2): return try only(method, "GET") { try mesh(r) }
        case ("events", 2): return try only(method, "GET") { try events(r) }
        case ("openapi.json", 2):
            return try only(method, "GET") { HTTPResponse(status: 200, contentType: "application/json; charset=utf-8", text: OpenAPIDocument.text) }
        default:
            throw HTTPFailure.notFound(r.rawPath)
        }
    }

    // MARK: answers

    func health() -> HTTPResponse {
        let healthy = gateway.report.isHealthy
        let state = gateway.statusSnapshot(store: opened.store).json["state"] ?? .null
        return json(["healthy": .bool(healthy), "state": state], status: healthy ? 200 : 503)
    }

    func collections() throws -> HTTPResponse {
        let store = opened.store
        var out: [JSONValue] = []
        for c in try store.collections() {
            out.append(["name": .string(c.description), "documents": .int(try store.count(c)), "deleted": .int(try store.count(c, deleted: true))])
        }
        return json(["collections": .array(out)])
    }

    /// Newest first, `before` an entry's number; `more` says whether older entries follow (one
    /// more than `limit` is read to know).
    func conflicts(_ r: HTTPRequest) throws -> HTTPResponse {
        let limit = Int(try r.query["limit"].map { try int($0, "limit", 1...10_000) } ?? 100)
        let before = try r.query["before"].map { try int($0, "before", 0...Int64.max) }
        let records = try opened.store.conflicts(limit: limit + 1, before: before)
        let page = try ControlHandler.page(Array(records.prefix(limit)), ControlHandler.json)
        return json(["conflicts": .array(page.items), "more": .bool(page.more || records.count > limit)])
    }

    func mesh(_ r: HTTPRequest) throws -> HTTPResponse {
        let format = r.query["format"] ?? HTTPAPI.preferred(r.header("accept"), ["application/json": "json", "text/vnd.graphviz": "dot", "image/svg+xml": "svg"]) ?? "json"
        switch format {
        case "json": return json(try control.dispatch(["op": "mesh"]))
        case "dot": return HTTPResponse(status: 200, contentType: "text/vnd.graphviz; charset=utf-8", text: gateway.meshView.withLock { $0 }.dot())
        case "svg": return HTTPResponse(status: 200, contentType: "image/svg+xml; charset=utf-8", text: gateway.meshView.withLock { $0 }.svg())
        default: throw HTTPFailure.badRequest("\"format\" is json, dot or svg")
        }
    }

    func events(_ r: HTTPRequest) throws -> HTTPResponse {
        let since = try r.query["since"].map { try int($0, "since", 0...Int64.max) } ?? 0
        guard HTTPAPI.wantsEventStream(r) else {
            return json(try control.dispatch(["op": "events", "since": .int(since)]))
        }
        var cursor = try lastEventID(r) ?? since
        // Event ids start at 1 with each start of the gateway: an id past the log's last is from
        // before a restart, and everything now in the log is news to that client.
        if cursor > gateway.meshEvents.after(Int64.max).last { cursor = 0 }
        let stream = HTTPStream()
        stream.send(": shoal mesh events\n\n")
        feed.addEvents(HTTPFeed.EventSubscriber(stream: stream, cursor: cursor))
        return HTTPAPI.eventStream(stream)
    }

    // MARK: helpers

    func only(_ method: String, _ allowed: String, _ body: () throws -> HTTPResponse) throws -> HTTPResponse {
        guard method == allowed else { throw HTTPFailure.methodNotAllowed(allowed == "GET" ? "GET, HEAD" : allowed) }
        return try body()
    }

    func json(_ value: JSONValue, status: Int = 200, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "application/json; charset=utf-8", text: value.compactText + "\n", headers: headers)
    }

    func int(_ text: String, _ name: String, _ range: ClosedRange<Int64>) throws -> Int64 {
        guard let v = Int64(text), range.contains(v) else {
            throw HTTPFailure.badRequest("\"\(name)\" is a whole number from \(range.lowerBound) to \(range.upperBound == Int64.max ? "2^63-1" : String(range.upperBound))")
        }
        return v
    }

    func bool(_ text: String?, _ name: String) throws -> Bool {
        // Python's requests sends True and False as they print.
        switch text?.lowercased() {
        case nil: return false
        case "true", "1", "yes", "": return true
        case "false", "0", "no": return false
        default: throw HTTPFailure.badRequest("\"\(name)\" is true or false, not \(text?.prefix(40) ?? "")")
        }
    }

    func lastEventID(_ r: HTTPRequest) throws -> Int64? {
        guard let text = r.header("last-event-id"), !text.isEmpty else { return nil }
        guard let v = Int64(text), v >= 0 else { throw HTTPFailure.badRequest("Last-Event-ID is a sequence number (an event's id:)") }
        return v
    }

    static func wantsEventStream(_ r: HTTPRequest) -> Bool {
        r.query["feed"] == "sse" || (r.header("accept")?.contains("text/event-stream") ?? false)
    }

    static func eventStream(_ stream: HTTPStream) -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")],
                     body: .stream(stream))
    }

    /// The first of `choices` an Accept header names (nil: none, or no header).
    static func preferred(_ accept: String?, _ choices: [String: String]) -> String? {
        guard let accept else { return nil }
        for part in accept.split(separator: ",") {
            let type = part.split(separator: ";").first.map { $0.trimmingCharacters(in: " ") } ?? ""
            if let hit = choices[type] { return hit }
        }
        return nil
    }

    static func failure(_ e: ControlError) -> HTTPResponse {
        switch e.code {
        case .badRequest: HTTPServer.error(400, "bad_request", e.message)
        case .invalidDocument: HTTPServer.error(400, "bad_request", e.message)
        case .notFound: HTTPServer.error(404, "not_found", e.message)
        case .unavailable: HTTPServer.error(503, "unavailable", e.message, extra: [("Retry-After", "2")])
        case .internalError: HTTPServer.error(500, "internal_error", e.message)
        }
    }
}

/// An answer other than success, thrown by a route.
struct HTTPFailure: Error {
    let response: HTTPResponse
    static func badRequest(_ why: String) -> HTTPFailure { HTTPFailure(response: HTTPServer.error(400, "bad_request", why)) }
    static func notFound(_ path: String) -> HTTPFailure {
        HTTPFailure(response: HTTPServer.error(404, "not_found", "no route \(path.prefix(200)) (see /v1/openapi.json)"))
    }
    static func methodNotAllowed(_ allow: String) -> HTTPFailure {
        HTTPFailure(response: HTTPServer.error(405, "method_not_allowed", "this path takes \(allow)", extra: [("Allow", allow)]))
    }
    static func precondition(_ why: String) -> HTTPFailure { HTTPFailure(response: HTTPServer.error(412, "precondition_failed", why)) }
}

extension Substring {
    func trimmingCharacters(in set: Character) -> String {
        String(drop { $0 == set }.reversed().drop { $0 == set }.reversed())
    }
}
