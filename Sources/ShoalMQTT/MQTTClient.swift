import CMosquitto
import Glibc
import ShoalLinux

/// One MQTT connection to one broker, on libmosquitto, driven by one thread (the broker's client
/// thread in the runtime) and never by libmosquitto's own: the client runs in libmosquitto's
/// "external thread" mode, where nothing is written to the socket until `flush()`. That is what
/// lets Shoal acknowledge a message only after committing it: libmosquitto queues a QoS 1 PUBACK
/// before it hands the message over, `read` collects a batch, the caller commits it, and only then
/// does `flush` send the acknowledgements. If the commit fails, `abort` shuts the socket: the queued
/// PUBACKs die with it and the broker sends the messages again after the reconnect.
///
/// Not thread-safe by design: every call comes from the one thread that owns the client.
public final class MQTTClient: @unchecked Sendable {  // the mosquitto handle is used by one thread only
    public struct Options: Sendable {
        public var host: String
        public var port: Int
        public var clientID: String
        /// 4 (MQTT 3.1.1) or 5.
        public var protocolVersion: Int = 4
        public var keepaliveSeconds: Int = 30
        public var cleanSession = false
        public var username: String?
        public var password: String?
        public var useTLS = false
        /// A CA file, or nil for the system's CA directory.
        public var caFile: String?
        public var certFile: String?
        public var keyFile: String?
        /// Skip the check of the broker's host name against its certificate.
        public var insecure = false
        /// QoS 1 messages the broker may send before we acknowledge (MQTT 5's receive maximum; a
        /// 3.1.1 broker uses its own max_inflight_messages) and that we send before the broker
        /// acknowledges.
        public var inflight = 100
        /// MQTT 5: how long the broker keeps our session (and the QoS 1 messages for it) after we
        /// go away, when `cleanSession` is false. 3.1.1 keeps it until a clean session replaces it.
        public var sessionExpirySeconds: UInt32 = 7 * 24 * 3600
        /// Payloads over this are not copied out of libmosquitto: the message comes with an empty
        /// payload and `isOversize` (its bytes are freed at once). MQTT 5 also tells the broker not
        /// to send packets over it and a little more (the Maximum Packet Size of CONNECT).
        public var maxPayloadBytes = 4 << 20

        public init(host: String, port: Int, clientID: String) {
            self.host = host
            self.port = port
            self.clientID = clientID
        }
    }

    /// A message from the broker. Its PUBACK (QoS 1) goes out at the next `flush()`.
    public struct Message: Sendable {
        public let topic: String
        /// Empty when `isOversize`.
        public let payload: [UInt8]
        public let qos: Int
        public let retain: Bool
        /// The payload's size as it came.
        public let size: Int
        public var isOversize: Bool { size > payload.count }
    }

    public enum Event: Sendable, Equatable {
        /// CONNACK accepted; `sessionPresent`: the broker kept our session from before.
        case connected(sessionPresent: Bool)
        /// CONNACK refused (bad credentials, not authorized, …), with the broker's reason.
        case refused(code: Int, reason: String)
        case disconnected(code: Int, reason: String)
        case subscribed(messageID: Int32, grantedQoS: [Int])
        /// The broker acknowledged a publish (PUBACK for QoS 1; sent, for QoS 0). MQTT 5 brokers
        /// may refuse it in the PUBACK: `reasonCode` 128 and up (135: not authorized).
        case published(messageID: Int32, reasonCode: Int)
    }

    private let handle: OpaquePointer
    private let state: CallbackState
    public let options: Options

    public init(_ options: Options) throws(MQTTError) {
        MQTTClient.libraryReady
        self.options = options
        let state = CallbackState()
        state.maxPayload = options.maxPayloadBytes
        guard let h = mosquitto_new(options.clientID, options.cleanSession, Unmanaged.passUnretained(state).toOpaque()) else {
            throw MQTTError(call: "mosquitto_new", code: MOSQ_ERR_NOMEM.rawValue, detail: "client id \(options.clientID)")
        }
        self.handle = h
        self.state = state
        do throws(MQTTError) {
            try configure()
        } catch {
            mosquitto_destroy(h)
            throw error
        }
    }

    deinit { mosquitto_destroy(handle) }

    /// libmosquitto's version (`2.0.11`).
    public static var libraryVersion: String {
        var major: Int32 = 0, minor: Int32 = 0, revision: Int32 = 0
        _ = mosquitto_lib_version(&major, &minor, &revision)
        return "\(major).\(minor).\(revision)"
    }

    private static let libraryReady: Void = { _ = mosquitto_lib_init() }()

    private func configure() throws(MQTTError) {
        try check("mosquitto_threaded_set", mosquitto_threaded_set(handle, true))
        try check("protocol version", mosquitto_int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, Int32(options.protocolVersion == 5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311)))
        if options.protocolVersion == 5 {
            try check("receive maximum", mosquitto_int_option(handle, MOSQ_OPT_RECEIVE_MAXIMUM, Int32(options.inflight)))
            try check("send maximum", mosquitto_int_option(handle, MOSQ_OPT_SEND_MAXIMUM, Int32(options.inflight)))
        } else {
            try check("mosquitto_max_inflight_messages_set", mosquitto_max_inflight_messages_set(handle, UInt32(options.inflight)))
        }
        _ = mosquitto_int_option(handle, MOSQ_OPT_TCP_NODELAY, 1)
        if let user = options.username {
            try check("mosquitto_username_pw_set", mosquitto_username_pw_set(handle, user, options.password))
        }
        if options.useTLS {
            let caPath: String? = options.caFile == nil ? "/etc/ssl/certs" : nil
            try check("mosquitto_tls_set", mosquitto_tls_set(handle, options.caFile, caPath, options.certFile, options.keyFile, nil))
            try check("mosquitto_tls_insecure_set", mosquitto_tls_insecure_set(handle, options.insecure))
        }
        mosquitto_connect_with_flags_callback_set(handle) { _, obj, rc, flags in
            guard let obj else { return }
            let s = Unmanaged<CallbackState>.fromOpaque(obj).takeUnretainedValue()
            if rc == 0 {
                s.events.append(.connected(sessionPresent: flags & 1 != 0))
            } else {
                s.events.append(.refused(code: Int(rc), reason: MQTTClient.reason(rc)))
            }
        }
        mosquitto_disconnect_callback_set(handle) { _, obj, rc in
            guard let obj else { return }
            let s = Unmanaged<CallbackState>.fromOpaque(obj).takeUnretainedValue()
            s.events.append(.disconnected(code: Int(rc), reason: rc == 0 ? "disconnected" : String(cString: mosquitto_strerror(rc))))
        }
        mosquitto_message_callback_set(handle) { _, obj, message in
            guard let obj, let m = message?.pointee, let topic = m.topic else { return }
            let s = Unmanaged<CallbackState>.fromOpaque(obj).takeUnretainedValue()
            let count = Int(max(0, m.payloadlen))
            let copy = count > 0 && count <= s.maxPayload && m.payload != nil
            let bytes: [UInt8] = copy ? Array(UnsafeRawBufferPointer(start: m.payload, count: count)) : []
            s.messages.append(Message(topic: String(cString: topic), payload: bytes, qos: Int(m.qos), retain: m.retain, size: count))
            s.bytes += bytes.count
        }
        mosquitto_publish_v5_callback_set(handle) { _, obj, mid, reason, _ in
            guard let obj else { return }
            Unmanaged<CallbackState>.fromOpaque(obj).takeUnretainedValue().events.append(.published(messageID: mid, reasonCode: Int(reason)))
        }
        mosquitto_subscribe_callback_set(handle) { _, obj, mid, count, granted in
            guard let obj else { return }
            let qos = (0..<Int(max(0, count))).map { Int(granted?[$0] ?? 128) }
            Unmanaged<CallbackState>.fromOpaque(obj).takeUnretainedValue().events.append(.subscribed(messageID: mid, grantedQoS: qos))
        }
        mosquitto_log_callback_set(handle) { _, obj, level, text in
            guard let obj, let text, level & Int32(MOSQ_LOG_ERR) != 0 else { return }
            Unmanaged<CallbackState>.fromOpaque(obj).takeUnretainedValue().lastError = String(cString: text)
        }
    }

    /// Connects (blocking: the name lookup, TCP and the TLS handshake) and sends CONNECT; the
    /// broker's answer comes as `.connected` or `.refused` from `read`. A second call reconnects
    /// to the same broker.
    public func connect() throws(MQTTError) {
        state.lastError = nil
        state.messages.removeAll()
        state.bytes = 0
        if state.everConnected {
            try check("mosquitto_reconnect", mosquitto_reconnect(handle))
        } else if options.protocolVersion == 5 && !options.cleanSession {
            var props: OpaquePointer? = nil
            defer { mosquitto_property_free_all(&props) }
            _ = mosquitto_property_add_int32(&props, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), options.sessionExpirySeconds)
            _ = mosquitto_property_add_int32(&props, Int32(MQTT_PROP_MAXIMUM_PACKET_SIZE.rawValue), UInt32(min(Int(UInt32.max), options.maxPayloadBytes + 65_536 + 16)))
            try check("mosquitto_connect", mosquitto_connect_bind_v5(handle, options.host, Int32(options.port), Int32(options.keepaliveSeconds), nil, props))
        } else if options.protocolVersion == 5 {
            var props: OpaquePointer? = nil
            defer { mosquitto_property_free_all(&props) }
            _ = mosquitto_property_add_int32(&props, Int32(MQTT_PROP_MAXIMUM_PACKET_SIZE.rawValue), UInt32(min(Int(UInt32.max), options.maxPayloadBytes + 65_536 + 16)))
            try check("mosquitto_connect", mosquitto_connect_bind_v5(handle, options.host, Int32(options.port), Int32(options.keepaliveSeconds), nil, props))
        } else {
            try check("mosquitto_connect", mosquitto_connect(handle, options.host, Int32(options.port), Int32(options.keepaliveSeconds)))
        }
        state.everConnected = true
        try flush()
    }

    /// Queues subscriptions (sent at the next `flush`); `.subscribed` comes from `read`. With MQTT
    /// 5 the broker sends retained messages only for a subscription it did not have yet (a
    /// resumed session's are not sent again on every reconnect).
    public func subscribe(_ filters: [(filter: String, qos: Int)]) throws(MQTTError) {
        for f in filters {
            var mid: Int32 = 0
            if options.protocolVersion == 5 {
                try check("mosquitto_subscribe_v5(\(f.filter))", mosquitto_subscribe_v5(handle, &mid, f.filter, Int32(f.qos), Int32(MQTT_SUB_OPT_SEND_RETAIN_NEW.rawValue), nil))
            } else {
                try check("mosquitto_subscribe(\(f.filter))", mosquitto_subscribe(handle, &mid, f.filter, Int32(f.qos)))
            }
        }
    }

    /// Queues a publish (sent at the next `flush`); returns its message id for `.published`.
    public func publish(topic: String, payload: [UInt8], qos: Int, retain: Bool) throws(MQTTError) -> Int32 {
        var mid: Int32 = 0
        let rc = payload.withUnsafeBytes { raw in
            mosquitto_publish(handle, &mid, topic, Int32(raw.count), raw.baseAddress, Int32(qos), retain)
        }
        try check("mosquitto_publish(\(topic))", rc)
        return mid
    }

    /// Waits up to `timeoutMillis` for the broker, then reads what it sent, up to about
    /// `maxMessages` messages or `maxBytes` of payload (libmosquitto may read a few more packets
    /// in one call). Their PUBACKs are queued, not sent: `flush()` sends them. Throws when the
    /// connection is gone; what was read before is dropped with the connection (its PUBACKs
    /// were not sent, so the broker sends it again).
    public func read(timeoutMillis: Int, maxMessages: Int, maxBytes: Int = 16 << 20) throws(MQTTError) -> [Message] {
        defer {
            state.messages.removeAll(keepingCapacity: true)
            state.bytes = 0
        }
        let fd = mosquitto_socket(handle)
        guard fd >= 0 else { throw MQTTError(call: "mosquitto_socket", code: MOSQ_ERR_NO_CONN.rawValue, detail: "not connected") }
        let revents: Int16
        do {
            revents = try SystemCall.poll(fd, Int16(POLLIN), timeoutMillis: timeoutMillis, "poll(mqtt \(options.host):\(options.port))")
        } catch {
            throw MQTTError(call: error.call, code: MOSQ_ERR_ERRNO.rawValue, detail: "\(error)")
        }
        if revents != 0 {
            var rounds = 0
            repeat {
                try check("mosquitto_loop_read", mosquitto_loop_read(handle, 1))
                rounds += 1
                if state.messages.count >= maxMessages || state.bytes >= maxBytes || rounds >= maxMessages * 4 { break }
                let more = (try? SystemCall.poll(fd, Int16(POLLIN), timeoutMillis: 0, "poll(mqtt)")) ?? 0
                if more == 0 || mosquitto_socket(handle) < 0 { break }
            } while true
        }
        return state.messages
    }

    /// Events since the last call (connects, refusals, disconnects, subscriptions, acknowledged publishes).
    public func takeEvents() -> [Event] {
        defer { state.events.removeAll(keepingCapacity: true) }
        return state.events
    }

    /// Writes everything queued (PUBACKs, publishes, subscriptions, pings), waiting up to
    /// `timeoutMillis` for the socket, and keeps the connection alive (PINGREQ when due).
    public func flush(timeoutMillis: Int = 5000) throws(MQTTError) {
        let deadline = ContinuousClock.now + .milliseconds(timeoutMillis)
        while mosquitto_want_write(handle) {
            let fd = mosquitto_socket(handle)
            guard fd >= 0 else { throw MQTTError(call: "mosquitto_socket", code: MOSQ_ERR_NO_CONN.rawValue, detail: "not connected") }
            let left = max(0, Int((deadline - .now) / .milliseconds(1)))
            let ready = (try? SystemCall.poll(fd, Int16(POLLOUT), timeoutMillis: min(left, 250), "poll(mqtt)")) ?? 0
            if ready != 0 { try check("mosquitto_loop_write", mosquitto_loop_write(handle, 1)) }
            if ContinuousClock.now >= deadline && mosquitto_want_write(handle) {
                throw MQTTError(call: "mosquitto_loop_write", code: MOSQ_ERR_KEEPALIVE.rawValue, detail: "the broker took nothing for \(timeoutMillis) ms")
            }
        }
        try check("mosquitto_loop_misc", mosquitto_loop_misc(handle))
        // loop_misc may queue a PINGREQ: send it now.
        if mosquitto_want_write(handle), mosquitto_socket(handle) >= 0 {
            try check("mosquitto_loop_write", mosquitto_loop_write(handle, 1))
        }
    }

    /// Drops the connection without writing what is queued (the PUBACKs of a batch that was not
    /// committed): the broker will send those messages again.
    public func abort() {
        let fd = mosquitto_socket(handle)
        if fd >= 0 { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
        _ = mosquitto_loop_read(handle, 1)
        state.messages.removeAll()
        state.bytes = 0
    }

    /// A clean DISCONNECT (sent at once).
    public func disconnect() {
        guard mosquitto_disconnect(handle) == MOSQ_ERR_SUCCESS.rawValue else { return }
        try? flush(timeoutMillis: 500)
    }

    public var isConnected: Bool { mosquitto_socket(handle) >= 0 }

    /// libmosquitto's last error line (an OpenSSL certificate error, for example), if any.
    public var lastLibraryError: String? { state.lastError }

    static func reason(_ rc: Int32) -> String {
        // 3.1.1 CONNACK codes are 1…5; MQTT 5 reason codes are 128 and up.
        rc < 128 ? String(cString: mosquitto_connack_string(rc)) : String(cString: mosquitto_reason_string(rc))
    }

    private func check(_ call: String, _ rc: Int32) throws(MQTTError) {
        guard rc != MOSQ_ERR_SUCCESS.rawValue else { return }
        var detail = rc == MOSQ_ERR_ERRNO.rawValue ? String(cString: strerror(errno))
            : rc == MOSQ_ERR_KEEPALIVE.rawValue ? "the broker did not answer within keepaliveSeconds (\(options.keepaliveSeconds) s)"
            : String(cString: mosquitto_strerror(rc))
        if let extra = state.lastError, rc == MOSQ_ERR_TLS.rawValue || rc == MOSQ_ERR_ERRNO.rawValue { detail += " (\(extra))" }
        throw MQTTError(call: call, code: rc, detail: detail)
    }

    /// What the C callbacks fill in; read and emptied by the owning thread between libmosquitto calls.
    private final class CallbackState {
        var messages: [Message] = []
        var events: [Event] = []
        var lastError: String?
        var everConnected = false
        var maxPayload = Int.max
        var bytes = 0
    }
}

/// A libmosquitto call that failed: which call, its code and libmosquitto's words for it.
public struct MQTTError: Error, Sendable, CustomStringConvertible {
    public let call: String
    public let code: Int32
    public let detail: String

    public var description: String { "\(call): \(detail)" }
    /// The connection is gone (reconnect); otherwise the call itself was refused (bad topic, …).
    public var isConnectionLost: Bool {
        [MOSQ_ERR_NO_CONN, MOSQ_ERR_CONN_LOST, MOSQ_ERR_ERRNO, MOSQ_ERR_KEEPALIVE, MOSQ_ERR_TLS, MOSQ_ERR_PROTOCOL, MOSQ_ERR_CONN_REFUSED, MOSQ_ERR_MALFORMED_PACKET]
            .map(\.rawValue).contains(code)
    }
}
