import ShoalCore
import CMbedTLS
import ShoalThreads

public enum TLSRole: Sendable { case client, server }

/// One side's TLS settings, shared by every session of that role: TLS 1.2 only, ECDHE-ECDSA with
/// AES-GCM or ChaCha20-Poly1305, our identity as the certificate we present, the authenticator
/// that judges peers, and (server side) a session cache so a flaky link can resume instead of
/// doing a full handshake again.
///
/// What a reader gets wrong: mbedTLS's own certificate verdict is replaced, not trusted. Each
/// session's verify callback (TLSSession) hands the peer's chain to the authenticator inside the
/// handshake, on both sides, every time, and sets mbedTLS's flags from its verdict ("required"
/// mode: a refusal fails the handshake with an alert that tells the refused peer why). mbedTLS
/// 2.28 checks no host name unless told to, and peers have no host names. A resumed session
/// shows no certificate and is judged after the handshake; a session is handed to the caller
/// only once the check passed.
///
/// The certificate it presents comes from its `TLSCredentials`: when they are given a renewed
/// certificate, the next handshake sets up a new mbedTLS configuration with it; a session keeps
/// the configuration it started with.
public final class TLSContext: @unchecked Sendable {  // mbedTLS configs, read-only once made (made under the lock; the cache locks itself)
    public let role: TLSRole
    public let credentials: TLSCredentials
    public let authenticator: PeerAuthenticator
    public let handshakeTimeoutMillis: Int
    let cache: UnsafeMutablePointer<mbedtls_ssl_cache_context>?
    let random: RandomSource
    private let configured: Locked<TLSConfiguration>

    /// The identity the next handshake presents.
    public var identity: Identity { credentials.identity }

    /// The cipher suites, zero-terminated; mbedTLS keeps the pointer, so it lives for the process.
    /// ChaCha20-Poly1305 comes first: the Pi 4 and older Pis have no AES instructions, and even on
    /// x86 with AES-NI, mbedTLS 2.28's GCM is slower (`shoal bench tls`: 173 vs 111 MB/s here).
    nonisolated(unsafe) static let cipherSuites: UnsafeMutablePointer<Int32> = {
        let suites: [Int32] = [
            Int32(MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
            Int32(MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
            Int32(MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384), 0,
        ]
        let p = UnsafeMutablePointer<Int32>.allocate(capacity: suites.count)
        p.initialize(from: suites, count: suites.count)
        return p
    }()

    /// Key exchange groups, preferred first (X25519 is cheaper than P-256 in mbedTLS 2.28).
    nonisolated(unsafe) static let curves: UnsafeMutablePointer<mbedtls_ecp_group_id> = {
        let list: [mbedtls_ecp_group_id] = [MBEDTLS_ECP_DP_CURVE25519, MBEDTLS_ECP_DP_SECP256R1, MBEDTLS_ECP_DP_NONE]
        let p = UnsafeMutablePointer<mbedtls_ecp_group_id>.allocate(capacity: list.count)
        p.initialize(from: list, count: list.count)
        return p
    }()

    public convenience init(role: TLSRole, identity: Identity, authenticator: PeerAuthenticator, handshakeTimeoutMillis: Int = 10_000) throws(TLSError) {
        try self.init(role: role, credentials: TLSCredentials(identity), authenticator: authenticator, handshakeTimeoutMillis: handshakeTimeoutMillis)
    }

    public init(role: TLSRole, credentials: TLSCredentials, authenticator: PeerAuthenticator, handshakeTimeoutMillis: Int = 10_000) throws(TLSError) {
        self.role = role
        self.credentials = credentials
        self.authenticator = authenticator
        self.handshakeTimeoutMillis = handshakeTimeoutMillis
        do { random = try RandomSource(personalization: role == .client ? "shoal-tls-client" : "shoal-tls-server") } catch { throw .mbedTLS(error) }
        if role == .server {
            let c = UnsafeMutablePointer<mbedtls_ssl_cache_context>.allocate(capacity: 1)
            mbedtls_ssl_cache_init(c)
            mbedtls_ssl_cache_set_max_entries(c, 64)
            mbedtls_ssl_cache_set_timeout(c, 3600)
            cache = c
        } else {
            cache = nil
        }
        let first: TLSConfiguration
        do { first = try TLSConfiguration(role: role, identity: credentials.identity, random: random, cache: cache) } catch {
            if let cache { mbedtls_ssl_cache_free(cache); cache.deallocate() }
            throw error
        }
        configured = Locked(first)
    }

    /// The mbedTLS configuration for a handshake starting now: made again when the credentials
    /// present another certificate than the one it was made with.
    func configuration() throws(TLSError) -> TLSConfiguration {
        let identity = credentials.identity
        let result: Result<TLSConfiguration, TLSError> = configured.withLock { current in
            if current.identity === identity { return .success(current) }
            do throws(TLSError) {
                current = try TLSConfiguration(role: role, identity: identity, random: random, cache: cache)
                return .success(current)
            } catch { return .failure(error) }
        }
        return try result.get()
    }

    deinit {
        if let cache {
            mbedtls_ssl_cache_free(cache)
            cache.deallocate()
        }
    }
}
