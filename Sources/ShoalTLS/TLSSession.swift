import CMbedTLS
import Glibc
import ShoalCore

/// A TLS session over a `ByteStream`, handed out only after the peer was verified. One thread
/// at a time may use a session (mbedTLS contexts are not safe for concurrent read and write).
public final class TLSSession: @unchecked Sendable {  // an mbedTLS session, used by its link's thread alone
    let ssl: UnsafeMutablePointer<mbedtls_ssl_context>
    let io: BIO
    let context: TLSContext
    /// The configuration it started with (the certificate it presented): mbedTLS points at it.
    let configuration: TLSConfiguration
    public let peerCertificate: Certificate
    /// True if this session resumed an earlier one instead of doing a full handshake.
    public let resumed: Bool
    private var isClosed = false

    /// The peer's id (of its certificate's key), computed once at the handshake.
    public let peerID: PeerID
    public var role: TLSRole { context.role }

    /// The state the send/receive callbacks see: the stream and the deadline of the current call.
    final class BIO {
        let stream: any ByteStream
        var deadline = 0
        var failure: StreamError?
        init(stream: any ByteStream) { self.stream = stream }
        var remaining: Int { max(0, deadline - monotonicMillis()) }
    }

    static let send: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int) -> Int32 = { ctx, buf, len in
        let bio = Unmanaged<BIO>.fromOpaque(ctx!).takeUnretainedValue()
        do throws(StreamError) {
            let n = try bio.stream.write(UnsafeRawBufferPointer(start: buf, count: len), timeoutMillis: max(1, bio.remaining))
            return Int32(n)
        } catch {
            bio.failure = error
            return error == .timeout ? MBEDTLS_ERR_SSL_TIMEOUT : MBEDTLS_ERR_NET_CONN_RESET
        }
    }

    static let receive: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<UInt8>?, Int, UInt32) -> Int32 = { ctx, buf, len, _ in
        let bio = Unmanaged<BIO>.fromOpaque(ctx!).takeUnretainedValue()
        let left = bio.remaining
        if left <= 0 { return MBEDTLS_ERR_SSL_TIMEOUT }
        do throws(StreamError) {
            return Int32(try bio.stream.read(into: UnsafeMutableRawBufferPointer(start: buf, count: len), timeoutMillis: left))
        } catch {
            bio.failure = error
            return error == .timeout ? MBEDTLS_ERR_SSL_TIMEOUT : MBEDTLS_ERR_NET_CONN_RESET
        }
    }

    /// Connects as the TLS client, optionally resuming `saved`. Verifies the server before returning.
    public static func connect(over stream: any ByteStream, context: TLSContext, resuming saved: TLSSavedSession? = nil) throws(TLSError) -> TLSSession {
        guard context.role == .client else { throw .invalidRequest("connect needs a client context") }
        return try TLSSession(stream: stream, context: context, saved: saved)
    }

    /// Accepts as the TLS server. Verifies the client before returning.
    public static func accept(over stream: any ByteStream, context: TLSContext) throws(TLSError) -> TLSSession {
        guard context.role == .server else { throw .invalidRequest("accept needs a server context") }
        return try TLSSession(stream: stream, context: context, saved: nil)
    }

    private init(ssl: UnsafeMutablePointer<mbedtls_ssl_context>, io: BIO, context: TLSContext, configuration: TLSConfiguration, peer: Certificate, resumed: Bool) {
        self.ssl = ssl
        self.io = io
        self.context = context
        self.configuration = configuration
        self.peerCertificate = peer
        self.peerID = peer.peerID
        self.resumed = resumed
    }

    private convenience init(stream: any ByteStream, context: TLSContext, saved: TLSSavedSession?) throws(TLSError) {
        let io = BIO(stream: stream)
        let ssl = UnsafeMutablePointer<mbedtls_ssl_context>.allocate(capacity: 1)
        mbedtls_ssl_init(ssl)
        do {
            let configuration = try context.configuration()
            let (peer, resumed) = try TLSSession.handshake(ssl, io: io, context: context, configuration: configuration, saved: saved)
            self.init(ssl: ssl, io: io, context: context, configuration: configuration, peer: peer, resumed: resumed)
        } catch {
            mbedtls_ssl_free(ssl)
            ssl.deallocate()
            // We refused them: let them read our alert before the stream closes (closing with their
            // last handshake messages unread would reset the connection, and the alert with it).
            if case .refusedByPeer = error {} else if error.isRefusal { TLSSession.linger(stream) }
            stream.close()
            throw error
        }
    }

    /// Reads and drops what the peer still sends, until it closes or `millis` passed.
    static func linger(_ stream: any ByteStream, millis: Int = 500) {
        let until = monotonicMillis() + millis
        var scratch = [UInt8](repeating: 0, count: 4096)
        while monotonicMillis() < until {
            let n = scratch.withUnsafeMutableBytes { raw in (try? stream.read(into: raw, timeoutMillis: max(1, until - monotonicMillis()))) ?? 0 }
            if n == 0 { return }
        }
    }

    /// A fatal alert the peer sent in the clear before closing, that mbedTLS never read because
    /// writing our own handshake messages failed first (the peer had closed). Waits briefly.
    static func pendingAlert(_ stream: any ByteStream, millis: Int = 300) -> UInt8? {
        let until = monotonicMillis() + millis
        var bytes: [UInt8] = []
        var scratch = [UInt8](repeating: 0, count: 2048)
        while bytes.count < 16 * 1024 && monotonicMillis() < until {
            let n = scratch.withUnsafeMutableBytes { raw in (try? stream.read(into: raw, timeoutMillis: max(1, until - monotonicMillis()))) ?? 0 }
            if n == 0 { break }
            bytes += scratch[0..<n]
        }
        // Records: type, version (2), length (2), body. An alert's body is level, description.
        var at = 0
        while at + 5 <= bytes.count {
            let length = Int(bytes[at + 3]) << 8 | Int(bytes[at + 4])
            if bytes[at] == UInt8(MBEDTLS_SSL_MSG_ALERT), length == 2, at + 7 <= bytes.count,
               bytes[at + 5] == UInt8(MBEDTLS_SSL_ALERT_LEVEL_FATAL) {
                return bytes[at + 6]
            }
            at += 5 + length
        }
        return nil
    }

    /// What the check inside the handshake found: the peer's chain and, if the authenticator
    /// refused it, why. Lives for one handshake; mbedTLS holds it unretained.
    final class Verification {
        let authenticator: PeerAuthenticator
        var certificate: Certificate?
        var refusal: TLSError?
        init(authenticator: PeerAuthenticator) { self.authenticator = authenticator }
    }

    /// mbedTLS's verify callback, once per certificate of the peer's chain, the leaf (depth 0)
    /// last. The authenticator judges the whole chain at the leaf; the flags it leaves are what
    /// mbedTLS turns into the alert the refused peer reads (expired, unknown CA, access denied).
    static let verifyPeer: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<mbedtls_x509_crt>?, Int32, UnsafeMutablePointer<UInt32>?) -> Int32 = { ctx, crt, depth, flags in
        guard let ctx, let crt, let flags else { return MBEDTLS_ERR_X509_BAD_INPUT_DATA }
        let verification = Unmanaged<Verification>.fromOpaque(ctx).takeUnretainedValue()
        guard depth == 0 else { flags.pointee = 0; return 0 }
        do throws(TLSError) {
            let certificate = try Certificate(copying: crt)
            verification.certificate = certificate
            try verification.authenticator.verify(certificate)
            flags.pointee = 0
        } catch {
            verification.refusal = error
            flags.pointee = TLSSession.verifyFlags(for: error)
        }
        return 0
    }

    /// Runs the handshake within the context's timeout. The peer is judged inside it (the verify
    /// callback), so a refused peer's handshake fails with our alert and it learns why; a resumed
    /// session shows no certificate, and is judged after. Nothing of the application's is read or
    /// written before this returns.
    static func handshake(_ ssl: UnsafeMutablePointer<mbedtls_ssl_context>, io: BIO, context: TLSContext, configuration: TLSConfiguration,
                          saved: TLSSavedSession?) throws(TLSError) -> (Certificate, Bool) {
        do {
            try MbedTLS.check(mbedtls_ssl_setup(ssl, configuration.config), "mbedtls_ssl_setup")
            if let saved { try MbedTLS.check(mbedtls_ssl_set_session(ssl, saved.session), "mbedtls_ssl_set_session") }
        } catch {
            throw .mbedTLS(error)
        }
        let verification = Verification(authenticator: context.authenticator)
        mbedtls_ssl_set_bio(ssl, Unmanaged.passUnretained(io).toOpaque(), TLSSession.send, nil, TLSSession.receive)
        mbedtls_ssl_set_verify(ssl, TLSSession.verifyPeer, Unmanaged.passUnretained(verification).toOpaque())
        io.deadline = monotonicMillis() + context.handshakeTimeoutMillis
        while true {
            let rc = withExtendedLifetime(verification) { mbedtls_ssl_handshake(ssl) }
            if rc == 0 { break }
            if rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE { continue }
            // We refused them (mbedTLS sent the alert), or they refused us (their alert says why).
            if let refusal = verification.refusal { throw refusal }
            if rc == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE, let alert = TLSSession.receivedAlert(ssl) {
                throw TLSSession.refused(by: verification.certificate?.peerID.description, alert: alert)
            }
            if (rc == MBEDTLS_ERR_NET_CONN_RESET || rc == MBEDTLS_ERR_SSL_CONN_EOF) && io.failure != .timeout,
               let alert = TLSSession.pendingAlert(io.stream) {
                throw TLSSession.refused(by: verification.certificate?.peerID.description, alert: alert)
            }
            throw TLSSession.handshakeError(rc, io.failure)
        }
        mbedtls_ssl_set_verify(ssl, nil, nil)
        // mbedTLS fails the handshake on the flags a refusal leaves ("required" mode); should a
        // change of mode or library let one through, the refusal still stands.
        if let refusal = verification.refusal { throw refusal }
        if let certificate = verification.certificate {
            return (certificate, false)
        }
        // Resumed: no certificate crossed, so the callback did not run; judge the session's peer now.
        guard let peer = mbedtls_ssl_get_peer_cert(ssl) else {
            mbedtls_ssl_send_alert_message(ssl, UInt8(MBEDTLS_SSL_ALERT_LEVEL_FATAL), UInt8(MBEDTLS_SSL_ALERT_MSG_NO_CERT))
            throw .noPeerCertificate
        }
        let certificate = try Certificate(copying: peer)
        do {
            try context.authenticator.verify(certificate)
        } catch {
            mbedtls_ssl_send_alert_message(ssl, UInt8(MBEDTLS_SSL_ALERT_LEVEL_FATAL), UInt8(TLSSession.alert(for: error)))
            throw error
        }
        var resumed = false
        if let saved, let current = ssl.pointee.session, current.pointee.id_len > 0 {
            resumed = current.pointee.id_len == saved.session.pointee.id_len
                && withUnsafeBytes(of: current.pointee.id) { a in withUnsafeBytes(of: saved.session.pointee.id) { b in a.elementsEqual(b) } }
        }
        return (certificate, resumed)
    }

    /// The description byte of the fatal alert mbedTLS just read (it stays in `in_msg`).
    static func receivedAlert(_ ssl: UnsafeMutablePointer<mbedtls_ssl_context>) -> UInt8? {
        guard ssl.pointee.in_msgtype == MBEDTLS_SSL_MSG_ALERT, let message = ssl.pointee.in_msg, ssl.pointee.in_msglen >= 2 else { return nil }
        return message[1]
    }

    /// A fatal alert from the peer: a refusal of our certificate (typed, with what to do), or a
    /// protocol error for any other alert.
    static func refused(by peer: String?, alert: UInt8) -> TLSError {
        let certificateAlerts: Set<Int32> = [
            MBEDTLS_SSL_ALERT_MSG_NO_CERT, MBEDTLS_SSL_ALERT_MSG_BAD_CERT, MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT,
            MBEDTLS_SSL_ALERT_MSG_CERT_REVOKED, MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED, MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN,
            MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA, MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED,
        ]
        guard certificateAlerts.contains(Int32(alert)) else {
            return .protocolError("the peer ended the handshake with TLS alert \(alert); check its log for why")
        }
        return .refusedByPeer(peer: peer, alert: alert)
    }

    /// The verify flags that make mbedTLS send the alert that names a refusal's reason.
    static func verifyFlags(for error: TLSError) -> UInt32 {
        switch error {
        case .expired: UInt32(MBEDTLS_X509_BADCERT_EXPIRED)
        case .notYetValid: UInt32(MBEDTLS_X509_BADCERT_FUTURE)
        case .unknownCA, .badSignature: UInt32(MBEDTLS_X509_BADCERT_NOT_TRUSTED)
        case .wrongKeyUsage: UInt32(MBEDTLS_X509_BADCERT_EXT_KEY_USAGE)
        case .revoked: UInt32(MBEDTLS_X509_BADCERT_REVOKED)
        default: UInt32(MBEDTLS_X509_BADCERT_OTHER)
        }
    }

    deinit {
        close()
        mbedtls_ssl_free(ssl)
        ssl.deallocate()
    }

    /// The same alert as a full handshake's refusal sends (mbedTLS's for `verifyFlags(for:)`), so the
    /// refused side reads one reason either way.
    static func alert(for error: TLSError) -> Int32 {
        switch error {
        case .expired: MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED
        case .notYetValid: MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN
        case .unknownCA, .badSignature: MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA
        case .wrongKeyUsage: MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT
        case .notInAllowList, .rejectedByAuthenticator: MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED
        case .revoked: MBEDTLS_SSL_ALERT_MSG_CERT_REVOKED
        default: MBEDTLS_SSL_ALERT_MSG_BAD_CERT
        }
    }

    static func handshakeError(_ rc: Int32, _ failure: StreamError?) -> TLSError {
        switch rc {
        case MBEDTLS_ERR_SSL_TIMEOUT: return .timeout
        case MBEDTLS_ERR_SSL_CONN_EOF, MBEDTLS_ERR_NET_CONN_RESET:
            if failure == .timeout { return .timeout }
            return .closedDuringHandshake
        case MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE: return .protocolError("the peer ended the handshake with a fatal alert; check its log for why")
        case MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE: return .noPeerCertificate
        case MBEDTLS_ERR_SSL_BAD_HS_CERTIFICATE:
            return .badCertificate("the peer's certificate message could not be parsed, or its key usage does not allow ECDSA signatures (digitalSignature)")
        default:
            if rc & 0x7F80 != 0 && -rc >= 0x2000 && -rc < 0x3000 { return .badCertificate(MbedTLS.describe(rc)) }
            return .protocolError(MbedTLS.describe(rc))
        }
    }

    /// Reads application data: the count read, 0 when the peer closed (close_notify or end of
    /// stream). Throws `.timeout` if nothing came within `timeoutMillis`.
    public func read(into buffer: UnsafeMutableRawBufferPointer, timeoutMillis: Int) throws(TLSError) -> Int {
        guard !isClosed else { throw .closed }
        io.deadline = monotonicMillis() + timeoutMillis
        while true {
            let rc = mbedtls_ssl_read(ssl, buffer.baseAddress?.assumingMemoryBound(to: UInt8.self), buffer.count)
            if rc > 0 { return Int(rc) }
            if rc == 0 || rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || rc == MBEDTLS_ERR_SSL_CONN_EOF { return 0 }
            if rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE { continue }
            if rc == MBEDTLS_ERR_SSL_TIMEOUT { throw .timeout }
            if rc == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE, let alert = TLSSession.receivedAlert(ssl) {
                // A resumed session the peer judged after the handshake, and refused.
                throw TLSSession.refused(by: peerID.description, alert: alert)
            }
            if rc == MBEDTLS_ERR_NET_CONN_RESET {
                // The stream ended: closed (end of stream), or broken (an I/O error, said as one).
                if case .failed(let why)? = io.failure { throw .io(why) }
                return 0
            }
            throw .protocolError(MbedTLS.describe(rc))
        }
    }

    /// Writes all of `bytes` as application data.
    public func write(_ bytes: UnsafeRawBufferPointer, timeoutMillis: Int) throws(TLSError) {
        guard !isClosed else { throw .closed }
        io.deadline = monotonicMillis() + timeoutMillis
        var offset = 0
        while offset < bytes.count {
            let rc = mbedtls_ssl_write(ssl, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self) + offset, bytes.count - offset)
            if rc > 0 { offset += Int(rc); continue }
            if rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE { continue }
            if rc == MBEDTLS_ERR_SSL_TIMEOUT { throw .timeout }
            if rc == MBEDTLS_ERR_NET_CONN_RESET {
                if case .failed(let why)? = io.failure { throw .io(why) }
                throw .closed
            }
            throw .protocolError(MbedTLS.describe(rc))
        }
    }

    public func write(_ bytes: [UInt8], timeoutMillis: Int) throws(TLSError) {
        let result: Result<Void, TLSError> = bytes.withUnsafeBytes { raw in
            do throws(TLSError) { try write(raw, timeoutMillis: timeoutMillis); return .success(()) } catch { return .failure(error) }
        }
        try result.get()
    }

    /// Sends close_notify (best effort, 1 s at most) and closes the stream.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        io.deadline = monotonicMillis() + 1000
        _ = mbedtls_ssl_close_notify(ssl)
        io.stream.close()
    }

    /// The session's keys and id, to resume it on the next connection to the same peer.
    public func save() -> TLSSavedSession? {
        let saved = TLSSavedSession()
        guard mbedtls_ssl_get_session(ssl, saved.session) == 0 else { return nil }
        return saved
    }
}

/// A session a client may resume (mbedTLS's session struct, owned).
public final class TLSSavedSession: @unchecked Sendable {  // an mbedTLS saved session, immutable once saved
    let session = UnsafeMutablePointer<mbedtls_ssl_session>.allocate(capacity: 1)
    init() { mbedtls_ssl_session_init(session) }
    deinit {
        mbedtls_ssl_session_free(session)
        session.deallocate()
    }
}
