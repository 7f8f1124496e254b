import CNATS
import Glibc
import ShoalCore
import ShoalThreads

/// What went wrong talking to a NATS server: the call, libnats's status text and, for a JetStream
/// API error, the server's error code (10071 is a failed compare-and-set, 10059 a missing stream).
public struct NATSError: Error, Sendable, CustomStringConvertible {
    public let call: String
    public let status: String
    public let jetStreamCode: Int
    public var description: String {
        jetStreamCode == 0 ? "\(call): \(status)" : "\(call): \(status) (JetStream error \(jetStreamCode))"
    }
    /// The server refused for lack of permission (a subject the account may not use).
    public var isPermission: Bool { status.lowercased().contains("permission") || status.lowercased().contains("authorization") }

    init(_ call: String, _ s: natsStatus, _ js: jsErrCode = jsErrCode(rawValue: 0)) {
        self.call = call
        var text = String(cString: natsStatus_GetText(s))
        // libnats keeps a per-thread detail of the last error (the server's -ERR text, a TLS
        // failure), prefixed with where in libnats it was raised: kept when it says more.
        if let detail = nats_GetLastError(nil), detail.pointee != 0 {
            var d = String(cString: detail)
            while d.hasPrefix("("), let close = d.firstIndex(of: ")"), d[d.index(after: close)...].hasPrefix(": ") {
                d = String(d[d.index(close, offsetBy: 3)...])
            }
            if !d.isEmpty, d != text { text = d.hasPrefix(text) ? d : text + ": " + d }
        }
        status = text
        jetStreamCode = Int(js.rawValue)
    }

    public init(call: String, status: String, jetStreamCode: Int = 0) {
        self.call = call
        self.status = status
        self.jetStreamCode = jetStreamCode
    }
}

/// A message as JetStream stored it: the subject, the headers (first value of each), the payload
/// and the stream sequence; for a consumer's message, how many more the stream holds after it.
public struct HubMessage: Sendable {
    public let subject: String
    public let headers: [String: String]
    public let payload: [UInt8]
    public let streamSequence: UInt64
    public let pending: UInt64
}

/// One JetStream publish: `expectedLastSubjectSequence` makes it a compare-and-set (0: the
/// subject must hold no message yet).
public struct PublishRequest: Sendable {
    public var subject: String
    public var headers: [(String, String)]
    public var payload: [UInt8]
    public var expectedLastSubjectSequence: UInt64?

    public init(subject: String, headers: [(String, String)], payload: [UInt8], expectedLastSubjectSequence: UInt64?) {
        self.subject = subject
        self.headers = headers
        self.payload = payload
        self.expectedLastSubjectSequence = expectedLastSubjectSequence
    }
}

public enum PublishResult: Sendable, Equatable {
    case stored(sequence: UInt64)
    /// The compare-and-set failed: the subject's last sequence is not the one expected.
    case wrongLastSequence
    /// Larger than the server or the stream takes: publishing it again would fail again.
    case tooLarge(String)
    case failed(String)
}

/// A stream as the server reports it.
public struct StreamState: Sendable {
    public var messages: UInt64
    public var lastSequence: UInt64
    public var replicas: Int
    /// This call made the stream.
    public var created: Bool
    /// When the server made it (ns since the epoch): a stream made anew holds nothing of before.
    public var createdNanos: Int64
}

/// One connection to a NATS server or cluster (libnats, the one importer of CNATS). libnats's
/// connection is thread-safe and reconnects by itself (to any server of the cluster it learned);
/// this wrapper is used by the uplink's two threads (push and pull).
public final class NATSClient: @unchecked Sendable {  // owns libnats handles; libnats locks them itself
    public struct Options: Sendable {
        public var servers: [String]
        public var name: String
        public var connectTimeoutMillis: Int64 = 2000
        /// JetStream API calls and publish acknowledgements.
        public var requestTimeoutMillis: Int64 = 10_000
        public var username: String?
        public var password: String?
        public var credentialsFile: String?
        public var nkeyPublic: String?
        public var nkeySeedFile: String?
        public var secure = false
        public var caFile: String?
        public var certFile: String?
        public var keyFile: String?
        /// The largest document body: publishes larger than the server's max_payload fail with
        /// the server's limit named.
        public var maxPayloadHint = 0
        /// The JetStream domain of the hub (through a leaf node); nil: the server's own.
        public var domain: String?

        public init(servers: [String], name: String) {
            self.servers = servers
            self.name = name
        }
    }

    private let nc: OpaquePointer
    private let js: OpaquePointer
    private let acks: AckCollector
    private let timeout: Int64

    public static var libraryVersion: String { String(cString: nats_GetVersion()) }
    /// Connections' callback boxes alive now (for tests: none outlives its connection).
    public static var liveCallbackBoxes: Int { CallbackBoxes.live.withLock { $0 } }

    /// Connects (one attempt over the servers in order); afterwards libnats reconnects by itself.
    public static func connect(_ o: Options) throws(NATSError) -> NATSClient {
        var opts: OpaquePointer?
        var s = natsOptions_Create(&opts)
        guard s == NATS_OK, let opts else { throw NATSError("natsOptions_Create", s) }
        defer { natsOptions_Destroy(opts) }
        func check(_ call: String, _ s: natsStatus) throws(NATSError) { if s != NATS_OK { throw NATSError(call, s) } }
        var cStrings = o.servers.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        s = cStrings.withUnsafeMutableBufferPointer { buf in
            buf.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buf.count) {
                natsOptions_SetServers(opts, $0, Int32(buf.count))
            }
        }
        try check("natsOptions_SetServers(\(o.servers.joined(separator: ",")))", s)
        try check("natsOptions_SetName", natsOptions_SetName(opts, o.name))
        try check("natsOptions_SetTimeout", natsOptions_SetTimeout(opts, o.connectTimeoutMillis))
        try check("natsOptions_SetNoRandomize", natsOptions_SetNoRandomize(opts, true))
        try check("natsOptions_SetMaxReconnect", natsOptions_SetMaxReconnect(opts, -1))
        try check("natsOptions_SetReconnectWait", natsOptions_SetReconnectWait(opts, 1000))
        try check("natsOptions_SetReconnectJitter", natsOptions_SetReconnectJitter(opts, 500, 1000))
        try check("natsOptions_SetPingInterval", natsOptions_SetPingInterval(opts, 10_000))
        try check("natsOptions_SetMaxPingsOut", natsOptions_SetMaxPingsOut(opts, 3))
        // Requests (JetStream API calls, acknowledgements awaited) fail at once when the connection
        // drops instead of waiting for their timeout: the uplink publishes again from its checkpoint.
        try check("natsOptions_SetFailRequestsOnDisconnect", natsOptions_SetFailRequestsOnDisconnect(opts, true))
        // The server's asynchronous errors (a permissions violation: the publish itself is just
        // never acknowledged) are kept to be told with the failure they cause.
        // libnats does not promise its closed callback is the last: acknowledgements run on a
        // delivery thread, errors (an ordered consumer's failed recreation) on others. Its
        // callbacks get a token, not the boxes' address, and the closed callback takes the boxes
        // out of the table, so a later callback finds nothing and returns.
        let serverErrors = AsyncErrors()
        let acks = AckCollector()
        let boxes = CallbackBoxes(errors: serverErrors, acks: acks)
        let token = CallbackBoxes.table.add(boxes)
        // Until a connection exists, no closed callback will come (a failed connect calls none).
        var handedOver = false
        defer { if !handedOver { CallbackBoxes.table.remove(token) } }
        try check("natsOptions_SetErrorHandler", natsOptions_SetErrorHandler(opts, natsAsyncError, token))
        try check("natsOptions_SetClosedCB", natsOptions_SetClosedCB(opts, natsConnectionClosed, token))
        try check("natsOptions_SetDisconnectedCB", natsOptions_SetDisconnectedCB(opts, natsConnectionLost, token))
        try check("natsOptions_SetReconnectedCB", natsOptions_SetReconnectedCB(opts, natsConnectionBack, token))
        if let u = o.username { try check("natsOptions_SetUserInfo", natsOptions_SetUserInfo(opts, u, o.password ?? "")) }
        if let c = o.credentialsFile {
            try check("natsOptions_SetUserCredentialsFromFiles(\(c))", natsOptions_SetUserCredentialsFromFiles(opts, c, nil))
        }
        if let pub = o.nkeyPublic, let seed = o.nkeySeedFile {
            try check("natsOptions_SetNKeyFromSeed(\(seed))", natsOptions_SetNKeyFromSeed(opts, pub, seed))
        }
        let secure = o.secure || o.servers.contains { $0.hasPrefix("tls://") }
        if secure {
            try check("natsOptions_SetSecure", natsOptions_SetSecure(opts, true))
            let ca = o.caFile ?? "/etc/ssl/certs/ca-certificates.crt"
            try check("natsOptions_LoadCATrustedCertificates(\(ca))", natsOptions_LoadCATrustedCertificates(opts, ca))
            if let cert = o.certFile, let key = o.keyFile {
                try check("natsOptions_LoadCertificatesChain(\(cert), \(key))", natsOptions_LoadCertificatesChain(opts, cert, key))
            }
        }
        var conn: OpaquePointer?
        s = natsConnection_Connect(&conn, opts)
        guard s == NATS_OK, let conn else { throw NATSError("connect to \(o.servers.joined(separator: ", "))", s) }
        handedOver = true
        var jsOpts = jsOptions()
        jsOptions_Init(&jsOpts)
        jsOpts.Wait = o.requestTimeoutMillis
        jsOpts.PublishAsync.MaxPending = 4096
        jsOpts.PublishAsync.AckHandler = natsPublishAcknowledged
        jsOpts.PublishAsync.AckHandlerClosure = token
        var ctx: OpaquePointer?
        // libnats copies the domain while making the context.
        s = o.domain.map { d in d.withCString { jsOpts.Domain = $0; return natsConnection_JetStream(&ctx, conn, &jsOpts) } }
            ?? natsConnection_JetStream(&ctx, conn, &jsOpts)
        guard s == NATS_OK, let ctx else {
            natsConnection_Destroy(conn)
            throw NATSError("natsConnection_JetStream", s)
        }
        return NATSClient(nc: conn, js: ctx, acks: acks, serverErrors: serverErrors, lost: boxes.lost,
                          timeout: o.requestTimeoutMillis)
    }

    private let serverErrors: AsyncErrors
    private let lost: ConnectionWatch

    /// Called on libnats's thread the moment it finds the connection lost (false: a read error, or
    /// pings unanswered) and when it has connected again (true), even while the caller's thread
    /// waits on the hub.
    public func onConnectionChange(_ f: @escaping @Sendable (Bool) -> Void) { lost.set(f) }

    private init(nc: OpaquePointer, js: OpaquePointer, acks: AckCollector, serverErrors: AsyncErrors, lost: ConnectionWatch, timeout: Int64) {
        self.nc = nc
        self.lost = lost
        self.js = js
        self.acks = acks
        self.serverErrors = serverErrors
        self.timeout = timeout
    }

    /// The server's last asynchronous error since the last call (e.g. "Permissions Violation for
    /// Publish to …"), then forgotten.
    public func takeServerError() -> String? { serverErrors.take() }

    deinit {
        jsCtx_Destroy(js)
        natsConnection_Close(nc)
        natsConnection_Destroy(nc)
    }

    public var isConnected: Bool { natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED }
    /// Whether the server answers a ping within `timeoutMillis` (libnats alone finds a link that
    /// went silent only after its unanswered pings, ~40 s).
    public func ping(timeoutMillis: Int64) -> Bool { natsConnection_FlushTimeout(nc, timeoutMillis) == NATS_OK }
    public var isClosed: Bool { natsConnection_IsClosed(nc) }

    /// How many times libnats reconnected this connection (to the same server or another).
    public var reconnects: UInt64 {
        var stats: OpaquePointer?
        guard natsStatistics_Create(&stats) == NATS_OK, let stats else { return 0 }
        defer { natsStatistics_Destroy(stats) }
        var n: UInt64 = 0
        guard natsConnection_GetStats(nc, stats) == NATS_OK,
              natsStatistics_GetCounts(stats, nil, nil, nil, nil, &n) == NATS_OK else { return 0 }
        return n
    }

    /// The server this connection is on now ("" while reconnecting).
    public var connectedURL: String {
        var buf = [CChar](repeating: 0, count: 256)
        guard natsConnection_GetConnectedUrl(nc, &buf, buf.count) == NATS_OK else { return "" }
        return String(cString: buf)
    }

    /// The last asynchronous error the server sent (a permissions violation, for one), if any.
    public var lastError: String? {
        var text: UnsafePointer<CChar>?
        let s = natsConnection_GetLastError(nc, &text)
        guard s != NATS_OK else { return nil }
        return text.map { String(cString: $0) } ?? String(cString: natsStatus_GetText(s))
    }

    /// The stream, created with these settings when it does not exist; an existing stream is used
    /// as it is (its administrator may have set it up differently on purpose).
    public func ensureStream(name: String, subjects: [String], replicas: Int, maxMessageBytes: Int) throws(NATSError) -> StreamState {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var jerr = jsErrCode(rawValue: 0)
        var s = js_GetStreamInfo(&info, js, name, nil, &jerr)
        if s == NATS_OK, let info {
            defer { jsStreamInfo_Destroy(info) }
            return StreamState(messages: info.pointee.State.Msgs, lastSequence: info.pointee.State.LastSeq,
                               replicas: Int(info.pointee.Config?.pointee.Replicas ?? 1), created: false, createdNanos: info.pointee.Created)
        }
        guard jerr == JSStreamNotFoundErr else { throw NATSError("stream info \(name)", s, jerr) }
        var cfg = jsStreamConfig()
        jsStreamConfig_Init(&cfg)
        var subjectStrings: [UnsafePointer<CChar>?] = subjects.map { UnsafePointer(strdup($0)) }
        defer { subjectStrings.forEach { free(UnsafeMutablePointer(mutating: $0)) } }
        s = name.withCString { cname in
            subjectStrings.withUnsafeMutableBufferPointer { subs in
                cfg.Name = cname
                cfg.Subjects = subs.baseAddress
                cfg.SubjectsLen = Int32(subs.count)
                cfg.Storage = js_FileStorage
                cfg.Replicas = Int64(replicas)
                cfg.MaxMsgsPerSubject = 1
                // No size limit of the stream's own: the server's max_payload bounds a message
                // (a version's header grows with the gateways that wrote it).
                cfg.MaxMsgSize = maxMessageBytes > 0 ? Int32(clamping: maxMessageBytes) : -1
                cfg.AllowDirect = true
                jerr = jsErrCode(rawValue: 0)
                return js_AddStream(&info, js, &cfg, nil, &jerr)
            }
        }
        guard s == NATS_OK, let info else { throw NATSError("create stream \(name)", s, jerr) }
        defer { jsStreamInfo_Destroy(info) }
        return StreamState(messages: info.pointee.State.Msgs, lastSequence: info.pointee.State.LastSeq, replicas: replicas, created: true,
                           createdNanos: info.pointee.Created)
    }

    /// The stream's current last sequence (what a consumer at `lastSequence` has yet to see).
    public func streamState(_ name: String) throws(NATSError) -> StreamState {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var jerr = jsErrCode(rawValue: 0)
        let s = js_GetStreamInfo(&info, js, name, nil, &jerr)
        guard s == NATS_OK, let info else { throw NATSError("stream info \(name)", s, jerr) }
        defer { jsStreamInfo_Destroy(info) }
        return StreamState(messages: info.pointee.State.Msgs, lastSequence: info.pointee.State.LastSeq,
                           replicas: Int(info.pointee.Config?.pointee.Replicas ?? 1), created: false, createdNanos: info.pointee.Created)
    }

    /// The last message on `subject` in `stream`, nil when it holds none.
    public func lastMessage(stream: String, subject: String) throws(NATSError) -> HubMessage? {
        var msg: OpaquePointer?
        var jerr = jsErrCode(rawValue: 0)
        let s = js_GetLastMsg(&msg, js, stream, subject, nil, &jerr)
        if jerr == JSNoMessageFoundErr || s == NATS_NOT_FOUND { return nil }
        guard s == NATS_OK, let msg else { throw NATSError("last message of \(subject)", s, jerr) }
        defer { natsMsg_Destroy(msg) }
        return NATSClient.read(msg, sequence: natsMsg_GetSequence(msg), pending: 0)
    }

    /// Publishes every request at once (pipelined) and waits for all their acknowledgements.
    public func publish(_ batch: [PublishRequest]) -> [PublishResult] { wait(send(batch)) }

    /// Sends every request without waiting (asynchronous JetStream publishes); `wait` collects
    /// their acknowledgements. Several batches may be in flight at once.
    public func send(_ batch: [PublishRequest]) -> PublishTicket {
        var tokens: [Int] = []
        var early: [Int: PublishResult] = [:]
        tokens.reserveCapacity(batch.count)
        var pubOpts = jsPubOptions()
        jsPubOptions_Init(&pubOpts)
        pubOpts.MaxWait = timeout
        for (i, r) in batch.enumerated() {
            tokens.append(-1)
            var msg: OpaquePointer?
            var s = r.payload.withUnsafeBufferPointer { p in
                natsMsg_Create(&msg, r.subject, nil, p.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) }, Int32(p.count))
            }
            guard s == NATS_OK, let created = msg else { early[i] = .failed(NATSError("natsMsg_Create", s).description); continue }
            for (k, v) in r.headers where s == NATS_OK { s = natsMsgHeader_Set(created, k, v) }
            if s == NATS_OK, let expected = r.expectedLastSubjectSequence {
                s = natsMsgHeader_Set(created, "Nats-Expected-Last-Subject-Sequence", String(expected))
            }
            guard s == NATS_OK else {
                early[i] = .failed(NATSError("publish \(r.subject)", s).description)
                natsMsg_Destroy(created)
                continue
            }
            // Registered before it is sent: the acknowledgement may come back before the call returns.
            let token = acks.register(created)
            s = js_PublishMsgAsync(js, &msg, &pubOpts)
            if s == NATS_OK {
                tokens[i] = token
            } else {
                acks.forget(token)
                let why = NATSError("publish \(r.subject)", s).description
                early[i] = s == NATS_MAX_PAYLOAD ? .tooLarge(why) : .failed(why)
                if msg != nil { natsMsg_Destroy(msg) }
            }
        }
        return PublishTicket(tokens: tokens, early: early)
    }

    /// The acknowledgements of a batch `send` sent, in its order. libnats reports each publish
    /// within the request timeout (a timeout is a failure); one it never reports fails after it.
    /// `meanwhile` runs on the caller's thread about once a second while acknowledgements are
    /// awaited (the uplink keeps its status current through a hub that went silent).
    public func wait(_ ticket: PublishTicket, meanwhile: () -> Void = {}) -> [PublishResult] {
        let deadline = ContinuousClock.now + .milliseconds(timeout + 5000)
        var pending = ticket.tokens.filter { $0 >= 0 }
        var got: [Int: PublishResult] = [:]
        while !pending.isEmpty {
            let left = deadline - ContinuousClock.now
            let slice = min(1000, Int(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            let last = slice <= 0 || left <= .seconds(1)
            got.merge(acks.wait(pending, timeoutMillis: max(1, slice), forgetRest: last)) { $1 }
            pending.removeAll { got[$0] != nil }
            if last { break }
            if !pending.isEmpty { meanwhile() }
        }
        return ticket.tokens.enumerated().map { i, token in
            ticket.early[i] ?? got[token] ?? .failed("no acknowledgement within \(timeout + 5000) ms")
        }
    }

    /// An ordered consumer of `stream` from `startSequence` (JetStream's ordered push consumer:
    /// flow control and heartbeats; libnats recreates it after a gap or a reconnect). Each message
    /// goes to `deliver` on libnats's delivery thread, in stream order; while `deliver` blocks,
    /// flow control holds the server back.
    public func orderedConsumer(stream: String, filter: String, startSequence: UInt64,
                                deliver: @escaping @Sendable (HubMessage) -> Void) throws(NATSError) -> NATSSubscription {
        var so = jsSubOptions()
        jsSubOptions_Init(&so)
        so.Ordered = true
        so.Config.DeliverPolicy = js_DeliverByStartSequence
        so.Config.OptStartSeq = max(1, startSequence)
        so.Config.Heartbeat = 5_000_000_000
        let box = DeliveryBox(deliver)
        var sub: OpaquePointer?
        var jerr = jsErrCode(rawValue: 0)
        // libnats may run the handler after an unsubscribe, from its own thread, and after a
        // failed js_Subscribe too (a timeout creating the consumer, which the server may make all
        // the same: the subscription existed for a while). The handler gets a token: once the
        // box is out of the table, a delivery finds nothing and drops the message.
        let token = DeliveryBox.table.add(box)
        let s = stream.withCString { cs in
            so.Stream = cs
            return js_Subscribe(&sub, js, filter, natsConsumerDelivered, token, nil, &so, &jerr)
        }
        guard s == NATS_OK, let sub else {
            // A delivery that already found the box holds it: abandoned, the box drops what such a
            // delivery brings unless it is already inside `deliver` (that one is not waited for: it
            // may be blocked on the caller's full inbox).
            box.abandon()
            DeliveryBox.table.remove(token)
            throw NATSError("ordered consumer on \(stream)", s, jerr)
        }
        return NATSSubscription(sub, box: box, token: token)
    }

    static func read(_ msg: OpaquePointer, sequence: UInt64, pending: UInt64) -> HubMessage {
        let subject = String(cString: natsMsg_GetSubject(msg))
        var headers: [String: String] = [:]
        var keys: UnsafeMutablePointer<UnsafePointer<CChar>?>?
        var count: Int32 = 0
        if natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK, let keys {
            for i in 0..<Int(count) {
                guard let k = keys[i] else { continue }
                var v: UnsafePointer<CChar>?
                if natsMsgHeader_Get(msg, k, &v) == NATS_OK, let v { headers[String(cString: k)] = String(cString: v) }
            }
            free(keys)
        }
        let n = Int(natsMsg_GetDataLength(msg))
        let payload: [UInt8] = n == 0 ? [] : natsMsg_GetData(msg).withMemoryRebound(to: UInt8.self, capacity: n) { Array(UnsafeBufferPointer(start: $0, count: n)) }
        return HubMessage(subject: subject, headers: headers, payload: payload, streamSequence: sequence, pending: pending)
    }
}

/// A consumer's subscription. Closing it waits until no delivery is running.
public final class NATSSubscription: @unchecked Sendable {  // one libnats subscription; closed once
    private let sub: OpaquePointer
    private let box: DeliveryBox
    private let token: UnsafeMutableRawPointer
    private let closed = Locked(false)

    init(_ sub: OpaquePointer, box: DeliveryBox, token: UnsafeMutableRawPointer) {
        self.sub = sub
        self.box = box
        self.token = token
    }

    /// Unsubscribes; afterwards `deliver` is not called again.
    public func close() {
        guard closed.withLock({ c in defer { c = true }; return !c }) else { return }
        natsSubscription_Unsubscribe(sub)
        DeliveryBox.table.remove(token)
        box.shut()
    }

    deinit {
        close()
        natsSubscription_Destroy(sub)
    }
}
