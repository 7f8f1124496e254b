import CMbedTLS

/// One mbedTLS configuration: the context's settings with one certificate to present. Sessions
/// hold the one they started with (mbedTLS keeps a pointer to it for the session's life).
final class TLSConfiguration: @unchecked Sendable {  // an mbedTLS config, read-only after set-up
    let identity: Identity
    let config = UnsafeMutablePointer<mbedtls_ssl_config>.allocate(capacity: 1)
    let caChain: Certificate

    init(role: TLSRole, identity: Identity, random: RandomSource, cache: UnsafeMutablePointer<mbedtls_ssl_cache_context>?) throws(TLSError) {
        self.identity = identity
        // mbedTLS wants a CA chain configured. Giving it our own leaf (never a CA) means it finds
        // no parent and spends no signature check on a verdict the verify callback replaces; the
        // authenticator checks the chain once, in that callback (TLSSession.verifyPeer).
        caChain = identity.certificate
        mbedtls_ssl_config_init(config)
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
            mbedtls_ssl_config_free(config)
            config.deallocate()
            throw .mbedTLS(error)
        }
    }

    deinit {
        mbedtls_ssl_config_free(config)
        config.deallocate()
    }
}
