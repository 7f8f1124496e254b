import ShoalCore
import ShoalThreads

/// What each broker's bridge has done: `shoal mqtt status`, `shoal status --json` (key `mqtt`)
/// and the `shoal_mqtt_*` families of /metrics read it; each bridge writes only its own entry.
public final class MQTTBoard: Sendable {
    public struct Broker: Sendable {
        public var name: String
        public var url: String
        public var protocolVersion: String
        /// connecting, connected, disconnected (waiting to reconnect), refused (by the broker)
        public var state = "connecting"
        public var sinceMillis: Int64 = 0
        public var lastError: String?
        public var subscriptions: [String] = []
        public var connects: Int64 = 0
        public var disconnects: Int64 = 0
        /// Messages from the broker, those that wrote a document, those that would not have
        /// changed theirs, and those dropped, by reason.
        public var received: Int64 = 0
        public var committed: Int64 = 0
        public var unchanged: Int64 = 0
        public var dropped: [String: Int64] = [:]
        /// Changes published, acknowledged by the broker, not sent back to the topic they came
        /// from, and in flight now.
        public var published: Int64 = 0
        public var acknowledged: Int64 = 0
        public var skippedLoops: Int64 = 0
        /// Changes not delivered, by reason (bad_topic, publish_refused).
        public var outDropped: [String: Int64] = [:]
        public var inFlight: Int64 = 0
        /// Changes in the outbound collections not yet acknowledged by the broker.
        public var outboundLag: Int64 = 0
        /// Series documents deleted to keep each series collection within its `keep`.
        public var expired: Int64 = 0

        public var json: JSONValue {
            [
                "name": .string(name), "url": .string(url), "protocol": .string(protocolVersion),
                "state": .string(state), "sinceMillis": .int(sinceMillis), "lastError": lastError.map(JSONValue.string) ?? .null,
                "subscriptions": .array(subscriptions.map(JSONValue.string)),
                "connects": .int(connects), "disconnects": .int(disconnects),
                "in": ["received": .int(received), "committed": .int(committed), "unchanged": .int(unchanged),
                       "dropped": .object(dropped.mapValues { .int($0) }), "expired": .int(expired)],
                "out": ["published": .int(published), "acknowledged": .int(acknowledged), "skippedLoops": .int(skippedLoops),
                        "inFlight": .int(inFlight), "lag": .int(outboundLag), "dropped": .object(outDropped.mapValues { .int($0) })],
            ]
        }
    }

    private let brokers = Locked<[String: Broker]>([:])

    public init() {}

    func update(_ name: String, _ body: (inout Broker) -> Void) {
        brokers.withLock { all in
            guard var b = all[name] else { return }
            body(&b)
            all[name] = b
        }
    }

    /// A broker's entry; one that exists (its child restarted) keeps its counters, so /metrics'
    /// counters do not fall back to 0 and `connects`/`disconnects` show the flapping.
    func register(_ broker: Broker) {
        brokers.withLock { all in
            guard var b = all[broker.name] else { all[broker.name] = broker; return }
            b.url = broker.url
            b.protocolVersion = broker.protocolVersion
            b.state = broker.state
            all[broker.name] = b
        }
    }

    public var snapshot: [Broker] { brokers.withLock { $0.values.sorted { $0.name < $1.name } } }

    /// The `mqtt` section of status: null when no broker is configured.
    public var json: JSONValue {
        let all = snapshot
        return all.isEmpty ? .null : ["brokers": .array(all.map(\.json))]
    }
}
