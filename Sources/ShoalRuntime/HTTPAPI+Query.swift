import ShoalCore
import ShoalHTTP
import ShoalStore

/// `GET /v1/collections/{c}/query`: a query as a JSON answer (as `shoal doc query --json`), or,
/// with `Accept: text/event-stream` or `follow=1`, a live query as server-sent events (an `update`
/// event with the whole result first, then one each time a change alters it). A malformed part is
/// a 400 that names the parameter and the character (`position`, 1-based; 0: not at one place).
extension HTTPAPI {
    func query(_ c: String, _ r: HTTPRequest) throws -> HTTPResponse {
        let name = try collection(c)
        let q = try HTTPAPI.parseQuery(r)
        let follow = try bool(r.query["follow"], "follow") || HTTPAPI.wantsEventStream(r)
        guard follow else {
            var request: [String: JSONValue] = ["op": "doc.query", "collection": .string(name.description)]
            // Parsed above for the error positions; the control op parses the same text again.
            for (param, key) in HTTPAPI.queryParameters where r.query[param] != nil { request[key] = .string(r.query[param]!) }
            if let n = q.limit { request["limit"] = .int(Int64(n)) }
            if q.offset > 0 { request["offset"] = .int(Int64(q.offset)) }
            if let after = q.after { request["after"] = .string(after) }
            return json(try control.dispatch(request))
        }
        let state = try LiveQueryState(store: opened.store, query: q, in: name)
        let slots = gateway.liveQueries
        guard slots.take() else { throw HTTPFailure(response: HTTPServer.error(503, "unavailable", slots.fullMessage, extra: [("Retry-After", "5")])) }
        let stream = HTTPStream()
        stream.send(": shoal live query of \(name)\nretry: 2000\n\n")
        feed.addLiveQuery(HTTPFeed.LiveSubscriber(stream: stream, state: state), release: { slots.release() })
        return HTTPAPI.eventStream(stream)
    }

    /// Query parameters that hold query text, and the control op's key for each.
    static let queryParameters: [(String, String)] = [("q", "where"), ("order", "order"), ("fields", "fields"), ("aggregate", "aggregate"), ("group_by", "groupBy")]

    static func parseQuery(_ r: HTTPRequest) throws -> Query {
        func part<T>(_ param: String, _ parse: (String) throws(QueryError) -> T) throws -> T? {
            guard let text = r.query[param] else { return nil }
            do { return try parse(text) } catch { throw HTTPFailure(response: queryError(param, error)) }
        }
        var q = Query()
        q.filter = try part("q") { t throws(QueryError) in try QueryParser.parseFilter(t) } ?? nil
        q.order = try part("order") { t throws(QueryError) in try QueryParser.parseOrder(t) } ?? []
        q.fields = try part("fields") { t throws(QueryError) in try QueryParser.parseFields(t) }
        q.aggregates = try part("aggregate") { t throws(QueryError) in try QueryParser.parseAggregates(t) } ?? []
        q.groupBy = try part("group_by") { t throws(QueryError) in try QueryParser.parseFields(t, max: QueryLimits.maxGroupBy) } ?? []
        func number(_ param: String, _ range: ClosedRange<Int>) throws -> Int? {
            guard let text = r.query[param] else { return nil }
            guard let n = Int(text), range.contains(n) else { throw HTTPFailure.badRequest("\"\(param)\" is a whole number from \(range.lowerBound) to \(range.upperBound)") }
            return n
        }
        q.limit = try number("limit", 1...QueryLimits.maxLimit)
        q.offset = try number("offset", 0...QueryLimits.maxOffset) ?? 0
        q.after = r.query["after"]
        return q
    }

    /// 400 with the parameter and position: `{"error":"bad_request","reason":"q: at character 7: …","parameter":"q","position":7}`.
    static func queryError(_ param: String, _ e: QueryError) -> HTTPResponse {
        HTTPResponse(status: 400, contentType: "application/json; charset=utf-8",
                     text: JSONValue.object(["error": "bad_request", "reason": .string("invalid query: \(param) \(e)"), "parameter": .string(param),
                                             "position": .int(Int64(e.position)), "message": .string(e.message)]).compactText + "\n")
    }
}

extension HTTPFeed {
    struct LiveSubscriber: Sendable {
        let stream: HTTPStream
        var state: LiveQueryState
    }

    /// Evaluates the live queries whose collection changed (as their pacing allows) and sends
    /// each changed result as an `update` event. A stream whose client reads slowly skips
    /// evaluations until it drains (the next one sends the result as it is then).
    func pushLiveQueries() {
        for var sub in liveSubscribers.withLock({ Array($0.values) }) {
            let key = ObjectIdentifier(sub.stream)
            guard sub.stream.buffered < sub.stream.maxBuffered / 2 else { continue }
            do {
                guard let u = try sub.state.poll(store) else {
                    let state = sub.state
                    liveSubscribers.withLock { $0[key]?.state = state }
                    continue
                }
                let data = try ControlHandler.json(u, sub.state.query).compactText
                _ = sub.stream.send("id: \(u.number)\nevent: update\ndata: \(data)\n\n")
            } catch {
                _ = sub.stream.send("event: error\ndata: \(JSONValue.object(["error": "unavailable", "reason": .string("\(error)")]).compactText)\n\n")
                sub.stream.finish()
            }
            let state = sub.state
            liveSubscribers.withLock { $0[key]?.state = state }
        }
    }

    /// The soonest a live query has work to do without a new change (nil: none).
    func liveQueryDue() -> ContinuousClock.Instant? {
        // A stream over half full is skipped until it drains (the keepalive round finds it).
        liveSubscribers.withLock { subs in subs.values.filter { $0.stream.buffered < $0.stream.maxBuffered / 2 }.compactMap { $0.state.due() }.min() }
    }
}
