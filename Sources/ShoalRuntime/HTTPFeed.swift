import ShoalCore
import ShoalHTTP
import ShoalLinux
import ShoalStore
import ShoalThreads
import ShoalWire

/// Fills the local API's open streams from one thread: the change feed (server-sent events and
/// long polls) as changes commit, the mesh events as they happen, and a keepalive comment every
/// 15 s (which also finds clients that went away). No thread per client: 100 SSE clients cost 100
/// small buffers. A client that reads slowly keeps its cursor and lags; its buffer never grows
/// past the stream's bound.
final class HTTPFeed: Sendable {
    struct ChangeSubscriber: Sendable {
        let stream: HTTPStream
        var cursor: Int64
        let collection: CollectionName?
        let includeDocs: Bool
        /// A long poll: answer once (at most `limit` changes), or with none at the deadline.
        let longPoll: (deadline: ContinuousClock.Instant, limit: Int)?
    }

    struct EventSubscriber: Sendable {
        let stream: HTTPStream
        var cursor: Int64
    }

    let store: DocumentStore
    let events: MeshEventLog
    private let changeSubscribers = Locked<[ObjectIdentifier: ChangeSubscriber]>([:])
    private let eventSubscribers = Locked<[ObjectIdentifier: EventSubscriber]>([:])
    let liveSubscribers = Locked<[ObjectIdentifier: LiveSubscriber]>([:])
    private let stopping = Locked(false)
    /// 15 s. Tests shorten it with SHOAL_HTTP_KEEPALIVE_MILLIS (100…60000); not a site-file option.
    static let keepaliveEvery: Duration = {
        guard let text = ProcessEnvironment.get("SHOAL_HTTP_KEEPALIVE_MILLIS"), let ms = Int(text), (100...60_000).contains(ms) else { return .seconds(15) }
        return .milliseconds(ms)
    }()
    /// Changes read per subscriber per round (the rest next round, which comes at once).
    static let batch = 200

    init(store: DocumentStore, events: MeshEventLog) {
        self.store = store
        self.events = events
    }

    var subscriberCount: Int { changeSubscribers.withLock { $0.count } + eventSubscribers.withLock { $0.count } + liveSubscribers.withLock { $0.count } }

    /// A live query's stream (`HTTPAPI.query`); `release` runs once when it closes.
    func addLiveQuery(_ s: LiveSubscriber, release: @escaping @Sendable () -> Void) {
        let key = ObjectIdentifier(s.stream)
        liveSubscribers.withLock { $0[key] = s }
        s.stream.whenClosed { [weak self] in
            if self?.liveSubscribers.withLock({ $0.removeValue(forKey: key) }) != nil { release() }
        }
        store.wake()
    }

    func addChanges(_ s: ChangeSubscriber) {
        let key = ObjectIdentifier(s.stream)
        changeSubscribers.withLock { $0[key] = s }
        s.stream.whenClosed { [weak self] in _ = self?.changeSubscribers.withLock { $0.removeValue(forKey: key) } }
        store.wake()
    }

    func addEvents(_ s: EventSubscriber) {
        let key = ObjectIdentifier(s.stream)
        eventSubscribers.withLock { $0[key] = s }
        s.stream.whenClosed { [weak self] in _ = self?.eventSubscribers.withLock { $0.removeValue(forKey: key) } }
    }

    func stop() {
        stopping.withLock { $0 = true }
        store.wake()
    }

    /// The feed's loop (its own thread); returns when `stop()` is called.
    func run(heartbeat: () -> Void) {
        var lastKeepalive = ContinuousClock.now
        var seen = store.lastSequence
        while !stopping.withLock({ $0 }) {
            heartbeat()
            let behind = changeSubscribers.withLock { subs in subs.values.contains { $0.cursor < seen && $0.stream.buffered < $0.stream.maxBuffered / 2 } }
            let hasLongPolls = changeSubscribers.withLock { subs in subs.values.contains { $0.longPoll != nil } }
            var waitMillis = hasLongPolls ? 100 : 250
            if let due = liveQueryDue() { waitMillis = min(waitMillis, max(1, Int((due - .now) / .milliseconds(1)) + 1)) }
            if !behind { seen = store.waitForChange(after: seen, timeoutMillis: waitMillis) }
            seen = store.lastSequence
            pushChanges(upTo: seen)
            pushEvents()
            pushLiveQueries()
            if ContinuousClock.now - lastKeepalive >= HTTPFeed.keepaliveEvery {
                lastKeepalive = .now
                // SSE streams only: a long poll's body is one JSON document.
                for s in changeSubscribers.withLock({ $0.values.filter { $0.longPoll == nil }.map(\.stream) }) + eventSubscribers.withLock({ $0.values.map(\.stream) })
                    + liveSubscribers.withLock({ $0.values.map(\.stream) }) {
                    s.send(": keepalive\n\n")
                }
            }
        }
        // Stopping: a long poll answers with no changes (a JSON page, as at its deadline); every
        // stream ends, so clients see a clean end rather than a cut.
        let head = store.lastSequence
        for sub in changeSubscribers.withLock({ Array($0.values) }) where sub.longPoll != nil {
            sub.stream.send(HTTPFeed.page([], includeDocs: false, store: store, head: head, requested: 1).compactText + "\n")
        }
        for s in changeSubscribers.withLock({ $0.values.map(\.stream) }) + eventSubscribers.withLock({ $0.values.map(\.stream) })
            + liveSubscribers.withLock({ $0.values.map(\.stream) }) { s.finish() }
    }

    private func pushChanges(upTo last: Int64) {
        let now = ContinuousClock.now
        for var sub in changeSubscribers.withLock({ Array($0.values) }) {
            let key = ObjectIdentifier(sub.stream)
            if let poll = sub.longPoll {
                var changes: [Change] = []
                if sub.cursor < last {
                    changes = (try? read(sub, limit: poll.limit)) ?? []
                    if changes.isEmpty {
                        // Only other collections' changes (or a purged tombstone's): wait past
                        // them, or the loop would read them again at once, round after round.
                        let cursor = last
                        changeSubscribers.withLock { subs in subs[key]?.cursor = cursor }
                    }
                }
                if !changes.isEmpty || now >= poll.deadline {
                    let body = HTTPFeed.page(changes, includeDocs: sub.includeDocs, store: store, head: last, requested: poll.limit)
                    sub.stream.send(body.compactText + "\n")
                    sub.stream.finish()
                    changeSubscribers.withLock { $0[key] = nil }
                }
                continue
            }
            guard sub.cursor < last, sub.stream.buffered < sub.stream.maxBuffered / 2 else { continue }
            guard let changes = try? read(sub, limit: HTTPFeed.batch) else { continue }
            if changes.isEmpty {
                // Only other collections' changes: nothing to send, but the cursor moves on.
                sub.cursor = last
            }
            // As many events as the stream has room for (at least one): a batch of documents near
            // 1 MiB each must not land in one buffer, nor be read only to be refused.
            let room = sub.stream.maxBuffered - sub.stream.buffered
            var text = ""
            var upTo: Int64?
            for c in changes {
                let event = "id: \(c.sequence)\nevent: change\ndata: \(HTTPFeed.change(c, includeDocs: sub.includeDocs, store: store).compactText)\n\n"
                if upTo != nil && text.utf8.count + event.utf8.count > room { break }
                text += event
                upTo = c.sequence
            }
            if let upTo {
                guard sub.stream.send(text) else { continue }  // full or gone: try again next round
                sub.cursor = upTo
            }
            let cursor = sub.cursor
            changeSubscribers.withLock { subs in subs[key]?.cursor = cursor }
        }
    }

    private func read(_ sub: ChangeSubscriber, limit: Int) throws(StoreError) -> [Change] {
        if let c = sub.collection { return try store.changes(in: c, since: sub.cursor, limit: limit) }
        return try store.changes(since: sub.cursor, limit: limit)
    }

    private func pushEvents() {
        for sub in eventSubscribers.withLock({ Array($0.values) }) {
            let (entries, _) = events.after(sub.cursor, limit: 200)
            guard !entries.isEmpty, sub.stream.buffered < sub.stream.maxBuffered / 2 else { continue }
            var text = ""
            for e in entries {
                text += "id: \(e.sequence)\nevent: \(e.event["type"]?.stringValue ?? "event")\ndata: \(HTTPFeed.event(e).compactText)\n\n"
            }
            guard sub.stream.send(text), let last = entries.last?.sequence else { continue }
            let key = ObjectIdentifier(sub.stream)
            eventSubscribers.withLock { subs in subs[key]?.cursor = last }
        }
    }

    /// One change as the API shows it, with its document's body when asked (null once deleted).
    static func change(_ c: Change, includeDocs: Bool, store: DocumentStore) -> JSONValue {
        var o = ControlHandler.json(c).objectValue ?? [:]
        if includeDocs {
            var doc: JSONValue = .null
            if !c.deleted, let id = try? DocumentID(c.id), let d = try? store.get(c.collection, id: id), let text = d.body,
               let body = try? JSONValue.parse(text) { doc = body }
            o["doc"] = doc
        }
        return .object(o)
    }

    /// A page of changes as `/v1/changes` answers it. `head` is the store's last sequence read
    /// before the changes were, so `lastSequence` (the later of it and the page's last) never
    /// names a change the page could have held and did not: with `more` false, `since=lastSequence`
    /// continues without losing one; with `more` true, continue after the page's last change.
    /// With documents, the page stops once it passes the control socket's page budget (3 MiB).
    static func page(_ changes: [Change], includeDocs: Bool, store: DocumentStore, head: Int64, requested: Int) -> JSONValue {
        var items: [JSONValue] = []
        var bytes = 0
        var cut = changes.count == requested
        for c in changes {
            let item = change(c, includeDocs: includeDocs, store: store)
            if includeDocs {
                bytes += item.compactText.utf8.count
                if bytes > ControlMessage.pageBudgetBytes && !items.isEmpty { cut = true; break }
            }
            items.append(item)
        }
        let pageLast = items.last?["sequence"]?.int64Value ?? 0
        return ["changes": .array(items), "lastSequence": .int(max(head, pageLast)), "more": .bool(cut)]
    }

    static func event(_ e: MeshEventLog.Entry) -> JSONValue {
        var o = e.event.objectValue ?? [:]
        o["sequence"] = .int(e.sequence)
        o["atMillis"] = .int(e.atMillis)
        return .object(o)
    }
}
