import ShoalCore
import ShoalStore
import ShoalWire

/// The pulling side of a link: deciding what to request, applying bodies (resolving conflicts),
/// moving checkpoints, and sharing requests across links.
extension ReplicationNode {
    /// Whether the local version already holds everything `announced` carries.
    func localCovers(_ local: [UInt8]?, _ announced: [UInt8]) -> Bool {
        guard let local, let lv = try? DocumentVersion(decoding: local), let rv = try? DocumentVersion(decoding: announced) else { return false }
        switch lv.vector.compare(rv.vector) {
        case .dominates: return true
        case .equal: return lv.bodyDigest >= rv.bodyDigest
        case .dominated, .concurrent: return false
        }
    }

    /// `included`: ids whose bodies came with the announce (a push): taken as requested from this
    /// link, without a request, whatever other links have in flight. `live`: a push (its
    /// acknowledgement may wait for the next tick).
    func receiveAnnounce(_ l: Link, _ peerID: PeerID, _ name: String, _ batch: UInt64, _ upTo: UInt64,
                         _ changes: [ReplicationMessage.AnnouncedChange], now: UInt64, included: Set<String> = [], live: Bool = false) throws -> [ReplicationAction] {
        guard let policy = policies[name], policy.pull else { throw ReplicationError.protocolViolation("announce for \(name), which we do not pull") }
        guard (l.pull[name]?.count ?? 0) < settings.batchWindow * 2 else {
            throw ReplicationError.protocolViolation("more than \(settings.batchWindow * 2) batches announced without waiting for acknowledgements")
        }
        guard changes.count <= max(settings.batchMaxCount, 100_000) else { throw ReplicationError.protocolViolation("announce of \(changes.count) changes") }
        // Per collection, batch numbers and upTo rise: a repeated batch would wait for what the
        // first settled, and a lower upTo behind a higher one would let the checkpoint pass it.
        if let last = l.lastInbound[name] {
            guard batch > last.batch, upTo > last.upTo else {
                throw ReplicationError.protocolViolation("announce of batch \(batch) up to \(upTo) after batch \(last.batch) up to \(last.upTo)")
            }
        }
        l.lastInbound[name] = (batch, upTo)
        let inbound = InboundBatch(batch: batch, upTo: upTo)
        inbound.live = live
        inbound.announcedAt = now
        // Bodies on a link we pruned: the pusher pushes again (its own tree moved); prune anew below
        // if they are a second copy still.
        if !included.isEmpty { l.pruned[name] = nil }
        let lazy = l.pruned[name] != nil
        // Room for the whole batch at once: growing a table rehashes every id already in it.
        // (Not the node's inFlight: it lives on, and would keep the largest batch's room.)
        inbound.waiting.reserveCapacity(changes.count)
        inbound.requested.reserveCapacity(changes.count)
        let wallNow = Int64(clamping: clock.wallMillis)
        var expired = 0
        var expiredIDs: Set<String> = []
        let locals = try store.transaction { (tx) throws(StoreError) -> [[UInt8]?] in
            try changes.map { (c) throws(StoreError) -> [UInt8]? in
                let local = try tx.version(policy.name, id: c.id)?.version
                // Expired by the rule here (TTL, or a version this gateway purged): not asked for,
                // and the checkpoint passes it like any settled change (see DocumentStore+Expiry).
                if try tx.expiryRefusal(policy.name, id: c.id, version: c.version, ttlMillis: policy.ttlMillis,
                                        nowMillis: wallNow, holdsLocal: local != nil) != nil {
                    expired += 1
                    expiredIDs.insert(c.id)
                    return c.version
                }
                return local
            }
        }
        store.noteRefusedExpired(expired)
        let horizon = UInt64(max(0, store.purgeHorizonMillis))
        var refused: [ConflictRecord] = []
        var ask: [String] = []  // requested here, in the announce's (sequence) order: no sort needed
        var held = 0  // pushed bodies of documents held already
        for (c, local) in zip(changes, locals) {
            guard (try? DocumentID(c.id)) != nil else { throw ReplicationError.protocolViolation("announced id is not a valid document id") }
            if let only = policy.documentIDs, !only.contains(c.id) { continue }
            guard !localCovers(local, c.version) else {
                if included.contains(c.id), expiredIDs.isEmpty || !expiredIDs.contains(c.id) { held += 1 }
                continue
            }
            if local == nil, horizon > 0, let newest = DocumentVersion.newestTimestamp(encoded: c.version),
               newest.physicalMillis <= horizon {
                // We hold nothing of it and its newest write predates our purge horizon: it may be
                // a document we deleted and purged since. Refuse it, visibly, rather than revive it.
                refused.append(ConflictRecord(collection: policy.name, id: c.id, localVersion: [], remoteVersion: c.version,
                                              peer: peerID.description, resolver: "purgeHorizon",
                                              outcome: "refused: older than our purge horizon", atMillis: Int64(clock.wallMillis)))
                continue
            }
            inbound.waiting[c.id] = c
            let key = DocKey(collection: name, id: c.id)
            if included.contains(c.id) {
                inbound.requested.insert(c.id)
                inFlight[key] = (l.id, now)
            } else if let f = inFlight[key], f.link != l.id, now < f.at + settings.requestTimeoutMillis {
                inbound.deferred.insert(c.id)
            } else if lazy {
                inbound.awaitingPush.insert(c.id)
                awaitingDue = min(awaitingDue ?? .max, now + pruneWait(l))
            } else {
                if inbound.requested.insert(c.id).inserted { ask.append(c.id) }
                inFlight[key] = (l.id, now)
            }
        }
        l.pull[name, default: []].append(inbound)
        // Catch-up only: a live push is not a sync to show progress for (though a short one may
        // be the end of a catch-up).
        l.progress.announce(live ? 0 : inbound.waiting.count, batchCount: changes.count, fullBatch: l.maxCount ?? settings.batchMaxCount, now: now)
        var actions: [ReplicationAction] = []
        if !refused.isEmpty {
            let records = refused
            try store.transaction { (tx) throws(StoreError) in try tx.logConflicts(records) }
            for r in refused { actions.append(.event(.conflict(link: l.id, peer: peerID, record: r))) }
        }
        if held > 0 {
            heldPushedBodies += held
            // Another path brought them first: this link's pushes of the collection are (for now)
            // a second copy. The peer then pushes without bodies; what we lack we request of it.
            // Not when this push left us asking for more, nor unless another unpruned link
            // announces the collection to us (else they came over this one before: a resumed
            // batch, not a second path).
            if l.takesPrune, ask.isEmpty, l.pruned[name] == nil,
               links.values.contains(where: { $0 !== l && $0.pruned[name] == nil && $0.lastInbound[name] != nil }) {
                l.pruned[name] = now
                actions.append(.send(l.id, ReplicationMessage.prune(collection: name).encoded()))
            }
        }
        if !ask.isEmpty {
            actions.append(request(l, name, batch, ask))
        }
        actions += try completeIfDone(l, peerID, name)
        return actions
    }

    /// An announce with bodies: what we lack among the included documents is applied at once
    /// (one transaction), the rest is requested as after an announce.
    func receivePush(_ l: Link, _ peerID: PeerID, _ name: String, _ batch: UInt64, _ upTo: UInt64,
                     _ changes: [ReplicationMessage.AnnouncedChange], _ docs: [CheckedDocument], now: UInt64) throws -> [ReplicationAction] {
        var byID: [String: CheckedDocument] = [:]
        for d in docs { byID[d.raw.id] = d }
        let announced = Set(changes.map(\.id))
        guard byID.keys.allSatisfy({ announced.contains($0) }) else { throw ReplicationError.protocolViolation("pushed a body it did not announce") }
        var actions = try receiveAnnounce(l, peerID, name, batch, upTo, changes, now: now, included: Set(byID.keys), live: true)
        guard links[l.id] != nil, let inbound = l.pull[name]?.first(where: { $0.batch == batch }) else { return actions }
        let apply = inbound.requested.sorted().compactMap { byID[$0] }
        if !apply.isEmpty { actions += try receiveDocuments(l, peerID, name, batch, apply, now: now) }
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
        // Entries sent "as announced" take the version this batch's announce gave them.
        let docs = try docs.map { (c) throws -> CheckedDocument in
            guard c.raw.asAnnounced else { return c }
            guard let change = inbound.waiting[c.raw.id] else {
                throw ReplicationError.protocolViolation("a document sent as announced that this batch did not announce")
            }
            return c.announced(change.version)
        }
        var items: [ReplicationEvent.Item] = []
        var conflicts: [ConflictRecord] = []
        var skewAhead: UInt64?
        var settled = 0
        var echoes: [Int64] = []
        let wall = clock.wallMillis
        let source = peerID.description
        try store.transaction { (tx) throws(StoreError) in
            let horizon = UInt64(max(0, try purgeHorizon(tx)))
            for checked in docs {
                let d = checked.raw
                inbound.requested.remove(d.id)
                if inbound.waiting.removeValue(forKey: d.id) != nil { settled += 1 }
                inFlight.removeValue(forKey: DocKey(collection: name, id: d.id))
                guard !d.version.isEmpty else { continue }  // gone at the sender
                let outcome = try apply(tx, policy, from: peerID, source: source, checked, purgeHorizon: horizon, conflicts: &conflicts)
                if let ts = outcome.remoteCurrent, !clock.observe(ts), ts.physicalMillis > wall {
                    skewAhead = max(skewAhead ?? 0, ts.physicalMillis - wall)
                }
                items.append(.init(collection: name, id: d.id, deleted: d.deleted, error: outcome.error))
                if let seq = outcome.tookSenderVersionAt { echoes.append(seq) }
            }
            try clock.persist(in: tx)
            try tx.logConflicts(conflicts)
            // Batches these documents completed move their checkpoint in the same commit.
            var upTo: UInt64?
            for b in l.pull[name] ?? [] {
                guard b.waiting.isEmpty else { break }
                upTo = b.upTo
            }
            precondition(upTo.map { u in (l.pull[name] ?? []).allSatisfy { $0.upTo > u || $0.waiting.isEmpty } } ?? true,
                         "a checkpoint would pass a missing document")
            if let upTo { try tx.setCheckpoint(peer: l.checkpointKey, collection: policy.name, direction: .pull, sequence: Int64(upTo)) }
        }
        // No echo: if this link pulls from us, do not announce back what it just gave us. Noted
        // only once committed: a failed commit hands those sequences out again, and the push
        // stream skips echoes without reading them (see onlyEchoesSince).
        if let stream = l.push[name] { stream.echoes.formUnion(echoes) }
        if !inbound.live { l.progress.receive(settled, now: now) }
        var actions: [ReplicationAction] = []
        if !items.isEmpty { actions.append(.event(.documents(link: l.id, peer: peerID, direction: .pull, items: items))) }
        for c in conflicts { actions.append(.event(.conflict(link: l.id, peer: peerID, record: c))) }
        if let ahead = skewAhead, !l.skewReported {
            l.skewReported = true
            actions.append(.event(.clockSkew(link: l.id, peer: peerID, aheadMillis: ahead)))
        }
        actions += try completeIfDone(l, peerID, name)
        actions += blobsReferenced(by: docs, collection: name, link: l.id, now: now)
        // What arrived may be what other links' batches were waiting for.
        actions += try settleDeferred(collection: name)
        if !items.isEmpty { actions += localChangesCommitted() }
        return actions
    }

    typealias ApplyOutcome = RemoteApply.Outcome

    /// Resolves one incoming document against the local one and writes the result, in `tx`.
    /// `source`: the peer id as text (the conflict log's), made once per batch, not per document.
    func apply(_ tx: StoreTransaction, _ policy: CollectionPolicy, from peerID: PeerID, source: String, _ checked: CheckedDocument,
               purgeHorizon horizon: UInt64, conflicts: inout [ConflictRecord]) throws(StoreError) -> ApplyOutcome {
        try RemoteApply(store: store, wallMillis: clock.wallMillis)
            .apply(tx, policy, from: source, peerID: peerID, checked, purgeHorizon: horizon, conflicts: &conflicts)
    }

    func purgeHorizon(_ tx: StoreTransaction) throws(StoreError) -> Int64 {
        try RemoteApply.purgeHorizon(tx)
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
        // The checkpoint may pass only batches whose documents are all held.
        precondition(completed.allSatisfy(\.waiting.isEmpty), "a checkpoint would pass a missing document")
        // One checkpoint write for all of them (a no-op if the documents' commit already wrote it),
        // durable before any acknowledgement leaves.
        let stored = try store.checkpoint(peer: l.checkpointKey, collection: policy.name, direction: .pull)
        if stored < Int64(last.upTo) {
            try store.setCheckpoint(peer: l.checkpointKey, collection: policy.name, direction: .pull, sequence: Int64(last.upTo))
        }
        // One cumulative acknowledgement for all of them. Live batches (pushes) may wait for the
        // next tick, so a trickle of single changes does not cost one acknowledgement each; the
        // pusher's window (batchWindow) bounds how many wait.
        let held = l.heldAcks[name]?.count ?? 0
        if completed.allSatisfy(\.live), held + completed.count < max(1, settings.batchWindow / 2) {
            l.heldAcks[name] = (last.batch, last.upTo, held + completed.count)
        } else {
            l.heldAcks[name] = nil
            actions.append(.send(l.id, ReplicationMessage.acknowledge(collection: name, batch: last.batch, upTo: last.upTo).encoded()))
        }
        if l.pull[name]?.isEmpty == true { l.pull[name] = nil }
        return actions
    }

    /// Drops deferred documents that are now held (received over another link, or over this one
    /// for another of its batches: a document changed twice, announced in two).
    func settleDeferred(collection name: String) throws -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        guard let policy = policies[name] else { return [] }
        for l in links.values.sorted(by: { $0.id < $1.id }) {
            guard let batches = l.pull[name], let peerID = l.peer else { continue }
            for inbound in batches where !inbound.deferred.isEmpty || !inbound.awaitingPush.isEmpty {
            let ids = inbound.deferred.union(inbound.awaitingPush).sorted()
            let locals = try store.transaction { (tx) throws(StoreError) -> [[UInt8]?] in
                try ids.map { (id) throws(StoreError) in try tx.version(policy.name, id: id)?.version }
            }
            var ask: [String] = []
            for (id, local) in zip(ids, locals) {
                if localCovers(local, inbound.waiting[id]?.version ?? []) {
                    inbound.deferred.remove(id)
                    inbound.awaitingPush.remove(id)
                    if inbound.waiting.removeValue(forKey: id) != nil, !inbound.live { l.progress.receive(1, now: lastNow) }
                } else if inbound.awaitingPush.contains(id) {
                    continue  // left for the pushing path until the tick says otherwise
                } else if inFlight[DocKey(collection: name, id: id)] == nil {
                    // What arrived elsewhere was not this version (a concurrent one): ask here now.
                    inbound.deferred.remove(id)
                    inbound.requested.insert(id)
                    inFlight[DocKey(collection: name, id: id)] = (l.id, lastNow)
                    ask.append(id)
                }
            }
            if !ask.isEmpty {
                actions.append(request(l, name, inbound.batch, ask))
            }
            }
            actions += try completeIfDone(l, peerID, name)
        }
        return actions
    }

    /// How long what a pruned link (`l`) announced is left for other paths: longer when any link
    /// is slow (the path bringing it may cross Bluetooth LE, whatever `l` is).
    func pruneWait(_ l: Link) -> UInt64 {
        links.values.contains { $0.slow } ? settings.pruneWaitSlowMillis : settings.pruneWaitMillis
    }

    /// A request of `ids` on `l`. It undoes our `prune` there: the peer pushes this collection
    /// again (it had what we needed, so its path is no second copy).
    func request(_ l: Link, _ name: String, _ batch: UInt64, _ ids: [String]) -> ReplicationAction {
        l.pruned[name] = nil
        return .send(l.id, ReplicationMessage.request(collection: name, batch: batch, ids: ids).encoded())
    }

    /// Deferred documents whose other request timed out (or whose link closed) are requested here.
    func retryDeferred(now: UInt64, force: Set<DocKey>) -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        if let due = awaitingDue, now >= due { awaitingDue = nil }
        for l in links.values.sorted(by: { $0.id < $1.id }) {
            for (name, batches) in l.pull.sorted(by: { CollectionName.replicatesBefore($0.key, $1.key) }) { for inbound in batches {
                if !inbound.awaitingPush.isEmpty {
                    if now >= inbound.announcedAt + pruneWait(l) {
                        inbound.deferred.formUnion(inbound.awaitingPush)
                        inbound.awaitingPush = []
                    } else {
                        awaitingDue = min(awaitingDue ?? .max, inbound.announcedAt + pruneWait(l))
                    }
                }
                guard !inbound.deferred.isEmpty else { continue }
                var ask: [String] = []
                for id in inbound.deferred.sorted() {
                    let key = DocKey(collection: name, id: id)
                    if let f = inFlight[key], f.link != l.id, !force.contains(key), now < f.at + settings.requestTimeoutMillis, links[f.link] != nil { continue }
                    ask.append(id)
                    inFlight[key] = (l.id, now)
                }
                guard !ask.isEmpty else { continue }
                for id in ask {
                    inbound.deferred.remove(id)
                    inbound.requested.insert(id)
                }
                actions.append(request(l, name, inbound.batch, ask))
            } }
        }
        return actions
    }
}
