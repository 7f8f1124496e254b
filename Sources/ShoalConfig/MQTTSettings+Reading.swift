import ShoalCore

/// Reading `mqtt:` out of the site file: every broker and rule is read to its end so one mistake
/// does not hide the next, and each error names its key (`mqtt.brokers[0].inbound[1].topic`).
extension MQTTSettings {
    /// `collections`: the site's collections; every rule's collection must be one of them.
    mutating func apply(_ r: inout ConfigReader, collections: [CollectionName]) throws(ConfigError) {
        var errors = ConfigErrors()
        errors.attempt { () throws(ConfigError) in
            guard let items = try r.sequence("brokers") else { return }
            var bad = ConfigErrors()
            for (i, item) in items.enumerated() {
                bad.attempt { () throws(ConfigError) in
                    var b = try ConfigReader(item, path: r.keyPath("brokers[\(i)]"))
                    var files: [MQTTFileReference] = []
                    let broker = try MQTTBroker.read(&b, collections: collections, files: &files)
                    if let other = brokers.first(where: { $0.name == broker.name }) {
                        throw ConfigError(mark: b.mark(of: "name"), key: b.keyPath("name"),
                                          message: "\"\(other.name)\" is listed twice; each broker has a name of its own (it names the child root/mqtt/<name>)")
                    }
                    if let explicit = broker.clientID,
                       let other = brokers.first(where: { $0.host == broker.host && $0.port == broker.port && $0.clientID == explicit }) {
                        throw ConfigError(mark: b.mark(of: "clientId"), key: b.keyPath("clientId"),
                                          message: "broker \"\(other.name)\" connects to \(broker.host):\(broker.port) as \"\(explicit)\" too; the broker would drop one each time the other connects: give each its own clientId")
                    }
                    brokers.append(broker)
                    referencedFiles += files
                }
            }
            try bad.check()
        }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
    }
}

extension MQTTBroker {
    static func read(_ r: inout ConfigReader, collections: [CollectionName], files: inout [MQTTFileReference]) throws(ConfigError) -> MQTTBroker {
        var errors = ConfigErrors()
        var broker = MQTTBroker(name: "", host: "")
        var urlRead = false
        errors.attempt { () throws(ConfigError) in
            let name = try r.required("name", example: "name: local")
            guard MQTTBroker.isValidName(name) else {
                throw ConfigError(mark: r.mark(of: "name"), key: r.keyPath("name"),
                                  message: "\"\(name.prefix(40))\": a broker's name is 1 to 32 of a-z, 0-9 and '-' (e.g. local, cloud-eu)")
            }
            broker.name = name
        }
        errors.attempt { () throws(ConfigError) in
            let text = try r.required("url", example: "url: mqtt://127.0.0.1:1883")
            switch MQTTBroker.parseURL(text) {
            case .success(let u): (broker.host, broker.port, broker.useTLS) = (u.host, u.port, u.tls)
            case .failure(let why): throw ConfigError(mark: r.mark(of: "url"), key: r.keyPath("url"), message: why.reason)
            }
            urlRead = true
        }
        errors.attempt { () throws(ConfigError) in
            if let v = try r.choice("protocol", as: MQTTProtocolVersion.self) { broker.protocolVersion = v }
        }
        errors.attempt { () throws(ConfigError) in
            guard let id = try r.string("clientId") else { return }
            guard (1...MQTTBroker.maxClientIDBytes).contains(id.utf8.count), !id.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
                throw ConfigError(mark: r.mark(of: "clientId"), key: r.keyPath("clientId"),
                                  message: "a client id is 1 to \(MQTTBroker.maxClientIDBytes) bytes with no control characters (e.g. shoal-gw1); leave it out for one made from the peer id")
            }
            broker.clientID = id
        }
        errors.attempt { () throws(ConfigError) in
            if let n = try r.int("keepaliveSeconds", in: MQTTBroker.keepaliveRange) { broker.keepaliveSeconds = n }
        }
        errors.attempt { () throws(ConfigError) in if let b = try r.bool("cleanSession") { broker.cleanSession = b } }
        errors.attempt { () throws(ConfigError) in broker.username = try r.nonEmpty("username", example: "username: shoal") }
        errors.attempt { () throws(ConfigError) in
            guard let path = try r.nonEmpty("passwordFile", example: "passwordFile: /etc/shoal/mqtt.pass") else { return }
            broker.passwordFile = path
            files.append(MQTTFileReference(kind: .passwordFile, path: path, key: r.keyPath("passwordFile"), mark: r.mark(of: "passwordFile")))
        }
        errors.attempt { () throws(ConfigError) in
            guard var t = try r.mapping("tls") else { return }
            broker.tls = try MQTTTLSSettings.read(&t, files: &files)
        }
        errors.attempt { () throws(ConfigError) in
            guard var t = try r.mapping("reconnect") else { return }
            (broker.reconnectMinMillis, broker.reconnectMaxMillis) = try MQTTBroker.readReconnect(&t)
        }
        errors.attempt { () throws(ConfigError) in
            broker.inbound = try r.list("inbound") { (item, path) throws(ConfigError) in
                var rr = try ConfigReader(item, path: path)
                return try MQTTInboundRule.read(&rr, collections: collections)
            }
        }
        errors.attempt { () throws(ConfigError) in
            broker.outbound = try r.list("outbound") { (item, path) throws(ConfigError) in
                var rr = try ConfigReader(item, path: path)
                return try MQTTOutboundRule.read(&rr, collections: collections)
            }
        }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        if broker.passwordFile != nil && broker.username == nil {
            errors.add(ConfigError(mark: r.mark(of: "passwordFile"), key: r.keyPath("passwordFile"),
                                   message: "a password needs a user: add username (e.g. username: shoal)"))
        }
        if urlRead {
            if broker.tls != nil && !broker.useTLS {
                errors.add(ConfigError(mark: r.mark(of: "tls"), key: r.keyPath("tls"),
                                       message: "tls: needs an mqtts:// url (mqtt:// is plain TCP), e.g. url: mqtts://\(broker.host):8883"))
            } else if broker.useTLS && broker.tls == nil {
                broker.tls = MQTTTLSSettings()
            }
        }
        if errors.isEmpty && broker.inbound.isEmpty && broker.outbound.isEmpty {
            errors.add(ConfigError(mark: r.node.mark, key: r.path,
                                   message: "broker \"\(broker.name)\" has no inbound and no outbound rules, so it would do nothing: add a rule under inbound: or outbound:, or remove it"))
        }
        try errors.check()
        return broker
    }

    static func readReconnect(_ r: inout ConfigReader) throws(ConfigError) -> (Int64, Int64) {
        var errors = ConfigErrors()
        var (low, high): (Int64, Int64) = (500, 30_000)
        errors.attempt { () throws(ConfigError) in if let n = try r.int("minMillis", in: 10...600_000) { low = n } }
        errors.attempt { () throws(ConfigError) in if let n = try r.int("maxMillis", in: 10...3_600_000) { high = n } }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
        guard low <= high else {
            throw ConfigError(mark: r.mark(of: "maxMillis"), key: r.keyPath("maxMillis"),
                              message: "\(high) is below minMillis (\(low)); the wait between tries grows from minMillis to maxMillis, e.g. { minMillis: 500, maxMillis: 30000 }")
        }
        return (low, high)
    }

    /// `mqtt://host[:port]` or `mqtts://host[:port]`; an IPv6 address in brackets.
    static func parseURL(_ text: String) -> Result<(host: String, port: UInt16, tls: Bool), MQTTSyntaxError> {
        let example = "e.g. mqtt://127.0.0.1:1883 or mqtts://broker.example.com:8883"
        guard let sep = text.firstRange(of: "://") else {
            return .failure(MQTTSyntaxError("\"\(text.prefix(60))\" is not a broker url; expected mqtt://host[:port] or mqtts://host[:port], \(example)"))
        }
        let tls: Bool
        switch text[..<sep.lowerBound].lowercased() {
        case "mqtt": tls = false
        case "mqtts": tls = true
        case let other:
            let hint = other == "tcp" ? " (tcp:// is written mqtt:// here)" : other == "ssl" || other == "tls" ? " (\(other):// is written mqtts:// here)" : ""
            return .failure(MQTTSyntaxError("\"\(other)://\" is not supported\(hint); expected mqtt:// or mqtts://, \(example)"))
        }
        let defaultPort = tls ? MQTTBroker.defaultTLSPort : MQTTBroker.defaultPort
        switch HostPort.parseURLAuthority(text[sep.upperBound...], defaultPort: defaultPort, scheme: tls ? "mqtts" : "mqtt", what: "broker", example: example) {
        case .success(let hp): return .success((hp.host, hp.port, tls))
        case .failure(let why): return .failure(why)
        }
    }
}

extension MQTTTLSSettings {
    /// Also the uplink's `tls:` (`insecureAllowed` false: there `insecure` is an unknown key;
    /// `caExample` names its CA file in the examples).
    static func read(_ r: inout ConfigReader, files: inout [MQTTFileReference], insecureAllowed: Bool = true,
                     caExample: String = "/etc/shoal/mqtt-ca.pem") throws(ConfigError) -> MQTTTLSSettings {
        var errors = ConfigErrors()
        var tls = MQTTTLSSettings()
        let pathKeys: [(String, MQTTFileReference.Kind, WritableKeyPath<MQTTTLSSettings, String?>, String)] = [
            ("caFile", .caFile, \.caFile, "caFile: \(caExample)"),
            ("certFile", .certFile, \.certFile, "certFile: /etc/shoal/client.pem"),
            ("keyFile", .keyFile, \.keyFile, "keyFile: /etc/shoal/client.key"),
        ]
        for (key, kind, path, example) in pathKeys {
            errors.attempt { () throws(ConfigError) in
                guard let text = try r.nonEmpty(key, example: example) else { return }
                tls[keyPath: path] = text
                files.append(MQTTFileReference(kind: kind, path: text, key: r.keyPath(key), mark: r.mark(of: key)))
            }
        }
        errors.attempt { () throws(ConfigError) in if let b = try r.bool("identity") { tls.identity = b } }
        if insecureAllowed {
            errors.attempt { () throws(ConfigError) in if let b = try r.bool("insecure") { tls.insecure = b } }
        }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
        if (tls.certFile == nil) != (tls.keyFile == nil) {
            let (has, lacks) = tls.certFile == nil ? ("keyFile", "certFile") : ("certFile", "keyFile")
            throw ConfigError(mark: r.mark(of: has), key: r.keyPath(lacks),
                              message: "a client certificate needs both certFile and keyFile (or identity: true for the gateway's own); \(lacks) is missing")
        }
        if tls.identity && tls.certFile != nil {
            throw ConfigError(mark: r.mark(of: "identity"), key: r.keyPath("identity"),
                              message: "identity: true presents the gateway's own certificate; leave out certFile and keyFile, or set identity: false")
        }
        return tls
    }
}

extension MQTTInboundRule {
    static func read(_ r: inout ConfigReader, collections: [CollectionName]) throws(ConfigError) -> MQTTInboundRule {
        var errors = ConfigErrors()
        let filter = errors.value { () throws(ConfigError) in
            let text = try r.required("topic", example: "topic: sensors/+site/+device/state")
            do throws(MQTTSyntaxError) { return try MQTTTopicFilter(parsing: text) } catch {
                throw ConfigError(mark: r.mark(of: "topic"), key: r.keyPath("topic"), message: error.reason)
            }
        }
        let collection = errors.value { () throws(ConfigError) in try r.listedCollection(collections) }
        let id = errors.value { () throws(ConfigError) in
            let template = try r.template("id", example: "id: \"{site}-{device}\"")
            guard let filter else { return template }
            let allowed = filter.names + [MQTTTopicFilter.topicPlaceholder]
            if let unknown = template.placeholders.first(where: { !allowed.contains($0) }) {
                let names = filter.names.isEmpty ? "it names no wildcard" : "its names: " + filter.names.joined(separator: ", ")
                throw ConfigError(mark: r.mark(of: "id"), key: r.keyPath("id"),
                                  message: "{\(unknown)} is not a name in the topic filter \(filter.text) (\(names); {topic} is the whole topic); name a level with +\(unknown) or #\(unknown)")
            }
            return template
        }
        let mode = errors.value { () throws(ConfigError) in try r.choice("mode", as: MQTTInboundMode.self) ?? .replace }
        let payload = errors.value { () throws(ConfigError) in try r.choice("payload", as: MQTTPayloadFormat.self) ?? .json }
        let topicFields = errors.value { () throws(ConfigError) in try r.bool("topicFields") ?? false }
        let timeField = errors.value { () throws(ConfigError) in try r.nonEmpty("timeField", example: "timeField: ts") }
        let keep = errors.value { () throws(ConfigError) in try r.int("keep", in: MQTTInboundRule.keepRange) }
        let qos = errors.value { () throws(ConfigError) in try r.qos() }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        if let mode, mode != .series {
            for (key, given) in [("timeField", (timeField ?? nil) != nil), ("keep", (keep ?? nil) != nil)] where given {
                errors.add(ConfigError(mark: r.mark(of: key), key: r.keyPath(key),
                                       message: "\(key) is for mode: series only (this rule's mode is \(mode.rawValue)); remove it or set mode: series"))
            }
        }
        try errors.check()
        // No error: every value is there.
        guard let filter, let collection, let id, let mode, let payload, let topicFields, let timeField, let keep, let qos else {
            preconditionFailure("a rule read without errors lacks a value")
        }
        return MQTTInboundRule(filter: filter, collection: collection, id: id, mode: mode, payload: payload, topicFields: topicFields,
                               timeField: timeField, keep: keep ?? MQTTInboundRule.defaultKeep, qos: qos)
    }
}

extension MQTTOutboundRule {
    static func read(_ r: inout ConfigReader, collections: [CollectionName]) throws(ConfigError) -> MQTTOutboundRule {
        var errors = ConfigErrors()
        let collection = errors.value { () throws(ConfigError) in try r.listedCollection(collections) }
        let topic = errors.value { () throws(ConfigError) in
            let template = try r.template("topic", example: "topic: \"shoal/{collection}/{id}\"")
            let allowed = MQTTOutboundRule.placeholders
            if let unknown = template.placeholders.first(where: { !allowed.contains($0) }) {
                throw ConfigError(mark: r.mark(of: "topic"), key: r.keyPath("topic"),
                                  message: "{\(unknown)} is not known here; an outbound topic may use {collection}, {scope}, {name} and {id}, e.g. shoal/{collection}/{id}")
            }
            let literal = template.literalText
            if literal.contains("+") || literal.contains("#") {
                throw ConfigError(mark: r.mark(of: "topic"), key: r.keyPath("topic"),
                                  message: "a topic to publish to may not contain + or # (those are for subscribing), e.g. shoal/{collection}/{id}")
            }
            if template.text.hasPrefix("$") {
                throw ConfigError(mark: r.mark(of: "topic"), key: r.keyPath("topic"),
                                  message: "topics that start with $ are the broker's own ($SYS); choose another, e.g. shoal/{collection}/{id}")
            }
            return template
        }
        let qos = errors.value { () throws(ConfigError) in try r.qos() }
        let retain = errors.value { () throws(ConfigError) in try r.bool("retain") ?? false }
        let envelope = errors.value { () throws(ConfigError) in try r.bool("envelope") ?? false }
        let deletes = errors.value { () throws(ConfigError) in try r.bool("deletes") ?? true }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
        guard let collection, let topic, let qos, let retain, let envelope, let deletes else {
            preconditionFailure("a rule read without errors lacks a value")
        }
        return MQTTOutboundRule(collection: collection, topic: topic, qos: qos, retain: retain, envelope: envelope, deletes: deletes)
    }
}

extension ConfigReader {
    /// A string that must be there and not be empty; the error shows how it is written.
    mutating func required(_ key: String, example: String) throws(ConfigError) -> String {
        guard let s = try string(key) else {
            throw ConfigError(mark: node.mark, key: keyPath(key), message: "is required, e.g. \(example)")
        }
        guard !s.isEmpty else {
            throw ConfigError(mark: mark(of: key), key: keyPath(key), message: "may not be empty, e.g. \(example)")
        }
        return s
    }

    /// An optional string that, when given, is not empty.
    mutating func nonEmpty(_ key: String, example: String) throws(ConfigError) -> String? {
        guard let s = try string(key) else { return nil }
        guard !s.isEmpty else {
            throw ConfigError(mark: mark(of: key), key: keyPath(key), message: "may not be empty, e.g. \(example); leave the key out for none")
        }
        return s
    }

    mutating func template(_ key: String, example: String) throws(ConfigError) -> MQTTTemplate {
        let text = try required(key, example: example)
        do { return try MQTTTemplate(parsing: text) } catch {
            throw ConfigError(mark: mark(of: key), key: keyPath(key), message: "\(error.reason), e.g. \(example)")
        }
    }

    /// `collection:`, which must be one of the site's `collections:`.
    mutating func listedCollection(_ collections: [CollectionName]) throws(ConfigError) -> CollectionName {
        let text = try required("collection", example: "collection: sensors.state")
        let name: CollectionName
        do { name = try CollectionName(parsing: text) } catch {
            throw ConfigError(mark: mark(of: "collection"), key: keyPath("collection"), message: error.reason)
        }
        guard collections.contains(name) else {
            throw ConfigError(mark: mark(of: "collection"), key: keyPath("collection"),
                              message: "\(name) is not in the site's collections: list; add \"- name: \(name)\" under collections:")
        }
        return name
    }

    /// `qos:` 0 or 1, default 1.
    mutating func qos() throws(ConfigError) -> Int {
        guard let n = try int("qos", in: Int64.min...Int64.max) else { return 1 }
        guard n == 0 || n == 1 else {
            throw ConfigError(mark: mark(of: "qos"), key: keyPath("qos"),
                              message: "\(n) is not supported; qos is 0 (at most once) or 1 (at least once, the default)")
        }
        return Int(n)
    }

    /// Each item of a list, read by `item` with its key path; every item is read, errors gathered.
    mutating func list<T>(_ key: String, _ item: (ConfigNode, String) throws(ConfigError) -> T) throws(ConfigError) -> [T] {
        guard let items = try sequence(key) else { return [] }
        var out: [T] = []
        var errors = ConfigErrors()
        for (i, node) in items.enumerated() {
            if let v = errors.value({ () throws(ConfigError) in try item(node, keyPath("\(key)[\(i)]")) }) { out.append(v) }
        }
        try errors.check()
        return out
    }
}
