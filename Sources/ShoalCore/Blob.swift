import Glibc
/// Blobs: binary content kept beside the documents, named by its SHA-256 and referenced from a
/// document by a small JSON object, `{"@blob": "sha256-<64 hex>", "length": N, "contentType": "…"}`.
///
/// A blob moves between gateways in *chunks* of `BlobManifest.chunkSize` bytes (the last one
/// shorter). Its manifest lets a receiver check every chunk on its own as it arrives, in any order,
/// and keep only verified ones (a cut transfer resumes from them); checking the last chunk checks
/// the whole blob against its name. The manifest is a function of the content alone, so every
/// honest holder sends the same one.

/// A blob's name: the SHA-256 of its content.
public struct BlobDigest: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let bytes: [UInt8]

    /// `bytes` must be 32 bytes long.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// Parses `sha256-<64 lowercase or uppercase hex digits>`.
    public init?(_ text: String) {
        let utf8 = Array(text.utf8)
        let prefix = Array("sha256-".utf8)
        guard utf8.count == prefix.count + 64, Array(utf8[0..<prefix.count]) == prefix else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(32)
        var i = prefix.count
        while i < utf8.count {
            guard let hi = BlobDigest.nibble(utf8[i]), let lo = BlobDigest.nibble(utf8[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        bytes = out
    }

    /// The digest of `content`.
    public static func of(_ content: [UInt8]) -> BlobDigest { BlobDigest(bytes: SHA256.hash(content))! }

    public var description: String { "sha256-" + SHA256.hex(bytes) }
    /// The first 12 hex digits, for logs.
    public var short: String { String(SHA256.hex(bytes).prefix(12)) }

    public static func < (a: BlobDigest, b: BlobDigest) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }

    static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// What a document holds to refer to a blob.
public struct BlobReference: Sendable, Hashable, CustomStringConvertible {
    public static let key = "@blob"
    /// Largest blob Shoal accepts (declared length): 4 GiB.
    public static let maxLength: Int64 = 4 << 30
    public static let maxContentTypeBytes = 255

    public var digest: BlobDigest
    public var length: Int64
    public var contentType: String?

    public init(digest: BlobDigest, length: Int64, contentType: String? = nil) {
        self.digest = digest
        self.length = length
        self.contentType = contentType
    }

    /// Reads a reference object; nil when `value` is not one (no `@blob` key). Throws when it has
    /// the key but is malformed (a bad digest, a missing or negative length, a length over
    /// `maxLength`, a content type that is not a short string).
    public init?(_ value: JSONValue) throws(BlobError) {
        guard case .object(let members) = value, let tag = members[BlobReference.key] else { return nil }
        guard let text = tag.stringValue, let digest = BlobDigest(text) else {
            throw .badReference("\"@blob\" must be \"sha256-\" and 64 hex digits")
        }
        guard let n = members["length"], case .number(let literal) = n, let length = Int64(literal), length >= 0 else {
            throw .badReference("\"length\" must be a whole number of bytes, 0 or more")
        }
        guard length <= BlobReference.maxLength else { throw .badReference("length \(length) is over the limit of \(BlobReference.maxLength) bytes") }
        var contentType: String?
        if let t = members["contentType"], t != .null {
            guard let s = t.stringValue, s.utf8.count <= BlobReference.maxContentTypeBytes else {
                throw .badReference("\"contentType\" must be a string of at most \(BlobReference.maxContentTypeBytes) bytes")
            }
            contentType = s
        }
        self.init(digest: digest, length: length, contentType: contentType)
    }

    /// The reference as a JSON object to put in a document.
    public var json: JSONValue {
        var members: [String: JSONValue] = [BlobReference.key: .string(digest.description), "length": .int(length)]
        if let contentType { members["contentType"] = .string(contentType) }
        return .object(members)
    }

    public var description: String { "\(digest) (\(length) bytes)" }

    /// Every reference anywhere in a document body (objects nested in objects and arrays), in the
    /// order met, each digest once. Malformed reference objects are skipped; `references(inText:)`
    /// is the cheap entry point for stored bodies.
    public static func references(in value: JSONValue) -> [BlobReference] {
        var found: [BlobReference] = []
        var seen: Set<BlobDigest> = []
        func visit(_ v: JSONValue, depth: Int) {
            guard depth < 64 else { return }
            switch v {
            case .object(let members):
                if members[BlobReference.key] != nil {
                    if let r = (try? BlobReference(v)) ?? nil, seen.insert(r.digest).inserted { found.append(r) }
                    return
                }
                for key in members.keys.sorted() { visit(members[key]!, depth: depth + 1) }
            case .array(let items):
                for item in items { visit(item, depth: depth + 1) }
            default:
                break
            }
        }
        visit(value, depth: 0)
        return found
    }

    /// References in a JSON text; a body without the text `"@blob"` is not parsed at all.
    public static func references(inText body: String) -> [BlobReference] {
        guard body.utf8.count >= 7, containsTag(body) else { return [] }
        guard let value = try? JSONValue.parse(body) else { return [] }
        return references(in: value)
    }

    /// Whether the text `"@blob"` is in `body`: memchr finds each `@` (rare in JSON, so this
    /// reads a body at memchr's speed, not a byte at a time), then the bytes around it are compared.
    /// Every replicated document's body goes through here.
    public static func containsTag(_ body: String) -> Bool {
        var body = body
        return body.withUTF8 { buf -> Bool in
            let tail = Array("blob\"".utf8)
            guard let base = buf.baseAddress, buf.count >= 7 else { return false }
            // "@" sits at 1 ... count - 6: one quote before it, `blob"` after it.
            var from = 1
            let last = buf.count - 6
            while from <= last {
                guard let hit = memchr(base + from, Int32(UInt8(ascii: "@")), last - from + 1) else { return false }
                let at = base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                if base[at - 1] == UInt8(ascii: "\""), base[at + 1] == tail[0], base[at + 2] == tail[1], base[at + 3] == tail[2],
                   base[at + 4] == tail[3], base[at + 5] == tail[4] {
                    return true
                }
                from = at + 1
            }
            return false
        }
    }
}

/// The chunk list of a blob: its name, its length and, for each chunk, where the blob's SHA-256
/// stands after it.
///
/// Entry i (for every chunk but the last) is SHA-256's chaining value after chunks 0…i — the
/// hash's internal state at that boundary, which 64 KiB (a whole number of 64-byte blocks) makes
/// well defined; the last entry is the blob's digest itself. Chunk i is verified by resuming the
/// hash from entry i − 1 (the initial state for chunk 0), feeding the chunk, and comparing with
/// entry i (for the last chunk: finishing the hash and comparing with the blob's name). So one
/// SHA-256 pass over the content checks every chunk, and once every chunk has passed, the chain
/// from the initial state to the name proves the whole: no second pass. A lying manifest cannot
/// make the last chunk end at the true digest (that would be a preimage), so lies show up as
/// chunks that fail.
public struct BlobManifest: Sendable, Equatable {
    /// Bytes per chunk (the last chunk is shorter): the unit of verification and resumption. Links
    /// move a chunk in pieces sized for the transport; only whole verified chunks are kept.
    public static let chunkSize = 64 * 1024

    public let digest: BlobDigest
    public let length: Int64
    /// One 32-byte entry per chunk, in order: chaining values, then the digest.
    public let chunkDigests: [[UInt8]]

    public init(digest: BlobDigest, length: Int64, chunkDigests: [[UInt8]]) throws(BlobError) {
        guard length >= 0, length <= BlobReference.maxLength else { throw .badManifest("length \(length) out of range") }
        guard chunkDigests.count == BlobManifest.chunkCount(length: length) else {
            throw .badManifest("\(chunkDigests.count) chunk digests for \(length) bytes (\(BlobManifest.chunkCount(length: length)) expected)")
        }
        guard chunkDigests.allSatisfy({ $0.count == 32 }) else { throw .badManifest("a chunk digest is not 32 bytes") }
        if let last = chunkDigests.last {
            guard last == digest.bytes else { throw .badManifest("the last chunk's entry is not the blob's digest") }
        } else {
            guard digest == BlobManifest.emptyDigest else { throw .badManifest("an empty blob's digest must be SHA-256 of nothing") }
        }
        self.digest = digest
        self.length = length
        self.chunkDigests = chunkDigests
    }

    static let emptyDigest = BlobDigest.of([])

    /// The manifest of `content`.
    public static func of(_ content: [UInt8]) -> BlobManifest {
        var builder = Builder()
        var start = 0
        while start < content.count {
            let end = min(content.count, start + chunkSize)
            builder.add(content[start..<end])
            start = end
        }
        return builder.finish()
    }

    /// Builds a manifest chunk by chunk, in one SHA-256 pass: `add` each chunk in order (every one
    /// `chunkSize` bytes but the last), then `finish`.
    public struct Builder: Sendable {
        var hasher = SHA256.Hasher()
        var entries: [[UInt8]] = []
        var length: Int64 = 0
        var short = false

        public init() {}

        public mutating func add(_ chunk: ArraySlice<UInt8>) {
            precondition(!short, "a chunk shorter than chunkSize must be the last")
            precondition(!chunk.isEmpty && chunk.count <= BlobManifest.chunkSize, "a chunk is 1 to chunkSize bytes")
            hasher.update(chunk)
            length += Int64(chunk.count)
            if chunk.count < BlobManifest.chunkSize {
                short = true
                entries.append([])  // the last: filled in by finish
            } else {
                entries.append(hasher.chainingValue!)
            }
        }
        public mutating func add(_ chunk: [UInt8]) { add(chunk[...]) }

        public mutating func finish() -> BlobManifest {
            let digest = hasher.finalize()
            if !entries.isEmpty { entries[entries.count - 1] = digest }
            do { return try BlobManifest(digest: BlobDigest(bytes: digest)!, length: length, chunkDigests: entries) } catch {
                preconditionFailure("a manifest built from its content is well formed: \(error)")
            }
        }
    }

    /// Whether `bytes` are chunk `index` of this blob (for the last chunk, whether the blob's
    /// digest comes out).
    public func verifies(chunk index: Int, _ bytes: [UInt8]) -> Bool {
        guard index >= 0, index < chunkCount, bytes.count == chunkLength(index) else { return false }
        var hasher: SHA256.Hasher
        if index == 0 {
            hasher = SHA256.Hasher()
        } else {
            guard let resumed = SHA256.Hasher(chainingValue: chunkDigests[index - 1], byteCount: UInt64(index) * UInt64(BlobManifest.chunkSize)) else { return false }
            hasher = resumed
        }
        hasher.update(bytes)
        if index == chunkCount - 1 { return hasher.finalize() == digest.bytes }
        return hasher.chainingValue == chunkDigests[index]
    }

    /// Chunks of a blob of `length` bytes (0 for an empty blob).
    public static func chunkCount(length: Int64) -> Int { Int((length + Int64(chunkSize) - 1) / Int64(chunkSize)) }
    public var chunkCount: Int { chunkDigests.count }
    /// Bytes in chunk `index`.
    public func chunkLength(_ index: Int) -> Int {
        let start = Int64(index) * Int64(BlobManifest.chunkSize)
        return Int(min(Int64(BlobManifest.chunkSize), length - start))
    }
}

/// Why a blob or a reference is refused.
public enum BlobError: Error, Sendable, Equatable, CustomStringConvertible {
    case badReference(String)
    case badManifest(String)
    /// A chunk or the whole blob does not match its digest.
    case digestMismatch(String)
    case notFound(BlobDigest)
    /// The blob (or the budget it would exceed) is too large.
    case tooLarge(String)
    case io(String)

    public var description: String {
        switch self {
        case .badReference(let why): "bad blob reference: \(why)"
        case .badManifest(let why): "bad blob manifest: \(why)"
        case .digestMismatch(let why): "blob digest mismatch: \(why)"
        case .notFound(let d): "no blob \(d) here"
        case .tooLarge(let why): "blob too large: \(why)"
        case .io(let why): "blob storage: \(why)"
        }
    }
}
