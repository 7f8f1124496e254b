import ShoalCore

/// The site file's `mqtt:` section: the brokers the gateway bridges to, each with its inbound
/// rules (topics → documents) and outbound rules (collection changes → topics). No broker, no
/// bridge. The files it names are checked by the runtime, which reads them (`fileProblems`).
public struct MQTTSettings: Sendable, Equatable {
    public var brokers: [MQTTBroker]
    /// The files the brokers name, with where, for `fileProblems(read:)`.
    public var referencedFiles: [MQTTFileReference] = []

    public var enabled: Bool { !brokers.isEmpty }

    public init(brokers: [MQTTBroker] = []) {
        self.brokers = brokers
    }

    /// Every problem with the files the brokers name, each at its line of the site file, for
    /// `ConfigLoader.loadSite(checkFiles:)`. `read` gives a file's text, nil when there is no
    /// such file, or throws when it cannot be read (the runtime's `Files.read`).
    public func fileProblems(read: (String) throws -> String?) -> ConfigError? {
        var errors = ConfigErrors()
        for file in referencedFiles {
            let text: String?
            do { text = try read(file.path) } catch {
                errors.add(ConfigError(mark: file.mark, key: file.key, message: "\(file.path): cannot be read (\(error))"))
                continue
            }
            guard let text else {
                errors.add(ConfigError(mark: file.mark, key: file.key, message: "\(file.path): no such file (\(file.kind.what))"))
                continue
            }
            if let problem = file.kind.problem(with: text) {
                errors.add(ConfigError(mark: file.mark, key: file.key, message: "\(file.path): \(problem)"))
            }
        }
        return errors.combined
    }
}

/// The MQTT version spoken to one broker.
public enum MQTTProtocolVersion: String, Sendable, Equatable, CaseIterable {
    case v311 = "3.1.1"
    case v5 = "5"
}

/// One broker (`mqtt.brokers[i]`): where it is, how to log in, and the rules. It runs as the
/// supervised child `root/mqtt/<name>`.
public struct MQTTBroker: Sendable, Equatable {
    /// `[a-z0-9-]{1,32}`, unique in the site.
    public var name: String
    public var host: String
    public var port: UInt16
    /// From `mqtts://`. With TLS on, `tls` nil means the defaults (`MQTTTLSSettings()`).
    public var useTLS: Bool
    public var protocolVersion: MQTTProtocolVersion = .v311
    /// Nil: `shoal-<first 12 hex digits of the peer id>-<name>` (see `clientID(peerIDHex:)`).
    public var clientID: String?
    public var keepaliveSeconds: Int64 = 30
    /// False (the default): the broker keeps our session and its QoS 1 messages while we are away.
    public var cleanSession = false
    public var username: String?
    /// The password is the file's first line (`password(fromFile:)`); read at each connect.
    public var passwordFile: String?
    /// Non-nil only with `useTLS`.
    public var tls: MQTTTLSSettings?
    public var reconnectMinMillis: Int64 = 500
    public var reconnectMaxMillis: Int64 = 30_000
    public var inbound: [MQTTInboundRule] = []
    public var outbound: [MQTTOutboundRule] = []

    public static let defaultPort: UInt16 = 1883
    public static let defaultTLSPort: UInt16 = 8883
    public static let keepaliveRange: ClosedRange<Int64> = 5...3600
    public static let maxClientIDBytes = 256

    public init(name: String, host: String, port: UInt16? = nil, useTLS: Bool = false) {
        self.name = name
        self.host = host
        self.useTLS = useTLS
        self.port = port ?? (useTLS ? MQTTBroker.defaultTLSPort : MQTTBroker.defaultPort)
    }

    /// The client id sent to the broker: the configured one, or one made from this gateway's
    /// peer id (64 hex digits) and the broker's name, stable across restarts so the broker
    /// resumes the session.
    public func clientID(peerIDHex: String) -> String {
        clientID ?? "shoal-\(peerIDHex.prefix(12).lowercased())-\(name)"
    }

    /// The distinct filters to subscribe, each with the highest QoS a rule asks of it.
    public var subscriptions: [MQTTSubscription] {
        var out: [MQTTSubscription] = []
        for rule in inbound {
            let filter = rule.filter.mqttFilter
            if let i = out.firstIndex(where: { $0.filter == filter }) {
                out[i].qos = max(out[i].qos, rule.qos)
            } else {
                out.append(MQTTSubscription(filter: filter, qos: rule.qos))
            }
        }
        return out
    }

    /// A password file's first line, without its line ending.
    public static func password(fromFile text: String) -> String {
        var line = text.prefix { $0 != "\n" && $0 != "\r\n" }
        if line.hasSuffix("\r") { line.removeLast() }
        return String(line)
    }

    /// `[a-z0-9-]{1,32}`.
    public static func isValidName(_ name: String) -> Bool {
        (1...32).contains(name.utf8.count)
            && name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: "-") }
    }
}

/// TLS to a broker (`tls:`). Without `caFile` the broker is checked against the system's CAs.
public struct MQTTTLSSettings: Sendable, Equatable {
    public var caFile: String?
    public var certFile: String?
    public var keyFile: String?
    /// Present the gateway's own identity (its certificate and key PEM files) as the client certificate.
    public var identity = false
    /// Do not check the broker's host name against its certificate (test labs only).
    public var insecure = false

    public static let systemCADirectory = "/etc/ssl/certs"

    public init(caFile: String? = nil, certFile: String? = nil, keyFile: String? = nil, identity: Bool = false, insecure: Bool = false) {
        self.caFile = caFile
        self.certFile = certFile
        self.keyFile = keyFile
        self.identity = identity
        self.insecure = insecure
    }
}

/// One subscription: an MQTT filter (names stripped) and its QoS.
public struct MQTTSubscription: Sendable, Equatable {
    public var filter: String
    public var qos: Int
    public init(filter: String, qos: Int) {
        self.filter = filter
        self.qos = qos
    }
}

/// What an inbound rule does with a document that exists.
public enum MQTTInboundMode: String, Sendable, Equatable, CaseIterable {
    /// The message is the document.
    case replace
    /// The message's top-level fields go over the existing document's (`MQTTInboundRule.merged`).
    case merge
    /// A new document per message, `<id>@<time key>`, the oldest deleted past `keep`.
    case series
}

/// How an inbound payload is read.
public enum MQTTPayloadFormat: String, Sendable, Equatable, CaseIterable {
    /// A JSON object is the body; any other JSON value is wrapped as `{"value": …}`.
    case json
    /// Any UTF-8 text is wrapped as `{"value": "<text>"}` (Tasmota's ON/OFF).
    case text
}

/// Messages whose topic matches `filter` become documents of `collection` with the id `id`.
public struct MQTTInboundRule: Sendable, Equatable {
    public var filter: MQTTTopicFilter
    public var collection: CollectionName
    /// Placeholders: the filter's names and `{topic}`.
    public var id: MQTTTemplate
    public var mode: MQTTInboundMode = .replace
    public var payload: MQTTPayloadFormat = .json
    /// Also add the topic's named fields to object payloads (never over a key they have).
    public var topicFields = false
    /// Series only: the payload field whose value keys the id (nil: the arrival time).
    public var timeField: String?
    /// Series only: the live documents kept in the collection; the oldest beyond it are deleted.
    public var keep: Int64 = MQTTInboundRule.defaultKeep
    public var qos = 1

    public static let defaultKeep: Int64 = 10_000
    public static let keepRange: ClosedRange<Int64> = 1...10_000_000

    public init(filter: MQTTTopicFilter, collection: CollectionName, id: MQTTTemplate, mode: MQTTInboundMode = .replace,
                payload: MQTTPayloadFormat = .json, topicFields: Bool = false, timeField: String? = nil,
                keep: Int64 = MQTTInboundRule.defaultKeep, qos: Int = 1) {
        self.filter = filter
        self.collection = collection
        self.id = id
        self.mode = mode
        self.payload = payload
        self.topicFields = topicFields
        self.timeField = timeField
        self.keep = keep
        self.qos = qos
    }
}

/// Changes in `collection` (local and replicated) are published to `topic`.
public struct MQTTOutboundRule: Sendable, Equatable {
    public var collection: CollectionName
    /// Placeholders: `{collection}` (scope.name), `{scope}`, `{name}`, `{id}`.
    public var topic: MQTTTemplate
    public var qos = 1
    public var retain = false
    /// True: `{"id","revision","origin","deleted","body"}`; false: the body alone.
    public var envelope = false
    /// Publish deletions (an envelope with deleted: true, or an empty payload).
    public var deletes = true

    public static let placeholders = ["collection", "scope", "name", "id"]

    public init(collection: CollectionName, topic: MQTTTemplate, qos: Int = 1, retain: Bool = false,
                envelope: Bool = false, deletes: Bool = true) {
        self.collection = collection
        self.topic = topic
        self.qos = qos
        self.retain = retain
        self.envelope = envelope
        self.deletes = deletes
    }

    /// The topic a change of document `id` is published to, or nil when the id would make it an
    /// invalid topic name (a `+`, `#` or NUL in it, or over 65,535 bytes): count it, skip it.
    public func publishTopic(collection: CollectionName, id: DocumentID) -> String? {
        let topic = self.topic.render([
            "collection": collection.description, "scope": collection.scope, "name": collection.name, "id": id.rawValue,
        ])
        guard !topic.isEmpty, topic.utf8.count <= MQTTTopicFilter.maxBytes,
              !topic.utf8.contains(where: { $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "#") || $0 == 0 })
        else { return nil }
        return topic
    }
}

/// A file a broker names, with where the site file names it.
public struct MQTTFileReference: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable {
        case caFile, certFile, keyFile, passwordFile
        /// The uplink's: a NATS credentials file (user JWT and NKey seed), an NKey seed file.
        case credentialsFile, nkeySeedFile
    }
    public var kind: Kind
    public var path: String
    /// `mqtt.brokers[0].tls.caFile`.
    public var key: String
    public var mark: SourceMark

    public init(kind: Kind, path: String, key: String, mark: SourceMark) {
        self.kind = kind
        self.path = path
        self.key = key
        self.mark = mark
    }
}

extension MQTTFileReference.Kind {
    /// What the file should hold, for "no such file".
    var what: String {
        switch self {
        case .caFile: "the PEM of the CA that signs the server's certificate (the broker's, the hub's)"
        case .certFile: "this gateway's client certificate, PEM"
        case .keyFile: "the client certificate's private key, PEM"
        case .passwordFile: "its first line is the password"
        case .credentialsFile: "a NATS credentials file: the user JWT and its NKey seed, as `nsc generate creds` writes it"
        case .nkeySeedFile: "the user's NKey seed (SU…), as `nk -gen user` writes it"
        }
    }

    /// What is wrong with a file's text, if anything.
    func problem(with text: String) -> String? {
        switch self {
        case .caFile, .certFile:
            text.contains("-----BEGIN CERTIFICATE-----") ? nil
                : "no certificate in it (expected PEM blocks \"-----BEGIN CERTIFICATE-----\"; a key is not a certificate)"
        case .keyFile:
            text.contains("PRIVATE KEY-----") ? nil
                : "no private key in it (expected a PEM block such as \"-----BEGIN PRIVATE KEY-----\")"
        case .passwordFile:
            MQTTBroker.password(fromFile: text).isEmpty ? "its first line is empty; write the password on the first line" : nil
        case .credentialsFile:
            Self.credentialsProblem(text)
        case .nkeySeedFile:
            Self.seedProblem(text)
        }
    }

    static let credentialsBlocks = ["-----BEGIN NATS USER JWT-----", "-----BEGIN USER NKEY SEED-----"]

    private static func credentialsProblem(_ text: String) -> String? {
        let missing = credentialsBlocks.filter { !text.contains($0) }
        guard !missing.isEmpty else { return nil }
        return "not a NATS credentials file: no \(missing.map { "\"\($0)\"" }.joined(separator: " and ")) block in it (`nsc generate creds` writes one; a bare seed goes in nkeySeedFile with nkey)"
    }

    private static func seedProblem(_ text: String) -> String? {
        let start = text.drop { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        if start.hasPrefix("SU") { return nil }
        let hint = start.hasPrefix("-----BEGIN") ? "; a credentials file (JWT and seed) goes in credentialsFile instead"
            : start.hasPrefix("U") ? "; that is the public key (it goes in nkey:), the seed starts with SU"
            : start.hasPrefix("S") ? "; that seed is not a user's (a user seed starts with SU)" : ""
        return "not a user NKey seed: it does not start with SU\(hint)"
    }
}
