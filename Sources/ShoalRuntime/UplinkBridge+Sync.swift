import ShoalConfig
import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalUplink
import ShoalWire

/// A hub message read as a document version, or why it is not one.
enum ParsedHubMessage {
    case document(HubDocument)
    case foreign(String)
}

extension UplinkBridge {
    // MARK: - Pull

    /// Applies what the consumers delivered, a batch per collection in one transaction each.
    func pullRound() throws -> Bool {
        let batch = inbox.take(max: Self.batchMax)
        guard !batch.isEmpty else { return false }
        var byLane: [Int: [HubMessage]] = [:]
        for (i, m) in batch where i < lanes.count { byLane[i, default: []].append(m) }
        for (i, messages) in byLane.sorted(by: { $0.key < $1.key }) { try applyFromHub(lane: i, messages) }
        succeeded()
        return true
    }

    private func applyFromHub(lane i: Int, _ messages: [HubMessage]) throws {
        let lane = lanes[i]
        let fresh = messages.filter { $0.streamSequence > UInt64(clamping: lane.pullCheckpoint) }
        guard let last = fresh.last else { return }
        var docs: [(HubMessage, HubDocument)] = []
        var foreign: [(HubMessage, String)] = []
        var echoes: Int64 = 0
        for m in fresh {
            if let mine = published[m.subject], mine == m.headers[HubHeader.version] {
                published[m.subject] = nil  // this gateway's own version, back from the hub
                echoes += 1
                continue
            }
            switch parse(m, lane) {
            case .document(let d): docs.append((m, d))
            case .foreign(let why): foreign.append((m, why))
            }
        }
        var conflicts: [ConflictRecord] = []
        var applied: Int64 = 0, unchanged: Int64 = 0
        var refused: [String] = []
        let applier = RemoteApply(store: store, wallMillis: writer.clock.wallMillis)
        let clock = writer.clock
        try store.transaction { (tx) throws(StoreError) in
            let horizon = UInt64(max(0, try RemoteApply.purgeHorizon(tx)))
            for (m, d) in docs {
                let before = conflicts.count
                let outcome = try applier.apply(tx, lane.policy, from: "uplink:\(d.origin)", peerID: d.origin, d.checked,
                                                purgeHorizon: horizon, conflicts: &conflicts)
                if let ts = outcome.remoteCurrent { _ = clock.observe(ts) }
                if let error = outcome.error {
                    refused.append("\(d.id): \(error)")
                    continue
                }
                try tx.setHubHead(hub: Self.hubKey, collection: lane.name, id: d.id, sequence: m.streamSequence, version: d.version)
                if outcome.tookSenderVersionAt != nil || conflicts.count > before { applied += 1 } else { unchanged += 1 }
            }
            try clock.persist(in: tx)
            try tx.logConflicts(conflicts)
            try tx.setCheckpoint(peer: Self.hubKey, collection: lane.name, direction: .pull, sequence: Int64(clamping: last.streamSequence))
        }
        lanes[i].pullCheckpoint = Int64(clamping: last.streamSequence)
        lanes[i].pullPending = last.pending
        let received = Int64(fresh.count), conflicted = Int64(conflicts.count)
        board.update {
            $0.received += received
            $0.applied += applied
            $0.unchanged += unchanged + echoes
            $0.conflicts += conflicted
            if !foreign.isEmpty { $0.skipped["foreign", default: 0] += Int64(foreign.count) }
            if !refused.isEmpty { $0.skipped["refused", default: 0] += Int64(refused.count) }
        }
        for (m, why) in foreign { noteSkipped(lane, "foreign", "\(m.subject) (stream sequence \(m.streamSequence)): \(why)") }
        for why in refused { noteSkipped(lane, "refused", why) }
    }

    /// A hub message as a document of `lane`'s collection, or why it is not one.
    func parse(_ m: HubMessage, _ lane: Lane) -> ParsedHubMessage {
        switch HubDocument.read(subject: m.subject, headers: m.headers, payload: m.payload, collection: lane.name, layout: layout, maxBodyBytes: maxBodyBytes) {
        case .success(let d): .document(d)
        case .failure(let why): .foreign(why.reason)
        }
    }

    // MARK: - Push

    func pushRound(_ client: NATSClient) throws -> Bool {
        var progress = false
        for i in lanes.indices where lanes[i].push && !isStopping {
            progress = try pushLane(i, client) || progress
        }
        return progress
    }

    private struct Pending {
        let change: Change
        let doc: StoredDocument?
        let head: (sequence: UInt64, version: [UInt8])?
    }

    /// Publishes one batch of a collection's changes the hub does not hold, moving the checkpoint
    /// over those it acknowledged or held already.
    /// One batch of a collection's changes, read after `since` and sent.
    private struct PushBatch {
        let since: Int64
        let items: [Pending]
        let requestOf: [Int]
        let needSettling: [Int]
        let alreadyThere: Int64
        let ticket: PublishTicket
        var last: Int64 { items.last?.change.sequence ?? since }
    }

    /// Publishes a collection's changes the hub does not hold, a batch at a time with the next
    /// batch sent before the last one's acknowledgements are awaited (so the server stores one
    /// while the gateway reads the other), moving the checkpoint over those the hub acknowledged
    /// or held already. At most `pushBatchesPerTurn` batches, then the pull gets its turn.
    private func pushLane(_ i: Int, _ client: NATSClient) throws -> Bool {
        var inFlight: PushBatch?
        var from = lanes[i].pushCheckpoint
        var progress = false
        var failure: Error?
        for _ in 0..<Self.pushBatchesPerTurn where !isStopping {
            let next = try sendBatch(i, since: from, client)
            if let next { from = next.last }
            if let batch = inFlight {
                do { try completeBatch(i, batch, client) } catch { failure = failure ?? error }
                progress = true
            }
            inFlight = next
            if next == nil || failure != nil { break }
        }
        if let batch = inFlight {
            do { try completeBatch(i, batch, client) } catch { failure = failure ?? error }
            progress = true
        }
        if let failure { throw failure }
        if progress { succeeded() }
        return progress
    }

    static let pushBatchesPerTurn = 8

    /// Reads up to `pushBatchMax` changes after `since` and sends what the hub does not hold; nil
    /// when there are none.
    private func sendBatch(_ i: Int, since: Int64, _ client: NATSClient) throws -> PushBatch? {
        let lane = lanes[i]
        let changes = try store.changes(in: lane.name, since: since, limit: Self.pushBatchMax)
        guard !changes.isEmpty else { return nil }
        let items = try store.transaction { (tx) throws(StoreError) -> [Pending] in
            try changes.map { (c) throws(StoreError) -> Pending in
                Pending(change: c, doc: try tx.get(lane.name, id: c.id), head: try tx.hubHead(hub: Self.hubKey, collection: lane.name, id: c.id))
            }
        }
        var requests: [PublishRequest] = []
        var requestOf: [Int] = []
        var needSettling: [Int] = []
        var alreadyThere: Int64 = 0
        for (k, it) in items.enumerated() {
            guard let doc = it.doc, !doc.version.isEmpty else { continue }  // purged since, or written without a version
            // The hub holds versions without field stamps (see `request`).
            if let h = it.head, h.version == DocumentVersion.documentLevel(doc.version) { alreadyThere += 1; continue }
            if let h = it.head, !Self.includes(doc.version, h.version) {
                // The hub holds what this gateway did not take in (push only, or refused by the
                // pull filter): resolve the two rather than overwrite it.
                needSettling.append(k)
                continue
            }
            if let filter = lane.policy.pushFilter, let v = try? DocumentVersion(decoding: doc.version),
               !filter(peerID, ReplicatedDocument(collection: lane.name, id: doc.id, body: doc.body, version: v)) { continue }
            requests.append(request(lane, doc, expected: it.head?.sequence ?? 0))
            requestOf.append(k)
        }
        return PushBatch(since: since, items: items, requestOf: requestOf, needSettling: needSettling, alreadyThere: alreadyThere,
                         ticket: client.send(requests))
    }

    /// Takes a sent batch's acknowledgements: hub heads recorded, conflicts settled, and the
    /// checkpoint moved over the done prefix — only if it stood at the batch's start (an earlier
    /// batch that failed keeps it where it is).
    private func completeBatch(_ i: Int, _ batch: PushBatch, _ client: NATSClient) throws {
        let lane = lanes[i]
        let items = batch.items
        let results = client.wait(batch.ticket) { keepStatusCurrent() }
        var done = [Bool](repeating: true, count: items.count)
        var heads: [(String, UInt64, [UInt8])] = []
        var published: Int64 = 0, retries: Int64 = 0
        var firstError: String?
        for (r, k) in zip(results, batch.requestOf) {
            let doc = items[k].doc!
            switch r {
            case .stored(let seq):
                heads.append((doc.id, seq, DocumentVersion.documentLevel(doc.version)))
                noteEcho(layout.subject(lane.name, id: doc.id), doc.version)
                published += 1
            case .wrongLastSequence:
                retries += 1
                if firstError == nil {
                    do { done[k] = try settleConflict(lane, id: doc.id, client) } catch { done[k] = false; firstError = "\(error)" }
                } else {
                    done[k] = false
                }
            case .tooLarge(let why):
                // It can never go up as it is: counted and logged, and the collection goes on.
                board.update { $0.skipped["too_large", default: 0] += 1 }
                noteSkipped(lane, "too_large", "\(doc.id) (\((doc.body ?? "").utf8.count) bytes) is more than the hub takes: \(why); not published — raise the server's max_payload")
            case .failed(let why):
                done[k] = false
                firstError = firstError ?? "publishing \(doc.id) to \(lane.stream): \(why)"
            }
        }
        for k in batch.needSettling {
            guard firstError == nil else { done[k] = false; continue }
            do { done[k] = try settleConflict(lane, id: items[k].change.id, client) } catch { done[k] = false; firstError = "\(error)" }
        }
        var checkpoint = lane.pushCheckpoint
        if lane.pushCheckpoint == batch.since {
            for (k, it) in items.enumerated() {
                guard done[k] else { break }
                checkpoint = it.change.sequence
            }
        }
        let moveTo = checkpoint
        try store.transaction { (tx) throws(StoreError) in
            for (id, seq, version) in heads {
                try tx.setHubHead(hub: Self.hubKey, collection: lane.name, id: id, sequence: seq, version: version)
            }
            if moveTo > lane.pushCheckpoint {
                try tx.setCheckpoint(peer: Self.hubKey, collection: lane.name, direction: .push, sequence: moveTo)
            }
        }
        lanes[i].pushCheckpoint = moveTo
        board.update {
            $0.published += published
            $0.alreadyThere += batch.alreadyThere
            $0.casRetries += retries
        }
        if let firstError { throw UplinkSyncError(text: firstError) }
    }

    /// The hub held a version of `id` this gateway had not seen (the compare-and-set failed): take
    /// it in like a pull would, and publish the result if it differs from the hub's. True when the
    /// hub holds this gateway's version, or one that includes it, or (push-only) one it leaves be.
    private func settleConflict(_ lane: Lane, id: String, _ client: NATSClient) throws -> Bool {
        let subject = layout.subject(lane.name, id: id)
        for _ in 0..<5 {
            let hub = try client.lastMessage(stream: lane.stream, subject: subject)
            var expected: UInt64 = 0
            if let hub {
                expected = hub.streamSequence
                switch parse(hub, lane) {
                case .foreign(let why):
                    // Not a version of ours: this gateway's replaces it.
                    board.update { $0.skipped["foreign", default: 0] += 1 }
                    noteSkipped(lane, "foreign", "\(hub.subject) (stream sequence \(hub.streamSequence)): \(why); replaced by this gateway's version")
                case .document(let d):
                    switch try takeIn(lane, d, at: hub.streamSequence, client) {
                    case .settled: return true
                    case .again: continue
                    case .publishLocal: break
                    }
                }
            }
            guard let docID = try? DocumentID(id), let local = try store.get(lane.name, id: docID), !local.version.isEmpty else { return true }
            let r = client.publish([request(lane, local, expected: expected)])
            switch r.first {
            case .stored(let seq)?:
                try store.transaction { (tx) throws(StoreError) in
                    try tx.setHubHead(hub: Self.hubKey, collection: lane.name, id: id, sequence: seq, version: DocumentVersion.documentLevel(local.version))
                }
                noteEcho(subject, local.version)
                board.update { $0.published += 1 }
                return true
            case .wrongLastSequence?:
                board.update { $0.casRetries += 1 }
                continue
            case .tooLarge(let why)?:
                board.update { $0.skipped["too_large", default: 0] += 1 }
                noteSkipped(lane, "too_large", "\(id) is more than the hub takes: \(why); not published")
                return true
            case .failed(let why)?:
                throw UplinkSyncError(text: "publishing \(id) to \(lane.stream): \(why)")
            case nil:
                return false
            }
        }
        return false
    }

    enum Settle {
        /// Nothing more to publish: the hub holds this gateway's version or one that includes it.
        case settled
        /// This gateway's (now merged) version goes to the hub.
        case publishLocal
        /// The hub moved meanwhile: look again.
        case again
    }

    /// Brings the hub's version `d` (at `sequence`) in, as a pull would; in a push-only
    /// collection, or for a version the pull filter refuses, the two are resolved without writing
    /// here and the resolution is published, so the hub's version is never overwritten unmerged.
    private func takeIn(_ lane: Lane, _ d: HubDocument, at sequence: UInt64, _ client: NATSClient) throws -> Settle {
        guard lane.pull else { return try publishResolution(lane, d, at: sequence, client) }
        var conflicts: [ConflictRecord] = []
        let applier = RemoteApply(store: store, wallMillis: writer.clock.wallMillis)
        let clock = writer.clock
        let refusedBy: String? = try store.transaction { (tx) throws(StoreError) -> String? in
            let horizon = UInt64(max(0, try RemoteApply.purgeHorizon(tx)))
            let outcome = try applier.apply(tx, lane.policy, from: "uplink:\(d.origin)", peerID: d.origin, d.checked,
                                            purgeHorizon: horizon, conflicts: &conflicts)
            if let ts = outcome.remoteCurrent { _ = clock.observe(ts) }
            try clock.persist(in: tx)
            try tx.logConflicts(conflicts)
            if outcome.error == nil {
                try tx.setHubHead(hub: Self.hubKey, collection: lane.name, id: d.id, sequence: sequence, version: d.version)
            }
            return outcome.error
        }
        let n = Int64(conflicts.count)
        if n > 0 { board.update { $0.conflicts += n } }
        if let refusedBy {
            board.update { $0.skipped["refused", default: 0] += 1 }
            noteSkipped(lane, "refused", "\(d.id): \(refusedBy); resolved with this gateway's version on the hub only")
            return try publishResolution(lane, d, at: sequence, client)
        }
        guard let docID = d.checked.id, let local = try store.get(lane.name, id: docID) else { return .settled }
        if DocumentVersion.documentLevel(local.version) == d.version {
            board.update { $0.alreadyThere += 1 }
            return .settled
        }
        return .publishLocal
    }

    /// This gateway's version against the hub's `d` without taking `d` in: publish ours over a
    /// version it includes, leave one that includes ours, and publish the resolution of two
    /// concurrent ones (a version that includes both) with compare-and-set.
    private func publishResolution(_ lane: Lane, _ d: HubDocument, at sequence: UInt64, _ client: NATSClient) throws -> Settle {
        guard let docID = d.checked.id, let local = try store.get(lane.name, id: docID), let lv = try? DocumentVersion(decoding: local.version),
              let hv = d.checked.version else { return .settled }
        switch lv.vector.compare(hv.vector) {
        case .dominates: return .publishLocal
        case .equal where lv.bodyDigest > hv.bodyDigest: return .publishLocal
        case .equal, .dominated:
            try store.transaction { (tx) throws(StoreError) in
                try tx.setHubHead(hub: Self.hubKey, collection: lane.name, id: d.id, sequence: sequence, version: d.version)
            }
            return .settled
        case .concurrent:
            let applier = RemoteApply(store: store, wallMillis: writer.clock.wallMillis)
            let (body, version, _) = applier.resolve(ReplicatedDocument(collection: lane.name, id: d.id, body: local.body, version: lv),
                                                     ReplicatedDocument(collection: lane.name, id: d.id, body: d.checked.body, version: hv),
                                                     policy: lane.policy, peerID: d.origin)
            let r = client.publish([request(lane, id: d.id, body: body, version: version.encoded, expected: sequence)])
            switch r.first {
            case .stored(let seq)?:
                try store.transaction { (tx) throws(StoreError) in
                    try tx.setHubHead(hub: Self.hubKey, collection: lane.name, id: d.id, sequence: seq, version: DocumentVersion.documentLevel(version.encoded))
                }
                board.update { $0.published += 1; $0.conflicts += 1 }
                return .settled
            case .wrongLastSequence?:
                board.update { $0.casRetries += 1 }
                return .again
            case .tooLarge(let why)?:
                board.update { $0.skipped["too_large", default: 0] += 1 }
                noteSkipped(lane, "too_large", "\(d.id): the resolution is more than the hub takes: \(why)")
                return .settled
            case .failed(let why)?:
                throw UplinkSyncError(text: "publishing the resolution of \(d.id) to \(lane.stream): \(why)")
            case nil:
                return .again
            }
        }
    }

    /// Whether version `a` includes `b` (dominates or equals it).
    static func includes(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard let x = try? DocumentVersion(decoding: a), let y = try? DocumentVersion(decoding: b) else { return true }
        switch x.vector.compare(y.vector) {
        case .dominates, .equal: return true
        case .dominated, .concurrent: return false
        }
    }

    /// Remembers a version this gateway put on `subject`, to pass it over when it comes back.
    func noteEcho(_ subject: String, _ version: [UInt8]) {
        if published.count >= Self.echoMax { published.removeAll(keepingCapacity: true) }
        published[subject] = HubHeader.hex(DocumentVersion.documentLevel(version))
    }

    func request(_ lane: Lane, _ doc: StoredDocument, expected: UInt64) -> PublishRequest {
        request(lane, id: doc.id, body: doc.body, version: doc.version, expected: expected)
    }

    /// What goes to the hub: `Shoal-Version` without field stamps (format 1, as protocol 2 sends a
    /// protocol-1 peer), so gateways of either protocol can share a hub, and the stamps in
    /// `Shoal-Fields`, which protocol-1 gateways ignore.
    func request(_ lane: Lane, id: String, body: String?, version stamped: [UInt8], expected: UInt64) -> PublishRequest {
        let version = DocumentVersion.documentLevel(stamped)
        var headers = [(HubHeader.version, HubHeader.hex(version)), (HubHeader.origin, peerID.description)]
        if version != stamped { headers.append((HubHeader.fields, HubHeader.hex(stamped))) }
        if let v = try? DocumentVersion(decoding: version), let current = v.vector.current {
            headers.append((HubHeader.hlc, current.timestamp.description))
        }
        if body == nil { headers.append((HubHeader.deleted, "true")) }
        return PublishRequest(subject: layout.subject(lane.name, id: id), headers: headers,
                              payload: Array((body ?? "").utf8), expectedLastSubjectSequence: expected)
    }

    /// Logs a skipped message: the first of a kind per collection and minute, then a count.
    func noteSkipped(_ lane: Lane, _ kind: String, _ detail: String) {
        let key = "\(lane.name)/\(kind)"
        let now = ContinuousClock.now
        if let last = skipLog[key], now - last.at < .seconds(60) {
            skipLog[key]!.since += 1
            return
        }
        let since = skipLog[key]?.since ?? 0
        skipLog[key] = (now, 0)
        logger.warning(.uplink, "\(lane.name): skipped a hub message (\(kind)): \(detail)\(since > 0 ? "; \(since) more skipped in the last minute" : "") — counted in `shoal uplink status`")
    }
}

struct UplinkSyncError: Error, CustomStringConvertible {
    let text: String
    var description: String { text }
}
