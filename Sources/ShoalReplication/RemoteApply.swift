import ShoalCore
import ShoalStore

/// Applying a document that came from elsewhere — a mesh peer or the uplink's hub — to the store:
/// the one place versions are compared and concurrent ones resolved, so every path that brings a
/// document in resolves it alike and the mesh and the hub converge on the same body and version.
public struct RemoteApply {
    let store: DocumentStore
    let wallMillis: UInt64

    public init(store: DocumentStore, wallMillis: UInt64) {
        self.store = store
        self.wallMillis = wallMillis
    }

    public struct Outcome: Sendable {
        public var remoteCurrent: HLCTimestamp?
        public var error: String?
        /// The local sequence of a write that took the sender's version as it was (no merge): the
        /// sender need not hear of it again.
        public var tookSenderVersionAt: Int64?
    }

    /// Resolves one incoming document against the local one and writes the result, in `tx`.
    /// `source` names where it came from in the conflict log (a peer id, or the uplink's hub);
    /// `peerID` is who filters and resolvers see as the sender.
    public func apply(_ tx: StoreTransaction, _ policy: CollectionPolicy, from source: String, peerID: PeerID, _ checked: CheckedDocument,
                      purgeHorizon horizon: UInt64, conflicts: inout [ConflictRecord]) throws(StoreError) -> Outcome {
        let d = checked.raw
        guard let remoteVersion = checked.version, let docID = checked.id, checked.problem == nil else {
            return Outcome(remoteCurrent: checked.version?.vector.current?.timestamp, error: checked.problem ?? "unreadable document")
        }
        let remoteBody = checked.body
        let remote = ReplicatedDocument(collection: policy.name, id: d.id, body: remoteBody, version: remoteVersion)
        var outcome = Outcome(remoteCurrent: remoteVersion.vector.current?.timestamp)
        if let filter = policy.pullFilter, !filter(peerID, remote) {
            outcome.error = "refused by the pull filter"
            return outcome
        }
        // Expiration (see DocumentStore+Expiry): expired by the TTL, or a version purged here.
        // Whether we hold it matters only against a purge record; with none, skip the lookup.
        let holdsLocal = tx.purgeRecordsMayExist ? try tx.version(policy.name, id: d.id) != nil : false
        if let why = try tx.expiryRefusal(policy.name, id: d.id, version: d.version, ttlMillis: policy.ttlMillis,
                                          nowMillis: Int64(clamping: wallMillis), holdsLocal: holdsLocal) {
            store.noteRefusedExpired(1)
            outcome.error = why
            return outcome
        }
        // Same rule as at announce time: a purge may have happened since we asked for it. It only
        // matters for a document we hold nothing of, and only an old one.
        let beforeHorizon = horizon > 0 && (remoteVersion.vector.current?.timestamp.physicalMillis ?? 0) <= horizon
        if !beforeHorizon,
           let change = try tx.insertIfAbsent(DocumentWrite(collection: policy.name, id: docID, body: remoteBody, version: d.version), bodyValidated: true) {
            outcome.tookSenderVersionAt = change.sequence
            return outcome  // new here: stored in one statement
        }
        guard let localMeta = try tx.version(policy.name, id: d.id) else {
            outcome.error = "refused: older than our purge horizon"
            conflicts.append(ConflictRecord(collection: policy.name, id: d.id, localVersion: [], remoteVersion: d.version,
                                            peer: source, resolver: "purgeHorizon", outcome: "refused: older than our purge horizon",
                                            atMillis: Int64(wallMillis), remoteBody: remoteBody))
            return outcome
        }
        let localVersion = (try? DocumentVersion(decoding: localMeta.version)) ?? DocumentVersion(vector: VersionVector(), bodyDigest: 0)
        switch remoteVersion.vector.compare(localVersion.vector) {
        case .dominated:
            return outcome
        case .equal:
            if remoteVersion.bodyDigest > localVersion.bodyDigest {
                outcome.tookSenderVersionAt = try tx.write(DocumentWrite(collection: policy.name, id: docID, body: remoteBody, version: d.version), bodyValidated: true).sequence
            }
            return outcome
        case .dominates:
            outcome.tookSenderVersionAt = try tx.write(DocumentWrite(collection: policy.name, id: docID, body: remoteBody, version: d.version), bodyValidated: true).sequence
            return outcome
        case .concurrent:
            // Only a conflict needs the local body.
            guard let local = try tx.get(policy.name, id: d.id) else { return outcome }
            let localDoc = ReplicatedDocument(collection: policy.name, id: d.id, body: local.body, version: localVersion)
            let (body, version, label) = resolve(localDoc, remote, policy: policy, peerID: peerID)
            try tx.write(DocumentWrite(collection: policy.name, id: docID, body: body, version: version.encoded), bodyValidated: true)
            conflicts.append(ConflictRecord(collection: policy.name, id: d.id, localVersion: local.version, remoteVersion: d.version,
                                            peer: source, resolver: policy.resolver.name, outcome: label,
                                            atMillis: Int64(wallMillis), localBody: local.body, remoteBody: remoteBody))
            return outcome
        }
    }

    /// What two concurrent versions resolve to by the collection's resolver: the body, a version
    /// that dominates both (their pointwise maximum, the new body's digest), and what won.
    public func resolve(_ local: ReplicatedDocument, _ remote: ReplicatedDocument, policy: CollectionPolicy,
                        peerID: PeerID) -> (body: String?, version: DocumentVersion, label: String) {
        let decision: Resolution
        if policy.resolver.joinsFields {
            if let joined = FieldMerge.join((local.body, local.version), (remote.body, remote.version)),
               (try? store.validateBody(joined.body)) != nil {
                return (joined.body, joined.version, "merged fields")
            }
            // A delete, a body that is not an object, or a join larger than a body may be (both
            // sides' fields): the whole-document rule, alike on every gateway.
            decision = ConflictResolver.lastWriteWins.resolve(peerID, local, remote)
        } else {
            decision = policy.resolver.resolve(peerID, local, remote)
        }
        var body: String?
        var label: String
        switch decision {
        case .keepLocal: body = local.body; label = "local"
        case .takeRemote: body = remote.body; label = "remote"
        case .delete: body = nil; label = "deleted"
        case .merged(let merged):
            do { try store.validateBody(merged); body = merged; label = "merged" } catch {
                body = local.body; label = "local (resolver returned an invalid body)"
            }
        }
        let vector = local.version.vector.merged(with: remote.version.vector)
        // A field-joining collection keeps the stamps of the side that won whole (a delete against
        // an edit, a body that is not an object).
        var fields: [String: FieldStamp] = [:]
        if policy.resolver.joinsFields, body != nil {
            if label == "local" { fields = FieldMerge.stamps(of: local.body, local.version, under: vector) }
            if label == "remote" { fields = FieldMerge.stamps(of: remote.body, remote.version, under: vector) }
        }
        return (body, DocumentVersion(vector: vector, bodyDigest: DocumentVersion.digest(of: body), fields: fields), label)
    }

    /// Below this (physical milliseconds), documents this node holds nothing of are refused: their
    /// tombstones may have been purged here (see `TombstoneRetention`).
    public static func purgeHorizon(_ tx: StoreTransaction) throws(StoreError) -> Int64 {
        Int64(try tx.metadata(DocumentStore.purgeHorizonKey) ?? "0") ?? 0
    }
}
