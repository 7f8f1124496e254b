import Glibc
import CSQLite
import ShoalCore
import ShoalStore
import ShoalTesting
import Testing

/// Bytes that are not all alike, so a chunk in the wrong place shows.
func blobBytes(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
    var random = SeededRandom(seed: seed)
    return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
}

/// The chunks of `content`, as a peer sends them.
func chunks(of content: [UInt8]) -> [(index: Int, bytes: [UInt8])] {
    stride(from: 0, to: content.count, by: BlobManifest.chunkSize).enumerated().map { i, start in
        (i, Array(content[start..<min(content.count, start + BlobManifest.chunkSize)]))
    }
}

func body(with r: BlobReference, extra: String = "") -> String {
    "{\"photo\":\(r.json.compactText)\(extra)}"
}

let photos = try! CollectionName(parsing: "site.photos")
let cache = try! CollectionName(parsing: "site.cache")

@Suite("Blob store")
struct BlobStoreTests {
    @Test("a blob put locally reads back whole, by chunks and by range, with its manifest")
    func putAndRead() throws {
        try withStore { (store, _) throws in
            let content = blobBytes(3 * BlobManifest.chunkSize + 100)
            let r = try store.putBlob(bytes: content, contentType: "image/jpeg")
            #expect(r.digest == BlobDigest.of(content))
            #expect(r.length == Int64(content.count))
            #expect(r.contentType == "image/jpeg")
            #expect(try store.blobIsComplete(r.digest))
            #expect(try store.blobManifest(r.digest) == BlobManifest.of(content))
            #expect(try store.heldBlobChunks(r.digest) == [true, true, true, true])
            let reader = try store.blobReader(r.digest)
            var back: [UInt8] = []
            while let chunk = try reader.nextChunk() { back += chunk }
            #expect(back == content)
            #expect(try store.readBlob(r.digest, offset: 65_000, length: 1000) == Array(content[65_000..<66_000]))
            #expect(try store.readBlob(r.digest, offset: Int64(content.count - 10), length: 100) == Array(content.suffix(10)))
            let info = try #require(try store.blobInfo(r.digest))
            #expect(info.state == .complete && info.heldBytes == Int64(content.count) && info.contentType == "image/jpeg")
        }
    }

    @Test("a streaming upload in uneven pieces gives the same blob as a one-shot put, and the same bytes twice make one blob")
    func streamingUpload() throws {
        try withStore { (store, _) throws in
            let content = blobBytes(200_000, seed: 2)
            let w = try store.blobWriter(contentType: "application/octet-stream")
            var at = 0
            for size in [1, 70_000, 3, 65_536, 100_000] where at < content.count {
                let end = min(content.count, at + size)
                try w.append(Array(content[at..<end]))
                at = end
            }
            let r = try w.finish()
            #expect(r.digest == BlobDigest.of(content))
            #expect(try store.blobManifest(r.digest) == BlobManifest.of(content))
            let again = try store.putBlob(bytes: content)
            #expect(again.digest == r.digest)
            #expect(try store.blobs().count == 1)
            #expect(try store.blobStats() == { var s = BlobStats(); s.count = 1; s.bytes = 200_000; return s }())
        }
    }

    @Test("an empty blob is a blob")
    func emptyBlob() throws {
        try withStore { (store, dir) throws in
            let r = try store.putBlob(bytes: [])
            #expect(r.length == 0 && r.digest == BlobDigest.of([]))
            #expect(try store.blobReader(r.digest).nextChunk() == nil)
            let other = try DocumentStore.open(StoreOptions(path: dir.file("other.db")), logger: quietLogger)
            defer { other.close() }
            try other.beginBlob(BlobManifest.of([]))
            #expect(try other.blobIsComplete(r.digest))
        }
    }

    @Test("an upload over the size limit is refused and leaves nothing behind")
    func uploadOverLimit() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore.open(StoreOptions(path: dir.file("s.db"), maxBlobBytes: 100_000), logger: quietLogger)
        defer { store.close() }
        let w = try store.blobWriter()
        try w.append(blobBytes(70_000))
        #expect(throws: StoreError.self) { try w.append(blobBytes(40_000)) }
        #expect(throws: StoreError.self) { try w.finish() }
        #expect(try store.blobStats() == BlobStats())
        #expect(throws: StoreError.self) { try store.beginBlob(BlobManifest.of(blobBytes(100_001))) }
        // A reference to a blob over the limit is not asked for from peers.
        try store.createCollection(photos)
        try store.put(photos, id: id("big"), body: body(with: BlobReference(digest: .of([1]), length: 100_001)))
        try store.put(photos, id: id("ok"), body: body(with: BlobReference(digest: .of([2]), length: 100_000)))
        #expect(try store.wantedBlobs(eagerCollections: ["site.photos"], limit: 10).map(\.length) == [100_000])
        #expect(throws: StoreError.self) { try store.blobWriter(contentType: String(repeating: "x", count: 256)) }
    }

    @Test("chunks from a peer are kept as they come, resume from what is held, and complete when the whole matches")
    func chunksFromAPeer() throws {
        try withStore { (store, _) throws in
            let content = blobBytes(3 * BlobManifest.chunkSize, seed: 3)
            let manifest = BlobManifest.of(content)
            let parts = chunks(of: content)
            try store.beginBlob(manifest)
            try store.beginBlob(manifest)  // the same manifest again: nothing happens
            #expect(try store.storeBlobChunks(manifest.digest, [parts[2]]) == .stored)
            #expect(try store.heldBlobChunks(manifest.digest) == [false, false, true])
            #expect(try store.blobInfo(manifest.digest)?.state == .partial)
            #expect(try store.readBlobChunk(manifest.digest, index: 2) == parts[2].bytes)
            #expect(try store.readBlobChunk(manifest.digest, index: 0) == nil)
            #expect(try store.storeBlobChunks(manifest.digest, [parts[0], parts[2]]) == .stored)
            #expect(try store.blobStats().partialBytes == Int64(2 * BlobManifest.chunkSize))
            #expect(try store.storeBlobChunks(manifest.digest, [parts[1]]) == .completed)
            #expect(try store.blobIsComplete(manifest.digest))
            #expect(try store.storeBlobChunks(manifest.digest, [parts[1]]) == .completed)
            // A different manifest is refused for a complete blob.
            let lie = try BlobManifest(digest: manifest.digest, length: 10, chunkDigests: [manifest.digest.bytes])
            #expect(throws: StoreError.self) { try store.beginBlob(lie) }
        }
    }

    @Test("a lying manifest cannot pass its last chunk: chunks verify along its chain, the last must end at the blob's name")
    func lyingManifest() throws {
        let content = blobBytes(2 * BlobManifest.chunkSize + 5, seed: 4)
        let real = BlobManifest.of(content)
        let other = blobBytes(content.count, seed: 5)
        // Other bytes' chain under this blob's name (a manifest must end with the name).
        var entries = BlobManifest.of(other).chunkDigests
        entries[entries.count - 1] = real.digest.bytes
        let lie = try BlobManifest(digest: real.digest, length: real.length, chunkDigests: entries)
        let fake = chunks(of: other), honest = chunks(of: content)
        #expect(lie.verifies(chunk: 0, fake[0].bytes) && lie.verifies(chunk: 1, fake[1].bytes))
        #expect(!lie.verifies(chunk: 2, fake[2].bytes))
        #expect(!lie.verifies(chunk: 0, honest[0].bytes))
        #expect((0..<3).allSatisfy { real.verifies(chunk: $0, honest[$0].bytes) })
        #expect(!real.verifies(chunk: 1, fake[1].bytes))
        // A chunk checks on its own, in any order, and only at its own index and length.
        #expect(real.verifies(chunk: 2, honest[2].bytes) && !real.verifies(chunk: 1, honest[2].bytes))
        #expect(!real.verifies(chunk: 3, honest[2].bytes) && !real.verifies(chunk: -1, honest[0].bytes))
        // The manifest is the one a single pass builds, and its last entry is the name.
        #expect(real.digest == BlobDigest.of(content) && real.chunkDigests.last == real.digest.bytes)
        #expect(BlobManifest.of([]).chunkDigests.isEmpty && BlobManifest.of([]).digest == BlobDigest.of([]))
        #expect(throws: BlobError.self) { try BlobManifest(digest: real.digest, length: real.length, chunkDigests: BlobManifest.of(other).chunkDigests) }
        // An exact multiple of the chunk size: the last full chunk's entry is the name.
        let even = blobBytes(2 * BlobManifest.chunkSize, seed: 6)
        let m = BlobManifest.of(even)
        #expect(m.chunkCount == 2 && m.chunkDigests[1] == BlobDigest.of(even).bytes && m.verifies(chunk: 1, chunks(of: even)[1].bytes))
    }

    @Test("a bad chunk is refused and nothing of its call is kept: out of range, wrong length, unknown blob")
    func badChunks() throws {
        try withStore { (store, _) throws in
            let content = blobBytes(BlobManifest.chunkSize + 10, seed: 6)
            let m = BlobManifest.of(content)
            let parts = chunks(of: content)
            #expect(throws: StoreError.blob(.notFound(m.digest))) { try store.storeBlobChunks(m.digest, [parts[0]]) }
            try store.beginBlob(m)
            #expect(throws: StoreError.self) { try store.storeBlobChunks(m.digest, [parts[0], (2, parts[1].bytes)]) }
            #expect(throws: StoreError.self) { try store.storeBlobChunks(m.digest, [(-1, parts[0].bytes)]) }
            #expect(throws: StoreError.self) { try store.storeBlobChunks(m.digest, [parts[0], (1, parts[1].bytes + [0])]) }
            // Wrong bytes of the right length are the caller's to catch (the replicator verifies
            // each chunk before it stores it); the manifest says so.
            var flipped = parts[1].bytes
            flipped[0] ^= 1
            #expect(!m.verifies(chunk: 1, flipped))
            #expect(try store.heldBlobChunks(m.digest) == [false, false])
            #expect(try store.storeBlobChunks(m.digest, parts) == .completed)
        }
    }

    @Test("bad digest text, a manifest for the wrong length and a bad read are refused")
    func badInputs() throws {
        #expect(BlobDigest("sha256-xyz") == nil)
        #expect(BlobDigest("md5-" + String(repeating: "0", count: 64)) == nil)
        #expect(BlobDigest("sha256-" + String(repeating: "g", count: 64)) == nil)
        let m = BlobManifest.of(blobBytes(100))
        #expect(throws: BlobError.self) { try BlobManifest(digest: m.digest, length: Int64(BlobManifest.chunkSize + 1), chunkDigests: m.chunkDigests) }
        try withStore { (store, _) throws in
            let r = try store.putBlob(bytes: blobBytes(100))
            #expect(throws: StoreError.self) { try store.readBlob(r.digest, offset: 101, length: 1) }
            #expect(throws: StoreError.self) { try store.readBlob(r.digest, offset: -1, length: 1) }
            #expect(throws: StoreError.self) { try store.readBlob(r.digest, offset: 0, length: DocumentStore.maxRangeBytes + 1) }
            let absent = BlobDigest.of([9])
            #expect(throws: StoreError.blob(.notFound(absent))) { try store.blobReader(absent) }
            #expect(try store.blobManifest(absent) == nil && store.heldBlobChunks(absent) == nil)
        }
    }

    @Test("references follow document puts, replacements and deletes in the same transaction")
    func referencesFollowWrites() throws {
        try withStore { (store, _) throws in
            try store.createCollection(photos)
            let a = try store.putBlob(bytes: blobBytes(10, seed: 10))
            let b = try store.putBlob(bytes: blobBytes(10, seed: 11))
            try store.put(photos, id: id("p1"), body: body(with: a, extra: ",\"thumb\":\(b.json.compactText)"))
            #expect(try store.blobInfo(a.digest)?.referencedBy == 1)
            #expect(try store.blobInfo(b.digest)?.referencedBy == 1)
            try store.put(photos, id: id("p1"), body: body(with: a))
            #expect(try store.blobInfo(b.digest)?.referencedBy == 0)
            try store.put(photos, id: id("p2"), body: body(with: a))
            #expect(try store.blobInfo(a.digest)?.referencedBy == 2)
            try store.delete(photos, id: id("p1"))
            #expect(try store.blobInfo(a.digest)?.referencedBy == 1)
            // A write that fails rolls its references back with it.
            #expect(throws: StoreError.self) {
                try store.write([DocumentWrite(collection: photos, id: id("p3"), body: body(with: b), version: []),
                                 DocumentWrite(collection: photos, id: id("p4"), body: "[1]", version: [])])
            }
            #expect(try store.blobInfo(b.digest)?.referencedBy == 0)
        }
    }

    @Test("references go when a document expires or is purged by a budget")
    func referencesFollowExpiry() throws {
        try withStore { (store, _) throws in
            try store.createCollection(photos)
            let a = try store.putBlob(bytes: blobBytes(10, seed: 12))
            try store.put(photos, id: id("p1"), body: body(with: a), version: version(at: 1000))
            try store.put(photos, id: id("p2"), body: body(with: a), version: version(at: 2000))
            #expect(try store.setExpiration(photos, id: id("p1"), atMillis: 5000))
            _ = try store.purgeExpired([], nowMillis: 6000)
            #expect(try store.blobInfo(a.digest)?.referencedBy == 1)
            _ = try store.purgeExpired([ExpiryRule(collection: photos, maxDocuments: 0)], nowMillis: 6000)
            #expect(try store.blobInfo(a.digest)?.referencedBy == 0)
        }
    }

    @Test("wanted blobs: referenced from an eager collection or demanded, oldest first, until complete")
    func wantedAndDemanded() throws {
        try withStore { (store, _) throws in
            try store.createCollection(photos)
            try store.createCollection(cache)
            let c1 = blobBytes(100, seed: 20), c2 = blobBytes(100, seed: 21)
            let r1 = BlobReference(digest: .of(c1), length: 100, contentType: "a/b")
            let r2 = BlobReference(digest: .of(c2), length: 100)
            try store.put(photos, id: id("p"), body: body(with: r1))
            try store.put(cache, id: id("c"), body: body(with: r2))
            #expect(try store.wantedBlobs(eagerCollections: ["site.photos"], limit: 10) == [r1])
            #expect(try store.wantedBlobs(eagerCollections: [], limit: 10) == [])
            try store.demandBlob(r2)
            try store.demandBlob(r2)
            #expect(try store.wantedBlobs(eagerCollections: ["site.photos"], limit: 10) == [r1, r2])
            #expect(try store.wantedBlobs(eagerCollections: ["site.photos"], limit: 1) == [r1])
            try store.beginBlob(BlobManifest.of(c2))
            #expect(try store.blobInfo(r2.digest)?.state == .partial)
            #expect(try store.storeBlobChunks(r2.digest, chunks(of: c2)) == .completed)
            #expect(try store.wantedBlobs(eagerCollections: ["site.photos"], limit: 10) == [r1])
            _ = try store.putBlob(bytes: c1)
            #expect(try store.wantedBlobs(eagerCollections: ["site.photos"], limit: 10) == [])
        }
    }

    @Test("a reader of a blob not held here demands it when a document refers to it, and only then")
    func demandOnRead() throws {
        try withStore { (store, _) throws in
            try store.createCollection(cache)
            let r = BlobReference(digest: .of([7, 7]), length: 2, contentType: "x/y")
            try store.put(cache, id: id("c"), body: body(with: r))
            #expect(try store.wantedBlobs(eagerCollections: [], limit: 10) == [])
            #expect(try store.demandIfReferenced(r.digest) == r)
            #expect(try store.wantedBlobs(eagerCollections: [], limit: 10) == [r])
            #expect(try store.demandIfReferenced(BlobDigest.of([8])) == nil)
        }
    }

    @Test("GC drops unreferenced blobs and unwanted partials after the grace period, never an eager-referenced one")
    func garbage() throws {
        try withStore { (store, _) throws in
            try store.createCollection(photos)
            let kept = try store.putBlob(bytes: blobBytes(100, seed: 30))
            let orphan = try store.putBlob(bytes: blobBytes(100, seed: 31))
            try store.put(photos, id: id("p"), body: body(with: kept))
            let partial = blobBytes(BlobManifest.chunkSize + 1, seed: 32)
            try store.beginBlob(BlobManifest.of(partial))
            _ = try store.storeBlobChunks(BlobDigest.of(partial), [chunks(of: partial)[0]])
            let abandoned = try store.blobWriter()
            try abandoned.append(blobBytes(BlobManifest.chunkSize, seed: 33))
            // Within the grace period everything stays.
            #expect(try store.collectBlobGarbage(BlobGCPolicy()).dropped == 0)
            let later = DocumentStoreTestsClock.now + 11 * 60 * 1000
            let report = try store.collectBlobGarbage(BlobGCPolicy(), nowMillis: later)
            #expect(report.dropped == 3)
            #expect(try store.blobs().map(\.digest) == [kept.digest])
            #expect(throws: StoreError.self) { try abandoned.finish() }
            #expect(store.blobCounts.withLock { $0 }.dropped == 3)
        }
    }

    @Test("over budget, on-demand blobs go least recently used first; eager ones stay and the pass says over budget")
    func budget() throws {
        try withStore { (store, _) throws in
            try store.createCollection(photos)
            try store.createCollection(cache)
            let eager = try store.putBlob(bytes: blobBytes(1000, seed: 40))
            let old = try store.putBlob(bytes: blobBytes(1000, seed: 41))
            let recent = try store.putBlob(bytes: blobBytes(1000, seed: 42))
            let both = try store.putBlob(bytes: blobBytes(1000, seed: 43))
            try store.put(photos, id: id("e"), body: body(with: eager))
            try store.put(photos, id: id("b"), body: body(with: both))
            try store.put(cache, id: id("b"), body: body(with: both))
            try store.put(cache, id: id("o"), body: body(with: old))
            try store.put(cache, id: id("r"), body: body(with: recent))
            _ = try store.readBlobChunk(old.digest, index: 0)
            _ = try store.readBlobChunk(recent.digest, index: 0)  // read last: used most recently
            let policy = BlobGCPolicy(budgetBytes: 3000, onDemandCollections: ["site.cache"])
            var report = try store.collectBlobGarbage(policy)
            #expect(report.dropped == 1 && !report.overBudget)
            #expect(try store.blobInfo(old.digest) == nil)
            report = try store.collectBlobGarbage(BlobGCPolicy(budgetBytes: 500, onDemandCollections: ["site.cache"]))
            #expect(report.overBudget)
            #expect(Set(try store.blobs().map(\.digest)) == [eager.digest, both.digest])
            #expect(store.blobCounts.withLock { $0 }.overBudget == 1)
        }
    }

    @Test("blobs survive reopening the store, references included")
    func reopen() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        var store = try DocumentStore.open(StoreOptions(path: dir.file("s.db")), logger: quietLogger)
        try store.createCollection(photos)
        let r = try store.putBlob(bytes: blobBytes(70_000, seed: 50))
        try store.put(photos, id: id("p"), body: body(with: r))
        store.close()
        store = try DocumentStore.open(StoreOptions(path: dir.file("s.db")), logger: quietLogger)
        defer { store.close() }
        #expect(try store.blobInfo(r.digest)?.referencedBy == 1)
        try store.delete(photos, id: id("p"))
        #expect(try store.blobInfo(r.digest)?.referencedBy == 0)
    }
}

enum DocumentStoreTestsClock {
    static var now: Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

@Suite("Blob store migration")
struct BlobMigrationTests {
    @Test("a store of schema 8 whose documents already refer to blobs gets their references recorded")
    func backfill() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("s.db")
        let r = BlobReference(digest: .of([1, 2, 3]), length: 3)
        do {
            let store = try DocumentStore.open(StoreOptions(path: path), logger: quietLogger)
            try store.createCollection(photos)
            try store.put(photos, id: id("p"), body: body(with: r))
            try store.put(photos, id: id("q"), body: "{}")
            store.close()
        }
        var db: OpaquePointer?
        sqlite3_open(path, &db)
        #expect(sqlite3_exec(db, "DROP TABLE blob_chunks; DROP TABLE blob_refs; DROP TABLE blob_wants; DROP TABLE blobs; PRAGMA user_version=8;", nil, nil, nil) == SQLITE_OK)
        sqlite3_close(db)
        let store = try DocumentStore.open(StoreOptions(path: path), logger: quietLogger)
        defer { store.close() }
        #expect(try store.wantedBlobs(eagerCollections: ["site.photos"], limit: 10) == [r])
    }
}
