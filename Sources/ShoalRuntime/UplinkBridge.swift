import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalStore
import ShoalThreads
import ShoalUplink
import ShoalWire

/// The uplink, run on a thread of its own (`run`): the hub (a NATS JetStream server or cluster) is
/// a virtual peer of this gateway.
///
/// Push: each collection's change feed is read from a durable checkpoint (the peer `uplink`) and
/// every version the hub does not hold is published on the document's subject with
/// compare-and-set on the subject's last sequence (`hub_heads` keeps what the hub holds of each
/// document). A failed compare-and-set means the hub holds a version this gateway has not seen:
/// it is fetched, applied here through `RemoteApply` (the mesh's path: same resolver, same result
/// everywhere), and the result published again. The checkpoint moves only over changes the hub
/// acknowledged or already held.
///
/// Pull: one ordered consumer per collection from the stored stream sequence; messages are
/// applied in batches, one transaction each, through `RemoteApply`, and the checkpoint moves in
/// the same commit. A version already held is neither applied nor published again, so any number
/// of a mesh's gateways may have an uplink at once.
final class UplinkBridge: @unchecked Sendable {  // loop state is touched only by the uplink's thread
    /// One collection's sync with the hub.
    struct Lane {
        let name: CollectionName
        let stream: String
        let subjects: String
        let push: Bool
        let pull: Bool
        let policy: CollectionPolicy
        var pushCheckpoint: Int64 = 0
        var pullCheckpoint: Int64 = 0
        var pullPending: UInt64 = 0
        var subscription: NATSSubscription?
    }

    let settings: UplinkSettings
    let layout: HubLayout
    let writer: LocalWriter
    let baseOptions: NATSClient.Options
    let logger: Logger
    let board: UplinkBoard
    let events: MeshEventLog
    let maxBodyBytes: Int
    var lanes: [Lane]
    let inbox = UplinkInbox()
    private let stopping = Locked(false)
    private let beat = Locked(ContinuousClock.now)
    var lastBeat: ContinuousClock.Instant { beat.withLock { $0 } }

    /// The key of this gateway's checkpoints and hub heads.
    static let hubKey = "uplink"
    static let batchMax = 256
    /// Changes published per round: acknowledgements are awaited once per round, so a round is
    /// large enough that the wait is small beside the publishing.
    static let pushBatchMax = 1024
    var store: DocumentStore { writer.store }
    var peerID: PeerID { writer.peer }

    init(settings: UplinkSettings, group: String, site: [SiteConfig.CollectionSettings], writer: LocalWriter, options: NATSClient.Options,
         logger: Logger, board: UplinkBoard, events: MeshEventLog) {
        self.settings = settings
        self.layout = HubLayout(group: group)
        self.writer = writer
        self.baseOptions = options
        self.logger = logger
        self.board = board
        self.events = events
        self.maxBodyBytes = writer.store.options.maxBodyBytes
        let layout = self.layout
        lanes = settings.collections.compactMap { c in
            guard let siteCollection = site.first(where: { $0.name == c.name }) else { return nil }
            var policy = CollectionPolicy(name: c.name)
            policy.resolver = CollectionPolicies.resolver(siteCollection.resolver)
            policy.pushFilter = c.pushFilter.map(CollectionPolicies.predicate)
            policy.pullFilter = c.pullFilter.map(CollectionPolicies.predicate)
            return Lane(name: c.name, stream: layout.streamName(c.name), subjects: layout.streamSubjects(c.name), push: c.push, pull: c.pull, policy: policy)
        }
        board.register(servers: settings.servers, collections: lanes.map {
            UplinkBoard.Collection(name: $0.name.description, stream: $0.stream, push: $0.push, pull: $0.pull)
        })
    }

    func stop() {
        stopping.withLock { $0 = true }
        inbox.wake()
        store.wake()
    }
    var isStopping: Bool { stopping.withLock { $0 } }

    // MARK: - The loop

    var skipLog: [String: (at: ContinuousClock.Instant, since: Int)] = [:]
    /// Subject → the version (hex) this gateway published there since it started: its consumer
    /// brings each back, and applying it would change nothing (the store holds it or newer), so it
    /// is passed over unread. Bounded: past `echoMax` it is forgotten (then echoes are applied, as
    /// no-ops). Only the uplink's thread touches it.
    var published: [String: String] = [:]
    static let echoMax = 100_000
    private var backoffMillis: Int64 = 0
    private var lagPublishedAt = ContinuousClock.now - .seconds(10)
    private var lastErrorText: String?
    private var lastErrorLogged = ContinuousClock.now - .seconds(3600)

    /// Connect, sync until the connection is closed for good or `stop()`, wait the backoff, again.
    func run() {
        backoffMillis = settings.reconnectMinMillis
        board.update { Self.move(&$0, to: "connecting") }
        // The lag shown before the first connection counts from the stored checkpoints.
        for i in lanes.indices {
            lanes[i].pushCheckpoint = (try? store.checkpoint(peer: Self.hubKey, collection: lanes[i].name, direction: .push)) ?? 0
            lanes[i].pullCheckpoint = (try? store.checkpoint(peer: Self.hubKey, collection: lanes[i].name, direction: .pull)) ?? 0
        }
        while !isStopping {
            beat.withLock { $0 = .now }
            var client: NATSClient?
            do {
                client = try NATSClient.connect(try connectOptions())
            } catch {
                fail(Self.explain(error, server: nil, settings: settings), state: refusal(error) ? "refused" : "disconnected")
                pause()
                continue
            }
            guard let client else { continue }
            // Status says so as soon as libnats knows, even while this thread waits on the hub for
            // acknowledgements; the session's loop does the rest (counts, events, resubscribing).
            client.onConnectionChange { [board, weak client] connected in
                let url = connected ? client?.connectedURL : nil
                board.update {
                    if !connected, $0.state == "connected" { Self.move(&$0, to: "reconnecting") }
                    if let url, $0.state == "reconnecting" { Self.move(&$0, to: "connected"); $0.server = url }
                }
            }
            board.update {
                Self.move(&$0, to: "connected")
                $0.server = client.connectedURL
                $0.connects += 1
            }
            logger.info(.uplink, "connected to \(client.connectedURL); \(lanes.count) collection(s)")
            events.append(["type": "uplink", "connected": .bool(true), "server": .string(client.connectedURL), "error": .null],
                          atMillis: Int64(writer.clock.wallMillis))
            let reason = session(client)
            logger.debug(.uplink, "session ended: \(reason ?? "stopped")")
            unsubscribe()
            board.update {
                $0.disconnects += 1
                Self.move(&$0, to: isStopping ? "stopped" : "disconnected")
            }
            events.append(["type": "uplink", "connected": .bool(false), "server": .string(client.connectedURL),
                           "error": reason.map(JSONValue.string) ?? .null], atMillis: Int64(writer.clock.wallMillis))
            if let reason, !isStopping {
                fail(reason, state: "disconnected")
                pause()
            }
        }
        board.update { Self.move(&$0, to: "stopped") }
    }

    /// The options of one connection: the password file is read again each time.
    func connectOptions() throws -> NATSClient.Options {
        var o = baseOptions
        if let file = settings.passwordFile {
            guard let text = try Files.read(file, max: 4096) else { throw UplinkError.missingFile("passwordFile \(file)") }
            o.password = MQTTBroker.password(fromFile: text)
        }
        return o
    }

    /// One connection's life: streams checked, consumers started, then push and pull rounds until
    /// the connection closes or a round keeps failing. Returns why it ended (nil: stopped).
    private func session(_ client: NATSClient) -> String? {
        do {
            try prepareStreams(client)
            try subscribe(client)
        } catch {
            return "setting up the streams: \(Self.explain(error, server: client.takeServerError(), settings: settings))"
        }
        var failures = 0
        var wasConnected = true
        var reconnectsSeen = client.reconnects
        var lastStatus = ContinuousClock.now - .seconds(10)
        var seen = store.lastSequence
        while !isStopping {
            beat.withLock { $0 = .now }
            if client.isClosed { return "the connection was closed: \(client.lastError ?? "by the server")" }
            guard client.isConnected else {
                if wasConnected {
                    wasConnected = false
                    let lostFrom = board.snapshot?.server ?? ""
                    let why = client.takeServerError().map { "connection lost: \($0)" } ?? "connection lost"
                    board.update {
                        Self.move(&$0, to: "reconnecting")
                        $0.server = ""
                        $0.disconnects += 1
                        $0.lastError = why
                        $0.lastErrorAtMillis = Int64(NodeClock.systemWallMillis())
                    }
                    events.append(["type": "uplink", "connected": .bool(false), "server": .string(lostFrom), "error": .string(why)],
                                  atMillis: Int64(writer.clock.wallMillis))
                    logger.warning(.uplink, "connection to the hub (\(lostFrom)) lost; libnats reconnects (changes wait in the store)")
                }
                if ContinuousClock.now - lastStatus > .seconds(1) {
                    lastStatus = .now
                    publishLag()  // what waits grows while the hub is away
                }
                inbox.sleep(timeoutMillis: 200)
                continue
            }
            let reconnects = client.reconnects
            if wasConnected, reconnects != reconnectsSeen {
                // libnats lost the connection and made another (maybe to another node of the
                // cluster) while this thread waited on the hub: the same as a loss seen here.
                let lostFrom = board.snapshot?.server ?? ""
                board.update { $0.disconnects += 1 }
                events.append(["type": "uplink", "connected": .bool(false), "server": .string(lostFrom), "error": .string("connection lost")],
                              atMillis: Int64(writer.clock.wallMillis))
                logger.warning(.uplink, "connection to the hub (\(lostFrom)) lost; libnats reconnected")
                wasConnected = false
            }
            reconnectsSeen = reconnects
            if !wasConnected {
                // Back on a server (maybe another node of the cluster): consumers start again from
                // the checkpoints, so nothing delivered while the connection was down is missed.
                wasConnected = true
                board.update { Self.move(&$0, to: "connected"); $0.server = client.connectedURL; $0.connects += 1 }
                events.append(["type": "uplink", "connected": .bool(true), "server": .string(client.connectedURL), "error": .null],
                              atMillis: Int64(writer.clock.wallMillis))
                logger.info(.uplink, "reconnected to \(client.connectedURL)")
                unsubscribe()
                do { try subscribe(client) } catch { return "resubscribing after a reconnect: \(error)" }
            }
            if ContinuousClock.now - lastStatus > .seconds(1) {
                lastStatus = .now
                publishLag()
            }
            var progress = false
            var failed: String?
            do {
                progress = try pullRound() || progress
            } catch {
                // What was taken from the inbox is not applied: the consumers start again from
                // the stored checkpoint, so nothing is skipped.
                failed = "applying hub messages: \(error)"
                unsubscribe()
                do { try subscribe(client) } catch { return "resubscribing after a failed apply: \(error)" }
            }
            if failed == nil {
                do { progress = try pushRound(client) || progress } catch { failed = "\(error)" }
            }
            if var text = failed, let said = client.takeServerError(), !text.contains(said) {
                // A refusal the server sent on the side (a permissions violation) is why.
                text += " (the server said: \(said))"
                failed = text
            }
            if let failed {
                failures += 1
                fail(failed, state: client.isConnected ? "connected" : "reconnecting")
                // A round that failed on a connection libnats still calls up: if the server does
                // not answer a ping either, the link to it went silent (cut, not closed) — connect
                // again rather than wait ~40 s for libnats's own pings to give up.
                if client.isConnected, !client.ping(timeoutMillis: 2000) {
                    return "the hub did not answer a ping within 2 s after a failed round (the link to it is down?): \(failed)"
                }
                if failures >= 5 { return "\(failures) rounds failed in a row; last: \(failed)" }
                pause()
                continue
            }
            if failures > 0 || lastErrorText != nil { failures = 0; clearError() }
            backoffMillis = settings.reconnectMinMillis
            if !progress {
                // Wait for a local commit or a hub message (the consumers wake the store).
                if inbox.isEmpty { seen = store.waitForChange(after: seen, timeoutMillis: 250) }
            }
        }
        return nil
    }

    /// Creates the missing streams and notices a stream made anew since the last session (the hub
    /// rebuilt empty): then everything is pushed again and pulled from its start.
    private func prepareStreams(_ client: NATSClient) throws {
        for i in lanes.indices {
            let lane = lanes[i]
            let state = try client.ensureStream(name: lane.stream, subjects: [lane.subjects], replicas: settings.replicas,
                                                maxMessageBytes: 0)
            if state.created { logger.info(.uplink, "created stream \(lane.stream) (\(settings.replicas) replica(s)) for \(lane.name)") }
            let key = "uplink.stream.\(lane.stream)"
            let known = try store.metadata(key)
            let now = String(state.createdNanos)
            if known != now {
                try store.transaction { (tx) throws(StoreError) in
                    if known != nil {
                        logger.warning(.uplink, "stream \(lane.stream) was made anew on the hub; pushing \(lane.name) again from the start")
                    }
                    try tx.forgetHubHeads(hub: Self.hubKey, collection: lane.name)
                    try tx.setCheckpoint(peer: Self.hubKey, collection: lane.name, direction: .push, sequence: 0)
                    try tx.setCheckpoint(peer: Self.hubKey, collection: lane.name, direction: .pull, sequence: 0)
                    try tx.setMetadata(key, now)
                }
            }
            lanes[i].pushCheckpoint = try store.checkpoint(peer: Self.hubKey, collection: lane.name, direction: .push)
            lanes[i].pullCheckpoint = try store.checkpoint(peer: Self.hubKey, collection: lane.name, direction: .pull)
            lanes[i].pullPending = state.lastSequence > UInt64(clamping: lanes[i].pullCheckpoint) ? state.lastSequence - UInt64(clamping: lanes[i].pullCheckpoint) : 0
        }
    }

    private func unsubscribe() {
        inbox.close()
        for i in lanes.indices { lanes[i].subscription?.close(); lanes[i].subscription = nil }
    }

    /// An ordered consumer per pulled collection, from its checkpoint.
    private func subscribe(_ client: NATSClient) throws {
        inbox.reopen()
        for i in lanes.indices where lanes[i].pull {
            let index = i
            let inbox = self.inbox
            let store = self.store
            lanes[i].subscription = try client.orderedConsumer(stream: lanes[i].stream, filter: lanes[i].subjects,
                                                               startSequence: UInt64(clamping: lanes[i].pullCheckpoint) + 1) { m in
                if inbox.put(index, m) { store.wake() }
            }
        }
    }

    // MARK: - Status

    /// While the loop waits on the hub: the heartbeat and the lag, at most once a second.
    func keepStatusCurrent() {
        beat.withLock { $0 = .now }
        if ContinuousClock.now - lagPublishedAt > .seconds(1) { publishLag() }
    }

    private func publishLag() {
        lagPublishedAt = .now
        var collections: [UplinkBoard.Collection] = []
        let now = Int64(writer.clock.wallMillis)
        for lane in lanes {
            var c = UplinkBoard.Collection(name: lane.name.description, stream: lane.stream, push: lane.push, pull: lane.pull)
            if lane.push, let backlog = try? store.changeBacklog(in: lane.name, since: lane.pushCheckpoint) {
                c.pushLag = backlog.count
                c.pushLagSeconds = backlog.count == 0 ? 0 : Double(max(0, now - backlog.oldestMillis)) / 1000
            }
            c.pullLag = lane.pull ? Int64(clamping: lane.pullPending) : 0
            c.pushCheckpoint = lane.pushCheckpoint
            c.pullCheckpoint = lane.pullCheckpoint
            collections.append(c)
        }
        board.update { $0.collections = collections }
    }

    /// An error with what to do about the usual causes.
    static func explain(_ error: Error, server said: String?, settings: UplinkSettings) -> String {
        var text = "\(error)"
        if let said, !text.contains(said) { text += " (the server said: \(said))" }
        let lower = text.lowercased()
        if lower.contains("10076") || lower.contains("no responders") {
            text += settings.domain == nil
                ? " — JetStream is not enabled on the server for this account (through a leaf node, set uplink.domain to the hub's JetStream domain)"
                : " — no JetStream in domain \(settings.domain!) is reachable for this account"
        } else if lower.contains("10074") || lower.contains("replicas > 1") {
            text += " — set uplink.replicas to what the server (or cluster) can hold: 1 on a single server"
        } else if lower.contains("permission") {
            text += " — the server's permissions for this gateway's user do not allow it: see README, \"One server\", for the subjects a gateway needs"
        } else if lower.contains("expected 'pong'") {
            text += " — the server closed the connection in the TLS handshake: it may want a client certificate it trusts (uplink.tls.identity, or certFile and keyFile); its log says which"
        } else if lower.contains("secure connection not available") {
            text += " — the server does not speak TLS: use nats:// or turn TLS on at the server"
        } else if lower.contains("unable to get local issuer") || lower.contains("certificate verify failed") {
            text += " — the server's certificate is not signed by a CA the gateway trusts: set uplink.tls.caFile to the CA that signed it"
        } else if lower.contains("authorization violation") || lower.contains("authentication") {
            text += " — the server refused the login: check username and passwordFile, credentialsFile or nkey; with verify_and_map the server's users must list this gateway's certificate subject (shoal identity show)"
        } else if lower.contains("no server available") {
            text += " — nothing answers at \(settings.servers.joined(separator: ", ")): is nats-server running there, on that port (shoal doctor checks it)?"
        } else if lower.contains("timeout") {
            text += " — no answer from the server's JetStream in time (permissions that deny the JetStream API look like this too: see the server's log)"
        }
        return text
    }

    static func move(_ s: inout UplinkBoard.State, to state: String) {
        guard s.state != state else { return }
        s.state = state
        s.sinceMillis = Int64(NodeClock.systemWallMillis())
    }

    func succeeded() {
        board.update { $0.lastSuccessMillis = Int64(NodeClock.systemWallMillis()) }
    }

    private func refusal(_ error: Error) -> Bool {
        let text = "\(error)".lowercased()
        return text.contains("authorization") || text.contains("permission") || text.contains("certificate") || text.contains("ssl")
            || text.contains("tls") || text.contains("nkey") || text.contains("credentials")
    }

    /// Notes an error on the board; logs it when it is new or a minute has passed.
    func fail(_ text: String, state: String) {
        board.update {
            $0.lastError = text
            $0.lastErrorAtMillis = Int64(NodeClock.systemWallMillis())
            Self.move(&$0, to: state)
        }
        if text != lastErrorText || ContinuousClock.now - lastErrorLogged > .seconds(60) {
            logger.warning(.uplink, "\(text); trying again with backoff up to \(settings.reconnectMaxMillis) ms")
            lastErrorLogged = .now
        }
        lastErrorText = text
    }

    private func clearError() {
        lastErrorText = nil
    }

    /// Waits the backoff (woken early by `stop`), then doubles it up to the maximum.
    private func pause() {
        let jitter = Int64.random(in: 0...(backoffMillis / 4 + 1))
        let until = ContinuousClock.now + .milliseconds(backoffMillis + jitter)
        var lastStatus = ContinuousClock.now
        while !isStopping, ContinuousClock.now < until {
            beat.withLock { $0 = .now }
            inbox.sleep(timeoutMillis: 100)
            if ContinuousClock.now - lastStatus > .seconds(1) {
                lastStatus = .now
                publishLag()  // what waits grows while the uplink backs off
            }
        }
        backoffMillis = min(settings.reconnectMaxMillis, backoffMillis * 2)
    }
}

enum UplinkError: Error, CustomStringConvertible {
    case missingFile(String)
    case noIdentity
    var description: String {
        switch self {
        case .missingFile(let what): "\(what): no such file"
        case .noIdentity: "the uplink needs the gateway's identity (it is not loaded)"
        }
    }
}

/// Hub messages delivered by libnats's thread, waiting for the uplink's thread. Bounded: when it
/// is full, the delivery blocks and JetStream's flow control holds the server back. Closed while
/// consumers are replaced: a delivery then drops its message (the new consumer starts from the
/// checkpoint) instead of blocking the unsubscribe.
final class UplinkInbox: @unchecked Sendable {  // items and closed only under lock
    private let lock = ConditionLock()
    private var items: [(Int, HubMessage)] = []
    private var closed = false
    static let capacity = 2048

    /// Queues a message; true when the queue was empty (the reader may be asleep).
    func put(_ lane: Int, _ m: HubMessage) -> Bool {
        lock.withLock {
            while items.count >= UplinkInbox.capacity, !closed { lock.wait(timeoutMillis: 100) }
            guard !closed else { return false }
            items.append((lane, m))
            lock.broadcast()
            return items.count == 1
        }
    }

    func take(max: Int) -> [(Int, HubMessage)] {
        lock.withLock {
            let n = min(max, items.count)
            let out = Array(items.prefix(n))
            items.removeFirst(n)
            lock.broadcast()
            return out
        }
    }

    var isEmpty: Bool { lock.withLock { items.isEmpty } }

    /// Waits until a message is queued or the time is up; true if one is.
    func wait(timeoutMillis: Int) -> Bool {
        lock.withLock {
            if items.isEmpty { lock.wait(timeoutMillis: timeoutMillis) }
            return !items.isEmpty
        }
    }

    /// Drops what is queued and refuses deliveries until `reopen`.
    func close() {
        lock.withLock {
            closed = true
            items.removeAll()
            lock.broadcast()
        }
    }

    func reopen() {
        lock.withLock {
            closed = false
            items.removeAll()
        }
    }

    func wake() { lock.withLock { lock.broadcast() } }

    /// Waits the time out, or until `wake` (a stop): whatever is queued (nothing takes from it
    /// while the hub is away or the uplink waits its backoff).
    func sleep(timeoutMillis: Int) { lock.withLock { lock.wait(timeoutMillis: timeoutMillis) } }
}
