import ShoalCore
import ShoalStore
import ShoalWire

/// One gateway's replicator for all its links: a sans-IO state machine. The driver reports links
/// opening and closing, frames arriving, local commits and the passing of time; the node answers
/// with frames to send, links to close and events.
///
/// Per link and collection, each side that pulls subscribes from its checkpoint; the pusher
/// announces changes (ids, versions, flags) in batches; the receiver requests only what it lacks —
/// unless another link already has that document in flight, younger than requestTimeoutMillis;
/// bodies come back in frames bounded by size and count and are applied one frame per store
/// transaction; once every announced document is held, the receiver moves its checkpoint (durably)
/// and acknowledges; the pusher then announces the next batch. A restart resumes from the
/// checkpoint, so nothing acknowledged is announced again and nothing is skipped.
///
/// What a reader gets wrong: the node is not thread-safe and calls the store synchronously —
/// drive it from one thread of your own.
public final class ReplicationNode {
    public let peer: PeerID
    public let group: String
    public let store: DocumentStore
    public let clock: NodeClock
    public let settings: ReplicationSettings
    public let writer: LocalWriter
    let policies: [String: CollectionPolicy]

    var links: [LinkID: Link] = [:]
    /// The latest time the driver reported (for requests made outside a timed call).
    var lastNow: UInt64 = 0
    /// Documents requested from some link and not yet received: (collection, id) → (link, when).
    var inFlight: [DocKey: (link: LinkID, at: UInt64)] = [:]

    struct DocKey: Hashable {
        let collection: String
        let id: String
    }

    final class Link {
        let id: LinkID
        var peer: PeerID?
        var nextBatch: UInt64 = 1
        var push: [String: PushStream] = [:]
        /// Announced batches not yet acknowledged, oldest first, per collection.
        var pull: [String: [InboundBatch]] = [:]
        var skewReported = false
        /// The peer's purge horizon (from its HELLO): it may no longer hold tombstones older than this.
        var remotePurgeHorizon: UInt64 = 0
        init(id: LinkID) { self.id = id }
    }

    final class PushStream {
        /// The peer acknowledged everything up to here.
        var since: UInt64
        /// Announced up to here (acknowledged or not).
        var announcedUpTo: UInt64
        /// Batches announced and not yet acknowledged, oldest first (at most `batchWindow`).
        var inFlight: [(batch: UInt64, upTo: UInt64, announced: [String: Bool])] = []
        init(since: UInt64) {
            self.since = since
            announcedUpTo = since
        }
    }

    final class InboundBatch {
        let batch: UInt64
        let upTo: UInt64
        /// Announced documents not yet held: id → announced change.
        var waiting: [String: ReplicationMessage.AnnouncedChange] = [:]
        var requested: Set<String> = []
        var deferred: Set<String> = []
        init(batch: UInt64, upTo: UInt64) {
            self.batch = batch
            self.upTo = upTo
        }
    }

    public init(peer: PeerID, group: String, store: DocumentStore, clock: NodeClock, collections: [CollectionPolicy],
                settings: ReplicationSettings = ReplicationSettings()) {
        self.peer = peer
        self.group = group
        self.store = store
        self.clock = clock
        self.settings = settings
        self.writer = LocalWriter(peer: peer, store: store, clock: clock)
        var p: [String: CollectionPolicy] = [:]
        for c in collections { p[c.name.description] = c }
        policies = p
    }

    /// Peers with a link that finished HELLO.
    public var connectedPeers: [PeerID] { links.values.compactMap(\.peer) }

    // MARK: - Driver events

    public func linkOpened(_ link: LinkID, neighbours: [PeerID] = []) -> [ReplicationAction] {
        links[link] = Link(id: link)
        let offers = policies.values.sorted { $0.name < $1.name }.map {
            ReplicationMessage.CollectionOffer(name: $0.name.description, push: $0.push, pull: $0.pull)
        }
        let hello = ReplicationMessage.hello(version: ReplicationMessage.protocolVersion, peer: peer, group: group, capabilities: 0,
                                             purgeHorizonMillis: UInt64(max(0, store.purgeHorizonMillis)), neighbours: neighbours, collections: offers)
        return [.send(link, hello.encoded())]
    }

    public func linkClosed(_ link: LinkID, now: UInt64) -> [ReplicationAction] {
        guard let l = links.removeValue(forKey: link) else { return [] }
        var actions: [ReplicationAction] = [.event(.linkClosed(link: link, peer: l.peer, error: nil))]
        // Whatever this link was fetching, others may now fetch at once.
        let orphaned = inFlight.filter { $0.value.link == link }.map(\.key)
        for k in orphaned { inFlight.removeValue(forKey: k) }
        if !orphaned.isEmpty { actions += retryDeferred(now: now, force: Set(orphaned)) }
        return actions
    }

    /// A frame's payload arrived on `link`.
    public func frameReceived(_ link: LinkID, _ payload: [UInt8], now: UInt64) -> [ReplicationAction] {
        preparedFramesReceived(link, [ReplicationNode.prepare(payload, maxBodyBytes: store.options.maxBodyBytes)], now: now)
    }

    /// Several frames that arrived together on one link (see `preparedFramesReceived`).
    public func framesReceived(_ link: LinkID, _ payloads: [[UInt8]], now: UInt64) -> [ReplicationAction] {
        let limit = store.options.maxBodyBytes
        return preparedFramesReceived(link, payloads.map { ReplicationNode.prepare($0, maxBodyBytes: limit) }, now: now)
    }

    /// Decodes a frame and checks its documents (version, JSON body, size, digest) without touching
    /// the node: the driver calls it on the link's own thread, so the node's thread only resolves
    /// and writes. Thread-safe.
    public static func prepare(_ payload: [UInt8], maxBodyBytes: Int) -> PreparedFrame {
        let message: ReplicationMessage
        do { message = try ReplicationMessage(decoding: payload) } catch { return PreparedFrame(result: .failure(.wire(error)), checked: nil) }
        guard case .documents(_, _, _, let docs) = message else { return PreparedFrame(result: .success(message), checked: nil) }
        return PreparedFrame(result: .success(message), checked: docs.map { CheckedDocument(checking: $0, maxBodyBytes: maxBodyBytes) })
    }

    /// Frames that arrived together on one link, already prepared. Consecutive document frames of
    /// one batch are applied in a single store transaction (one commit, one fsync with durability
    /// full) instead of one each; everything else is handled frame by frame, in order.
    public func preparedFramesReceived(_ link: LinkID, _ frames: [PreparedFrame], now: UInt64) -> [ReplicationAction] {
        guard let l = links[link] else { return [] }
        lastNow = max(lastNow, now)
        var actions: [ReplicationAction] = []
        var pending: (collection: String, batch: UInt64, docs: [CheckedDocument])?
        func flush() throws -> [ReplicationAction] {
            guard let p = pending, let peerID = l.peer, links[link] != nil else { pending = nil; return [] }
            pending = nil
            return try receiveDocuments(l, peerID, p.collection, p.batch, p.docs, now: now)
        }
        do {
            for frame in frames {
                guard links[link] != nil else { break }
                let message = try frame.result.get()
                if case .documents(let c, let b, _, _) = message, let checked = frame.checked, l.peer != nil {
                    if let p = pending, p.collection == c, p.batch == b {
                        pending!.docs += checked
                        continue
                    }
                    actions += try flush()
                    pending = (c, b, checked)
                    continue
                }
                actions += try flush()
                actions += try handle(message, on: l, now: now)
            }
            actions += try flush()
            return actions
        } catch let error as ReplicationError {
            return actions + fail(l, error, now: now)
        } catch let error as StoreError {
            return actions + fail(l, .store(error), now: now)
        } catch {
            return actions + fail(l, .protocolViolation("\(error)"), now: now)
        }
    }

    /// New local changes were committed (local writes, or documents applied from another link).
    public func localChangesCommitted() -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        for l in links.values.sorted(by: { $0.id < $1.id }) {
            for (name, stream) in l.push.sorted(by: { $0.key < $1.key }) where stream.inFlight.count < settings.batchWindow {
                do { actions += try pump(l, name, stream) } catch { actions += fail(l, .store(error), now: 0) }
            }
        }
        return actions
    }

    /// Time passed: requests deferred to another link whose timeout ran out go to their own link.
    public func tick(now: UInt64) -> [ReplicationAction] {
        lastNow = max(lastNow, now)
        return retryDeferred(now: now, force: [])
    }

    // MARK: - Messages

    func handle(_ message: ReplicationMessage, on l: Link, now: UInt64) throws -> [ReplicationAction] {
        if case .error(let code, let text) = message {
            return fail(l, .remote(code: code, message: text), now: now, tellPeer: false)
        }
        guard let peerID = l.peer else {
            guard case .hello(let version, let remote, let remoteGroup, _, let remoteHorizon, _, let offers) = message else {
                throw ReplicationError.protocolViolation("\(message.kind) before hello")
            }
            guard version == ReplicationMessage.protocolVersion else { throw ReplicationError.protocolVersion(version) }
            guard remoteGroup == group else { throw ReplicationError.wrongGroup(remoteGroup) }
            guard remote != peer else { throw ReplicationError.selfConnection }
            l.peer = remote
            l.remotePurgeHorizon = remoteHorizon
            var actions: [ReplicationAction] = [.event(.peerConnected(link: l.id, peer: remote))]
            for offer in offers.sorted(by: { $0.name < $1.name }) {
                guard let policy = policies[offer.name], policy.pull, offer.push else { continue }
                let since = try store.checkpoint(peer: remote.description, collection: policy.name, direction: .pull)
                actions.append(.send(l.id, ReplicationMessage.subscribe(collection: offer.name, since: UInt64(max(0, since))).encoded()))
            }
            return actions
        }
        switch message {
        case .hello:
            throw ReplicationError.protocolViolation("second hello")
        case .subscribe(let name, let since):
            guard let policy = policies[name], policy.push else { throw ReplicationError.protocolViolation("subscribe to \(name), which we do not push") }
            guard l.push[name] == nil else { throw ReplicationError.protocolViolation("second subscribe to \(name)") }
            let stream = PushStream(since: since)
            l.push[name] = stream
            _ = policy
            return try pump(l, name, stream)
        case .announce(let name, let batch, let upTo, let changes):
            return try receiveAnnounce(l, peerID, name, batch, upTo, changes, now: now)
        case .request(let name, let batch, let ids):
            return try serveRequest(l, peerID, name, batch, ids)
        case .documents(let name, let batch, _, let docs):
            let limit = store.options.maxBodyBytes
            return try receiveDocuments(l, peerID, name, batch, docs.map { CheckedDocument(checking: $0, maxBodyBytes: limit) }, now: now)
        case .acknowledge(let name, let batch, let upTo):
            guard let stream = l.push[name], let f = stream.inFlight.first, f.batch == batch, f.upTo == upTo else {
                throw ReplicationError.protocolViolation("acknowledge of batch \(batch) out of order or never sent")
            }
            stream.since = upTo
            stream.inFlight.removeFirst()
            try store.setCheckpoint(peer: peerID.description, collection: policies[name]!.name, direction: .push, sequence: Int64(upTo))
            var actions: [ReplicationAction] = []
            if !f.announced.isEmpty {
                let items = f.announced.sorted { $0.key < $1.key }.map { ReplicationEvent.Item(collection: name, id: $0.key, deleted: $0.value, error: nil) }
                actions.append(.event(.documents(link: l.id, peer: peerID, direction: .push, items: items)))
            }
            return actions + (try pump(l, name, stream))
        case .error:
            return []
        }
    }

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
        guard let policy = policies[name], let peerID = l.peer else { return [] }
        let changes = try store.changes(in: policy.name, since: Int64(stream.announcedUpTo), limit: settings.batchMaxCount)
        guard let last = changes.last else { return [] }
        var announced: [ReplicationMessage.AnnouncedChange] = []
        var ids: [String: Bool] = [:]
        for c in changes {
            if let only = policy.documentIDs, !only.contains(c.id) { continue }
            if let filter = policy.pushFilter {
                guard let docID = try? DocumentID(c.id) else { continue }
                let doc = try store.get(policy.name, id: docID)
                let version = (try? DocumentVersion(decoding: c.version)) ?? DocumentVersion(vector: VersionVector(), bodyDigest: 0)
                if !filter(peerID, ReplicatedDocument(collection: policy.name, id: c.id, body: doc?.body, version: version)) { continue }
            }
            announced.append(.init(sequence: UInt64(c.sequence), id: c.id, deleted: c.deleted, version: c.version))
            ids[c.id] = c.deleted
        }
        let batch = l.nextBatch
        l.nextBatch += 1
        stream.inFlight.append((batch, UInt64(last.sequence), ids))
        stream.announcedUpTo = UInt64(last.sequence)
        return [.send(l.id, ReplicationMessage.announce(collection: name, batch: batch, upTo: UInt64(last.sequence), changes: announced).encoded())]
    }

    /// Whether the local version already holds everything `announced` carries.
    func localCovers(_ local: [UInt8]?, _ announced: [UInt8]) -> Bool {
        guard let local, let lv = try? DocumentVersion(decoding: local), let rv = try? DocumentVersion(decoding: announced) else { return false }
        switch lv.vector.compare(rv.vector) {
        case .dominates: return true
        case .equal: return lv.bodyDigest >= rv.bodyDigest
        case .dominated, .concurrent: return false
        }
    }

    func receiveAnnounce(_ l: Link, _ peerID: PeerID, _ name: String, _ batch: UInt64, _ upTo: UInt64,
                         _ changes: [ReplicationMessage.AnnouncedChange], now: UInt64) throws -> [ReplicationAction] {
        guard let policy = policies[name], policy.pull else { throw ReplicationError.protocolViolation("announce for \(name), which we do not pull") }
        guard (l.pull[name]?.count ?? 0) < settings.batchWindow * 2 else {
            throw ReplicationError.protocolViolation("more than \(settings.batchWindow * 2) batches announced without waiting for acknowledgements")
        }
        guard changes.count <= max(settings.batchMaxCount, 100_000) else { throw ReplicationError.protocolViolation("announce of \(changes.count) changes") }
        let inbound = InboundBatch(batch: batch, upTo: upTo)
        let locals = try store.transaction { (tx) throws(StoreError) -> [[UInt8]?] in
            try changes.map { (c) throws(StoreError) in try tx.version(policy.name, id: c.id)?.version }
        }
        let horizon = UInt64(max(0, store.purgeHorizonMillis))
        var refused: [ConflictRecord] = []
        for (c, local) in zip(changes, locals) {
            guard (try? DocumentID(c.id)) != nil else { throw ReplicationError.protocolViolation("announced id is not a valid document id") }
            if let only = policy.documentIDs, !only.contains(c.id) { continue }
            guard !localCovers(local, c.version) else { continue }
            if local == nil, horizon > 0, let newest = (try? DocumentVersion(decoding: c.version))?.vector.current,
               newest.timestamp.physicalMillis <= horizon {
                // We hold nothing of it and its newest write predates our purge horizon: it may be
                // a document we deleted and purged since. Refuse it, visibly, rather than revive it.
                refused.append(ConflictRecord(collection: policy.name, id: c.id, localVersion: [], remoteVersion: c.version,
                                              peer: peerID.description, resolver: "purgeHorizon",
                                              outcome: "refused: older than our purge horizon", atMillis: Int64(clock.wallMillis)))
                continue
            }
            inbound.waiting[c.id] = c
            let key = DocKey(collection: name, id: c.id)
            if let f = inFlight[key], f.link != l.id, now < f.at + settings.requestTimeoutMillis {
                inbound.deferred.insert(c.id)
            } else {
                inbound.requested.insert(c.id)
                inFlight[key] = (l.id, now)
            }
        }
        l.pull[name, default: []].append(inbound)
        var actions: [ReplicationAction] = []
        if !refused.isEmpty {
            let records = refused
            try store.transaction { (tx) throws(StoreError) in for r in records { try tx.logConflict(r) } }
            for r in refused { actions.append(.event(.conflict(link: l.id, peer: peerID, record: r))) }
        }
        if !inbound.requested.isEmpty {
            actions.append(.send(l.id, ReplicationMessage.request(collection: name, batch: batch, ids: inbound.requested.sorted()).encoded()))
        }
        actions += try completeIfDone(l, peerID, name)
        return actions
    }

    func serveRequest(_ l: Link, _ peerID: PeerID, _ name: String, _ batch: UInt64, _ ids: [String]) throws -> [ReplicationAction] {
        guard let policy = policies[name], let stream = l.push[name], let f = stream.inFlight.first(where: { $0.batch == batch }) else {
            throw ReplicationError.protocolViolation("request for batch \(batch) we did not announce")
        }
        guard ids.allSatisfy({ f.announced[$0] != nil }) else { throw ReplicationError.protocolViolation("request for a document we did not announce") }
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
            if !frame.isEmpty && (frameBytes + body.count > settings.batchSizeBytes || frame.count >= settings.batchMaxCount) { flush(final: false) }
            frame.append(.init(id: id, deleted: doc?.isDeleted ?? true, version: doc?.version ?? [], body: body))
            frameBytes += body.count + id.utf8.count + (doc?.version.count ?? 0)
        }
        flush(final: true)
        return actions
    }

    func receiveDocuments(_ l: Link, _ peerID: PeerID, _ name: String, _ batch: UInt64,
                          _ docs: [CheckedDocument], now: UInt64) throws -> [ReplicationAction] {
        guard let policy = policies[name], let inbound = l.pull[name]?.first(where: { $0.batch == batch }) else {
            throw ReplicationError.protocolViolation("documents for batch \(batch) we did not request")
        }
        guard docs.allSatisfy({ inbound.requested.contains($0.raw.id) }) else {
            throw ReplicationError.protocolViolation("documents we did not request")
        }
        var items: [ReplicationEvent.Item] = []
        var conflicts: [ConflictRecord] = []
        var skewAhead: UInt64?
        let wall = clock.wallMillis
        try store.transaction { (tx) throws(StoreError) in
            let horizon = UInt64(max(0, try purgeHorizon(tx)))
            for checked in docs {
                let d = checked.raw
                inbound.requested.remove(d.id)
                inbound.waiting.removeValue(forKey: d.id)
                inFlight.removeValue(forKey: DocKey(collection: name, id: d.id))
                guard !d.version.isEmpty else { continue }  // gone at the sender
                let outcome = try apply(tx, policy, from: peerID, checked, purgeHorizon: horizon, conflicts: &conflicts)
                if let ts = outcome.remoteCurrent, !clock.observe(ts), ts.physicalMillis > wall {
                    skewAhead = max(skewAhead ?? 0, ts.physicalMillis - wall)
                }
                items.append(.init(collection: name, id: d.id, deleted: d.deleted, error: outcome.error))
            }
            try clock.persist(in: tx)
            for c in conflicts { try tx.logConflict(c) }
            // Batches these documents completed move their checkpoint in the same commit.
            var upTo: UInt64?
            for b in l.pull[name] ?? [] {
                guard b.waiting.isEmpty else { break }
                upTo = b.upTo
            }
            if let upTo { try tx.setCheckpoint(peer: peerID.description, collection: policy.name, direction: .pull, sequence: Int64(upTo)) }
        }
        var actions: [ReplicationAction] = []
        if !items.isEmpty { actions.append(.event(.documents(link: l.id, peer: peerID, direction: .pull, items: items))) }
        for c in conflicts { actions.append(.event(.conflict(link: l.id, peer: peerID, record: c))) }
        if let ahead = skewAhead, !l.skewReported {
            l.skewReported = true
            actions.append(.event(.clockSkew(link: l.id, peer: peerID, aheadMillis: ahead)))
        }
        actions += try completeIfDone(l, peerID, name)
        // What arrived may be what other links' batches were waiting for.
        actions += try settleDeferred(collection: name, except: l.id)
        if !items.isEmpty { actions += localChangesCommitted() }
        return actions
    }

    struct ApplyOutcome {
        var remoteCurrent: HLCTimestamp?
        var error: String?
    }

    /// Resolves one incoming document against the local one and writes the result, in `tx`.
    func apply(_ tx: StoreTransaction, _ policy: CollectionPolicy, from peerID: PeerID, _ checked: CheckedDocument,
               purgeHorizon horizon: UInt64, conflicts: inout [ConflictRecord]) throws(StoreError) -> ApplyOutcome {
        let d = checked.raw
        guard let remoteVersion = checked.version, let docID = checked.id, checked.problem == nil else {
            return ApplyOutcome(remoteCurrent: checked.version?.vector.current?.timestamp, error: checked.problem ?? "unreadable document")
        }
        let remoteBody = checked.body
        let remote = ReplicatedDocument(collection: policy.name, id: d.id, body: remoteBody, version: remoteVersion)
        var outcome = ApplyOutcome(remoteCurrent: remoteVersion.vector.current?.timestamp)
        if let filter = policy.pullFilter, !filter(peerID, remote) {
            outcome.error = "refused by the pull filter"
            return outcome
        }
        // Same rule as at announce time: a purge may have happened since we asked for it. It only
        // matters for a document we hold nothing of, and only an old one.
        let beforeHorizon = horizon > 0 && (remoteVersion.vector.current?.timestamp.physicalMillis ?? 0) <= horizon
        if !beforeHorizon,
           try tx.insertIfAbsent(DocumentWrite(collection: policy.name, id: docID, body: remoteBody, version: d.version), bodyValidated: true) != nil {
            return outcome  // new here: stored in one statement
        }
        guard let localMeta = try tx.version(policy.name, id: d.id) else {
            outcome.error = "refused: older than our purge horizon"
            conflicts.append(ConflictRecord(collection: policy.name, id: d.id, localVersion: [], remoteVersion: d.version,
                                            peer: peerID.description, resolver: "purgeHorizon", outcome: "refused: older than our purge horizon",
                                            atMillis: Int64(clock.wallMillis)))
            return outcome
        }
        let localVersion = (try? DocumentVersion(decoding: localMeta.version)) ?? DocumentVersion(vector: VersionVector(), bodyDigest: 0)
        switch remoteVersion.vector.compare(localVersion.vector) {
        case .dominated:
            return outcome
        case .equal:
            if remoteVersion.bodyDigest > localVersion.bodyDigest {
                try tx.write(DocumentWrite(collection: policy.name, id: docID, body: remoteBody, version: d.version), bodyValidated: true)
            }
            return outcome
        case .dominates:
            try tx.write(DocumentWrite(collection: policy.name, id: docID, body: remoteBody, version: d.version), bodyValidated: true)
            return outcome
        case .concurrent:
            // Only a conflict needs the local body.
            guard let local = try tx.get(policy.name, id: d.id) else { return outcome }
            let localDoc = ReplicatedDocument(collection: policy.name, id: d.id, body: local.body, version: localVersion)
            let resolution = policy.resolver.resolve(peerID, localDoc, remote)
            var body: String?
            var label: String
            switch resolution {
            case .keepLocal: body = local.body; label = "local"
            case .takeRemote: body = remoteBody; label = "remote"
            case .delete: body = nil; label = "deleted"
            case .merged(let merged):
                do { try store.validateBody(merged); body = merged; label = "merged" } catch {
                    body = local.body; label = "local (resolver returned an invalid body)"
                }
            }
            let version = DocumentVersion(vector: localVersion.vector.merged(with: remoteVersion.vector), bodyDigest: DocumentVersion.digest(of: body))
            try tx.write(DocumentWrite(collection: policy.name, id: docID, body: body, version: version.encoded), bodyValidated: true)
            conflicts.append(ConflictRecord(collection: policy.name, id: d.id, localVersion: local.version, remoteVersion: d.version,
                                            peer: peerID.description, resolver: policy.resolver.name, outcome: label,
                                            atMillis: Int64(clock.wallMillis)))
            return outcome
        }
    }

    func purgeHorizon(_ tx: StoreTransaction) throws(StoreError) -> Int64 {
        Int64(try tx.metadata(DocumentStore.purgeHorizonKey) ?? "0") ?? 0
    }

    /// Acknowledges, oldest first, every batch whose announced documents are all held, moving the
    /// checkpoint (durably) before each acknowledgement. A later batch that completes first waits,
    /// so the checkpoint never passes a document still missing.
    func completeIfDone(_ l: Link, _ peerID: PeerID, _ name: String) throws -> [ReplicationAction] {
        guard let policy = policies[name] else { return [] }
        var actions: [ReplicationAction] = []
        var completed: [InboundBatch] = []
        while let head = l.pull[name]?.first, head.waiting.isEmpty {
            completed.append(head)
            l.pull[name]?.removeFirst()
        }
        guard let last = completed.last else { return [] }
        // One checkpoint write for all of them (a no-op if the documents' commit already wrote it),
        // durable before any acknowledgement leaves.
        let stored = try store.checkpoint(peer: peerID.description, collection: policy.name, direction: .pull)
        if stored < Int64(last.upTo) {
            try store.setCheckpoint(peer: peerID.description, collection: policy.name, direction: .pull, sequence: Int64(last.upTo))
        }
        for b in completed {
            actions.append(.send(l.id, ReplicationMessage.acknowledge(collection: name, batch: b.batch, upTo: b.upTo).encoded()))
        }
        if l.pull[name]?.isEmpty == true { l.pull[name] = nil }
        return actions
    }

    /// Drops deferred documents that are now held (received over another link).
    func settleDeferred(collection name: String, except: LinkID) throws -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        guard let policy = policies[name] else { return [] }
        for l in links.values.sorted(by: { $0.id < $1.id }) where l.id != except {
            guard let batches = l.pull[name], let peerID = l.peer else { continue }
            for inbound in batches where !inbound.deferred.isEmpty {
            let ids = inbound.deferred.sorted()
            let locals = try store.transaction { (tx) throws(StoreError) -> [[UInt8]?] in
                try ids.map { (id) throws(StoreError) in try tx.version(policy.name, id: id)?.version }
            }
            var ask: [String] = []
            for (id, local) in zip(ids, locals) {
                if localCovers(local, inbound.waiting[id]?.version ?? []) {
                    inbound.deferred.remove(id)
                    inbound.waiting.removeValue(forKey: id)
                } else if inFlight[DocKey(collection: name, id: id)] == nil {
                    // What arrived elsewhere was not this version (a concurrent one): ask here now.
                    inbound.deferred.remove(id)
                    inbound.requested.insert(id)
                    inFlight[DocKey(collection: name, id: id)] = (l.id, lastNow)
                    ask.append(id)
                }
            }
            if !ask.isEmpty {
                actions.append(.send(l.id, ReplicationMessage.request(collection: name, batch: inbound.batch, ids: ask).encoded()))
            }
            }
            actions += try completeIfDone(l, peerID, name)
        }
        return actions
    }

    /// Deferred documents whose other request timed out (or whose link closed) are requested here.
    func retryDeferred(now: UInt64, force: Set<DocKey>) -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        for l in links.values.sorted(by: { $0.id < $1.id }) {
            for (name, batches) in l.pull.sorted(by: { $0.key < $1.key }) { for inbound in batches where !inbound.deferred.isEmpty {
                var ask: [String] = []
                for id in inbound.deferred.sorted() {
                    let key = DocKey(collection: name, id: id)
                    if let f = inFlight[key], !force.contains(key), now < f.at + settings.requestTimeoutMillis, links[f.link] != nil { continue }
                    ask.append(id)
                    inFlight[key] = (l.id, now)
                }
                guard !ask.isEmpty else { continue }
                for id in ask {
                    inbound.deferred.remove(id)
                    inbound.requested.insert(id)
                }
                actions.append(.send(l.id, ReplicationMessage.request(collection: name, batch: inbound.batch, ids: ask).encoded()))
            } }
        }
        return actions
    }

    /// Closes a link for `error`: tells the peer why, forgets the link, lets others take over.
    func fail(_ l: Link, _ error: ReplicationError, now: UInt64, tellPeer: Bool = true) -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        if tellPeer { actions.append(.send(l.id, ReplicationMessage.error(code: error.code, message: error.description).encoded())) }
        actions.append(.close(l.id))
        actions.append(.event(.linkClosed(link: l.id, peer: l.peer, error: error)))
        links.removeValue(forKey: l.id)
        let orphaned = inFlight.filter { $0.value.link == l.id }.map(\.key)
        for k in orphaned { inFlight.removeValue(forKey: k) }
        if !orphaned.isEmpty { actions += retryDeferred(now: now, force: Set(orphaned)) }
        return actions
    }
}
