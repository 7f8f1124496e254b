import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalTesting
import ShoalWire
import Testing

/// Blob storage that lies the way a hostile or broken holder would.
final class LyingBlobStorage: BlobStorage {
    /// `fakeChain`: the manifest of other bytes of the same length under the blob's name (its
    /// last entry the name, as a manifest must have), and those other bytes as chunks.
    enum Lie { case flipsBytes, addsBytes, wrongManifestLength, fakeChain }
    let inner: MemoryBlobStorage
    let lie: Lie
    init(_ inner: MemoryBlobStorage, _ lie: Lie) {
        self.inner = inner
        self.lie = lie
    }
    func blobManifest(_ d: BlobDigest) throws(StoreError) -> BlobManifest? {
        if lie == .fakeChain, let content = inner.content(d) {
            var entries = BlobManifest.of(LyingBlobStorage.other(content)).chunkDigests
            if !entries.isEmpty { entries[entries.count - 1] = d.bytes }
            return try? BlobManifest(digest: d, length: Int64(content.count), chunkDigests: entries)
        }
        guard let m = try inner.blobManifest(d), lie == .wrongManifestLength else { return try inner.blobManifest(d) }
        let longer = m.length + 1
        let n = BlobManifest.chunkCount(length: longer)
        return try? BlobManifest(digest: d, length: longer, chunkDigests: (0..<n).map { i in i == n - 1 ? d.bytes : i < m.chunkCount ? m.chunkDigests[i] : Array(repeating: 0, count: 32) })
    }
    func blobIsComplete(_ d: BlobDigest) throws(StoreError) -> Bool { try inner.blobIsComplete(d) }
    func heldBlobChunks(_ d: BlobDigest) throws(StoreError) -> [Bool]? { try inner.heldBlobChunks(d) }
    func readBlobChunk(_ d: BlobDigest, index: Int) throws(StoreError) -> [UInt8]? {
        guard var bytes = try inner.readBlobChunk(d, index: index) else { return nil }
        switch lie {
        case .flipsBytes: bytes[0] ^= 0xFF
        case .addsBytes: bytes += [1, 2, 3]
        case .wrongManifestLength: break
        case .fakeChain:
            let start = index * BlobManifest.chunkSize
            return inner.content(d).map { Array(LyingBlobStorage.other($0)[start..<(start + bytes.count)]) }
        }
        return bytes
    }
    static func other(_ content: [UInt8]) -> [UInt8] { content.map { $0 ^ 0x55 } }
    func beginBlob(_ m: BlobManifest) throws(StoreError) { try inner.beginBlob(m) }
    func storeBlobChunks(_ d: BlobDigest, _ chunks: [(index: Int, bytes: [UInt8])]) throws(StoreError) -> BlobChunkOutcome { try inner.storeBlobChunks(d, chunks) }
    func discardBlob(_ d: BlobDigest) throws(StoreError) { try inner.discardBlob(d) }
    func wantedBlobs(eagerCollections: Set<String>, limit: Int) throws(StoreError) -> [BlobReference] { try inner.wantedBlobs(eagerCollections: eagerCollections, limit: limit) }
    func demandBlob(_ r: BlobReference) throws(StoreError) { try inner.demandBlob(r) }
}

/// Blob storage whose disk fails: the next `failures` calls to store chunks throw.
final class FailingBlobStorage: BlobStorage {
    let inner: MemoryBlobStorage
    var failures: Int
    var storeCalls = 0
    init(_ inner: MemoryBlobStorage, failures: Int) {
        self.inner = inner
        self.failures = failures
    }
    func blobManifest(_ d: BlobDigest) throws(StoreError) -> BlobManifest? { try inner.blobManifest(d) }
    func blobIsComplete(_ d: BlobDigest) throws(StoreError) -> Bool { try inner.blobIsComplete(d) }
    func heldBlobChunks(_ d: BlobDigest) throws(StoreError) -> [Bool]? { try inner.heldBlobChunks(d) }
    func readBlobChunk(_ d: BlobDigest, index: Int) throws(StoreError) -> [UInt8]? { try inner.readBlobChunk(d, index: index) }
    func beginBlob(_ m: BlobManifest) throws(StoreError) { try inner.beginBlob(m) }
    func storeBlobChunks(_ d: BlobDigest, _ chunks: [(index: Int, bytes: [UInt8])]) throws(StoreError) -> BlobChunkOutcome {
        storeCalls += 1
        if failures > 0 {
            failures -= 1
            throw .blob(.io("disk full"))
        }
        return try inner.storeBlobChunks(d, chunks)
    }
    func discardBlob(_ d: BlobDigest) throws(StoreError) { try inner.discardBlob(d) }
    func wantedBlobs(eagerCollections: Set<String>, limit: Int) throws(StoreError) -> [BlobReference] { try inner.wantedBlobs(eagerCollections: eagerCollections, limit: limit) }
    func demandBlob(_ r: BlobReference) throws(StoreError) { try inner.demandBlob(r) }
}

/// Nodes with in-memory blob storage (`without`: indexes of nodes with blobs off; `lying`: holders that lie).
func makeBlobNodes(_ names: [String], seed: UInt64 = 1, policies: [CollectionPolicy]? = nil, settings: ReplicationSettings = ReplicationSettings(),
                   without: Set<Int> = [], lying: [Int: LyingBlobStorage.Lie] = [:], failing: [Int: Int] = [:]) throws -> [TestNode] {
    var rng = SeededRandom(seed: seed)
    return try names.enumerated().map { i, name in
        try TestNode(name, policies: policies, settings: settings, rng: &rng, blobs: without.contains(i) ? nil : { store in
            let memory = MemoryBlobStorage(documents: store)
            if let n = failing[i] { return FailingBlobStorage(memory, failures: n) }
            return lying[i].map { LyingBlobStorage(memory, $0) } ?? memory
        })
    }
}

extension TestNode {
    var memoryBlobs: MemoryBlobStorage? { (blobs as? MemoryBlobStorage) ?? (blobs as? LyingBlobStorage)?.inner ?? (blobs as? FailingBlobStorage)?.inner }

    /// Keeps `content` as a blob and writes a document `id` referencing it.
    @discardableResult
    func putBlob(_ content: [UInt8], id: String, in c: CollectionName = readings) throws -> BlobReference {
        let ref = BlobReference(digest: BlobDigest.of(content), length: Int64(content.count))
        memoryBlobs?.put(content)
        try put(id, #"{"file":{"@blob":"\#(ref.digest)","length":\#(ref.length)}}"#, in: c)
        return ref
    }

    func holdsBlob(_ content: [UInt8]) -> Bool { memoryBlobs?.content(BlobDigest.of(content)) == content }
}

func blobContent(_ bytes: Int, seed: UInt64) -> [UInt8] {
    var rng = SeededRandom(seed: seed)
    return (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &rng) }
}

extension Network {
    func blobEvents(at node: Int) -> [BlobOutcome] {
        events.compactMap { e in
            guard e.node == node, case .blob(_, _, _, let outcome) = e.event else { return nil }
            return outcome
        }
    }
}

@Suite("Blob transfer over in-memory links")
struct BlobTransferTests {
    @Test("a blob referenced by a document of an eager collection follows the document, verified chunk by chunk")
    func eagerFetch() throws {
        let nodes = try makeBlobNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(5 * BlobManifest.chunkSize + 1234, seed: 1)
        try nodes[0].putBlob(content, id: "photo")
        let net = Network(nodes, seed: 1)
        net.connect(0, 1)
        net.settle()
        #expect(nodes[1].holdsBlob(content))
        #expect(net.blobEvents(at: 1) == [.completed(bytes: Int64(content.count))])
        #expect(nodes[0].node.blobCounters.chunksSent == 6)
        #expect(nodes[1].node.blobCounters.chunksVerified == 6)
        #expect(nodes[1].node.blobCounters.bytesReceived == Int64(content.count))
        #expect(net.closeErrors().isEmpty)
    }

    @Test("an empty blob and a blob written after the link is up both arrive")
    func emptyAndLater() throws {
        let nodes = try makeBlobNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        let net = Network(nodes, seed: 2)
        net.connect(0, 1)
        net.settle()
        try nodes[0].putBlob([], id: "empty")
        let later = blobContent(70_000, seed: 2)
        try nodes[0].putBlob(later, id: "later")
        net.committed(0)
        net.settle()
        #expect(nodes[1].holdsBlob([]))
        #expect(nodes[1].holdsBlob(later))
    }

    @Test("an on-demand collection's blob is fetched only when a reader demands it")
    func onDemand() throws {
        var policy = CollectionPolicy(name: readings)
        policy.blobs = .onDemand
        let nodes = try makeBlobNodes(["a", "b"], policies: [CollectionPolicy(name: .default), policy])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(100_000, seed: 3)
        let ref = try nodes[0].putBlob(content, id: "photo")
        let net = Network(nodes, seed: 3)
        net.connect(0, 1)
        net.settle()
        net.tick(2000)
        net.settle()
        #expect(try nodes[1].snapshot()["photo"] != nil)
        #expect(!nodes[1].holdsBlob(content))
        #expect(nodes[0].node.blobCounters.chunksSent == 0)
        net.process(1, nodes[1].node.demandBlob(ref, now: net.now))
        net.settle()
        #expect(nodes[1].holdsBlob(content))
    }

    @Test("in a line A-B-C, C is told \"not here\" by B and fetches from B once B has it")
    func multiHop() throws {
        for seed in UInt64(1)...4 {
            let nodes = try makeBlobNodes(["a", "b", "c"], seed: seed)
            defer { nodes.forEach { $0.close() } }
            let content = blobContent(3 * BlobManifest.chunkSize, seed: seed)
            try nodes[0].putBlob(content, id: "photo")
            let net = Network(nodes, seed: seed)
            net.connect(0, 1)
            net.connect(1, 2)
            net.settle()
            #expect(nodes[2].holdsBlob(content), "seed \(seed)")
            #expect(nodes[1].holdsBlob(content), "seed \(seed)")
            // One copy per hop.
            #expect(nodes[0].node.blobCounters.chunksSent == 3, "seed \(seed)")
            #expect(nodes[1].node.blobCounters.chunksSent == 3, "seed \(seed)")
            #expect(net.closeErrors().isEmpty)
        }
    }

    @Test("a cut transfer resumes from the verified chunks: none of them is sent again")
    func resume() throws {
        let nodes = try makeBlobNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(40 * BlobManifest.chunkSize, seed: 4)
        try nodes[0].putBlob(content, id: "big")
        let net = Network(nodes, seed: 4)
        let link = net.connect(0, 1)
        while nodes[1].node.blobCounters.chunksVerified < 12 { #expect(net.step()); if !net.step() { net.tick(0) } }
        net.cut(link)
        let verified = nodes[1].node.blobCounters.chunksVerified
        let sentBefore = nodes[0].node.blobCounters.chunksSent
        #expect(!nodes[1].holdsBlob(content))
        net.connect(0, 1)
        net.settle()
        #expect(nodes[1].holdsBlob(content))
        #expect(nodes[0].node.blobCounters.chunksSent - sentBefore == 40 - verified)
        #expect(nodes[1].node.blobCounters.chunksVerified == 40)
    }

    @Test("with two holders the blob is fetched from one only; the other is asked after the first stalls")
    func oncePerNode() throws {
        let nodes = try makeBlobNodes(["a", "b", "c"])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(6 * BlobManifest.chunkSize, seed: 5)
        try nodes[0].putBlob(content, id: "photo")
        let net = Network(nodes, seed: 5)
        net.connect(0, 2)
        net.settle()
        #expect(nodes[2].holdsBlob(content))
        let before = (nodes[0].node.blobCounters.chunksSent, nodes[2].node.blobCounters.chunksSent)
        let ab = net.connect(0, 1)
        net.connect(2, 1)
        net.settle()
        #expect(nodes[1].holdsBlob(content))
        #expect(nodes[0].node.blobCounters.chunksSent - before.0 + nodes[2].node.blobCounters.chunksSent - before.1 == 6)
        _ = ab
    }

    @Test("a holder that stalls is not doubled by another until requestTimeoutMillis passes; then the other serves it all")
    func stalledHolder() throws {
        let nodes = try makeBlobNodes(["a", "b", "c"])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(4 * BlobManifest.chunkSize, seed: 6)
        try nodes[0].putBlob(content, id: "photo")
        nodes[2].memoryBlobs?.put(content)
        let net = Network(nodes, seed: 6)
        let ab = net.connect(0, 1)
        // Until B asked A for the manifest; then A's answers stop reaching B.
        while !(nodes[1].node.blobFetchesInProgress.count == 1) { if !net.step() { net.tick(0) } }
        net.paused.insert([ab, 1])
        net.connect(2, 1)
        net.settle()
        #expect(nodes[2].node.blobCounters.chunksSent == 0)
        #expect(!nodes[1].holdsBlob(content))
        net.tick(ReplicationSettings().requestTimeoutMillis)
        net.settle()
        #expect(nodes[1].holdsBlob(content))
        #expect(nodes[2].node.blobCounters.chunksSent == 4)
    }

    @Test("a holder that stalls with no other link to ask is kept past requestTimeoutMillis: when its link heals, the window it owed is taken and no chunk comes twice")
    func stalledOnlyHolderResumes() throws {
        let nodes = try makeBlobNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(20 * BlobManifest.chunkSize, seed: 9)
        try nodes[0].putBlob(content, id: "photo")
        let net = Network(nodes, seed: 9)
        let ab = net.connect(0, 1)
        // Until B verified a few chunks; then A's frames stop reaching B (a cut TCP keeps them).
        while nodes[1].node.blobCounters.chunksVerified < 3 { if !net.step() { net.tick(0) } }
        net.paused.insert([ab, 1])
        net.settle()
        net.tick(3 * ReplicationSettings().requestTimeoutMillis)
        net.settle()
        let heldWhileCut = nodes[1].holdsBlob(content)
        #expect(!heldWhileCut)
        net.paused.remove([ab, 1])
        net.settle()
        let heldAfter = nodes[1].holdsBlob(content)
        #expect(heldAfter)
        #expect(nodes[1].node.blobCounters.redundantPieces == 0)
        #expect(nodes[1].node.blobCounters.chunksVerified == 20)
        #expect(nodes[0].node.blobCounters.chunksSent == 20)
    }

    @Test("verified chunks are stored a batch at a time; a storage error closes the link, keeps none of that batch as held, and the next link fetches them again")
    func storageFailsMidTransfer() throws {
        let nodes = try makeBlobNodes(["a", "b"], failing: [1: 1])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(30 * BlobManifest.chunkSize, seed: 10)
        try nodes[0].putBlob(content, id: "photo")
        let net = Network(nodes, seed: 10)
        net.connect(0, 1)
        net.settle()
        let heldAfterFailure = nodes[1].holdsBlob(content)
        #expect(!heldAfterFailure)
        #expect(net.closeErrors().contains { "\($0)".contains("disk full") }, "\(net.closeErrors())")
        net.connect(0, 1)
        net.settle()
        let held = nodes[1].holdsBlob(content)
        #expect(held)
        #expect(nodes[1].node.blobCounters.chunksVerified == 30)
        // Fewer store calls than chunks: frames that came together were stored together.
        let calls = (nodes[1].blobs as? FailingBlobStorage)?.storeCalls ?? 0
        #expect(calls > 1 && calls < 30, "\(calls) store calls for 30 chunks")
    }

    @Test("a holder whose chunks do not match the manifest is dropped after a few, and an honest one finishes the blob")
    func badChunks() throws {
        let nodes = try makeBlobNodes(["liar", "b", "honest"], lying: [0: .flipsBytes])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(4 * BlobManifest.chunkSize, seed: 7)
        try nodes[0].putBlob(content, id: "photo")
        nodes[2].memoryBlobs?.put(content)
        let net = Network(nodes, seed: 7)
        net.connect(0, 1)
        net.settle()
        #expect(!nodes[1].holdsBlob(content))
        #expect(nodes[1].node.blobCounters.badChunks == ReplicationSettings().blobBadChunksPerBlob)
        #expect(nodes[1].node.blobCounters.chunksVerified == 0)
        net.connect(2, 1)
        net.settle()
        #expect(nodes[1].holdsBlob(content))
        #expect(net.closeErrors().isEmpty)
    }

    @Test("a holder whose manifest chains other bytes to the blob's name is caught at the first chunk (the last one), and an honest holder's manifest replaces it")
    func fakeChain() throws {
        let nodes = try makeBlobNodes(["liar", "b", "honest"], lying: [0: .fakeChain])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(4 * BlobManifest.chunkSize + 100, seed: 8)
        try nodes[0].putBlob(content, id: "photo")
        nodes[2].memoryBlobs?.put(content)
        let net = Network(nodes, seed: 8)
        net.connect(0, 1)
        net.settle()
        #expect(!nodes[1].holdsBlob(content))
        // Only the last chunk was ever asked of the liar: no fake chunk was kept.
        #expect(nodes[1].node.blobCounters.chunksVerified == 0)
        #expect(nodes[1].node.blobCounters.badChunks == ReplicationSettings().blobBadChunksPerBlob)
        net.connect(2, 1)
        net.settle()
        #expect(nodes[1].holdsBlob(content))
        #expect(nodes[1].node.blobCounters.manifestsReplaced == 1)
        #expect(nodes[1].node.blobCounters.chunksVerified == 5)
    }

    @Test("a blob nobody holds is set aside after a while, so it does not keep others from being fetched")
    func unavailableBlobYields() throws {
        var settings = ReplicationSettings()
        settings.blobMaxFetches = 1
        let nodes = try makeBlobNodes(["a", "b"], settings: settings)
        defer { nodes.forEach { $0.close() } }
        let missing = blobContent(1000, seed: 14)
        try nodes[0].put("missing", #"{"file":{"@blob":"\#(BlobDigest.of(missing))","length":1000}}"#)
        let present = blobContent(1000, seed: 15)
        try nodes[0].putBlob(present, id: "present")
        let net = Network(nodes, seed: 14)
        net.connect(0, 1)
        net.settle()
        #expect(!nodes[1].holdsBlob(present))
        net.tick(4 * settings.requestTimeoutMillis)
        net.settle()
        #expect(nodes[1].holdsBlob(present))
        // The holder gets it later and says so: the waiting node fetches it then.
        nodes[0].memoryBlobs?.put(missing)
        net.tick(settings.blobPollMillis)
        net.settle()
        net.tick(4 * settings.requestTimeoutMillis)
        net.settle()
        #expect(nodes[1].holdsBlob(missing))
    }

    @Test("a link that keeps sending bad chunks is closed")
    func persistentLiar() throws {
        var settings = ReplicationSettings()
        settings.blobBadChunksPerLink = 5
        let nodes = try makeBlobNodes(["liar", "b"], settings: settings, lying: [0: .flipsBytes])
        defer { nodes.forEach { $0.close() } }
        for k in 0..<3 { try nodes[0].putBlob(blobContent(2 * BlobManifest.chunkSize, seed: 70 + UInt64(k)), id: "p\(k)") }
        let net = Network(nodes, seed: 8)
        net.connect(0, 1)
        net.settle()
        #expect(net.closeErrors().contains { if case .protocolViolation(let why) = $0 { why.contains("do not match") } else { false } })
    }

    @Test("bytes beyond the blob's declared length close the link")
    func extraBytes() throws {
        let nodes = try makeBlobNodes(["liar", "b"], lying: [0: .addsBytes])
        defer { nodes.forEach { $0.close() } }
        try nodes[0].putBlob(blobContent(1000, seed: 9), id: "photo")
        let net = Network(nodes, seed: 9)
        net.connect(0, 1)
        net.settle()
        #expect(net.closeErrors().contains { if case .protocolViolation(let why) = $0 { why.contains("beyond the blob's length") } else { false } })
    }

    @Test("a manifest whose length differs from the document's reference is refused before anything is begun")
    func wrongManifest() throws {
        let nodes = try makeBlobNodes(["liar", "b"], lying: [0: .wrongManifestLength])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(1000, seed: 10)
        try nodes[0].putBlob(content, id: "photo")
        let net = Network(nodes, seed: 10)
        net.connect(0, 1)
        net.settle()
        #expect(try nodes[1].blobs?.blobManifest(BlobDigest.of(content)) == nil)
        #expect(nodes[0].node.blobCounters.chunksSent == 0)
    }

    @Test("a blob over the configured maximum is refused before it is begun")
    func tooLarge() throws {
        var settings = ReplicationSettings()
        settings.blobMaxBytes = 100_000
        let nodes = try makeBlobNodes(["a", "b"], settings: settings)
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(100_001, seed: 11)
        try nodes[0].putBlob(content, id: "photo")
        let net = Network(nodes, seed: 11)
        net.connect(0, 1)
        net.settle()
        #expect(try nodes[1].blobs?.blobManifest(BlobDigest.of(content)) == nil)
        #expect(net.blobEvents(at: 1).count == 1)
        #expect(net.receivedTypes[0]?.contains(16) != true)
    }

    @Test("a peer that did not set the blob capability never receives a blob frame, and documents still flow")
    func capability() throws {
        let nodes = try makeBlobNodes(["a", "old"], without: [1])
        defer { nodes.forEach { $0.close() } }
        try nodes[0].putBlob(blobContent(1000, seed: 12), id: "photo")
        try nodes[1].put("from-old", "{}")
        let net = Network(nodes, seed: 12)
        net.connect(0, 1)
        net.settle()
        net.tick(10_000)
        net.settle()
        #expect(try nodes[1].snapshot()["photo"] != nil)
        #expect(try nodes[0].snapshot()["from-old"] != nil)
        for node in 0..<2 { #expect(net.receivedTypes[node]?.contains { $0 >= 16 } != true, "node \(node) got a blob frame") }
        #expect(net.closeErrors().isEmpty)
    }

    @Test("documents keep flowing while a big blob moves")
    func documentsFirst() throws {
        let nodes = try makeBlobNodes(["a", "b"])
        defer { nodes.forEach { $0.close() } }
        let content = blobContent(64 * BlobManifest.chunkSize, seed: 13)
        try nodes[0].putBlob(content, id: "big")
        let net = Network(nodes, seed: 13)
        net.connect(0, 1)
        while nodes[1].node.blobCounters.chunksVerified < 2 { if !net.step() { net.tick(0) } }
        for i in 0..<20 { try nodes[0].put("late-\(i)", "{\"i\":\(i)}") }
        net.committed(0)
        var steps = 0
        while try nodes[1].snapshot()["late-19"] == nil, steps < 100_000 { if !net.step() { net.tick(0) }; steps += 1 }
        #expect(try nodes[1].snapshot().count == 21)
        #expect(nodes[1].node.blobCounters.chunksVerified < 64, "the documents waited for the whole blob")
        net.settle()
        #expect(nodes[1].holdsBlob(content))
    }
}
