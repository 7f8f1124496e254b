import ShoalCore
import ShoalReplication
import ShoalWire

/// Blobs in the simulation: a node keeps a blob and writes a document referencing it; every node
/// fetches it (the default collection is eager) through the real transfer engine.
extension Simulation {
    /// Keeps `bytes` seeded random bytes as a blob on node `i` and writes document `id` referencing it.
    @discardableResult
    public func writeBlob(on i: Int, id: String, bytes: Int) throws -> Bool {
        let n = nodes[i]
        guard n.up, let storage = n.blobStorage else { return false }
        var content = [UInt8](repeating: 0, count: bytes)
        var x = rng.next()
        for k in 0..<bytes {
            if k % 8 == 0 { x = rng.next() }
            content[k] = UInt8(truncatingIfNeeded: x >> (UInt64(k % 8) * 8))
        }
        let ref = storage.put(content, contentType: "application/octet-stream")
        blobsWritten.append((ref.digest, ref.length))
        return try write(on: i, id: id, body: #"{"file":{"@blob":"\#(ref.digest)","length":\#(ref.length)}}"#)
    }

    /// Every node that is up holds every blob written, complete.
    public var blobsConverged: Bool {
        checkedNodes.allSatisfy { i in
            guard let held = nodes[i].blobStorage?.completeBlobs else { return false }
            return blobsWritten.allSatisfy { held.contains($0.digest) }
        }
    }

    /// Blob frame bytes sent (manifests, requests, pieces), as the medium counted them.
    public var blobBytesSent: UInt64 {
        bytesByType.filter { $0.key >= 16 && $0.key <= 21 }.values.reduce(0, +)
    }

    /// One copy of every blob to every other node.
    public var blobIdealBytes: UInt64 {
        UInt64(blobsWritten.map(\.length).reduce(0, +)) * UInt64(max(0, nodes.count - 1))
    }

    /// A chunk's first piece going to a node that holds the chunk verified already is a chunk sent
    /// twice (resumption should never ask for one).
    func noteBlobFrame(_ frame: [UInt8], to: Int) {
        guard frame.first == 19, case .blobPiece(let d, let chunk, 0, _)? = try? ReplicationMessage(decoding: frame) else { return }
        if let held = (try? nodes[to].blobStorage?.heldBlobChunks(d)) ?? nil, held.indices.contains(Int(chunk)), held[Int(chunk)] {
            blobChunksResent += 1
        }
    }
}
