import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMQTT
import ShoalReplication
import ShoalStore
import ShoalThreads

/// One broker's bridge, run on a thread of its own (`run`): messages on the inbound rules' topics
/// become documents, changes to the outbound rules' collections become messages.
///
/// In: a batch of messages is read (at most `batchMax`; what the broker sends beyond that waits in
/// the socket and at the broker: back-pressure, never a growing buffer), turned into documents by
/// the rules, and committed in one transaction; only then are the PUBACKs written. A crash between
/// the commit and the PUBACKs makes the broker send those messages again: a replace or merge of the
/// same body writes nothing (`unchanged`), a series keyed by `timeField` lands on the same id.
///
/// Out: each outbound rule reads its collection's change feed from a durable checkpoint (stored as
/// the peer `mqtt/<broker>/<topic template>`), keeps at most `window` publishes in flight, and moves
/// the checkpoint only over changes the broker acknowledged: after a broker outage or a restart it
/// publishes again from there (at least once). A change that came in from this broker on the topic
/// it would go out on is not sent back (the store notes each inbound change's topic).
final class MQTTBridge: @unchecked Sendable {  // loop state is touched only by the bridge's thread
    let broker: MQTTBroker
    let writer: LocalWriter
    let logger: Logger
    let board: MQTTBoard
    let events: MeshEventLog
    let clientOptions: MQTTClient.Options
    private let stopping = Locked(false)
    /// When the bridge's thread last went round its loop (the service heartbeats while it is recent:
    /// a blocking connect to a host that does not answer takes the kernel's ~2 min).
    private let beat = Locked(ContinuousClock.now)
    var lastBeat: ContinuousClock.Instant { beat.withLock { $0 } }

    static let batchMax = 256
    static let window = 100
    var store: DocumentStore { writer.store }
    var name: String { broker.name }

    init(broker: MQTTBroker, writer: LocalWriter, clientOptions: MQTTClient.Options, logger: Logger, board: MQTTBoard, events: MeshEventLog) {
        self.broker = broker
        self.writer = writer
        self.clientOptions = clientOptions
        self.logger = logger
        self.board = board
        self.events = events
        let scheme = clientOptions.useTLS ? "mqtts" : "mqtt"
        board.register(MQTTBoard.Broker(name: broker.name, url: "\(scheme)://\(clientOptions.host):\(clientOptions.port)",
                                        protocolVersion: clientOptions.protocolVersion == 5 ? "5" : "3.1.1"))
        outbound = broker.outbound.map { Outbound(rule: $0, peerKey: "mqtt/\(broker.name)/\($0.topic.text)") }
    }

    func stop() { stopping.withLock { $0 = true } }
    private var isStopping: Bool { stopping.withLock { $0 } }

    // MARK: - The loop

    private var client: MQTTClient?
    private var connected = false
    private var subscribedThisRun = false
    /// The broker's refusal of the connection being closed, which `lost` reports instead of the
    /// read error that follows it.
    private var refusedReason: String?
    private var backoffMillis: Int64 = 0
    private var arrivalClock = MQTTArrivalClock()

    /// The bridge's thread: connect, then read → commit → acknowledge → publish, until `stop()`.
    func run() {
        backoffMillis = broker.reconnectMinMillis
        for i in outbound.indices { loadCheckpoint(i) }
        while !isStopping {
            beat.withLock { $0 = .now }
            guard let client = connectedClient() else { continue }
            do throws(MQTTError) {
                let waiting = outbound.contains { $0.hasMore } && inFlight < MQTTBridge.window
                let messages = try client.read(timeoutMillis: waiting && connected ? 0 : 50, maxMessages: MQTTBridge.batchMax)
                // Commit before anything is written: the batch's PUBACKs are queued already, and
                // the events (a CONNACK read with the batch → SUBSCRIBE) may flush.
                if !messages.isEmpty {
                    guard commitInbound(messages) else {
                        // Not committed: the PUBACKs must not leave. Drop the connection; the
                        // broker sends the batch again after the reconnect.
                        _ = client.takeEvents()
                        lost(client, reason: "a store error kept a batch from committing")
                        continue
                    }
                }
                try handle(client.takeEvents(), client)
                try client.flush()
                if connected { try publishOutbound(client) }
                try client.flush()
                try handle(client.takeEvents(), client)
                saveCheckpoints(force: false)
                expireSeries(force: false)
            } catch {
                try? handle(client.takeEvents(), client)
                lost(client, reason: error.isConnectionLost ? "\(error)" : "\(error) (reconnecting)")
            }
        }
        if let client {
            try? client.flush(timeoutMillis: 1000)
            try? handle(client.takeEvents(), client)
            client.disconnect()
        }
        saveCheckpoints(force: true)
        board.update(name) { MQTTBridge.move(&$0, to: "stopped") }
    }

    /// The client, connected at the TCP/TLS level (the CONNACK comes through `read`); nil after a
    /// failed attempt, having waited the backoff.
    private func connectedClient() -> MQTTClient? {
        if let client, client.isConnected { return client }
        // A new client for each connection: libmosquitto would otherwise send its own queue of
        // unacknowledged publishes again while the bridge publishes again from its checkpoint.
        client = nil
        var options = clientOptions
        if let file = broker.passwordFile {
            // Read at each connection: a corrected password file takes effect without a restart.
            do {
                if let text = try Files.read(file, max: 4096) { options.password = MQTTBroker.password(fromFile: text) }
            } catch {
                if noteError("passwordFile \(file): \(error)") { logger.warning(.mqtt, "\(name): cannot read passwordFile \(file): \(error); using the password read before") }
            }
        }
        do throws(MQTTError) {
            let c = try MQTTClient(options)
            client = c
            try c.connect()
            return c
        } catch {
            board.update(name) { MQTTBridge.move(&$0, to: "disconnected"); $0.lastError = "\(error)" }
            if noteError("\(error)") {
                logger.warning(.mqtt, "\(name): cannot connect to \(clientOptions.host):\(clientOptions.port): \(error); trying again with backoff up to \(broker.reconnectMaxMillis) ms")
                event(connected: false, error: "\(error)")
            } else {
                logger.verbose(.mqtt, "\(name): still cannot connect: \(error)")
            }
            waitBackoff()
            return nil
        }
    }

    /// The last error logged at warning level: the same error again is verbose (a broker down
    /// for a day must not write a line per attempt), a different one is a warning again.
    private var lastLoggedError: String?

    /// Whether `error` is new (log it as a warning and raise an event) or the one logged last.
    private func noteError(_ error: String) -> Bool {
        guard error != lastLoggedError else { return false }
        lastLoggedError = error
        return true
    }

    private func waitBackoff() {
        var left = backoffMillis
        while left > 0 && !isStopping {
            beat.withLock { $0 = .now }
            saveCheckpoints(force: false)  // keeps the outbound lag current while the broker is away
            SystemCall.pause(millis: Int(min(left, 100)))
            left -= 100
        }
        backoffMillis = min(broker.reconnectMaxMillis, max(broker.reconnectMinMillis, backoffMillis * 2))
    }

    private func lost(_ client: MQTTClient, reason error: String) {
        let wasConnected = connected
        connected = false
        client.abort()
        resetOutbound()
        // A refusal (CONNACK) is why this connection ended: the read error after it says less.
        var reason = error
        if let refusal = refusedReason {
            reason = refusal
        } else if !wasConnected && clientOptions.useTLS && clientOptions.certFile != nil && !error.contains("certificate verify failed") {
            // Our check of the broker's certificate failing says so itself; a broker that drops
            // the connection before CONNACK most often refused our certificate.
            reason += " (closed before the broker answered: does it trust this gateway's client certificate \(clientOptions.certFile ?? "")?)"
        }
        refusedReason = nil
        let refused = board.snapshot.first { $0.name == name }?.state == "refused"
        board.update(name) {
            MQTTBridge.move(&$0, to: refused ? "refused" : "disconnected"); $0.lastError = reason
            if wasConnected { $0.disconnects += 1 }
            $0.inFlight = 0
        }
        self.client = nil
        if wasConnected || noteError(reason) {
            logger.warning(.mqtt, "\(name): \(wasConnected ? "connection lost" : "connection failed"): \(reason); reconnecting with backoff up to \(broker.reconnectMaxMillis) ms")
            event(connected: false, error: reason)
        } else {
            logger.verbose(.mqtt, "\(name): still failing: \(reason)")
        }
        waitBackoff()
    }

    private func handle(_ events: [MQTTClient.Event], _ client: MQTTClient) throws(MQTTError) {
        for e in events {
            switch e {
            case .connected(let sessionPresent):
                connected = true
                lastLoggedError = nil
                backoffMillis = broker.reconnectMinMillis
                let filters = broker.subscriptions.map { (filter: $0.filter, qos: $0.qos) }
                // A resumed session keeps its subscriptions; subscribing again would make a 3.1.1
                // broker send every retained message again (MQTT 5 subscribes "retained for new
                // subscriptions only"). The first connection of a run always subscribes: the site
                // file's rules may have changed.
                if !filters.isEmpty && !(sessionPresent && subscribedThisRun) { try client.subscribe(filters) }
                subscribedThisRun = true
                board.update(name) {
                    MQTTBridge.move(&$0, to: "connected"); $0.lastError = nil; $0.connects += 1
                    $0.subscriptions = filters.map(\.filter)
                }
                logger.info(.mqtt, "\(name): connected to \(clientOptions.host):\(clientOptions.port) (MQTT \(clientOptions.protocolVersion == 5 ? "5" : "3.1.1"), session \(sessionPresent ? "resumed" : "new")); \(filters.count) subscription(s), \(outbound.count) outbound rule(s)")
                event(connected: true, error: nil)
            case .refused(let code, let reason):
                connected = false
                let why = "refused by the broker: \(reason) (\(code))"
                refusedReason = why
                board.update(name) { MQTTBridge.move(&$0, to: "refused"); $0.lastError = why }
                if noteError(why) {
                    logger.warning(.mqtt, "\(name): the broker refused the connection: \(reason) (code \(code)); check username/passwordFile and the broker's ACL")
                    event(connected: false, error: "refused: \(reason)")
                }
                // The next call on the client throws (no connection): `lost` waits the backoff once.
                client.abort()
            case .disconnected:
                break  // the next call on the client throws; `lost` handles it
            case .subscribed(_, let granted):
                if let bad = granted.first(where: { $0 > 1 }) {
                    logger.warning(.mqtt, "\(name): the broker refused a subscription (granted QoS \(bad)); check its ACL")
                }
            case .published(let mid, let reason):
                acknowledged(mid, reasonCode: reason)
            }
        }
    }

    private func event(connected: Bool, error: String?) {
        events.append(["type": "mqtt", "broker": .string(name), "connected": .bool(connected), "error": error.map(JSONValue.string) ?? .null],
                      atMillis: MQTTBridge.nowMillis())
    }

    static func nowMillis() -> Int64 { Int64(NodeClock.systemWallMillis()) }

    /// A new state; `since` moves only when the state changes (a broker refusing every attempt
    /// for an hour has been `refused` since the first).
    static func move(_ b: inout MQTTBoard.Broker, to state: String) {
        guard b.state != state else { return }
        b.state = state
        b.sinceMillis = nowMillis()
    }

    // MARK: - In

    /// A message turned into a write by one rule: a document, or (an empty payload under a
    /// replace or merge rule) the deletion of one.
    private struct Prepared {
        let rule: Int
        let topic: String
        let id: DocumentID
        /// nil: delete.
        let document: MQTTInboundDocument?
    }

    /// Dropped-message log lines: at most one per rule per minute, with the count since.
    private var dropLog: [Int: (last: ContinuousClock.Instant, since: Int)] = [:]
    /// Series collections: live documents as last counted (plus new ones since), to trim at `keep`.
    private var seriesLive: [CollectionName: Int64] = [:]
    private var seriesCountedAt = ContinuousClock.now

    /// Turns a batch into documents and commits them in one transaction. False if the store
    /// failed (nothing of the batch is written; the caller must not acknowledge it).
    func commitInbound(_ messages: [MQTTClient.Message]) -> Bool {
        var prepared: [Prepared] = []
        prepared.reserveCapacity(messages.count)
        let now = MQTTBridge.nowMillis()
        for m in messages {
            if m.isOversize {
                let rule = broker.inbound.firstIndex { $0.filter.match(m.topic) != nil } ?? -1
                drop(rule: rule, topic: m.topic, reason: MQTTDropReason.tooLarge.rawValue, detail: "a payload of \(m.size) bytes, over the \(clientOptions.maxPayloadBytes) this bridge reads (4 × the store's body limit)")
                continue
            }
            // Every rule whose filter matches (overlapping filters may feed several collections).
            var matchedAny = false
            for (index, rule) in broker.inbound.enumerated() {
                guard let fields = rule.filter.match(m.topic) else { continue }
                matchedAny = true
                if m.payload.isEmpty {
                    // An empty payload is how MQTT clears a retained message, and how an outbound
                    // rule publishes a deletion: under replace or merge it deletes the document.
                    var all = fields
                    all["topic"] = m.topic
                    guard rule.mode != .series else {
                        drop(rule: index, topic: m.topic, reason: "empty", detail: "an empty payload adds nothing to a series")
                        continue
                    }
                    guard let id = try? DocumentID(rule.id.render(all)) else {
                        drop(rule: index, topic: m.topic, reason: MQTTDropReason.badID.rawValue, detail: MQTTBridge.explain(.badID))
                        continue
                    }
                    prepared.append(Prepared(rule: index, topic: m.topic, id: id, document: nil))
                    continue
                }
                let arrival = arrivalClock.next(nowMillis: now)
                switch rule.document(topic: m.topic, fields: fields, payload: m.payload, maxBodyBytes: store.options.maxBodyBytes,
                                     arrivalMillis: arrival.millis, counter: arrival.counter) {
                case .success(let doc): prepared.append(Prepared(rule: index, topic: m.topic, id: doc.id, document: doc))
                case .failure(let reason): drop(rule: index, topic: m.topic, reason: reason.rawValue, detail: MQTTBridge.explain(reason))
                }
            }
            if !matchedAny { drop(rule: -1, topic: m.topic, reason: "no_rule", detail: "no inbound rule matches the topic") }
        }
        board.update(name) { $0.received += Int64(messages.count) }
        guard !prepared.isEmpty else { return true }
        let recordSources = Set(broker.outbound.map(\.collection))
        let maxBytes = store.options.maxBodyBytes
        do throws(StoreError) {
            let (written, unchanged, oversize, newDocs) = try store.transaction { (tx) throws(StoreError) -> (Int, Int, [Prepared], [CollectionName: Int64]) in
                var written = 0, unchanged = 0
                var oversize: [Prepared] = []
                var newDocs: [CollectionName: Int64] = [:]
                for p in prepared {
                    let rule = broker.inbound[p.rule]
                    let existing = try tx.get(rule.collection, id: p.id.rawValue)
                    var text: String? = nil
                    if let document = p.document {
                        var t = document.bodyText
                        if rule.mode == .merge, let old = existing?.body, let json = try? JSONValue.parse(old) {
                            t = MQTTInboundRule.merged(existing: json, incoming: document.body).compactText
                        }
                        if let old = existing?.body, old == t { unchanged += 1; continue }
                        if t.utf8.count > maxBytes { oversize.append(p); continue }
                        text = t
                    } else if existing == nil || existing?.isDeleted == true {
                        unchanged += 1  // a deletion of what is not there
                        continue
                    }
                    let change = try writer.write(tx, rule.collection, p.id, text, existing: existing)
                    if text != nil && (existing == nil || existing?.isDeleted == true) { newDocs[rule.collection, default: 0] += 1 }
                    if recordSources.contains(rule.collection) {
                        try tx.recordSource(sequence: change.sequence, bridge: name, source: p.topic)
                    }
                    written += 1
                }
                return (written, unchanged, oversize, newDocs)
            }
            for p in oversize { drop(rule: p.rule, topic: p.topic, reason: MQTTDropReason.tooLarge.rawValue, detail: "merged into the document, it would be over \(maxBytes) bytes") }
            for (c, n) in newDocs where seriesLive[c] != nil { seriesLive[c, default: 0] += n }
            board.update(name) { $0.committed += Int64(written); $0.unchanged += Int64(unchanged) }
            if !newDocs.isEmpty { expireSeries(force: false) }
            return true
        } catch {
            board.update(name) { $0.lastError = "store: \(error)" }
            logger.error(.mqtt, "\(name): could not commit \(prepared.count) message(s): \(error); not acknowledged, the broker will send them again")
            return false
        }
    }

    private func drop(rule: Int, topic: String, reason: String, detail: String) {
        board.update(name) {
            if rule <= -2 { $0.outDropped[reason, default: 0] += 1 } else { $0.dropped[reason, default: 0] += 1 }
        }
        let now = ContinuousClock.now
        if let seen = dropLog[rule], now - seen.last < .seconds(60) {
            dropLog[rule]?.since += 1
            return
        }
        let since = dropLog[rule]?.since ?? 0
        dropLog[rule] = (now, 0)
        let which = rule >= 0 ? "inbound rule \(rule + 1) (\(broker.inbound[rule].filter.text))"
            : rule <= -2 ? "outbound rule \(-1 - rule) (\(broker.outbound[-2 - rule].topic.text))" : "no inbound rule matches"
        logger.warning(.mqtt, "\(name): dropped a message on \(topic): \(reason): \(detail) [\(which)]\(since > 0 ? "; \(since) more dropped by this rule in the last minute" : "") — counted in `shoal mqtt status`")
    }

    static func explain(_ reason: MQTTDropReason) -> String {
        switch reason {
        case .notUTF8: "the payload is not UTF-8"
        case .notJSON: "the payload is not JSON (set payload: text on the rule to take plain text)"
        case .tooLarge: "the document would be over the store's body limit"
        case .badID: "the id template gives an invalid document id for this topic"
        case .badTime: "the timeField is neither a number nor a string"
        case .storeError: "the store refused the write"
        }
    }

    /// Series collections over their `keep`: deletes the oldest live documents (by last change).
    private func expireSeries(force: Bool) {
        let series = broker.inbound.filter { $0.mode == .series }
        guard !series.isEmpty else { return }
        let recount = force || ContinuousClock.now - seriesCountedAt > .seconds(10)
        if recount { seriesCountedAt = .now }
        for rule in series {
            let c = rule.collection
            if recount || seriesLive[c] == nil { seriesLive[c] = (try? store.count(c)) ?? 0 }
            let keep = series.filter { $0.collection == c }.map(\.keep).min() ?? rule.keep
            guard let live = seriesLive[c], live > keep else { continue }
            var excess = Int(live - keep)
            var expired = 0
            var after: Int64 = 0
            while excess > 0 {
                guard let changes = try? store.changes(in: c, since: after, limit: min(1000, max(excess * 2, 64))), !changes.isEmpty else { break }
                after = changes.last!.sequence
                let victims = changes.filter { !$0.deleted }.prefix(excess)
                guard !victims.isEmpty else { continue }
                do throws(StoreError) {
                    let n = try store.transaction { (tx) throws(StoreError) -> Int in
                        var n = 0
                        for v in victims {
                            guard let id = try? DocumentID(v.id), let doc = try tx.get(c, id: v.id), !doc.isDeleted, doc.sequence == v.sequence else { continue }
                            _ = try writer.write(tx, c, id, nil)
                            n += 1
                        }
                        return n
                    }
                    expired += n
                    excess -= victims.count
                } catch {
                    logger.warning(.mqtt, "\(name): could not expire old documents of \(c): \(error)")
                    break
                }
            }
            seriesLive[c] = max(0, live - Int64(expired))
            if expired > 0 { board.update(name) { $0.expired += Int64(expired) } }
        }
    }

    // MARK: - Out

    private struct Outbound {
        let rule: MQTTOutboundRule
        let peerKey: String
        /// Acknowledged up to here (durable once saved).
        var checkpoint: Int64 = 0
        var saved: Int64 = 0
        /// Read up to here.
        var cursor: Int64 = 0
        /// In order of sequence: published (a message id) or settled without one (nil).
        var pending: [(sequence: Int64, mid: Int32?)] = []
        var hasMore = true
    }

    private var outbound: [Outbound] = []
    private var byMID: [Int32: Int] = [:]
    /// The topic of each publish in flight (for what a refusal names).
    private var topicByMID: [Int32: String] = [:]
    private var lastSave = ContinuousClock.now
    private var inFlight: Int { byMID.count }

    private func loadCheckpoint(_ i: Int) {
        let c = (try? store.checkpoint(peer: outbound[i].peerKey, collection: outbound[i].rule.collection, direction: .push)) ?? 0
        outbound[i].checkpoint = c
        outbound[i].saved = c
        outbound[i].cursor = c
        outbound[i].hasMore = true
    }

    /// After a lost connection: what was in flight is published again from the last
    /// acknowledged change (at least once).
    private func resetOutbound() {
        byMID = [:]
        topicByMID = [:]
        for i in outbound.indices {
            outbound[i].pending = []
            outbound[i].cursor = outbound[i].checkpoint
            outbound[i].hasMore = true
        }
    }

    private func publishOutbound(_ client: MQTTClient) throws(MQTTError) {
        let last = store.lastSequence
        for i in outbound.indices {
            var o = outbound[i]
            defer { outbound[i] = o }
            guard o.cursor < last else { o.hasMore = false; continue }
            let room = MQTTBridge.window - inFlight
            guard room > 0 else { return }
            // A store error ends the round where it is (the cursor does not move over what could
            // not be read) and is retried next round.
            let changes: [Change]
            let sources: [Int64: String]
            do throws(StoreError) {
                changes = try store.changes(in: o.rule.collection, since: o.cursor, limit: room)
                sources = changes.isEmpty ? [:] : try store.sources(bridge: name, in: changes.first!.sequence...changes.last!.sequence)
            } catch {
                storeTrouble("reading the changes of \(o.rule.collection)", error)
                return
            }
            guard !changes.isEmpty else {
                o.cursor = last
                o.hasMore = false
                settle(&o)
                continue
            }
            for ch in changes {
                guard let id = try? DocumentID(ch.id) else { o.cursor = ch.sequence; o.pending.append((ch.sequence, nil)); continue }
                let doc: StoredDocument?
                do throws(StoreError) { doc = try store.get(o.rule.collection, id: id) } catch {
                    storeTrouble("reading \(o.rule.collection)/\(id.rawValue)", error)
                    o.hasMore = true
                    settle(&o)
                    return
                }
                o.cursor = ch.sequence
                guard let topic = o.rule.publishTopic(collection: o.rule.collection, id: id) else {
                    drop(rule: -2 - i, topic: o.rule.topic.text, reason: "bad_topic", detail: "the id \(id.rawValue) would put +, # or NUL in the topic, or make it too long")
                    o.pending.append((ch.sequence, nil))
                    continue
                }
                if sources[ch.sequence] == topic {
                    o.pending.append((ch.sequence, nil))
                    board.update(name) { $0.skippedLoops += 1 }
                    continue
                }
                if ch.deleted && !o.rule.deletes { o.pending.append((ch.sequence, nil)); continue }
                // Changed again since: its newer change comes later in the feed.
                guard let doc, doc.sequence == ch.sequence else { o.pending.append((ch.sequence, nil)); continue }
                let payload = MQTTBridge.payload(doc, envelope: o.rule.envelope)
                do throws(MQTTError) {
                    let mid = try client.publish(topic: topic, payload: payload, qos: o.rule.qos, retain: o.rule.retain)
                    o.pending.append((ch.sequence, mid))
                    byMID[mid] = i
                    topicByMID[mid] = topic
                    board.update(name) { $0.published += 1 }
                } catch where !error.isConnectionLost {
                    // A topic the broker cannot take (too long, bad UTF-8): count it and go on.
                    drop(rule: -2 - i, topic: topic, reason: "publish_refused", detail: "\(error)")
                    o.pending.append((ch.sequence, nil))
                }
            }
            o.hasMore = o.cursor < last
            settle(&o)
        }
        board.update(name) { [inFlight] in $0.inFlight = Int64(inFlight) }
    }

    private var lastStoreTrouble: ContinuousClock.Instant?

    /// A store error on the way out: logged at most once a minute; the round ends and the same
    /// changes are read again next round.
    private func storeTrouble(_ what: String, _ error: StoreError) {
        board.update(name) { $0.lastError = "store: \(what): \(error)" }
        if let t = lastStoreTrouble, ContinuousClock.now - t < .seconds(60) { return }
        lastStoreTrouble = .now
        logger.warning(.mqtt, "\(name): \(what) for the outbound rules failed: \(error); trying again")
    }

    private func acknowledged(_ mid: Int32, reasonCode: Int) {
        guard let i = byMID.removeValue(forKey: mid) else { return }
        let topic = topicByMID.removeValue(forKey: mid) ?? outbound[i].rule.topic.text
        if let k = outbound[i].pending.firstIndex(where: { $0.mid == mid }) { outbound[i].pending[k].mid = nil }
        if reasonCode >= 128 {
            // An MQTT 5 broker took the PUBLISH and refused it (135: not authorized by its ACL):
            // not delivered, and publishing it again would be refused again.
            drop(rule: -2 - i, topic: topic, reason: "publish_refused",
                 detail: "the broker refused a publish with reason code \(reasonCode) (135: its ACL does not let this client publish there)")
        } else {
            board.update(name) { $0.acknowledged += 1 }
        }
        settle(&outbound[i])
    }

    /// Moves the checkpoint over the leading changes that need nothing more.
    private func settle(_ o: inout Outbound) {
        var n = 0
        while n < o.pending.count, o.pending[n].mid == nil { n += 1 }
        if n > 0 {
            o.checkpoint = o.pending[n - 1].sequence
            o.pending.removeFirst(n)
        }
        if o.pending.isEmpty { o.checkpoint = max(o.checkpoint, o.cursor) }
    }

    private func saveCheckpoints(force: Bool) {
        guard force || ContinuousClock.now - lastSave > .milliseconds(500) else { return }
        lastSave = .now
        var lag: Int64 = 0
        let last = store.lastSequence
        for i in outbound.indices {
            let o = outbound[i]
            lag = max(lag, Int64((try? store.changes(in: o.rule.collection, since: o.checkpoint, limit: 1001).count) ?? 0))
            guard o.checkpoint != o.saved else { continue }
            do throws(StoreError) {
                try store.setCheckpoint(peer: o.peerKey, collection: o.rule.collection, direction: .push, sequence: o.checkpoint)
                outbound[i].saved = o.checkpoint
            } catch {
                logger.warning(.mqtt, "\(name): could not save the outbound checkpoint of \(o.rule.collection): \(error)")
            }
        }
        if let low = outbound.map(\.saved).min(), low > 0 { try? store.forgetSources(bridge: name, through: low) }
        _ = last
        board.update(name) { $0.outboundLag = lag }
    }

    /// The message for a document: its body (an empty payload for a deletion), or the envelope.
    static func payload(_ doc: StoredDocument, envelope: Bool) -> [UInt8] {
        guard envelope else { return Array((doc.body ?? "").utf8) }
        let origin = (try? DocumentVersion(decoding: doc.version))?.vector.current?.peer.description
        let body: JSONValue = doc.body.flatMap { try? JSONValue.parse($0) } ?? .null
        let e: JSONValue = ["id": .string(doc.id), "collection": .string(doc.collection.description), "revision": .int(doc.revision),
                            "origin": origin.map(JSONValue.string) ?? .null, "deleted": .bool(doc.isDeleted), "body": body]
        return Array(e.compactText.utf8)
    }
}
