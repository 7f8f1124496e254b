import ShoalCore
import ShoalHTTP
import ShoalLinux
import ShoalStore
import ShoalThreads
import ShoalWire

/// Blobs over HTTP: `POST /v1/blobs` keeps the body as a blob (its Content-Type too) and answers
/// 201 with the reference; `GET /v1/blobs/{digest}` streams a held blob (ETag: the digest; one
/// `Range: bytes=a-b` answered 206); `GET /v1/blobs` lists what is held.
///
/// What a reader gets wrong: the HTTP server holds a request body in memory, so a POST is bounded
/// by `HTTPService.blobBodyLimit`; larger blobs go in pieces through `shoal blob put`.
extension HTTPAPI {
    /// Downloads streaming at once; one more is answered 503.
    static let maxBlobDownloads = 8
    static let blobDownloads = Locked(0)

    func postBlob(_ r: HTTPRequest) throws -> HTTPResponse {
        var contentType = r.header("content-type").map { String($0.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed()) }
        if contentType?.isEmpty == true { contentType = nil }
        if let t = contentType, t.utf8.count > BlobReference.maxContentTypeBytes {
            throw HTTPFailure.badRequest("Content-Type is at most \(BlobReference.maxContentTypeBytes) bytes")
        }
        let reference = try opened.store.putBlob(bytes: r.body, contentType: contentType)
        gateway.logger.verbose(.http, "blob \(reference.digest.short) stored, \(reference.length) bytes")
        return json(reference.json, status: 201, headers: [("Location", "/v1/blobs/\(reference.digest)"), ("ETag", "\"\(reference.digest)\"")])
    }

    func listBlobs() throws -> HTTPResponse {
        let page = ControlHandler.page(try opened.store.blobs(), ControlHandler.json)
        return json(["blobs": .array(page.items), "more": .bool(page.more), "stats": ControlHandler.json(try opened.store.blobStats())])
    }

    func getBlob(_ text: String, _ r: HTTPRequest) throws -> HTTPResponse {
        guard let digest = BlobDigest(text) else { throw HTTPFailure.badRequest("\"\(text.prefix(80))\" is not a blob digest: sha256- and 64 hex digits") }
        let store = opened.store
        guard let info = try store.blobInfo(digest), info.state == .complete else { throw try ControlHandler.missing(store, digest) }
        let etag = "\"\(digest)\""
        if let match = r.header("if-none-match"), match == etag || match == "*" {
            return HTTPResponse(status: 304, headers: [("ETag", etag)])
        }
        var headers: [(String, String)] = [("Content-Type", info.contentType ?? "application/octet-stream"), ("ETag", etag),
                                           ("Accept-Ranges", "bytes"), ("Cache-Control", "public, max-age=31536000, immutable")]
        var status = 200
        var (start, end) = (Int64(0), info.length)
        if let range = r.header("range") {
            guard let (a, b) = HTTPAPI.byteRange(range, length: info.length) else {
                return HTTPResponse(status: 416, headers: [("Content-Range", "bytes */\(info.length)")])
            }
            (start, end, status) = (a, b + 1, 206)
            headers.append(("Content-Range", "bytes \(a)-\(b)/\(info.length)"))
        }
        if end - start <= Int64(ControlHandler.blobPieceMaxBytes) {
            return HTTPResponse(status: status, headers: headers, body: .bytes(try store.readBlob(digest, offset: start, length: Int(end - start))))
        }
        let admitted = HTTPAPI.blobDownloads.withLock { n -> Bool in
            guard n < HTTPAPI.maxBlobDownloads else { return false }
            n += 1
            return true
        }
        guard admitted else { throw ControlError(code: .unavailable, message: "\(HTTPAPI.maxBlobDownloads) blob downloads are running; try again") }
        let stream = HTTPStream(maxBuffered: 4 * BlobManifest.chunkSize)
        let logger = gateway.logger
        let (from, to) = (start, end)
        let started = DetachedThread.start(name: "shoal-blob-http") {
            defer { HTTPAPI.blobDownloads.withLock { $0 -= 1 } }
            HTTPAPI.pump(store, digest, from: from, to: to, into: stream, logger: logger)
        }
        if !started {
            HTTPAPI.blobDownloads.withLock { $0 -= 1 }
            throw ControlError(code: .unavailable, message: "cannot start a thread for the download; try again")
        }
        return HTTPResponse(status: status, headers: headers, body: .stream(stream))
    }

    /// Sends bytes `from..<to` of a blob, waiting while the client's buffer is full; ends early
    /// (the client sees a cut body) if the client goes or the blob is dropped meanwhile.
    static func pump(_ store: DocumentStore, _ digest: BlobDigest, from: Int64, to: Int64, into stream: HTTPStream, logger: Logger) {
        var at = from
        while at < to, !stream.isClosed {
            let bytes: [UInt8]
            do { bytes = try store.readBlob(digest, offset: at, length: Int(min(Int64(BlobManifest.chunkSize), to - at))) } catch {
                logger.warning(.http, "blob \(digest.short): download cut at byte \(at): \(error)")
                break
            }
            if bytes.isEmpty { break }
            while !stream.send(bytes) {
                if stream.isClosed { return }
                SystemCall.pause(millis: 5)
            }
            at += Int64(bytes.count)
        }
        stream.finish()
    }

    /// One `bytes=a-b`, `bytes=a-` or `bytes=-n` range within `length`; nil when unsatisfiable or
    /// not of that simple form (several ranges are not served).
    static func byteRange(_ header: String, length: Int64) -> (Int64, Int64)? {
        guard header.hasPrefix("bytes="), !header.contains(","), length > 0 else { return nil }
        let spec = header.dropFirst(6)
        guard let dash = spec.firstIndex(of: "-") else { return nil }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        if first.isEmpty {
            guard let n = Int64(last), n > 0 else { return nil }
            return (max(0, length - n), length - 1)
        }
        guard let a = Int64(first), a >= 0, a < length else { return nil }
        if last.isEmpty { return (a, length - 1) }
        guard let b = Int64(last), b >= a else { return nil }
        return (a, min(b, length - 1))
    }
}
