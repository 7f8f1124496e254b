import CMbedTLS
@testable import ShoalTLS
import Testing

/// The alert a refusal sends, and what the refused side reads from it.
@Suite("Refusal alerts")
struct RefusalAlertTests {
    /// The alert mbedTLS 2.28 sends for verify flags (ssl_tls.c, ssl_parse_certificate), for the
    /// flags `verifyFlags(for:)` sets.
    static func mbedTLSAlert(_ flags: UInt32) -> Int32 {
        if flags & UInt32(MBEDTLS_X509_BADCERT_OTHER) != 0 { return MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED }
        if flags & UInt32(MBEDTLS_X509_BADCERT_EXT_KEY_USAGE) != 0 { return MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT }
        if flags & UInt32(MBEDTLS_X509_BADCERT_EXPIRED) != 0 { return MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED }
        if flags & UInt32(MBEDTLS_X509_BADCERT_REVOKED) != 0 { return MBEDTLS_SSL_ALERT_MSG_CERT_REVOKED }
        if flags & UInt32(MBEDTLS_X509_BADCERT_NOT_TRUSTED) != 0 { return MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA }
        return MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN
    }

    @Test("a resumed session's refusal (judged after its handshake) sends the alert a full handshake's refusal sends: the refused side reads one reason (not yet valid was told as a bad signature)")
    func resumedRefusalAlertsMatch() {
        let refusals: [TLSError] = [
            .expired(peer: "p"), .notYetValid(peer: "p"), .unknownCA(peer: "p"), .badSignature(peer: "p"),
            .wrongKeyUsage(peer: "p", missing: "clientAuth"), .notInAllowList(peer: "p"), .rejectedByAuthenticator(peer: "p"), .revoked(peer: "p"),
        ]
        for error in refusals {
            let resumed = TLSSession.alert(for: error)
            let full = Self.mbedTLSAlert(TLSSession.verifyFlags(for: error))
            #expect(resumed == full, "\(error): a resumed session sends alert \(resumed) (\(TLSError.refusal(UInt8(resumed)))), a full handshake \(full) (\(TLSError.refusal(UInt8(full))))")
        }
        #expect(TLSError.refusal(UInt8(TLSSession.alert(for: .notYetValid(peer: "p")))).contains("not valid yet"))
        // A revoked peer reads that it is revoked (it was told "not in allowedPeers" on a full handshake).
        #expect(TLSSession.verifyFlags(for: .revoked(peer: "p")) == UInt32(MBEDTLS_X509_BADCERT_REVOKED))
        #expect(TLSError.refusal(UInt8(TLSSession.alert(for: .revoked(peer: "p")))).contains("revoked"))
    }
}
