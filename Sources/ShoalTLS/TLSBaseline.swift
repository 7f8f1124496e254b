import CMbedTLS
import ShoalCore

/// mbedTLS itself, without Shoal's wrapper: the baseline of `shoal bench tls` (the benchmark lives
/// in ShoalBench; the bare calls stay here, in the one importer of mbedTLS).
extension TLSSession {
    /// The negotiated cipher suite's name.
    public var cipherSuite: String { String(cString: mbedtls_ssl_get_ciphersuite(ssl)) }

    /// Sets the I/O deadline the session's stream callbacks use (monotonic milliseconds).
    public func setDeadline(_ millis: Int) { io.deadline = millis }

    /// One bare `mbedtls_ssl_write`: the bytes taken, nil when mbedTLS wants I/O first (try again).
    public func bareWrite(_ bytes: UnsafeRawBufferPointer) throws(TLSError) -> Int? {
        let rc = mbedtls_ssl_write(ssl, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        if rc == MBEDTLS_ERR_SSL_WANT_WRITE || rc == MBEDTLS_ERR_SSL_WANT_READ { return nil }
        guard rc > 0 else { throw .protocolError(MbedTLS.describe(rc)) }
        return Int(rc)
    }

    /// One bare `mbedtls_ssl_read`: the bytes read, nil when mbedTLS wants I/O first (try again).
    public func bareRead(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> Int? {
        let rc = mbedtls_ssl_read(ssl, buffer.baseAddress?.assumingMemoryBound(to: UInt8.self), buffer.count)
        if rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE { return nil }
        guard rc > 0 else { throw .protocolError(MbedTLS.describe(rc)) }
        return Int(rc)
    }
}
