/// ShoalStatus: what a gateway shows of itself — the status snapshot behind `shoal status`, the
/// one-line form for the serial console, and (with the field issue) the LED patterns. Pure.
import ShoalCore

/// The gateway's overall state, the first word of every status line.
public enum GatewayState: String, Sendable {
    case booting, running, degraded, stopping, failed
}

/// A snapshot of the whole gateway, taken on demand.
public struct GatewayStatus: Sendable {
    public struct Child: Sendable {
        public var path: String
        public var state: String
        public var restarts: Int
        public var lastError: String?
        public init(path: String, state: String, restarts: Int, lastError: String?) {
            self.path = path
            self.state = state
            self.restarts = restarts
            self.lastError = lastError
        }
    }

    public var state: GatewayState
    public var version: String
    public var boardID: String
    public var boardName: String
    public var boardSupport: String
    public var group: String
    public var serviceType: String
    public var uptimeSeconds: Int64
    public var storePath: String
    public var durability: String
    public var documents: Int64
    public var tombstones: Int64
    public var collections: [String]
    public var lastSequence: Int64
    /// The ObjectBox seed's mesh state; `Created` until the mesh issue brings the mesh manager.
    public var meshState: String
    public var connectedPeers: Int
    /// This gateway's peer id (64 hex digits), nil until its identity is loaded.
    public var peerID: String?
    public var identityLabel: String
    public var identityNotAfter: String?
    public var identityProblem: String?
    /// The ObjectBox seed's counters (failed connection attempts, messages, documents, bytes,
    /// conflicts), by name.
    public var counters: [String: Int64] = [:]
    /// Expiration since start: documents purged (expired, ttl, budget) and refused on receive.
    public var expiration: [String: Int64] = [:]
    /// Blobs held (count, bytes, partialBytes), the budget when set, and what the GC dropped since start.
    public var blobs: [String: Int64] = [:]
    /// Blob transfers since start (`BlobCounters`: bytesSent, bytesReceived, chunksSent,
    /// chunksVerified, badChunks, redundantPieces, completed, failed, manifestsReplaced,
    /// unprovenChunks) and the digests of the blobs being fetched now.
    public var blobTransfer: [String: Int64] = [:]
    public var blobFetches: [String] = []
    /// Where the local HTTP API listens (`127.0.0.1:8470`, `unix:<path>`); empty when it does not.
    public var httpAddresses: [String] = []
    /// The MQTT bridge's brokers as `MQTTBoard` writes them (`{"brokers": [...]}`), null without one.
    public var mqtt: JSONValue = .null
    /// The uplink's state (null without an `uplink:` section).
    public var uplink: JSONValue = .null
    /// Per transport (the Couchbase seed's status per transport): active or not, its last error, and
    /// how discovery runs on it (for Wi-Fi: the DNS-SD service and whether avahi-daemon answers).
    public struct Transport: Sendable {
        public var name: String
        public var active: Bool
        public var error: String?
        public var discovery: String?
        public init(name: String, active: Bool, error: String?, discovery: String?) {
            self.name = name
            self.active = active
            self.error = error
            self.discovery = discovery
        }

        /// "active; listening on port 4984, …" — the one wording of a transport's state, shared
        /// by `shoal status`, `shoal radios` and the serial console.
        public var summary: String {
            var line = active ? "active" : "inactive"
            if let error { line += " (\(error))" }
            if let discovery { line += "; \(discovery)" }
            return line
        }
    }
    public var transports: [Transport] = []
    /// The status LED's pattern now (shown whatever the LED driver, so a remote look matches what
    /// the LED says on site).
    public var ledPattern: String?
    /// Peers whose clocks run too far ahead of ours.
    public var clockSkewPeers: [String] = []
    /// The store service is running (false while it restarts or has failed).
    public var storeRunning = true
    /// The sync pulled from peers now, all links together (nil: none runs).
    public var sync: SyncProgress?
    public var children: [Child]
    /// Expiries ahead or passed (the identity's certificate, the trust list's checkpoint), each a
    /// sentence with what to do: the LED shows `expiring`, the console line says so.
    public var warnings: [String] = []
    /// The fleet's trust in brief (`shoal trust status` has all): state, entries, allowed,
    /// revoked, pending, nextUpdate.
    public var trust: JSONValue = .null

    public init(state: GatewayState, version: String, boardID: String, boardName: String, boardSupport: String,
                group: String, serviceType: String, uptimeSeconds: Int64, storePath: String, durability: String,
                documents: Int64, tombstones: Int64, collections: [String], lastSequence: Int64,
                meshState: String, connectedPeers: Int, peerID: String?, identityLabel: String, identityNotAfter: String?,
                identityProblem: String?, children: [Child]) {
        self.state = state
        self.version = version
        self.boardID = boardID
        self.boardName = boardName
        self.boardSupport = boardSupport
        self.group = group
        self.serviceType = serviceType
        self.uptimeSeconds = uptimeSeconds
        self.storePath = storePath
        self.durability = durability
        self.documents = documents
        self.tombstones = tombstones
        self.collections = collections
        self.lastSequence = lastSequence
        self.meshState = meshState
        self.connectedPeers = connectedPeers
        self.peerID = peerID
        self.identityLabel = identityLabel
        self.identityNotAfter = identityNotAfter
        self.identityProblem = identityProblem
        self.children = children
    }

    var healthyChildren: Int { children.filter { $0.state == "running" || $0.state == "stopped" }.count }

    /// One line for the serial console, under 100 characters for typical values (a sync running
    /// adds about 45).
    public var consoleLine: String {
        "shoal \(boardID) \(peerID.map { String($0.prefix(8)) } ?? "--------") \(state.rawValue) up \(GatewayStatus.duration(uptimeSeconds))"
            + " | docs \(documents) seq \(lastSequence)"
            + (sync.map { " | syncing \($0.text)" } ?? "")
            + " | mesh \(meshState) peers \(connectedPeers)"
            + " | tree \(healthyChildren)/\(children.count)"
            + (warnings.isEmpty ? "" : " | WARN \(warnings.count.counted("expiry", plural: "expiries"))")
    }

    /// Several lines for `shoal status`.
    public var text: String {
        var lines: [String] = []
        lines.append("state       \(state.rawValue) (up \(GatewayStatus.duration(uptimeSeconds)), shoal \(version))")
        lines.append("board       \(boardID): \(boardName) [\(boardSupport)]")
        lines.append("peer id     \(peerID ?? "none yet") (identity \(identityLabel)\(identityNotAfter.map { ", valid until \($0)" } ?? ""))")
        if let p = identityProblem { lines.append("identity    PROBLEM: \(p)") }
        for w in warnings { lines.append("WARNING     \(w)") }
        if trust != .null { lines.append("trust       \(GatewayStatus.trustLine(trust))") }
        if !counters.isEmpty {
            lines.append("replication " + counters.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        if let l = ledPattern { lines.append("led         \(l)") }
        for p in clockSkewPeers { lines.append("clock skew  peer \(p) runs ahead of our clock") }
        lines.append("group       \(group) (DNS-SD \(serviceType))")
        lines.append("mesh        \(meshState), \(connectedPeers.counted("peer")) connected")
        for t in transports { lines.append("\(t.name.padding(to: 11)) \(t.summary)") }
        if !httpAddresses.isEmpty { lines.append("http        \(httpAddresses.joined(separator: ", "))") }
        for b in mqtt["brokers"]?.arrayValue ?? [] { lines.append("mqtt        \(GatewayStatus.mqttLine(b))") }
        if uplink != .null { lines.append("uplink      \(GatewayStatus.uplinkLine(uplink))") }
        lines.append("store       \(storePath) (durability \(durability))")
        lines.append("documents   \(documents) live, \(tombstones.counted("tombstone")), last sequence \(lastSequence)")
        if !expiration.isEmpty {
            let e = { (k: String) in expiration[k] ?? 0 }
            lines.append("expiration  \(e("expired")) expired, \(e("ttl")) past ttl, \(e("budget")) over budget (purged, no tombstones); \(e("refused")) refused on receive")
        }
        if !blobs.isEmpty {
            let b = { (k: String) in blobs[k] ?? 0 }
            let budget = blobs["budget"].map { " of a \($0)-byte budget" } ?? ""
            lines.append("blobs       \(b("count")) held, \(b("bytes")) bytes\(budget) (\(b("partialBytes")) partial); GC dropped \(b("gcDropped")) (\(b("gcDroppedBytes")) bytes)\(b("gcOverBudget") > 0 ? ", over budget \(b("gcOverBudget")) times" : "")")
        }
        if !blobTransfer.isEmpty {
            let b = { (k: String) in blobTransfer[k] ?? 0 }
            lines.append("blob moves  \(b("bytesReceived")) bytes received (\(b("chunksVerified")) chunks), \(b("bytesSent")) sent; \(b("completed")) complete, \(b("failed")) failed, \(b("badChunks")) bad chunks; \(blobFetches.count) fetching now")
        }
        if let sync { lines.append("syncing     \(sync.text) (received/announced so far)") }
        lines.append("collections \(collections.joined(separator: ", "))")
        lines.append("supervision")
        let pathWidth = max(28, children.map(\.path.count).max() ?? 0)
        for c in children {
            var line = "  \(c.path.padding(to: pathWidth)) \(c.state.padding(to: 10)) restarts \(c.restarts)"
            if let e = c.lastError { line += "  last error: \(e)" }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }

    public var json: JSONValue {
        [
            "state": .string(state.rawValue),
            "version": .string(version),
            "board": ["id": .string(boardID), "name": .string(boardName), "support": .string(boardSupport)],
            "group": .string(group),
            "serviceType": .string(serviceType),
            "uptimeSeconds": .int(uptimeSeconds),
            "store": [
                "path": .string(storePath), "durability": .string(durability),
                "documents": .int(documents), "tombstones": .int(tombstones), "lastSequence": .int(lastSequence),
                "collections": .array(collections.map { .string($0) }),
            ],
            "mesh": ["state": .string(meshState), "connectedPeers": .int(connectedPeers)],
            "transports": .object(Dictionary(uniqueKeysWithValues: transports.map { ($0.name, $0.json) })),
            "peerID": peerID.map { .string($0) } ?? .null,
            "counters": .object(counters.mapValues { .int($0) }),
            "expiration": .object(expiration.mapValues { .int($0) }),
            "blobs": .object(blobs.mapValues { .int($0) }),
            "blobTransfer": .object(blobTransfer.mapValues { .int($0) }.merging(["fetching": .array(blobFetches.map(JSONValue.string))]) { a, _ in a }),
            "clockSkewPeers": .array(clockSkewPeers.map { .string($0) }),
            "led": ledPattern.map(JSONValue.string) ?? .null,
            "sync": sync?.json ?? .null,
            "http": .array(httpAddresses.map(JSONValue.string)),
            "mqtt": mqtt,
            "uplink": uplink,
            "warnings": .array(warnings.map(JSONValue.string)),
            "trust": trust,
            "identity": [
                "label": .string(identityLabel), "notAfter": identityNotAfter.map { .string($0) } ?? .null,
                "problem": identityProblem.map { .string($0) } ?? .null,
            ],
            "supervision": .array(children.map { c in
                [
                    "path": .string(c.path), "state": .string(c.state), "restarts": .int(c.restarts),
                    "lastError": c.lastError.map { .string($0) } ?? .null,
                ]
            }),
        ]
    }

    /// Reads back what `json` wrote (the CLI's side of `shoal status`).
    public init?(json s: JSONValue) {
        guard let state = s["state"]?.stringValue.flatMap(GatewayState.init(rawValue:)), let store = s["store"] else { return nil }
        self.init(
            state: state, version: s["version"]?.stringValue ?? "?", boardID: s["board"]?["id"]?.stringValue ?? "?",
            boardName: s["board"]?["name"]?.stringValue ?? "?", boardSupport: s["board"]?["support"]?.stringValue ?? "?",
            group: s["group"]?.stringValue ?? "?", serviceType: s["serviceType"]?.stringValue ?? "?",
            uptimeSeconds: s["uptimeSeconds"]?.int64Value ?? 0, storePath: store["path"]?.stringValue ?? "?",
            durability: store["durability"]?.stringValue ?? "?", documents: store["documents"]?.int64Value ?? 0,
            tombstones: store["tombstones"]?.int64Value ?? 0,
            collections: (store["collections"]?.arrayValue ?? []).compactMap(\.stringValue),
            lastSequence: store["lastSequence"]?.int64Value ?? 0, meshState: s["mesh"]?["state"]?.stringValue ?? "?",
            connectedPeers: Int(s["mesh"]?["connectedPeers"]?.int64Value ?? 0),
            peerID: s["peerID"]?.stringValue, identityLabel: s["identity"]?["label"]?.stringValue ?? "?",
            identityNotAfter: s["identity"]?["notAfter"]?.stringValue, identityProblem: s["identity"]?["problem"]?.stringValue,
            children: (s["supervision"]?.arrayValue ?? []).map { c in
                Child(path: c["path"]?.stringValue ?? "?", state: c["state"]?.stringValue ?? "?",
                      restarts: Int(c["restarts"]?.int64Value ?? 0), lastError: c["lastError"]?.stringValue)
            })
        counters = (s["counters"]?.objectValue ?? [:]).compactMapValues(\.int64Value)
        expiration = (s["expiration"]?.objectValue ?? [:]).compactMapValues(\.int64Value)
        blobs = (s["blobs"]?.objectValue ?? [:]).compactMapValues(\.int64Value)
        blobTransfer = (s["blobTransfer"]?.objectValue ?? [:]).compactMapValues(\.int64Value)
        blobFetches = (s["blobTransfer"]?["fetching"]?.arrayValue ?? []).compactMap(\.stringValue)
        clockSkewPeers = (s["clockSkewPeers"]?.arrayValue ?? []).compactMap(\.stringValue)
        ledPattern = s["led"]?.stringValue
        sync = SyncProgress(json: s["sync"])
        httpAddresses = (s["http"]?.arrayValue ?? []).compactMap(\.stringValue)
        mqtt = s["mqtt"] ?? .null
        uplink = s["uplink"] ?? .null
        warnings = (s["warnings"]?.arrayValue ?? []).compactMap(\.stringValue)
        trust = s["trust"] ?? .null
        transports = (s["transports"]?.objectValue ?? [:]).sorted { $0.key < $1.key }.map { name, t in Transport(name: name, json: t) }
    }

    /// The fleet's trust in a line: `ok, 7 entries: 5 allowed, 1 revoked, 0 pending`.
    public static func trustLine(_ t: JSONValue) -> String {
        var line = "\(t["state"]?.stringValue ?? "?"), \(t["entries"]?.int64Value ?? 0) entries: \(t["allowed"]?.int64Value ?? 0) allowed, "
            + "\(t["revoked"]?.int64Value ?? 0) revoked, \(t["pending"]?.int64Value ?? 0) pending"
        if let n = t["nextUpdateDate"]?.stringValue { line += "; next update by \(n)" }
        return line
    }

    /// One broker in a line: `local mqtt://127.0.0.1:1883 connected, in 10 (8 written, 1 unchanged, 1 dropped), out 5/5`.
    public static func mqttLine(_ b: JSONValue) -> String {
        let i = b["in"], o = b["out"]
        let dropped = (i?["dropped"]?.objectValue ?? [:]).values.compactMap(\.int64Value).reduce(0, +)
        var line = "\(b["name"]?.stringValue ?? "?") \(b["url"]?.stringValue ?? "?") \(b["state"]?.stringValue ?? "?")"
        line += ", in \(i?["received"]?.int64Value ?? 0) (\(i?["committed"]?.int64Value ?? 0) written, \(i?["unchanged"]?.int64Value ?? 0) unchanged, \(dropped) dropped)"
        line += ", out \(o?["acknowledged"]?.int64Value ?? 0)/\(o?["published"]?.int64Value ?? 0) acknowledged, lag \(o?["lag"]?.int64Value ?? 0)"
        if let e = b["lastError"]?.stringValue { line += "; last error: \(e)" }
        return line
    }

    /// The uplink in a line: `connected to nats://10.0.0.5:4222, push 120 (lag 0), pull 80 (lag 0), 1 conflict`.
    public static func uplinkLine(_ u: JSONValue) -> String {
        let push = u["push"], pull = u["pull"]
        let state = u["state"]?.stringValue ?? "?"
        let server = u["server"]?.stringValue ?? ""
        var line = state == "connected" && !server.isEmpty ? "connected to \(server)" : "\(state) (\((u["servers"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ", ")))"
        let skipped = (pull?["skipped"]?.objectValue ?? [:]).values.compactMap(\.int64Value).reduce(0, +)
        line += ", push \(push?["published"]?.int64Value ?? 0) (lag \(push?["lag"]?.int64Value ?? 0))"
        line += ", pull \(pull?["applied"]?.int64Value ?? 0) applied (lag \(pull?["lag"]?.int64Value ?? 0))"
        line += ", \((u["conflicts"]?.int64Value ?? 0).counted("conflict"))"
        if skipped > 0 { line += ", \(skipped) skipped" }
        if let e = u["lastError"]?.stringValue { line += "; last error: \(e)" }
        return line
    }

    /// `42s`, `3m12s`, `2h5m`, `3d4h`: an uptime or an age.
    public static func duration(_ s: Int64) -> String {
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m\(s % 60)s" }
        if s < 86400 { return "\(s / 3600)h\(s % 3600 / 60)m" }
        return "\(s / 86400)d\(s % 86400 / 3600)h"
    }
}

extension String {
    func padding(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}

extension GatewayStatus.Transport {
    /// From the JSON `status` and `radios` give for one transport.
    public init(name: String, json t: JSONValue) {
        self.init(name: name, active: t["active"]?.boolValue ?? false, error: t["error"]?.stringValue, discovery: t["discovery"]?.stringValue)
    }

    public var json: JSONValue {
        ["active": .bool(active), "error": error.map(JSONValue.string) ?? .null, "discovery": discovery.map(JSONValue.string) ?? .null]
    }
}
