import ShoalMesh
import ShoalStatus
import ShoalStore
import ShoalSupervision

/// The figures `GET /metrics` exposes, read from one gateway at one moment, and their Prometheus
/// families. Gathering (`Gateway.metrics(store:)`) reads the store; turning them into families is
/// pure, so tests build one by hand.
///
/// Names follow the seeds' counters (ObjectBox: discovered/connected peers, failed connection
/// attempts, messages sent/received, sync logs received/applied; bytes, conflicts) in Prometheus's
/// form: `shoal_` first, counters end in `_total`, units last (`_bytes`, `_seconds`). What a reader
/// gets wrong: the counters live in the process, so they start again from 0 when the gateway
/// restarts (Prometheus's `rate()` handles that), and a peer's series stay only while the mesh
/// knows the peer.
public struct GatewayMetrics: Sendable {
    public struct Collection: Sendable {
        public var name: String
        public var documents: Int64
        public var tombstones: Int64
    }

    public var state: GatewayState
    public var version: String
    public var board: String
    public var group: String
    public var counters: ReplicationCounters
    public var mesh: MeshView
    public var children: [SupervisionReport.Child]
    public var ledPattern: String
    public var peerID: String?
    public var identityLabel: String
    public var identityNotAfterSeconds: Int64?
    /// Nil while the store is closed (restarting): its figures are left out.
    public var collections: [Collection]?
    public var lastSequence: Int64?
    /// Expiration since start (nil while the store is closed).
    public var expiry: ExpiryCounts?
    /// Blob figures (`BlobRetention.figures`; nil while the store is closed).
    public var blobs: [String: Int64]?
    public var storeBytes: Int?
    public var uptimeSeconds: Double
    public var startTimeSeconds: Double?
    public var residentBytes: Int?
    /// `monotonicMillis()` when gathered: a peer's idle time is measured from its last activity to this.
    public var nowMillis: Int
    /// The local API's connections and streams (set by the API itself when it answers /metrics).
    public var http: HTTP? = nil
    /// The fleet's trust: entries held, peers allowed/revoked/pending, entries refused, the
    /// checkpoint's next update.
    public struct Trust: Sendable {
        public var entries = 0, allowed = 0, revoked = 0, pending = 0, rejected = 0
        public var nextUpdateSeconds: Int64?
        public init() {}
    }
    public var trust = Trust()
    /// The MQTT bridge's brokers (empty without an `mqtt:` section).
    public var mqtt: [MQTTBoard.Broker] = []
    /// The uplink to the hub (nil without an `uplink:` section, or before it first reports).
    public var uplink: UplinkBoard.State? = nil

    /// What the local API holds now, over all its listeners.
    public struct HTTP: Sendable {
        public var connections: Int
        /// Idle connections closed to make room for new ones past `http.maxConnections`.
        public var idleConnectionsClosed: Int
        public var streams: Int
        public var bufferedBytes: Int
        public var largestBufferBytes: Int

        public init(connections: Int, idleConnectionsClosed: Int, streams: Int, bufferedBytes: Int, largestBufferBytes: Int) {
            self.connections = connections
            self.idleConnectionsClosed = idleConnectionsClosed
            self.streams = streams
            self.bufferedBytes = bufferedBytes
            self.largestBufferBytes = largestBufferBytes
        }
    }

    public typealias Family = MetricsExposition.Family
    public typealias Sample = MetricsExposition.Sample

    /// Every family, in no particular order (the renderer sorts).
    public var families: [Family] {
        gatewayFamilies + counterFamilies + blobTransferFamilies + meshFamilies + peerFamilies + storeFamilies + supervisionFamilies + httpFamilies + mqttFamilies + uplinkFamilies
    }

    /// The reasons a hub message is skipped (`UplinkBoard.State.skipped`): each has a series from
    /// the start, so a rate over it works before the first one.
    static let uplinkSkipReasons = ["foreign", "refused", "too_large"]

    var uplinkFamilies: [Family] {
        guard let u = uplink else { return [] }
        func counter(_ name: String, _ help: String, _ v: Int64) -> Family { Family(name, .counter, help: help, value: Int(v)) }
        func per(_ name: String, _ help: String, _ value: (UplinkBoard.Collection) -> Double) -> Family {
            Family(name, .gauge, help: help, u.collections.map { Sample([("collection", $0.name)], value($0)) })
        }
        var reasons = u.skipped
        for r in Self.uplinkSkipReasons where reasons[r] == nil { reasons[r] = 0 }
        return [
            Family("shoal_uplink_connected", .gauge, help: "1 while the uplink is connected to a hub server, else 0.", value: u.state == "connected" ? 1 : 0),
            counter("shoal_uplink_connects_total", "Connections to the hub that were made (first ones and reconnections).", u.connects),
            counter("shoal_uplink_disconnects_total", "Connections to the hub that were lost or closed.", u.disconnects),
            counter("shoal_uplink_published_total", "Document versions published to the hub and stored by it.", u.published),
            counter("shoal_uplink_already_there_total", "Document versions not published because the hub already held them (or a later one).", u.alreadyThere),
            counter("shoal_uplink_cas_retries_total", "Publishes the hub refused by compare-and-set: it held a version this gateway had not seen.", u.casRetries),
            counter("shoal_uplink_received_total", "Messages received from the hub's streams.", u.received),
            counter("shoal_uplink_applied_total", "Hub messages that changed a document here.", u.applied),
            counter("shoal_uplink_unchanged_total", "Hub messages this gateway already held: nothing written.", u.unchanged),
            counter("shoal_uplink_conflicts_total", "Conflicts between a local and a hub version, resolved.", u.conflicts),
            Family("shoal_uplink_skipped_total", .counter, help: "Hub messages not applied, by reason (foreign: not written by a Shoal gateway; refused: a filter or the purge horizon; concurrent: a push-only collection's hub version is concurrent).",
                   reasons.sorted { $0.key < $1.key }.map { Sample([("reason", $0.key)], Int($0.value)) }),
            per("shoal_uplink_push_lag_changes", "Local changes not yet on the hub, per collection (0 when push is off).") { Double($0.pushLag) },
            per("shoal_uplink_push_lag_seconds", "Age of the oldest local change not yet on the hub, per collection (0 when none).") { $0.pushLagSeconds },
            per("shoal_uplink_pull_lag_messages", "Hub messages not yet applied here, per collection (0 when pull is off).") { Double($0.pullLag) },
            Family("shoal_uplink_last_success_timestamp_seconds", .gauge, help: "When a push or pull to the hub last completed without error (Unix time; 0: never).",
                   value: Double(u.lastSuccessMillis) / 1000),
        ]
    }

    var mqttFamilies: [Family] {
        guard !mqtt.isEmpty else { return [] }
        func per(_ name: String, _ kind: MetricsExposition.Kind, _ help: String, _ value: (MQTTBoard.Broker) -> Int64) -> Family {
            Family(name, kind, help: help, mqtt.map { Sample([("broker", $0.name)], Int(value($0))) })
        }
        var dropped: [Sample] = []
        for b in mqtt {
            for (reason, n) in b.dropped.sorted(by: { $0.key < $1.key }) { dropped.append(Sample([("broker", b.name), ("direction", "in"), ("reason", reason)], Int(n))) }
            for (reason, n) in b.outDropped.sorted(by: { $0.key < $1.key }) { dropped.append(Sample([("broker", b.name), ("direction", "out"), ("reason", reason)], Int(n))) }
        }
        return [
            per("shoal_mqtt_connected", .gauge, "1 while the bridge is connected to the broker, else 0.") { $0.state == "connected" ? 1 : 0 },
            per("shoal_mqtt_connects_total", .counter, "Connections to the broker the broker accepted.") { $0.connects },
            per("shoal_mqtt_disconnects_total", .counter, "Connections to the broker that were lost.") { $0.disconnects },
            per("shoal_mqtt_received_total", .counter, "Messages received from the broker on the inbound rules' topics.") { $0.received },
            per("shoal_mqtt_committed_total", .counter, "Messages written to the store as documents (then acknowledged to the broker).") { $0.committed },
            per("shoal_mqtt_unchanged_total", .counter, "Messages that would not have changed their document (redeliveries, echoes): nothing written.") { $0.unchanged },
            Family("shoal_mqtt_dropped_total", .counter, help: "Messages dropped, by direction and reason (in: not_json, not_utf8, too_large, bad_id, bad_time, empty, no_rule; out: bad_topic, publish_refused).", dropped),
            per("shoal_mqtt_expired_total", .counter, "Series documents deleted to keep their collection within the rule's keep.") { $0.expired },
            per("shoal_mqtt_published_total", .counter, "Changes published to the broker.") { $0.published },
            per("shoal_mqtt_acknowledged_total", .counter, "Published changes the broker acknowledged.") { $0.acknowledged },
            per("shoal_mqtt_loops_skipped_total", .counter, "Changes not published because they came from the same topic of the same broker.") { $0.skippedLoops },
            per("shoal_mqtt_in_flight", .gauge, "Publishes waiting for the broker's acknowledgement now.") { $0.inFlight },
            per("shoal_mqtt_outbound_lag", .gauge, "Changes in the outbound collections the broker has not acknowledged yet (counted up to 1001).") { $0.outboundLag },
        ]
    }

    var httpFamilies: [Family] {
        guard let http else { return [] }
        return [
            Family("shoal_http_connections", .gauge, help: "Connections the local API holds now (all listeners).", value: http.connections),
            Family("shoal_http_idle_connections_closed_total", .counter,
                   help: "Idle connections the local API closed to make room for new ones (past http.maxConnections).", value: http.idleConnectionsClosed),
            Family("shoal_http_streams", .gauge, help: "Server-sent event streams and long polls open now.", value: http.streams),
            Family("shoal_http_stream_buffered_bytes", .gauge, help: "Bytes written to the open streams and not yet taken by their clients, all together.",
                   value: http.bufferedBytes),
            Family("shoal_http_stream_largest_buffer_bytes", .gauge, help: "The most bytes one open stream holds for its client (each stream is bounded).",
                   value: http.largestBufferBytes),
        ]
    }

    /// The exposition text (`MetricsExposition.contentType`).
    public var text: String { MetricsExposition.render(families) }

    var gatewayFamilies: [Family] {
        var f = [
            Family("shoal_build_info", .gauge, help: "The running build: version, board and group label this gateway (always 1).",
                   [Sample([("version", version), ("board", board), ("group", group)], 1)]),
            Family("shoal_gateway_state", .gauge, help: "The gateway's state: 1 for the current one, 0 for the others.",
                   GatewayMetrics.stateSet([GatewayState.booting, .running, .degraded, .stopping, .failed].map(\.rawValue), current: state.rawValue)),
            Family("shoal_led_state", .gauge, help: "The status LED's current pattern (always 1; the pattern is the label).",
                   [Sample([("pattern", ledPattern)], 1)]),
            Family("shoal_uptime_seconds", .gauge, help: "Seconds since the gateway started.", value: uptimeSeconds),
        ]
        if let peerID {
            f.append(Family("shoal_identity_info", .gauge, help: "This gateway's identity: its peer id and label (always 1).",
                            [Sample([("peer", peerID), ("label", identityLabel)], 1)]))
        }
        if let t = identityNotAfterSeconds {
            f.append(Family("shoal_identity_not_after_timestamp_seconds", .gauge, help: "When this gateway's certificate expires (Unix time).", value: Int(t)))
        }
        f.append(Family("shoal_trust_entries", .gauge, help: "Signed _trust entries this gateway holds.", value: trust.entries))
        f.append(Family("shoal_trust_peers", .gauge, help: "Peers by the fleet's trust: allowed (site file and _trust), revoked, pending approval.",
                        [Sample([("state", "allowed")], trust.allowed), Sample([("state", "revoked")], trust.revoked), Sample([("state", "pending")], trust.pending)]))
        f.append(Family("shoal_trust_rejected_entries_total", .counter, help: "Trust entries refused since start (bad signature, unknown signer, replayed, older, future, malformed).", value: trust.rejected))
        if let t = trust.nextUpdateSeconds {
            f.append(Family("shoal_trust_next_update_timestamp_seconds", .gauge, help: "When the trust checkpoint says a new one is due (Unix time); past it the list is stale.", value: Int(t)))
        }
        if let t = startTimeSeconds {
            f.append(Family("process_start_time_seconds", .gauge, help: "Start time of the process since the Unix epoch in seconds.", value: t))
        }
        if let r = residentBytes {
            f.append(Family("process_resident_memory_bytes", .gauge, help: "Resident memory size in bytes.", value: r))
        }
        return f
    }

    var counterFamilies: [Family] {
        let c = counters
        let m = mesh.counters
        func counter(_ name: String, _ help: String, _ v: Int) -> Family { Family(name, .counter, help: help, value: v) }
        return [
            counter("shoal_messages_sent_total", "Replication messages sent to peers.", c.messagesSent),
            counter("shoal_messages_received_total", "Replication messages received from peers.", c.messagesReceived),
            counter("shoal_sent_bytes_total", "Bytes of replication messages sent to peers (frames with their length prefix).", c.bytesSent),
            counter("shoal_received_bytes_total", "Bytes of replication messages received from peers (frames with their length prefix).", c.bytesReceived),
            counter("shoal_documents_sent_total", "Documents pushed to peers.", c.documentsSent),
            counter("shoal_documents_received_total", "Documents pulled from peers (the seed's received sync logs).", c.documentsReceived),
            counter("shoal_documents_applied_total", "Documents pulled from peers and written to the store (the seed's applied sync logs).", c.documentsApplied),
            counter("shoal_conflicts_total", "Conflicts resolved (concurrent versions of a document).", c.conflicts),
            counter("shoal_failed_connection_attempts_total", "Links to peers that failed: dials, refusals and failed handshakes either way.", c.failedConnections),
            counter("shoal_evictions_total", "Links this gateway closed to make room for a newcomer.", m.evictions),
            counter("shoal_refused_connections_total", "Incoming links the mesh refused (no room, or a link to that peer exists).", m.refusedConnections),
        ]
    }

    var blobTransferFamilies: [Family] {
        let b = counters.blob
        func counter(_ name: String, _ help: String, _ v: Int) -> Family { Family("shoal_blob_transfer_" + name, .counter, help: help, value: v) }
        return [
            counter("sent_bytes_total", "Blob chunk bytes sent to peers (pieces served).", Int(b.bytesSent)),
            counter("received_bytes_total", "Blob chunk bytes received from peers and verified against the manifest.", Int(b.bytesReceived)),
            counter("chunks_sent_total", "Blob chunks sent to peers.", b.chunksSent),
            counter("chunks_verified_total", "Blob chunks received, verified and stored.", b.chunksVerified),
            counter("bad_chunks_total", "Blob chunks received that did not match the manifest (dropped).", b.badChunks),
            counter("redundant_pieces_total", "Blob pieces received for a chunk already held or no longer asked of that link (ignored).", b.redundantPieces),
            counter("completed_total", "Blobs fetched complete and verified.", b.completed),
            counter("failed_total", "Blob fetches given up (too large, manifest refused, storage error).", b.failed),
            counter("manifests_replaced_total", "Held blob manifests that gave way to a holder's that agreed with every proven entry.", b.manifestsReplaced),
            counter("unproven_chunks_total", "Blob chunks that matched the manifest before their entry was proven (dropped, asked again).", b.unprovenChunks),
            Family("shoal_blob_transfer_fetches", .gauge, help: "Blobs being fetched from peers now.", value: counters.blobFetches.count),
        ]
    }

    var meshFamilies: [Family] {
        var f = [
            Family("shoal_discovered_peers", .gauge, help: "Peers of the group heard now on any transport.", value: mesh.counters.discoveredPeers),
            Family("shoal_connected_peers", .gauge, help: "Peers linked now.", value: mesh.counters.connectedPeers),
            Family("shoal_mesh_state", .gauge, help: "The mesh's state (the ObjectBox seed's names): 1 for the current one, 0 for the others.",
                   GatewayMetrics.stateSet([MeshState.created, .discovering, .fullyConnected, .stopped, .dead].map(\.rawValue), current: mesh.state.rawValue)),
            Family("shoal_clock_skewed_peers", .gauge, help: "Peers seen with a clock ahead of ours (their timestamps do not move our clock).",
                   value: counters.skewedPeers.count),
        ]
        f.append(Family("shoal_transport_active", .gauge, help: "Whether a transport works now (advertising and discovery): 1 or 0.",
                        mesh.transports.map { Sample([("transport", $0.key.rawValue)], $0.value.active ? 1 : 0) }))
        return f
    }

    var peerFamilies: [Family] {
        var online: [Sample] = [], link: [Sample] = [], lag: [Sample] = [], idle: [Sample] = [], rate: [Sample] = []
        for p in mesh.peers {
            let id = p.info.peer.description
            online.append(Sample([("peer", id)], p.info.online ? 1 : 0))
            if let t = p.info.connectedOn {
                let direction = p.info.outgoing.map { $0 ? "outgoing" : "incoming" } ?? "unknown"
                link.append(Sample([("peer", id), ("transport", t.rawValue), ("direction", direction)], 1))
                lag.append(Sample([("peer", id)], p.sync?.remaining ?? 0))
                if let r = p.sync?.perSecond { rate.append(Sample([("peer", id)], r)) }
            }
            if let last = p.lastActivityMillis {
                idle.append(Sample([("peer", id)], Double(max(0, nowMillis - last)) / 1000))
            }
        }
        return [
            Family("shoal_peer_online", .gauge, help: "Whether a peer the mesh knows is heard now: 1 or 0.", online),
            Family("shoal_peer_link_info", .gauge, help: "A linked peer, with the transport in use and who dialled (always 1).", link),
            Family("shoal_peer_replication_lag_documents", .gauge,
                   help: "Documents a linked peer announced that this gateway lacks and has not yet applied (0 when in step).", lag),
            Family("shoal_peer_sync_documents_per_second", .gauge, help: "Documents per second pulled from a peer while a sync runs.", rate),
            Family("shoal_peer_idle_seconds", .gauge, help: "Seconds since a replication message last went to or came from a peer.", idle),
        ]
    }

    var storeFamilies: [Family] {
        var f = [Family("shoal_store_up", .gauge, help: "Whether the store is open: 1 or 0 (restarting).", value: collections == nil ? 0 : 1)]
        if let s = storeBytes {
            f.append(Family("shoal_store_size_bytes", .gauge, help: "Size of the store's files (database and write-ahead log) in bytes.", value: s))
        }
        if let s = lastSequence {
            f.append(Family("shoal_store_last_sequence", .gauge, help: "The last sequence number of the store's change feed.", value: Int(s)))
        }
        if let collections {
            f.append(Family("shoal_collection_documents", .gauge, help: "Live documents per collection.",
                            collections.map { Sample([("collection", $0.name)], Int($0.documents)) }))
            f.append(Family("shoal_collection_tombstones", .gauge, help: "Tombstones (deleted documents kept for replication) per collection.",
                            collections.map { Sample([("collection", $0.name)], Int($0.tombstones)) }))
        }
        if let e = expiry {
            f.append(Family("shoal_documents_expired_total", .counter,
                            help: "Documents purged locally without a tombstone, by reason: expired (a local expiry), ttl, budget.",
                            [Sample([("reason", "expired")], Int(e.expired)), Sample([("reason", "ttl")], Int(e.ttl)),
                             Sample([("reason", "budget")], Int(e.budget))]))
            f.append(Family("shoal_documents_expiry_refused_total", .counter,
                            help: "Documents refused on receive: expired by this gateway's TTL, or a version it purged itself.", value: Int(e.refused)))
        }
        if let b = blobs {
            let v = { (k: String) in Int(b[k] ?? 0) }
            f.append(Family("shoal_blobs", .gauge, help: "Blobs held, complete or partial.", value: v("count")))
            f.append(Family("shoal_blob_bytes", .gauge, help: "Bytes of blob chunks held, by state.",
                            [Sample([("state", "all")], v("bytes")), Sample([("state", "partial")], v("partialBytes"))]))
            if let budget = b["budget"] {
                f.append(Family("shoal_blob_budget_bytes", .gauge, help: "storage.blobBudget: the bytes of blob chunks the gateway may hold.", value: Int(budget)))
            }
            f.append(Family("shoal_blobs_collected_total", .counter, help: "Blobs dropped by the blob GC since start.", value: v("gcDropped")))
            f.append(Family("shoal_blob_collected_bytes_total", .counter, help: "Bytes of blobs dropped by the blob GC since start.", value: v("gcDroppedBytes")))
            f.append(Family("shoal_blob_over_budget_total", .counter, help: "GC passes that ended over the budget with only blobs that must stay.", value: v("gcOverBudget")))
        }
        return f
    }

    var supervisionFamilies: [Family] {
        [
            Family("shoal_supervision_restarts_total", .counter, help: "Restarts of each supervised child since the gateway started.",
                   children.map { Sample([("child", $0.path)], $0.restarts) }),
            Family("shoal_supervision_child_state", .gauge, help: "Each supervised child's current state (always 1; the state is the label).",
                   children.map { Sample([("child", $0.path), ("state", $0.state.rawValue)], 1) }),
        ]
    }

    /// An enum as a gauge: one sample per state, 1 for the current one.
    static func stateSet(_ states: [String], current: String) -> [Sample] {
        states.map { Sample([("state", $0)], $0 == current ? 1 : 0) }
    }
}
