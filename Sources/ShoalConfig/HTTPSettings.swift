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
            guard let items = try r.sequence("listen") else { return }
            var out: [HostPort] = []
            var bad = ConfigErrors()
            for (i, item) in items.enumerated() {
                guard case .scalar(let text, _) = item.value, let hp = HostPort(parsing: text), !hp.isName else {
                    bad.add(ConfigError(mark: item.mark, key: "http.listen[\(i)]", message: "expected a numeric address:port (127.0.0.1:8470, 0.0.0.0:8470, [::]:8470)"))
                    continue
                }
                out.append(hp)
            }
            try bad.check()
            listen = out
        }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
    }
}
