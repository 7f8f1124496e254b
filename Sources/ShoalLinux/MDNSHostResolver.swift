import CAvahi
import Glibc
import ShoalCore

/// Resolves a `.local` host name through avahi-daemon, for systems whose resolver cannot (no
/// nss-mdns in /etc/nsswitch.conf). One blocking question with a deadline, on the caller's thread
/// (a transport's own, never the cooperative pool): its own simple poll and client, freed before
/// it returns. Without a running avahi-daemon it fails at once and says so.
public enum MDNSHostResolver {
    /// The numeric address of `name` (link-local IPv6 with `%interface`), or why there is none.
    public static func resolve(_ name: String, timeoutMillis: Int = 3000) throws(NameLookupError) -> String {
        guard let poll = avahi_simple_poll_new() else { throw NameLookupError(host: name, reason: "avahi: out of memory") }
        defer { avahi_simple_poll_free(poll) }
        var error: Int32 = 0
        guard let client = avahi_client_new(avahi_simple_poll_get(poll), AvahiClientFlags(0), { _, _, _ in }, nil, &error) else {
            throw NameLookupError(host: name, reason: "avahi-daemon is not running (\(String(cString: avahi_strerror(error)))); a .local name needs it, or nss-mdns")
        }
        defer { avahi_client_free(client) }
        let answer = Answer()
        let user = Unmanaged.passUnretained(answer).toOpaque()
        let resolver = avahi_host_name_resolver_new(client, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), name, AvahiProtocol(AVAHI_PROTO_UNSPEC), AvahiLookupFlags(0), {
            _, interface, _, event, _, address, _, user in
            guard let user else { return }
            let answer = Unmanaged<Answer>.fromOpaque(user).takeUnretainedValue()
            guard event == AVAHI_RESOLVER_FOUND, let address else {
                answer.failure = "avahi-daemon found no host by that name on the link"
                return
            }
            var buffer = [CChar](repeating: 0, count: 64)
            avahi_address_snprint(&buffer, buffer.count, address)
            var host = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if host.lowercased().hasPrefix("fe80:") {
                var ifname = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
                if if_indextoname(UInt32(bitPattern: interface), &ifname) != nil {
                    host += "%" + String(decoding: ifname.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                }
            }
            answer.address = host
        }, user)
        guard let resolver else {
            throw NameLookupError(host: name, reason: "avahi: \(String(cString: avahi_strerror(avahi_client_errno(client))))")
        }
        defer { avahi_host_name_resolver_free(resolver) }
        let deadline = monotonicMillis() + timeoutMillis
        while answer.address == nil && answer.failure == nil {
            let left = deadline - monotonicMillis()
            guard left > 0 else { throw NameLookupError(host: name, reason: "avahi-daemon had no answer within \(timeoutMillis) ms") }
            if avahi_simple_poll_iterate(poll, Int32(clamping: left)) != 0 { break }
        }
        guard let address = answer.address else { throw NameLookupError(host: name, reason: answer.failure ?? "avahi: the poll loop failed") }
        return address
    }

    /// What the callback found; lives on the resolving thread only.
    private final class Answer {
        var address: String?
        var failure: String?
    }
}
