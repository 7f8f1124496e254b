import ShoalCore

/// Reading `uplink:` out of the site file, every key to its end so one mistake does not hide the
/// next, each error at its key (`uplink.servers[1]`, `uplink.collections[0].pushFilter.peers`).
/// What a reader would get wrong: without `collections:` every collection of the site syncs with
/// the hub both ways; `collections: []` means none does.
extension UplinkSettings {
    /// At most this many servers (a cluster's other members are learned from the server).
    public static let maxServers = 32

    /// `collections`: the site's collections; every listed one must be among them.
    mutating func apply(_ r: inout ConfigReader, collections: [CollectionName]) throws(ConfigError) {
        var errors = ConfigErrors()
        var files: [MQTTFileReference] = []
        errors.attempt { () throws(ConfigError) in servers = try UplinkSettings.readServers(&r) }
        errors.attempt { () throws(ConfigError) in
            if let n = try r.int("replicas", in: Int64(UplinkSettings.replicasRange.lowerBound)...Int64(UplinkSettings.replicasRange.upperBound)) {
                replicas = Int(n)
            }
        }
        errors.attempt { () throws(ConfigError) in
            // A JetStream domain: the hub's JetStream seen through a leaf node at the site.
            guard let d = try r.string("domain") else { return }
            guard !d.isEmpty, d.utf8.count <= 64,
                  d.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x5F || $0 == 0x2D }) else {
                throw ConfigError(mark: r.mark(of: "domain"), key: r.keyPath("domain"),
                                  message: "\"\(d.prefix(64))\" is not a JetStream domain (1 to 64 of A-Z a-z 0-9 _ -: the hub's `jetstream { domain: … }`)")
            }
            domain = d
        }
        errors.attempt { () throws(ConfigError) in try readLogin(&r, files: &files) }
        errors.attempt { () throws(ConfigError) in
            guard var t = try r.mapping("tls") else { return }
            let read = try MQTTTLSSettings.read(&t, files: &files, insecureAllowed: false, caExample: "/etc/shoal/hub-ca.pem")
            var tls = UplinkTLSSettings()
            (tls.caFile, tls.identity, tls.certFile, tls.keyFile) = (read.caFile, read.identity, read.certFile, read.keyFile)
            self.tls = tls
        }
        errors.attempt { () throws(ConfigError) in
            guard var t = try r.mapping("reconnect") else { return }
            (reconnectMinMillis, reconnectMaxMillis) = try MQTTBroker.readReconnect(&t)
        }
        var listed = false
        errors.attempt { () throws(ConfigError) in
            guard let list = try r.sequence("collections") else { return }
            listed = true
            self.collections = try UplinkSettings.readCollections(list, path: r.keyPath("collections"), known: collections)
        }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
        if useTLS && tls == nil { tls = UplinkTLSSettings() }
        if !listed && enabled { self.collections = collections.map { UplinkCollection(name: $0) } }
        referencedFiles = files
    }

    /// `servers:`, a list or a single string, each normalised to `scheme://host:port`.
    static func readServers(_ r: inout ConfigReader) throws(ConfigError) -> [String] {
        guard let n = r.raw("servers") else { return [] }
        let items: [(ConfigNode, String)]
        switch n.value {
        case .scalar: items = [(n, r.keyPath("servers"))]
        case .sequence(let list): items = list.enumerated().map { ($1, r.keyPath("servers[\($0)]")) }
        default:
            throw ConfigError(mark: n.mark, key: r.keyPath("servers"),
                              message: "expected a server url or a list of them, e.g. servers: [nats://10.0.0.5:4222, nats://10.0.0.6:4222]")
        }
        guard items.count <= maxServers else {
            throw ConfigError(mark: n.mark, key: r.keyPath("servers"),
                              message: "\(items.count) servers; at most \(maxServers) (name a few of the cluster's: the others are learned from them)")
        }
        var errors = ConfigErrors()
        var servers: [(url: String, mark: SourceMark)] = []
        for (item, key) in items {
            errors.attempt { () throws(ConfigError) in
                guard case .scalar(let text, _) = item.value else {
                    throw ConfigError(mark: item.mark, key: key, message: "expected a server url, found \(item.kindName), e.g. nats://10.0.0.5:4222")
                }
                let url: String
                switch parseServer(text) {
                case .success(let u): url = u
                case .failure(let why): throw ConfigError(mark: item.mark, key: key, message: why.reason)
                }
                if let other = servers.first(where: { $0.url.dropScheme == url.dropScheme }) {
                    throw ConfigError(mark: item.mark, key: key,
                                      message: "\(other.url) is listed twice (line \(other.mark.line)); name each server once")
                }
                if let other = servers.first(where: { $0.url.scheme != url.scheme }) {
                    throw ConfigError(mark: item.mark, key: key,
                                      message: "\(url) and \(other.url) mix nats:// and tls://; the connection to every server is TLS or none is: write them all one way (tls:// for TLS)")
                }
                servers.append((url, item.mark))
            }
        }
        try errors.check()
        return servers.map(\.url)
    }

    /// `nats://host[:port]` or `tls://host[:port]` (port 4222 by default; IPv6 in brackets), as
    /// `nats://host:port`; a host name in lower case.
    static func parseServer(_ text: String) -> Result<String, MQTTSyntaxError> {
        let example = "e.g. nats://10.0.0.5:4222 or tls://hub.example.com:4222"
        guard let sep = text.firstRange(of: "://") else {
            return .failure(MQTTSyntaxError("\"\(text.prefix(60))\" is not a server url; expected nats://host[:port] or tls://host[:port], \(example)"))
        }
        let scheme = text[..<sep.lowerBound].lowercased()
        guard scheme == "nats" || scheme == "tls" else {
            let hint = scheme == "tcp" ? " (tcp:// is written nats:// here)" : scheme == "ssl" || scheme == "nats+tls" ? " (\(scheme):// is written tls:// here)" : ""
            return .failure(MQTTSyntaxError("\"\(scheme.prefix(20))://\" is not supported\(hint); expected nats:// or tls://, \(example)"))
        }
        switch HostPort.parseURLAuthority(text[sep.upperBound...], defaultPort: defaultPort, scheme: scheme, what: "server", example: example) {
        case .failure(let why): return .failure(why)
        case .success(var hp):
            // Names and IPv6 digits are case-blind; an IPv6 zone (an interface name) is not.
            let zone = hp.host.firstIndex(of: "%").map { String(hp.host[$0...]) } ?? ""
            hp.host = hp.host.prefix { $0 != "%" }.lowercased() + zone
            return .success("\(scheme)://\(hp)")
        }
    }

    /// username/passwordFile, credentialsFile, nkey/nkeySeedFile: one way to log in, or none.
    mutating func readLogin(_ r: inout ConfigReader, files: inout [MQTTFileReference]) throws(ConfigError) {
        var errors = ConfigErrors()
        errors.attempt { () throws(ConfigError) in username = try r.nonEmpty("username", example: "username: gw1") }
        let fileKeys: [(String, MQTTFileReference.Kind, WritableKeyPath<UplinkSettings, String?>, String)] = [
            ("passwordFile", .passwordFile, \.passwordFile, "passwordFile: /etc/shoal/hub.pass"),
            ("credentialsFile", .credentialsFile, \.credentialsFile, "credentialsFile: /etc/shoal/hub.creds"),
            ("nkeySeedFile", .nkeySeedFile, \.nkeySeedFile, "nkeySeedFile: /etc/shoal/hub.nk"),
        ]
        for (key, kind, path, example) in fileKeys {
            errors.attempt { () throws(ConfigError) in
                guard let text = try r.nonEmpty(key, example: example) else { return }
                self[keyPath: path] = text
                files.append(MQTTFileReference(kind: kind, path: text, key: r.keyPath(key), mark: r.mark(of: key)))
            }
        }
        errors.attempt { () throws(ConfigError) in
            guard let key = try r.nonEmpty("nkey", example: "nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4") else { return }
            if let why = UplinkSettings.nkeyProblem(key) {
                throw ConfigError(mark: r.mark(of: "nkey"), key: r.keyPath("nkey"), message: why)
            }
            nkey = key
        }
        try errors.check()
        if passwordFile != nil && username == nil {
            errors.add(ConfigError(mark: r.mark(of: "passwordFile"), key: r.keyPath("passwordFile"),
                                   message: "a password needs a user: add username (e.g. username: gw1)"))
        }
        if (nkey == nil) != (nkeySeedFile == nil) {
            let (has, lacks) = nkey == nil ? ("nkeySeedFile", "nkey") : ("nkey", "nkeySeedFile")
            errors.add(ConfigError(mark: r.mark(of: has), key: r.keyPath(lacks),
                                   message: "NKey authentication needs both nkey (the user's public key, U…) and nkeySeedFile (the file holding its seed, SU…); \(lacks) is missing"))
        }
        let ways = [("username", username), ("credentialsFile", credentialsFile), ("nkey", nkey)]
            .filter { $0.1 != nil }.map(\.0).sorted { r.mark(of: $0).line < r.mark(of: $1).line }
        if ways.count > 1, let last = ways.last {
            errors.add(ConfigError(mark: r.mark(of: last), key: r.keyPath(last),
                                   message: "\(ways.joined(separator: " and ")) are \(ways.count == 2 ? "two" : "three") ways to log in; choose one: username (with passwordFile), credentialsFile, or nkey (with nkeySeedFile)"))
        }
        try errors.check()
    }

    /// Why `key` is not a user's public NKey (`U` and 55 more of base32 A-Z 2-7), nil when it is.
    static func nkeyProblem(_ key: String) -> String? {
        let base32 = key.utf8.allSatisfy { (0x41...0x5A).contains($0) || (0x32...0x37).contains($0) }
        if key.utf8.count == 56, key.hasPrefix("U"), base32 { return nil }
        if key.hasPrefix("SU") {
            return "this is a seed, a secret: write it to a file and name that with nkeySeedFile; nkey is the user's public key (U…, `nk -inkey FILE -pubout` prints it)"
        }
        return "\"\(key.prefix(60))\" is not a user's public NKey: 56 characters of A-Z and 2-7 starting with U (`nk -inkey FILE -pubout` prints it)"
    }

    /// `collections:` — each a collection of the site, once, with push/pull and filters.
    static func readCollections(_ list: [ConfigNode], path: String, known: [CollectionName]) throws(ConfigError) -> [UplinkCollection] {
        var errors = ConfigErrors()
        var out: [UplinkCollection] = []
        for (i, item) in list.enumerated() {
            errors.attempt { () throws(ConfigError) in
                var r = try ConfigReader(item, path: "\(path)[\(i)]")
                let c = try UplinkCollection.read(&r, known: known)
                if out.contains(where: { $0.name == c.name }) {
                    throw ConfigError(mark: r.mark(of: "name"), key: r.keyPath("name"),
                                      message: "\(c.name) is listed twice; give each collection one entry (push, pull and both filters)")
                }
                out.append(c)
            }
        }
        try errors.check()
        return out
    }
}

extension UplinkCollection {
    static let peersRefused = "the hub is not a peer: peers: applies to mesh filters only; filter by idPrefix, field or fieldIn here"

    static func read(_ r: inout ConfigReader, known: [CollectionName]) throws(ConfigError) -> UplinkCollection {
        var errors = ConfigErrors()
        let name = errors.value { () throws(ConfigError) in
            let text = try r.required("name", example: "name: sensors.state")
            let name: CollectionName
            do throws(NameError) { name = try CollectionName(parsing: text) } catch {
                throw ConfigError(mark: r.mark(of: "name"), key: r.keyPath("name"), message: error.reason)
            }
            guard known.contains(name) else {
                throw ConfigError(mark: r.mark(of: "name"), key: r.keyPath("name"),
                                  message: "\(name) is not a collection of the site file (its collections: \(known.map(\.description).joined(separator: ", "))); add \"- name: \(name)\" under collections: or remove it here")
            }
            return name
        }
        var c = UplinkCollection(name: name ?? .default)
        errors.attempt { () throws(ConfigError) in c.push = try r.bool("push") ?? true }
        errors.attempt { () throws(ConfigError) in c.pull = try r.bool("pull") ?? true }
        errors.attempt { () throws(ConfigError) in c.pushFilter = try r.filterSpec("pushFilter", peersRefused: peersRefused) }
        errors.attempt { () throws(ConfigError) in c.pullFilter = try r.filterSpec("pullFilter", peersRefused: peersRefused) }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
        return c
    }
}

private extension String {
    var scheme: Substring { prefix { $0 != ":" } }
    var dropScheme: Substring { firstRange(of: "://").map { self[$0.upperBound...] } ?? self[...] }
}
