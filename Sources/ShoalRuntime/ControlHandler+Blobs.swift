import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalWire

/// `blob.*`: blobs on this gateway (`shoal blob`). An upload goes in pieces — `blob.begin`
/// (content type) gives a token, `blob.append` adds base64 pieces of at most `pieceMaxBytes`,
/// `blob.finish` names the blob and answers its reference, `blob.cancel` drops it — and a read
/// comes back in pieces too (`blob.get` with offset and length). `blob.ls`, `blob.stat`, `blob.gc`.
extension ControlHandler {
    /// Largest piece of a blob in one control message (before base64).
    static let blobPieceMaxBytes = 256 << 10

    func dispatchBlob(_ op: String, _ r: [String: JSONValue]) throws -> JSONValue? {
        switch op {
        case "blob.begin": return try blobBegin(r)
        case "blob.append", "blob.finish", "blob.cancel": return try blobUpload(op, r)
        case "blob.get": return try blobGet(r)
        case "blob.stat":
            let digest = try blobDigest(r)
            guard let info = try openStore().blobInfo(digest) else { throw StoreError.blob(.notFound(digest)) }
            return ControlHandler.json(info)
        case "blob.ls":
            let infos = try openStore().blobs()
            let page = ControlHandler.page(infos, ControlHandler.json)
            return ["blobs": .array(page.items), "more": .bool(page.more), "stats": ControlHandler.json(try openStore().blobStats())]
        case "blob.gc":
            let report = try BlobRetention(site: gateway.site).collect(try openStore())
            return ["dropped": .int(report.dropped), "droppedBytes": .int(report.droppedBytes), "overBudget": .bool(report.overBudget),
                    "budget": gateway.site.blobBudgetBytes.map { .int($0) } ?? .null, "stats": ControlHandler.json(report.stats)]
        default:
            return nil
        }
    }

    private func blobBegin(_ r: [String: JSONValue]) throws -> JSONValue {
        var contentType: String?
        if let t = r["contentType"], t != .null {
            guard let s = t.stringValue, !s.isEmpty, s.utf8.count <= BlobReference.maxContentTypeBytes else {
                throw bad("\"contentType\" is a string of 1 to \(BlobReference.maxContentTypeBytes) bytes")
            }
            contentType = s
        }
        let writer = try openStore().blobWriter(contentType: contentType)
        guard let token = gateway.blobUploads.add(writer, now: ControlHandler.nowMillis()) else {
            throw ControlError(code: .unavailable, message: "\(BlobUploads.maxOpen) blob uploads are open already; finish or cancel one, or wait for idle ones to time out (\(BlobUploads.idleMillis / 60_000) minutes)")
        }
        return ["upload": .string(token), "pieceMaxBytes": .int(Int64(ControlHandler.blobPieceMaxBytes)),
                "maxBlobBytes": .int(try openStore().options.maxBlobBytes)]
    }

    private func blobUpload(_ op: String, _ r: [String: JSONValue]) throws -> JSONValue {
        guard let token = r["upload"]?.stringValue else { throw bad("missing \"upload\" (the token blob.begin answered)") }
        var piece: [UInt8] = []
        if op == "blob.append" {
            guard let text = r["data"]?.stringValue, let bytes = Base64.decode(text) else {
                throw bad("\"data\" must be base64 (RFC 4648, padded); nothing was added")
            }
            guard bytes.count <= ControlHandler.blobPieceMaxBytes else {
                throw bad("a piece is at most \(ControlHandler.blobPieceMaxBytes) bytes; this one is \(bytes.count); nothing was added")
            }
            piece = bytes
        }
        let entry: BlobUploads.Entry
        switch gateway.blobUploads.checkOut(token) {
        case .entry(let e): entry = e
        case .busy: throw ControlError(code: .unavailable, message: "upload \(token) is busy with another request; try again")
        case .unknown: throw ControlError(code: .notFound, message: "no open upload \(token) (finished, cancelled, or idle over \(BlobUploads.idleMillis / 60_000) minutes)")
        }
        var keep: BlobUploads.Entry? = nil
        defer { gateway.blobUploads.checkIn(token, keep, now: ControlHandler.nowMillis()) }
        switch op {
        case "blob.append":
            try entry.writer.append(piece)  // over the size limit: the writer drops the upload and throws
            keep = entry
            return ["upload": .string(token), "length": .int(entry.writer.length)]
        case "blob.finish":
            let reference = try entry.writer.finish()
            gateway.logger.verbose(.control, "blob \(reference.digest.short) stored, \(reference.length) bytes")
            return reference.json
        default:
            entry.writer.cancel()
            return ["upload": .string(token), "cancelled": true]
        }
    }

    private func blobGet(_ r: [String: JSONValue]) throws -> JSONValue {
        let digest = try blobDigest(r)
        let offset = r["offset"]?.int64Value ?? 0
        let length = r["length"]?.int64Value ?? Int64(ControlHandler.blobPieceMaxBytes)
        guard offset >= 0 else { throw bad("\"offset\" is 0 or more") }
        guard length >= 0, length <= Int64(ControlHandler.blobPieceMaxBytes) else {
            throw bad("\"length\" is 0 to \(ControlHandler.blobPieceMaxBytes)")
        }
        let store = try openStore()
        guard let info = try store.blobInfo(digest), info.state == .complete else { throw try ControlHandler.missing(store, digest) }
        guard offset <= info.length else { throw bad("\"offset\" \(offset) is past the end of \(digest) (\(info.length) bytes)") }
        let bytes = try store.readBlob(digest, offset: offset, length: Int(length))
        return ["digest": .string(digest.description), "length": .int(info.length), "offset": .int(offset),
                "contentType": info.contentType.map { .string($0) } ?? .null,
                "data": .string(Base64.encode(bytes)), "end": .bool(offset + Int64(bytes.count) >= info.length)]
    }

    /// A blob not held whole here: when a document refers to it, it is demanded from the mesh and
    /// the reader told to come back (unavailable); else not found.
    static func missing(_ store: DocumentStore, _ digest: BlobDigest) throws -> ControlError {
        guard try store.demandIfReferenced(digest) != nil else { return translate(.blob(.notFound(digest))) }
        return ControlError(code: .unavailable, message: "blob \(digest) is not here yet; a document refers to it, so it was asked for from the mesh: try again later")
    }

    func blobDigest(_ r: [String: JSONValue]) throws -> BlobDigest {
        guard let text = r["digest"]?.stringValue else { throw bad("missing \"digest\"") }
        guard let d = BlobDigest(text) else { throw bad("\"\(text.prefix(80))\" is not a blob digest: sha256- and 64 hex digits") }
        return d
    }

    static func json(_ b: BlobInfo) -> JSONValue {
        ["digest": .string(b.digest.description), "length": .int(b.length), "contentType": b.contentType.map { .string($0) } ?? .null,
         "state": .string(b.state.rawValue), "heldBytes": .int(b.heldBytes), "referencedBy": .int(b.referencedBy),
         "createdAtMillis": .int(b.createdAtMillis), "usedAtMillis": .int(b.usedAtMillis)]
    }

    static func json(_ s: BlobStats) -> JSONValue {
        ["count": .int(s.count), "bytes": .int(s.bytes), "partialBytes": .int(s.partialBytes)]
    }

    static func nowMillis() -> Int64 { Int64(NodeClock.systemWallMillis()) }
}
