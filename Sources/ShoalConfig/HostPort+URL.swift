/// The `host[:port]` part of a server url (`mqtt://`, `nats://`), shared by the MQTT bridge and
/// the uplink so both read hosts, ports and IPv6 brackets alike.
extension HostPort {
    /// `rest` is what follows `scheme://`. A trailing `/` is allowed; a path, a query or a user is
    /// not. `scheme`, `what` (broker, server) and `example` go into the errors.
    static func parseURLAuthority(_ text: Substring, defaultPort: UInt16, scheme: String, what: String, example: String) -> Result<HostPort, MQTTSyntaxError> {
        var rest = text
        if rest.hasSuffix("/") { rest.removeLast() }
        let v6 = "\(scheme)://[::1]:\(defaultPort)"
        if rest.contains("@") {
            return .failure(MQTTSyntaxError("no user or password in the url: write username: and passwordFile: beside it"))
        }
        if rest.contains("/") || rest.contains("?") {
            return .failure(MQTTSyntaxError("a \(what) url has no path or query, \(example)"))
        }
        guard !rest.isEmpty, !rest.hasPrefix(":") else { return .failure(MQTTSyntaxError("the url names no host, \(example)")) }
        // Split off the port: after "]" for IPv6, else after the only ':'.
        var hostPart = rest
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return .failure(MQTTSyntaxError("an IPv6 address with no closing ']', e.g. \(v6)")) }
            hostPart = rest[...close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return .failure(MQTTSyntaxError("expected :port after the address, e.g. \(v6)")) }
                portText = after.dropFirst()
            }
        } else if let colon = rest.firstIndex(of: ":") {
            guard rest[rest.index(after: colon)...].firstIndex(of: ":") == nil else {
                return .failure(MQTTSyntaxError("an IPv6 address is written in brackets, e.g. \(v6)"))
            }
            hostPart = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        }
        var port = defaultPort
        if let portText {
            guard let p = UInt16(portText), p != 0 else {
                return .failure(MQTTSyntaxError("\"\(portText.prefix(20))\" is not a port; a port is 1 to 65535, \(example)"))
            }
            port = p
        }
        guard let hp = HostPort(parsing: "\(hostPart):\(port)") else {
            return .failure(MQTTSyntaxError("\"\(hostPart.prefix(60))\" is not a host name or address, \(example)"))
        }
        return .success(hp)
    }
}
