import ShoalCore
import ShoalReplication

/// One gateway's update status, as kept in `_system._status` under the gateway's peer id: the
/// version it runs and what became of its last update attempt. Each gateway writes only its own;
/// they replicate like documents, so an operator reads every gateway's from any gateway.
///
/// What a reader gets wrong: a status document is not signed; what protects it is who wrote it.
/// A gateway takes one from a peer only when the document's latest write is the very peer it is
/// about (`acceptsReplicated`), so a relay can pass it on but cannot forge it.
public struct UpdateStatus: Sendable, Equatable {
    public static let formatVersion = 1
    public static let maxBytes = 4096
    public static let maxReasonBytes = 512

    public enum Outcome: String, Sendable, CaseIterable {
        /// Nothing attempted yet.
        case none
        /// The release is being fetched (its blob demanded).
        case fetching
        /// A release was refused (bad signature, wrong binary, below the minimum version…).
        case refused
        /// Installed; the gateway restarts into it and must confirm it.
        case installed
        /// The new binary reached READY and a health check in time.
        case confirmed
        /// The new binary crashed or never became ready: the previous one runs again.
        case rolledBack = "rolled-back"
    }

    public var peer: PeerID
    public var running: String
    public var architecture: String
    /// The version the last attempt was about (empty when none).
    public var attempted: String
    public var outcome: Outcome
    public var reason: String
    /// When the outcome was reached, and when the gateway started (seconds since 1970).
    public var outcomeAt: Int64
    public var startedAt: Int64

    public init(peer: PeerID, running: String, architecture: String, attempted: String = "", outcome: Outcome = .none, reason: String = "",
                outcomeAt: Int64 = 0, startedAt: Int64) {
        self.peer = peer
        self.running = running
        self.architecture = architecture
        self.attempted = attempted
        self.outcome = outcome
        self.reason = String(reason.utf8.prefix(UpdateStatus.maxReasonBytes)) ?? ""
        self.outcomeAt = outcomeAt
        self.startedAt = startedAt
    }

    public var documentID: String { peer.description }

    public var body: String {
        JSONValue.object([
            "v": .int(Int64(UpdateStatus.formatVersion)), "peer": .string(peer.description), "running": .string(running),
            "architecture": .string(architecture), "attempted": .string(attempted), "outcome": .string(outcome.rawValue),
            "reason": .string(reason), "outcomeAt": .int(outcomeAt), "startedAt": .int(startedAt),
        ]).compactText
    }

    public static func decode(_ body: String) throws(TrustError) -> UpdateStatus {
        let known: Set<String> = ["v", "peer", "running", "architecture", "attempted", "outcome", "reason", "outcomeAt", "startedAt"]
        let o = try SignedForm.object(body, maxBytes: maxBytes, known: known, what: "status")
        try SignedForm.formatVersion(o, formatVersion)
        guard let p = o["peer"]?.stringValue, p.utf8.count == 64, SignedForm.isHex(p), let peer = PeerID(hex: p) else { throw TrustError("peer must be a peer id (64 lower-case hex digits)") }
        func text(_ key: String, max: Int = 64) throws(TrustError) -> String {
            guard let s = o[key]?.stringValue, s.utf8.count <= max else { throw TrustError("\(key) must be a string of at most \(max) bytes") }
            return s
        }
        let running = try text("running"), architecture = try text("architecture"), attempted = try text("attempted")
        let reason = try text("reason", max: maxReasonBytes)
        guard let ot = o["outcome"]?.stringValue, let outcome = Outcome(rawValue: ot) else {
            throw TrustError("outcome must be one of \(Outcome.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let outcomeAt = SignedForm.integer(o["outcomeAt"]), let startedAt = SignedForm.integer(o["startedAt"]) else {
            throw TrustError("outcomeAt and startedAt must be whole seconds since 1970")
        }
        return UpdateStatus(peer: peer, running: running, architecture: architecture, attempted: attempted, outcome: outcome, reason: reason,
                             outcomeAt: outcomeAt, startedAt: startedAt)
    }

    /// Whether a replicated `_status` document may be taken: a well-formed status, kept under the
    /// id of the peer it names, whose latest write is that peer's. A deletion is refused (a
    /// gateway's status is replaced, never deleted). Nil when it may, else why not.
    public static func refusal(of doc: ReplicatedDocument) -> String? {
        guard let body = doc.body else { return "a deletion: status documents are replaced, never deleted" }
        let status: UpdateStatus
        do { status = try decode(body) } catch { return error.description }
        guard status.documentID == doc.id else { return "kept as \(doc.id) but about peer \(status.peer)" }
        guard let writer = doc.version.vector.current?.peer, writer == status.peer else {
            return "written by another peer than the one it is about (\(status.peer.short))"
        }
        return nil
    }

    /// The `_status` collection's pull filter.
    public static let pullFilter: @Sendable (PeerID, ReplicatedDocument) -> Bool = { _, doc in refusal(of: doc) == nil }
}
