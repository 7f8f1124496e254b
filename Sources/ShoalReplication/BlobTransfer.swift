import ShoalCore
import ShoalStore
import ShoalWire

/// Blob transfer over the replication links (only to peers whose HELLO set
/// `ReplicationMessage.Capability.blobs`).
///
/// Fetching: a wanted blob (referenced by a document of an eager collection, demanded by a reader,
/// or listed by the storage's `wantedBlobs`) is asked of ONE link at a time — the one its document
/// came from first — as bodies are: another link is asked only when that one answers "not here",
/// stalls for `requestTimeoutMillis` while another link could be asked (with none, the stalled
/// link is kept: a cut that heals goes on where it was), or closes. The node asks for the
/// manifest, checks it against the reference, begins the blob in storage, then asks for the chunks
/// it lacks, a bounded window at a time, in pieces sized for the link. Pieces are assembled into chunks; each chunk is checked
/// against the manifest before it is stored (the chunks one batch of frames verified are stored
/// together: one transaction), so a cut resumes from the verified chunks and never asks for one
/// again.
///
/// Serving: a manifest request is answered with the manifest of a blob held complete, or "not here"
/// and, once the blob is complete here, "have now" (so a chain A→B→C fills hop by hop). Fetches
/// queue on the link and are sent a bounded number of bytes per turn, after the turn's documents.
///
/// What a reader gets wrong: a holder only serves complete blobs; a partial copy is "not here".
extension ReplicationNode {
    final class BlobFetch {
        let reference: BlobReference
        /// The link the referencing document came from: asked first.
        var preferred: LinkID?
        /// The link asked now (nil: none).
        var link: LinkID?
        /// When that link was asked or last sent a piece.
        var progressAt: UInt64 = 0
        var manifest: BlobManifest?
        var held: [Bool] = []
        /// Chunks asked of `link` and not yet complete, in the order asked.
        var requested: [Int] = []
        var assembling: [Int: [UInt8]] = [:]
        /// Links not to ask again (said "not here", stalled, sent bad chunks or a wrong manifest)
        /// until they say "have now" or the list is cleared after a long idle.
        var refused: Set<LinkID> = []
        var badChunks: [LinkID: Int] = [:]
        var idleSince: UInt64 = 0
        /// Chunks verified (and proven) during this batch of frames, not yet stored: marked held
        /// so the chunks below them are proven and not asked again; stored together, in one
        /// transaction (one fsync with durability full), when the batch ends.
        var unstored: [(index: Int, bytes: [UInt8])] = []
        var unstoredLink: LinkID?
        init(reference: BlobReference) { self.reference = reference }
    }

    final class BlobState {
        var fetches: [BlobDigest: BlobFetch] = [:]
        /// Links told "not here", to be told "have now": digest → links.
        var watchers: [BlobDigest: Set<LinkID>] = [:]
        /// Blobs refused for good (too large, storage refused): not wanted again while the node runs.
        var refused: Set<BlobDigest> = []
        /// Blobs nobody could give us, set aside until then (ms) so they do not hold every fetch
        /// slot; a "have now" or a referencing document brings one back at once.
        var resting: [BlobDigest: UInt64] = [:]
        var polledAt: UInt64?
        var pollDue = true
        var counters = BlobCounters()
        /// Fetches with verified chunks not yet stored (within one batch of frames).
        var unstored: Set<BlobDigest> = []
    }

    /// What the blob transfers did so far.
    public var blobCounters: BlobCounters { blobState.counters }

    /// Blobs being fetched now.
    public var blobFetchesInProgress: [BlobDigest] { blobState.fetches.keys.sorted() }

    /// A reader wants this blob (of an on-demand collection, or any): recorded in the storage and
    /// fetched like an eager one.
    public func demandBlob(_ reference: BlobReference, now: UInt64) -> [ReplicationAction] {
        guard let storage = blobs else { return [] }
        lastNow = max(lastNow, now)
        do { try storage.demandBlob(reference) } catch {
            return [.event(.blob(link: nil, peer: nil, digest: reference.digest, outcome: .failed("storage: \(error)")))]
        }
        return wantBlob(reference, from: nil, now: now)
    }

    var eagerCollections: Set<String> {
        Set(policies.values.filter { $0.blobs == .eager && $0.pull }.map { $0.name.description })
    }

    /// Starts fetching `reference` unless it is held, refused, or already on its way.
    func wantBlob(_ reference: BlobReference, from link: LinkID?, now: UInt64) -> [ReplicationAction] {
        guard let storage = blobs else { return [] }
        let state = blobState
        let d = reference.digest
        if let f = state.fetches[d] {
            if f.preferred == nil { f.preferred = link }
            return []
        }
        if link == nil, let until = state.resting[d], lastNow < until { return [] }
        state.resting[d] = nil
        guard !state.refused.contains(d), state.fetches.count < settings.blobMaxFetches else { return [] }
        guard reference.length <= min(settings.blobMaxBytes, ReplicationMessage.maxManifestBlobBytes) else {
            state.refused.insert(d)
            state.counters.failed += 1
            return [.event(.blob(link: link, peer: link.flatMap { links[$0]?.peer }, digest: d,
                                 outcome: .failed("declared length \(reference.length) is over the limit of \(min(settings.blobMaxBytes, ReplicationMessage.maxManifestBlobBytes)) bytes (blobMaxBytes)")))]
        }
        if (try? storage.blobIsComplete(d)) == true { return [] }
        let f = BlobFetch(reference: reference)
        f.preferred = link
        f.idleSince = now
        state.fetches[d] = f
        return askNext(f, now: now)
    }

    /// Asks the next link for a fetch that has none: the preferred one, then others by id.
    func askNext(_ f: BlobFetch, now: UInt64) -> [ReplicationAction] {
        guard f.link == nil else { return [] }
        let candidates = links.values.filter { $0.peer != nil && $0.blobCapable && !f.refused.contains($0.id) }.map(\.id).sorted()
        guard let pick = f.preferred.flatMap({ candidates.contains($0) ? $0 : nil }) ?? candidates.first else {
            if f.link == nil && f.idleSince == 0 { f.idleSince = now }
            return []
        }
        f.link = pick
        f.progressAt = now
        f.idleSince = 0
        f.requested = []
        f.assembling = [:]
        return [.send(pick, ReplicationMessage.blobManifestRequest(digest: f.reference.digest).encoded())]
    }

    /// Whether a link other than the fetch's current one could be asked now.
    func hasOtherLink(_ f: BlobFetch) -> Bool {
        links.values.contains { $0.id != f.link && $0.peer != nil && $0.blobCapable && !f.refused.contains($0.id) }
    }

    /// Gives up on the current link for this blob (it stays refused until it says "have now").
    func dropBlobLink(_ f: BlobFetch, now: UInt64) -> [ReplicationAction] {
        if let l = f.link { f.refused.insert(l) }
        f.link = nil
        f.requested = []
        f.assembling = [:]
        return askNext(f, now: now)
    }

    /// Asks the current link for missing chunks, up to the link's window.
    func requestChunks(_ f: BlobFetch, _ l: Link) -> [ReplicationAction] {
        let window = l.slow ? settings.blobWindowSlow : settings.blobWindowFast
        let piece = l.slow ? settings.blobPieceBytesSlow : settings.blobPieceBytesFast
        var asked = Set(f.requested)
        var next: [Int] = []
        // Last chunk first, then downwards: a chunk verified while every chunk after it is held is
        // authentic (its end state is proven by the chunk after it, or is the blob's name), so the
        // chunks held are always a proven suffix and a lying manifest is caught at its first lie.
        for i in f.held.indices.reversed() where !f.held[i] && !asked.contains(i) {
            guard f.requested.count + next.count < window else { break }
            next.append(i)
            asked.insert(i)
        }
        f.requested += next
        var actions: [ReplicationAction] = []
        var k = 0
        while k < next.count {
            // One fetch per chunk: a holder serves a fetch's chunks upwards, and these go downwards.
            actions.append(.send(l.id, ReplicationMessage.blobFetch(digest: f.reference.digest, firstChunk: UInt32(next[k]), chunkCount: 1,
                                                                  pieceBytes: UInt32(min(max(1, piece), BlobManifest.chunkSize))).encoded()))
            k += 1
        }
        return actions
    }

    func finishBlob(_ f: BlobFetch, link: LinkID?, outcome: BlobOutcome, now: UInt64) -> [ReplicationAction] {
        let state = blobState
        let d = f.reference.digest
        state.fetches.removeValue(forKey: d)
        var actions: [ReplicationAction] = [.event(.blob(link: link, peer: link.flatMap { links[$0]?.peer }, digest: d, outcome: outcome))]
        switch outcome {
        case .completed:
            state.counters.completed += 1
            actions += tellWatchers(d)
        case .failed:
            state.counters.failed += 1
            state.refused.insert(d)
        }
        // A slot is free: other wanted blobs may start.
        state.pollDue = true
        return actions
    }

    func tellWatchers(_ d: BlobDigest) -> [ReplicationAction] {
        guard let waiting = blobState.watchers.removeValue(forKey: d) else { return [] }
        let open = waiting.sorted().compactMap { links[$0] }
        for l in open { l.watching -= 1 }
        return open.map { .send($0.id, ReplicationMessage.blobHaveNow(digest: d).encoded()) }
    }

    // MARK: - Messages

    func handleBlob(_ message: ReplicationMessage, on l: Link, now: UInt64) throws -> [ReplicationAction] {
        guard let storage = blobs, l.blobCapable else {
            throw ReplicationError.protocolViolation("\(message.kind) on a link that did not agree to blobs")
        }
        let state = blobState
        switch message {
        case .blobManifestRequest(let d):
            if try storage.blobIsComplete(d), let m = try storage.blobManifest(d) {
                // A manifest that does not fit a frame cannot be sent: the blob is not served.
                guard m.length <= ReplicationMessage.maxManifestBlobBytes else { return [.send(l.id, ReplicationMessage.blobNotHere(digest: d).encoded())] }
                return [.send(l.id, ReplicationMessage.blobManifest(m).encoded())]
            }
            guard l.watching < 1024 else { throw ReplicationError.protocolViolation("more than 1024 blobs asked for and not here") }
            if state.watchers[d, default: []].insert(l.id).inserted { l.watching += 1 }
            return [.send(l.id, ReplicationMessage.blobNotHere(digest: d).encoded())]
        case .blobNotHere(let d):
            guard let f = state.fetches[d], f.link == l.id else { return [] }
            return dropBlobLink(f, now: now)
        case .blobHaveNow(let d):
            guard let f = state.fetches[d] else {
                // Set aside since: the next poll takes it up again if it is still wanted.
                if state.resting.removeValue(forKey: d) != nil { state.pollDue = true }
                return []
            }
            f.refused.remove(l.id)
            if f.link == nil { f.preferred = l.id }
            return askNext(f, now: now)
        case .blobManifest(let m):
            guard let f = state.fetches[m.digest], f.link == l.id, f.manifest == nil || f.requested.isEmpty else { return [] }
            // What this batch verified is stored before the held manifest may give way.
            if !f.unstored.isEmpty {
                let actions = try storeUnstored(f, now: now)
                if state.fetches[m.digest] !== f { return actions }
            }
            f.progressAt = now
            guard m.length == f.reference.length else {
                // The reference is what the document says; a holder whose manifest differs is wrong.
                return dropBlobLink(f, now: now)
            }
            if let held = f.manifest, held != m {
                // Entries a verified chunk proved (see `BlobManifest`): the held chunks are a suffix
                // [first…], and chunk `first` proved the entry before it. A holder that disagrees
                // there lies; one that disagrees only below may be right where the held manifest
                // lied, so the held one (and its chunks) gives way to it.
                let first = f.held.lastIndex(of: false).map { $0 + 1 } ?? 0
                let proven = max(0, first - 1)
                guard held.chunkDigests.count == m.chunkDigests.count, held.chunkDigests[proven...] == m.chunkDigests[proven...] else {
                    return dropBlobLink(f, now: now)
                }
                try storage.discardBlob(m.digest)
                f.manifest = nil
                f.held = []
                state.counters.manifestsReplaced += 1
            }
            do { try storage.beginBlob(m) } catch {
                return finishBlob(f, link: l.id, outcome: .failed("storage refused the manifest: \(error)"), now: now)
            }
            f.manifest = m
            f.held = try storage.heldBlobChunks(m.digest) ?? Array(repeating: false, count: m.chunkCount)
            guard f.held.count == m.chunkCount else { throw ReplicationError.store(.blob(.badManifest("storage holds \(f.held.count) chunks for \(m.chunkCount)"))) }
            if !f.held.contains(false) {
                // Nothing to fetch (an empty blob, or every chunk held): let the storage conclude.
                return try storeVerified(f, l, [], now: now)
            }
            return requestChunks(f, l)
        case .blobFetch(let d, let first, let count, let pieceBytes):
            guard try storage.blobIsComplete(d), let m = try storage.blobManifest(d) else {
                return [.send(l.id, ReplicationMessage.blobNotHere(digest: d).encoded())]
            }
            guard UInt64(first) + UInt64(count) <= UInt64(m.chunkCount) else {
                throw ReplicationError.protocolViolation("fetch of chunks \(first)..<\(UInt64(first) + UInt64(count)) of a \(m.chunkCount)-chunk blob")
            }
            guard l.serving.count + Int(count) <= 2 * Int(ReplicationMessage.maxFetchChunks) else {
                throw ReplicationError.protocolViolation("more than \(2 * ReplicationMessage.maxFetchChunks) blob chunks asked for and not yet sent")
            }
            for i in Int(first)..<Int(first + count) { l.serving.append((d, i, Int(pieceBytes))) }
            return []  // sent by serveBlobs, after the turn's documents
        case .blobPiece(let d, let chunk, let offset, let bytes):
            return try receivePiece(l, d, Int(chunk), Int(offset), bytes, now: now)
        default:
            return []
        }
    }

    func receivePiece(_ l: Link, _ d: BlobDigest, _ chunk: Int, _ offset: Int, _ bytes: [UInt8], now: UInt64) throws -> [ReplicationAction] {
        let state = blobState
        // The link moves blob bytes: fetches whose pieces queue behind these are not stalled.
        l.blobProgressAt = now
        guard let f = state.fetches[d], let m = f.manifest else {
            state.counters.redundantPieces += 1
            return []
        }
        // Beyond the blob's declared end: whatever was asked, this is not the blob.
        guard chunk < m.chunkCount, offset + bytes.count <= m.chunkLength(chunk) else {
            throw ReplicationError.protocolViolation("blob piece beyond the blob's length (chunk \(chunk), bytes \(offset)..<\(offset + bytes.count))")
        }
        guard f.link == l.id, let position = f.requested.firstIndex(of: chunk) else {
            // Late (the link was dropped for this blob: at most a window of chunks) or unasked.
            state.counters.redundantPieces += 1
            l.unaskedPieces += 1
            if l.unaskedPieces > 4 * Int(ReplicationMessage.maxFetchChunks) {
                throw ReplicationError.protocolViolation("more than \(4 * ReplicationMessage.maxFetchChunks) blob pieces nobody asked for")
            }
            return []
        }
        var buffer = f.assembling[chunk] ?? []
        guard offset == buffer.count else {
            throw ReplicationError.protocolViolation("blob piece at offset \(offset) of chunk \(chunk), expected \(buffer.count)")
        }
        buffer += bytes
        f.progressAt = now
        guard buffer.count == m.chunkLength(chunk) else {
            f.assembling[chunk] = buffer
            return []
        }
        f.assembling[chunk] = nil
        f.requested.remove(at: position)
        guard m.verifies(chunk: chunk, buffer) else {
            state.counters.badChunks += 1
            l.badBlobChunks += 1
            f.badChunks[l.id, default: 0] += 1
            if l.badBlobChunks >= settings.blobBadChunksPerLink {
                throw ReplicationError.protocolViolation("\(l.badBlobChunks) blob chunks that do not match their manifest")
            }
            if f.badChunks[l.id, default: 0] >= settings.blobBadChunksPerBlob { return dropBlobLink(f, now: now) }
            return requestChunks(f, l)
        }
        // Authentic only when its end state is proven: it is the last chunk, or the chunk after it
        // is held. Pieces come in the order asked (downwards), so that is the honest case; a chunk
        // whose successor failed is dropped unstored and asked for again.
        guard chunk == m.chunkCount - 1 || f.held[chunk + 1] else {
            state.counters.unprovenChunks += 1
            return requestChunks(f, l)
        }
        // Kept for the end of the batch (`storeUnstoredChunks`); a batch that brings more than
        // `blobChunksPerStore` is stored as it goes.
        f.held[chunk] = true
        f.unstored.append((chunk, buffer))
        f.unstoredLink = l.id
        state.unstored.insert(d)
        if !f.held.contains(false) || f.unstored.count >= max(1, settings.blobChunksPerStore) { return try storeUnstored(f, now: now) }
        return requestChunks(f, l)
    }

    /// Stores the chunks a fetch verified in this batch, in one call to the storage.
    func storeUnstored(_ f: BlobFetch, now: UInt64) throws -> [ReplicationAction] {
        let chunks = f.unstored
        f.unstored = []
        blobState.unstored.remove(f.reference.digest)
        guard !chunks.isEmpty else { return [] }
        // The link they came from, for the event (nil: closed in this batch; stored all the same).
        let link = f.unstoredLink.flatMap { links[$0] } ?? f.link.flatMap { links[$0] }
        do { return try storeVerified(f, link, chunks, now: now) } catch {
            // Not stored: no longer held, asked for again.
            for c in chunks where c.index < f.held.count { f.held[c.index] = false }
            throw error
        }
    }

    /// The end of a batch of frames: every fetch's verified chunks go to the storage. A storage
    /// error on the way (what was not stored is asked for again) is rethrown.
    func storeUnstoredChunks(now: UInt64) throws -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        for d in blobState.unstored.sorted() {
            guard let f = blobState.fetches[d] else { blobState.unstored.remove(d); continue }
            actions += try storeUnstored(f, now: now)
        }
        return actions
    }

    /// As `storeUnstoredChunks`, on a batch that already failed: what cannot be stored is dropped
    /// (and asked for again).
    func storeUnstoredChunksAfterFailure(now: UInt64) -> [ReplicationAction] {
        var actions: [ReplicationAction] = []
        for d in blobState.unstored.sorted() {
            guard let f = blobState.fetches[d] else { continue }
            actions += (try? storeUnstored(f, now: now)) ?? []
        }
        blobState.unstored = []
        return actions
    }

    func storeVerified(_ f: BlobFetch, _ l: Link?, _ chunks: [(index: Int, bytes: [UInt8])], now: UInt64) throws -> [ReplicationAction] {
        guard let storage = blobs else { return [] }
        let state = blobState
        let outcome = try storage.storeBlobChunks(f.reference.digest, chunks)
        for c in chunks {
            f.held[c.index] = true
            state.counters.chunksVerified += 1
            state.counters.bytesReceived += Int64(c.bytes.count)
        }
        switch outcome {
        case .stored:
            // More from the link asked now (the chunks may have come from one given up since).
            guard let asked = f.link.flatMap({ links[$0] }) else { return [] }
            return requestChunks(f, asked)
        case .completed:
            return finishBlob(f, link: l?.id, outcome: .completed(bytes: f.reference.length), now: now)
        case .wholeMismatch:
            // Every chunk matched a manifest whose whole does not match the name: the manifest lied.
            state.counters.badChunks += 1
            f.manifest = nil
            f.held = []
            return dropBlobLink(f, now: now)
        }
    }

    /// Sends queued chunks on every link, at most the link's per-turn byte budget each.
    func serveBlobs() -> [ReplicationAction] {
        guard let storage = blobs else { return [] }
        var actions: [ReplicationAction] = []
        for l in links.values.sorted(by: { $0.id < $1.id }) where !l.serving.isEmpty {
            var budget = l.slow ? settings.blobServeBytesSlow : settings.blobServeBytesFast
            while budget > 0, !l.serving.isEmpty {
                let (d, index, pieceBytes) = l.serving.removeFirst()
                guard let bytes = (try? storage.readBlobChunk(d, index: index)) ?? nil else {
                    // Gone since (discarded): say so once and drop the rest of it.
                    l.serving.removeAll { $0.digest == d }
                    actions.append(.send(l.id, ReplicationMessage.blobNotHere(digest: d).encoded()))
                    continue
                }
                var offset = 0
                while offset < bytes.count {
                    let end = min(bytes.count, offset + pieceBytes)
                    actions.append(.send(l.id, ReplicationMessage.blobPiece(digest: d, chunk: UInt32(index), offset: UInt32(offset), bytes: Array(bytes[offset..<end])).encoded()))
                    offset = end
                }
                budget -= bytes.count
                blobState.counters.chunksSent += 1
                blobState.counters.bytesSent += Int64(bytes.count)
            }
        }
        return actions
    }

    /// Documents that just arrived on `link`: blobs they reference in eager collections are wanted.
    func blobsReferenced(by docs: [CheckedDocument], collection: String, link: LinkID, now: UInt64) -> [ReplicationAction] {
        guard blobs != nil, policies[collection]?.blobs == .eager else { return [] }
        var actions: [ReplicationAction] = []
        for d in docs where d.problem == nil {
            guard let body = d.body else { continue }
            for r in BlobReference.references(inText: body) { actions += wantBlob(r, from: link, now: now) }
        }
        return actions
    }

    /// Timers: a link that stalled longer than `requestTimeoutMillis` is given up for its blob;
    /// the storage's wanted blobs are read again every `blobPollMillis` (or after local commits);
    /// a fetch that found nobody retries every link after a long idle.
    func blobTick(now: UInt64) -> [ReplicationAction] {
        guard let storage = blobs else { return [] }
        let state = blobState
        var actions: [ReplicationAction] = []
        for (_, f) in state.fetches.sorted(by: { $0.key < $1.key }) {
            if let link = f.link, now >= max(f.progressAt, links[link]?.blobProgressAt ?? 0) + settings.requestTimeoutMillis {
                // Given up only for another link: with none, dropping it would leave the fetch idle
                // and throw away what the link sends when it comes back (a cut that heals under TCP
                // resends the window the link owed, and the fetch goes on from there).
                if hasOtherLink(f) { actions += dropBlobLink(f, now: now) }
            } else if f.link == nil, f.idleSince > 0, now >= f.idleSince + 4 * settings.requestTimeoutMillis {
                if state.fetches.count >= settings.blobMaxFetches {
                    // Nobody has it and others wait for a slot: set it aside for a while.
                    state.fetches[f.reference.digest] = nil
                    state.resting[f.reference.digest] = now + 4 * settings.requestTimeoutMillis
                    state.pollDue = true
                    continue
                }
                f.refused = Set(f.badChunks.filter { $0.value >= settings.blobBadChunksPerBlob }.keys)
                f.idleSince = now
                actions += askNext(f, now: now)
            }
        }
        if state.pollDue || state.polledAt.map({ now >= $0 + settings.blobPollMillis }) ?? true {
            state.pollDue = false
            state.polledAt = now
            // Blobs completed here by other means (a local write) are told to whoever waits.
            for d in state.watchers.keys.sorted() where (try? storage.blobIsComplete(d)) == true { actions += tellWatchers(d) }
            state.resting = state.resting.filter { $0.value > now }
            let free = settings.blobMaxFetches - state.fetches.count
            let limit = min(1024, free + state.fetches.count + state.refused.count + state.resting.count)
            if free > 0, let wanted = try? storage.wantedBlobs(eagerCollections: eagerCollections, limit: limit) {
                for r in wanted { actions += wantBlob(r, from: nil, now: now) }
            }
        }
        return actions + serveBlobs()
    }

    /// A link went away: its fetches go elsewhere, its queue and watches are dropped.
    func blobLinkGone(_ link: LinkID, now: UInt64) -> [ReplicationAction] {
        let state = blobState
        for d in state.watchers.keys { state.watchers[d]?.remove(link) }
        state.watchers = state.watchers.filter { !$0.value.isEmpty }
        var actions: [ReplicationAction] = []
        for (_, f) in state.fetches.sorted(by: { $0.key < $1.key }) {
            f.refused.remove(link)
            f.badChunks[link] = nil
            if f.preferred == link { f.preferred = nil }
            if f.link == link {
                f.link = nil
                f.requested = []
                f.assembling = [:]
                actions += askNext(f, now: now)
            }
        }
        return actions
    }
}
