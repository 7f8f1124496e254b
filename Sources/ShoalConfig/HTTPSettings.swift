/// The site file's `http:` section: where the local API (REST, SSE, /metrics, the web console)
/// listens and how much it takes. Loopback and the Unix socket by default; any other address
/// needs the bearer token (`shoal http token`).
public struct HTTPSettings: Sendable, Equatable {
    public var enabled = true
    public var listen: [HostPort] = [HTTPSettings.defaultAddress]
    /// `<data dir>/http.sock`, mode 0660 like the control socket.
    public var unixSocket = true
    public var maxConnections: Int64 = 256
    public var maxConnectionsPerAddress: Int64 = 64
    public var connectionTimeoutSeconds: Int64 = 30

    public static let defaultPort: UInt16 = 8470
    public static let defaultAddress = HostPort(host: "127.0.0.1", port: defaultPort)

    public init() {}

    /// 127.0.0.0/8 and ::1: the addresses that need no token.
    public static func isLoopback(_ address: HostPort) -> Bool {
        if address.isIPv6 { return address.host == "::1" }
        return address.host.split(separator: ".").first == "127"
    }

    mutating func apply(_ r: inout ConfigReader) throws(ConfigError) {
        var errors = ConfigErrors()
        errors.attempt { () throws(ConfigError) in if let b = try r.bool("enabled") { enabled = b } }
        errors.attempt { () throws(ConfigError) in if let b = try r.bool("unixSocket") { unixSocket = b } }
        errors.attempt { () throws(ConfigError) in if let n = try r.int("maxConnections", in: 1...100_000) { maxConnections = n } }
        errors.attempt { () throws(ConfigError) in if let n = try r.int("maxConnectionsPerAddress", in: 1...100_000) { maxConnectionsPerAddress = n } }
        errors.attempt { () throws(ConfigError) in if let n = try r.int("connectionTimeoutSeconds", in: 1...3600) { connectionTimeoutSeconds = n } }
        errors.attempt { () throws(ConfigError) in
            guard let node = r.raw("listen") else { return }
            // One address may be written alone, as replication.listen is.
            let single: Bool
            let items: [ConfigNode]
            switch node.value {
            case .scalar: (single, items) = (true, [node])
            case .sequence(let list): (single, items) = (false, list)
            default: throw ConfigError(mark: node.mark, key: "http.listen", message: "expected a list of address:port, e.g. [\"127.0.0.1:8470\"]")
            }
            var out: [HostPort] = []
            var bad = ConfigErrors()
            for (i, item) in items.enumerated() {
                let key = single ? "http.listen" : "http.listen[\(i)]"
                guard case .scalar(let text, _) = item.value, let hp = HostPort(parsing: text), !hp.isName else {
                    bad.add(ConfigError(mark: item.mark, key: key, message: "expected a numeric address:port (127.0.0.1:8470, 0.0.0.0:8470, [::]:8470)"))
                    continue
                }
                guard !out.contains(hp) else {
                    bad.add(ConfigError(mark: item.mark, key: key, message: "\(hp) is listed twice"))
                    continue
                }
                out.append(hp)
            }
            try bad.check()
            listen = out
        }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
        if enabled && listen.isEmpty && !unixSocket {
            throw ConfigError(mark: r.mark(of: "unixSocket"), key: "http.unixSocket",
                              message: "with no listen address and no Unix socket the API would be reachable nowhere; set enabled: false to turn it off")
        }
    }
}
