import Glibc
import ShoalCore
import ShoalSupervision
import ShoalTLS

/// Keeps the gateway's identity: finds it by the site's label in `<storage>/identities`, creates a
/// self-signed one on first boot, renews a self-signed one a day before it expires (half its
/// lifetime before, for one valid less than two days), and re-reads the files every minute (so
/// `shoal identity create --force` takes effect without a restart).
/// Renewal keeps the key, so the peer id — what other gateways' `allowedPeers` name — stays the
/// same; only the certificate's dates (and serial) change. A CA-signed identity cannot be renewed
/// without the CA's key: when it nears expiry the service says so in the log and in `shoal
/// status`, and the operator re-issues it. A broken key file is reported the same way and never
/// replaced: replacing it would change the peer id that other gateways trust. The gateway keeps
/// running on its store either way.
///
/// It provides the identity to the services started after it (replication) as `TLSCredentials`.
/// A certificate renewed or re-issued over the same key is handed to the running replication
/// through them: new links present it, open links carry on, nothing restarts. When a look finds a
/// usable identity with another peer id (first made usable, re-created with `--new-key`), it
/// provides new credentials and returns: the supervisor (rest_for_one) starts it again and those
/// after it, which take them. A look that fails keeps what was provided, so a briefly unreadable
/// file does not stop replication.
struct IdentityService: Service {
    let gateway: Gateway
    let provides: Provision<TLSCredentials>
    /// Seconds since the epoch, the wall clock that decides expiry (a test's can be set past it).
    var now: @Sendable () -> Int64 = { Identity.now() }

    func run(context: ServiceContext) async throws {
        let label = gateway.site.identityLabel
        var credentials: TLSCredentials?
        var ready = false
        repeat {
            context.heartbeat()
            let outcome = await look()
            switch outcome {
            case .success(let (identity, note)):
                report(identity, note)
                if let current = credentials, current.peerID == identity.peerID {
                    if current.identity.certificate.der != identity.certificate.der {
                        try? current.present(identity)  // same peer id: cannot fail
                        gateway.logger.info(.tls, "identity \(label): new links present the certificate valid until \(IdentityText.date(identity.certificate.notAfter)); peer id \(identity.peerID.short) unchanged, links stay up")
                    }
                } else {
                    gateway.logger.info(.tls, "identity \(label): peer id \(identity.peerID), valid until \(IdentityText.date(identity.certificate.notAfter))")
                    let before = credentials?.peerID
                    let fresh = TLSCredentials(identity)
                    credentials = fresh
                    provides.provide(fresh)
                    if ready {
                        gateway.logger.info(.tls, "identity \(label) changed (peer id \(before.map { $0.short } ?? "none") → \(identity.peerID.short)); restarting replication with it")
                        return
                    }
                }
            case .failure(let error):
                gateway.setIdentity(nil, problem: "identity \(label) in \(gateway.identityDirectory): \(error)")
                gateway.logger.error(.tls, "identity \(label) in \(gateway.identityDirectory) unusable: \(error); fix or delete it (`shoal identity delete`), nothing was replaced")
            }
            context.markReady()
            ready = true
        } while await context.pause(for: .seconds(60))
    }

    /// One look at the files, on the work thread: the identity as found, made, or renewed.
    func look() async -> Result<(Identity, IdentityOutcome), TLSError> {
        let store = IdentityStore(directory: gateway.identityDirectory)
        let label = gateway.site.identityLabel
        let days = Int(gateway.site.identityValidDays)
        let commonName = IdentityDefaults.commonName(label: label)
        let now = now()
        return (try? await gateway.workThread.run { () -> Result<(Identity, IdentityOutcome), TLSError> in
            do throws(TLSError) {
                if let existing = try store.find(label) {
                    if now + IdentityService.renewalMargin(validDays: days) < existing.certificate.notAfter { return .success((existing, .kept)) }
                    if !existing.isSelfSigned {
                        let state = now >= existing.certificate.notAfter ? "has expired" : "expires within a day"
                        return .success((existing, .problem("CA-signed identity \(label) \(state); re-issue it with `shoal identity create --force --ca-key … --ca-cert …` (it keeps the key and the peer id)")))
                    }
                    let renewed = try existing.renewed(validDays: days, now: now)
                    try store.save(renewed, label: label)
                    return .success((renewed, .renewed(previousNotAfter: existing.certificate.notAfter)))
                }
                let fresh = try Identity.createSelfSigned(.init(commonName: commonName, notBefore: now - 3600, validDays: days))
                try store.save(fresh, label: label)
                return .success((fresh, .created))
            } catch {
                return .failure(error)
            }
        }) ?? .failure(.io("the work thread is overloaded"))
    }

    /// How long before its end a certificate is renewed: a day, or half the lifetime a renewal
    /// gives (`identity.validDays`) when that is shorter — a renewed one-day certificate (valid
    /// from an hour ago) ends within a day, and would otherwise be renewed at every look. It is
    /// the site's lifetime, not the certificate's, that counts: a short certificate made by hand
    /// on a gateway whose site says 365 days is renewed in its last day like any other.
    static func renewalMargin(validDays: Int) -> Int64 {
        min(86_400, Int64(max(0, validDays)) * 86_400 / 2)
    }

    func report(_ identity: Identity, _ note: IdentityOutcome) {
        let label = gateway.site.identityLabel
        switch note {
        case .kept:
            gateway.setIdentity(identity, problem: nil)
        case .created:
            gateway.setIdentity(identity, problem: nil)
            gateway.logger.info(.tls, "created identity \(label) in \(gateway.identityDirectory): peer id \(identity.peerID)")
        case .renewed(let previous):
            gateway.setIdentity(identity, problem: nil)
            gateway.logger.info(.tls, "renewed identity \(label) over the same key (peer id \(identity.peerID) unchanged): valid until \(IdentityText.date(previous)) → \(IdentityText.date(identity.certificate.notAfter))")
        case .problem(let why):
            gateway.setIdentity(identity, problem: why)
            gateway.logger.error(.tls, why)
        }
    }
}

/// Dates as people read them in the field: UTC, to the second; an identity as `shoal identity
/// show --json` and the control socket give it.
public enum IdentityText {
    public static func json(_ identity: Identity, label: String, directory: String, now: Int64 = Identity.now()) -> JSONValue {
        let c = identity.certificate
        return [
            "label": .string(label), "directory": .string(directory), "peerID": .string(identity.peerID.description),
            "subject": .string(c.subject), "issuer": .string(c.issuer),
            "notBefore": .string(date(c.notBefore)), "notAfter": .string(date(c.notAfter)),
            "expired": .bool(identity.isExpired(now: now)),
            "extendedKeyUsages": .array(c.extendedKeyUsages.map { .string($0) }),
        ]
    }

    public static func date(_ epoch: Int64) -> String {
        let days = epoch >= 0 ? epoch / 86_400 : (epoch - 86_399) / 86_400
        let secs = epoch - days * 86_400
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        func two(_ v: Int64) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(y)-\(two(m))-\(two(d)) \(two(secs / 3600)):\(two(secs % 3600 / 60)):\(two(secs % 60)) UTC"
    }

    /// The same instant in this machine's time zone (TZ, else /etc/localtime), with its zone's
    /// abbreviation: "2026-12-02 04:39:27 CET". Falls back to UTC if the zone cannot be read.
    public static func localDate(_ epoch: Int64) -> String {
        var t = time_t(epoch)
        var parts = tm()
        guard localtime_r(&t, &parts) != nil else { return date(epoch) }
        var buffer = [CChar](repeating: 0, count: 64)
        let n = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S %Z", &parts)
        guard n > 0 else { return date(epoch) }
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

public enum IdentityDefaults {
    /// The common name a gateway gives its own certificate: its host name when that is a plain
    /// name, else `shoal-<label>`.
    public static func commonName(label: String) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        if gethostname(&buffer, buffer.count) == 0 {
            let host = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if !host.isEmpty, host.count <= 64, host.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." }) { return host }
        }
        return "shoal-\(label)"
    }
}

/// What the identity service found at one look: the identity kept as it is, a new one created
/// (first boot), a self-signed one renewed over its key, or one it cannot fix by itself.
enum IdentityOutcome: Sendable {
    case kept
    case created
    case renewed(previousNotAfter: Int64)
    case problem(String)
}
