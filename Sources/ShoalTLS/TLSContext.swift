import ShoalCore
import CMbedTLS

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
public final class TLSContext: @unchecked Sendable {  // an mbedTLS config, read-only after set-up (its cache locks itself)
    public let role: TLSRole
    public let identity: Identity
    public let authenticator: PeerAuthenticator
    public let handshakeTimeoutMillis: Int
    let config = UnsafeMutablePointer<mbedtls_ssl_config>.allocate(capacity: 1)
    let cache: UnsafeMutablePointer<mbedtls_ssl_cache_context>?
    let random: RandomSource
    let caChain: Certificate

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

    public init(role: TLSRole, identity: Identity, authenticator: PeerAuthenticator, handshakeTimeoutMillis: Int = 10_000) throws(TLSError) {
        self.role = role
        self.identity = identity
        self.authenticator = authenticator
        self.handshakeTimeoutMillis = handshakeTimeoutMillis
        do { random = try RandomSource(personalization: role == .client ? "shoal-tls-client" : "shoal-tls-server") } catch { throw .mbedTLS(error) }
        // mbedTLS wants a CA chain configured. Giving it our own leaf (never a CA) means it finds
        // no parent and spends no signature check on a verdict the verify callback replaces; the
        // authenticator checks the chain once, in that callback.
        caChain = identity.certificate
        mbedtls_ssl_config_init(config)
        if role == .server {
            let c = UnsafeMutablePointer<mbedtls_ssl_cache_context>.allocate(capacity: 1)
            mbedtls_ssl_cache_init(c)
            mbedtls_ssl_cache_set_max_entries(c, 64)
            mbedtls_ssl_cache_set_timeout(c, 3600)
            cache = c
        } else {
            cache = nil
        }
        do {
            try MbedTLS.check(mbedtls_ssl_config_defaults(config, role == .client ? MBEDTLS_SSL_IS_CLIENT : MBEDTLS_SSL_IS_SERVER,
                                                          MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT), "mbedtls_ssl_config_defaults")
            mbedtls_ssl_conf_rng(config, mbedtls_ctr_drbg_random, random.drbg)
            mbedtls_ssl_conf_authmode(config, MBEDTLS_SSL_VERIFY_REQUIRED)
            mbedtls_ssl_conf_ca_chain(config, caChain.chain, nil)
            try MbedTLS.check(mbedtls_ssl_conf_own_cert(config, identity.certificate.chain, identity.key.context), "mbedtls_ssl_conf_own_cert")
            mbedtls_ssl_conf_ciphersuites(config, TLSContext.cipherSuites)
            mbedtls_ssl_conf_curves(config, TLSContext.curves)
            mbedtls_ssl_conf_min_version(config, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3)
            mbedtls_ssl_conf_max_version(config, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3)
            if let cache { mbedtls_ssl_conf_session_cache(config, cache, mbedtls_ssl_cache_get, mbedtls_ssl_cache_set) }
        } catch {
            throw .mbedTLS(error)
        }
    }

    deinit {
        mbedtls_ssl_config_free(config)
        config.deallocate()
        if let cache {
            mbedtls_ssl_cache_free(cache)
            cache.deallocate()
        }
    }
}
