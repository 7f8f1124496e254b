import ShoalCore
import ShoalThreads

/// What the uplink has done: `shoal uplink status`, `shoal status --json` (key `uplink`) and the
/// `shoal_uplink_*` families of /metrics read it. Only the uplink writes it; its counters survive
/// the uplink's restarts (the board belongs to the gateway).
public final class UplinkBoard: Sendable {
    public struct Collection: Sendable {
        public var name: String
        public var stream: String
        public var push: Bool
        public var pull: Bool
        /// Local changes not yet on the hub (in changes), and how old the oldest of them is.
        public var pushLag: Int64 = 0
        public var pushLagSeconds: Double = 0
        /// Hub messages not yet applied here (the consumer's pending count).
        public var pullLag: Int64 = 0
        public var pushCheckpoint: Int64 = 0
        public var pullCheckpoint: Int64 = 0

        var json: JSONValue {
            ["name": .string(name), "stream": .string(stream), "push": .bool(push), "pull": .bool(pull),
             "pushLag": .int(pushLag), "pushLagSeconds": .double(pushLagSeconds), "pullLag": .int(pullLag),
             "pushCheckpoint": .int(pushCheckpoint), "pullCheckpoint": .int(pullCheckpoint)]
        }
    }

    public struct State: Sendable {
        public var servers: [String] = []
        /// connecting, connected, reconnecting, disconnected (waiting to connect again), refused
        public var state = "connecting"
        public var sinceMillis: Int64 = 0
        /// The server this gateway is connected to now.
        public var server = ""
        public var lastError: String?
        public var lastErrorAtMillis: Int64 = 0
        /// When a push or pull last completed without error (wall clock ms; 0: never).
        public var lastSuccessMillis: Int64 = 0
        public var connects: Int64 = 0
        public var disconnects: Int64 = 0
        /// Versions published and stored by the hub; skipped because the hub already held them.
        public var published: Int64 = 0
        public var alreadyThere: Int64 = 0
        /// Compare-and-set failures (the hub held a version this gateway had not seen) and the
        /// conflicts they or a pull resolved.
        public var casRetries: Int64 = 0
        public var conflicts: Int64 = 0
        /// Hub messages received, applied (changed a document here), already held.
        public var received: Int64 = 0
        public var applied: Int64 = 0
        public var unchanged: Int64 = 0
        /// Hub messages not applied, by reason (foreign: not Shoal's; refused: a filter or the
        /// purge horizon; too_large: more than the hub takes, never published).
        public var skipped: [String: Int64] = [:]
        public var collections: [Collection] = []

        public var json: JSONValue {
            [
                "servers": .array(servers.map(JSONValue.string)), "state": .string(state), "sinceMillis": .int(sinceMillis),
                "server": .string(server), "lastError": lastError.map(JSONValue.string) ?? .null,
                "lastErrorAtMillis": .int(lastErrorAtMillis), "lastSuccessMillis": .int(lastSuccessMillis),
                "connects": .int(connects), "disconnects": .int(disconnects),
                "push": ["published": .int(published), "alreadyThere": .int(alreadyThere), "casRetries": .int(casRetries),
                         "lag": .int(collections.reduce(0) { $0 + $1.pushLag }),
                         "lagSeconds": .double(collections.map(\.pushLagSeconds).max() ?? 0)],
                "pull": ["received": .int(received), "applied": .int(applied), "unchanged": .int(unchanged),
                         "lag": .int(collections.reduce(0) { $0 + $1.pullLag }),
                         "skipped": .object(skipped.mapValues { .int($0) })],
                "conflicts": .int(conflicts),
                "collections": .array(collections.map(\.json)),
            ]
        }
    }

    private let state = Locked<State?>(nil)

    public init() {}

    func update(_ body: (inout State) -> Void) {
        state.withLock { s in
            guard var v = s else { return }
            body(&v)
            s = v
        }
    }

    /// Starts (or, after a restart of the uplink, resumes) the board: counters are kept.
    func register(servers: [String], collections: [Collection]) {
        state.withLock { s in
            var v = s ?? State()
            v.servers = servers
            v.collections = collections
            s = v
        }
    }

    public var snapshot: State? { state.withLock { $0 } }

    /// The `uplink` section of status: null when the site has no uplink.
    public var json: JSONValue { snapshot?.json ?? .null }
}
