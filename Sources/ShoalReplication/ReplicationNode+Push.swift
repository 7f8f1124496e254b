import ShoalCore
import ShoalStore
import ShoalWire

/// The pushing side of a link: announcing batches of changes, serving requests for bodies.
extension ReplicationNode {
    /// Announces the next batches of a push stream while fewer than `batchWindow` are unacknowledged,
    /// so the pusher reads and sends while the receiver applies.
    func pump(_ l: Link, _ name: String, _ stream: PushStream) throws(StoreError) -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        while stream.inFlight.count < settings.batchWindow {
            let next = try announceNext(l, name, stream)
            if next.isEmpty { break }
            actions += next
        }
        return actions
    }

    func announceNext(_ l: Link, _ name: String, _ stream: PushStream) throws(StoreError) -> [ReplicationAction] {
        guard l.onTree, let policy = policies[name], let peerID = l.peer else { return [] }
        if onlyEchoesSince(stream) { return [] }
        let maxCount = l.maxCount ?? settings.batchMaxCount
        var changes = try store.changes(in: policy.name, since: Int64(stream.announcedUpTo), limit: maxCount)
        // An announce is bounded by bytes too (versions with many field stamps are large): the
        // changes past the budget wait for the next batch.
        var bytes = 0
        if let cut = changes.firstIndex(where: { c in bytes += c.id.utf8.count + c.version.count + 16; return bytes > frameBudget(l) }) {
            changes.removeSubrange(max(cut, 1)...)
        }
        guard let last = changes.last else { return [] }
        var announced: [ReplicationMessage.AnnouncedChange] = []
        var ids: [String: (deleted: Bool, version: [UInt8])] = [:]
        for c in changes {
            if stream.echoes.remove(c.sequence) != nil { continue }
            if let only = policy.documentIDs, !only.contains(c.id) { continue }
            if let filter = policy.pushFilter {
                guard let docID = try? DocumentID(c.id) else { continue }
                let doc = try store.get(policy.name, id: docID)
                let version = (try? DocumentVersion(decoding: c.version)) ?? DocumentVersion(vector: VersionVector(), bodyDigest: 0)
                if !filter(peerID, ReplicatedDocument(collection: policy.name, id: c.id, body: doc?.body, version: version)) { continue }
            }
            announced.append(.init(sequence: UInt64(c.sequence), id: c.id, deleted: c.deleted,
                                   version: l.protocol2 ? c.version : DocumentVersion.documentLevel(c.version)))
            ids[c.id] = (c.deleted, c.version)
        }
        // Echo records this batch passed are done with (a document changed again since has a new sequence).
        if !stream.echoes.isEmpty { stream.echoes = stream.echoes.filter { $0 > last.sequence } }
        if announced.isEmpty && !changes.isEmpty && changes.count < maxCount && bytes <= frameBudget(l) {
            // Only echoes (or filtered changes) and nothing more to read: nothing to tell the peer.
            // The next batch's upTo covers these sequences; no announce, no acknowledgement.
            stream.announcedUpTo = UInt64(last.sequence)
            return []
        }
        let batch = l.nextBatch
        l.nextBatch += 1
        stream.inFlight.append((batch, UInt64(last.sequence), ids))
        precondition(stream.inFlight.count <= settings.batchWindow, "more batches in flight than batchWindow")
        stream.announcedUpTo = UInt64(last.sequence)
        if settings.eagerBodyBytes > 0, !announced.isEmpty, announced.count <= settings.eagerMaxCount {
            // Pruned: a live batch still, without its bodies (the peer asks for what it lacks).
            let bodies = stream.lazy ? [] : try eagerBodies(l, policy, announced)
            return [.send(l.id, ReplicationMessage.push(collection: name, batch: batch, upTo: UInt64(last.sequence), changes: announced, documents: bodies).encoded())]
        }
        return [.send(l.id, ReplicationMessage.announce(collection: name, batch: batch, upTo: UInt64(last.sequence), changes: announced).encoded())]
    }

    /// What one announce's entries, or one push's bodies, may take: txLogBatchSizeKb, the link's
    /// frame size on a slow link, and never more than half a frame (a push carries both).
    func frameBudget(_ l: Link) -> Int {
        min(settings.batchSizeBytes, l.frameBytes ?? .max, ReplicationMessage.frameLimit / 2)
    }

    /// True (and the stream moved past them) when every change committed since the stream's last
    /// announce is an echo of this collection: a document this link's peer gave us, applied as it
    /// sent it. A pull then costs no read of the change feed per batch received. (Any other
    /// change in between, of any collection, and the feed is read as before.)
    func onlyEchoesSince(_ stream: PushStream) -> Bool {
        guard !stream.echoes.isEmpty else { return false }
        let from = Int64(stream.announcedUpTo), last = store.lastSequence
        guard last > from, last - from <= Int64(stream.echoes.count) else { return false }
        for s in (from + 1)...last where !stream.echoes.contains(s) { return false }
        for s in (from + 1)...last { stream.echoes.remove(s) }
        stream.announcedUpTo = UInt64(last)
        return true
    }

    /// The bodies of small announced documents (and tombstones), as they stand, up to one frame's
    /// worth (txLogBatchSizeKb).
    func eagerBodies(_ l: Link, _ policy: CollectionPolicy, _ announced: [ReplicationMessage.AnnouncedChange]) throws(StoreError) -> [ReplicationMessage.DocumentBody] {
        let docs = try store.transaction { (tx) throws(StoreError) -> [StoredDocument?] in
            try announced.map { (c) throws(StoreError) in try tx.get(policy.name, id: c.id) }
        }
        var out: [ReplicationMessage.DocumentBody] = []
        var total = 0
        for (c, doc) in zip(announced, docs) {
            // Changed since: let it be requested. (The announce has the version in the peer's form.)
            guard let doc, (l.protocol2 ? doc.version : DocumentVersion.documentLevel(doc.version)) == c.version else { continue }
            let body = Array((doc.body ?? "").utf8)
            guard body.count <= settings.eagerBodyBytes, total + body.count <= frameBudget(l) else { continue }
            total += body.count
            // The version is the announced one: not sent twice (see ReplicationMessage.push).
            out.append(.init(id: c.id, deleted: doc.isDeleted, version: [], body: body))
        }
        return out
    }

    func serveRequest(_ l: Link, _ peerID: PeerID, _ name: String, _ batch: UInt64, _ ids: [String]) throws -> [ReplicationAction] {
        guard let policy = policies[name], let stream = l.push[name], let f = stream.inFlight.first(where: { $0.batch == batch }) else {
            throw ReplicationError.protocolViolation("request for batch \(batch) we did not announce")
        }
        guard ids.allSatisfy({ f.announced[$0] != nil }) else { throw ReplicationError.protocolViolation("request for a document we did not announce") }
        // The peer needed what we announced: push to it again (see `prune`).
        if !ids.isEmpty { stream.lazy = false }
        let docs = try store.transaction { (tx) throws(StoreError) -> [StoredDocument?] in
            try ids.map { (id) throws(StoreError) in try tx.get(policy.name, id: id) }
        }
        var actions: [ReplicationAction] = []
        var frame: [ReplicationMessage.DocumentBody] = []
        var frameBytes = 0
        func flush(final: Bool) {
            actions.append(.send(l.id, ReplicationMessage.documents(collection: name, batch: batch, final: final, documents: frame).encoded()))
            frame = []
            frameBytes = 0
        }
        for (id, doc) in zip(ids, docs) {
            // A document gone since the announcement goes out with an empty version: "not here".
            let body = Array((doc?.body ?? "").utf8)
            if !frame.isEmpty && (frameBytes + body.count > frameBudget(l) || frame.count >= settings.batchMaxCount) { flush(final: false) }
            // Unchanged since the announce, to a peer that takes it: "as announced", no version.
            if let doc, l.takesAnnouncedVersions, !doc.version.isEmpty, f.announced[id]?.version == doc.version {
                frame.append(.init(id: id, deleted: doc.isDeleted, version: [], body: body, asAnnounced: true))
                frameBytes += body.count + id.utf8.count
                continue
            }
            let version = doc.map { l.protocol2 ? $0.version : DocumentVersion.documentLevel($0.version) } ?? []
            frame.append(.init(id: id, deleted: doc?.isDeleted ?? true, version: version, body: body))
            frameBytes += body.count + id.utf8.count + version.count
        }
        flush(final: true)
        return actions
    }
}
