/// ShoalWire: the bytes that cross a link or a socket. Frames are a 4-byte big-endian length and a
/// payload. The decoder is incremental (feed it whatever a read returned) and bounded: a length
/// above the limit is rejected before a byte of the payload is buffered.

/// Why a frame was refused.
public enum FrameError: Error, Sendable, Equatable, CustomStringConvertible {
    case oversize(length: Int, limit: Int)
    case emptyFrame
    case truncated(have: Int, need: Int)

    public var description: String {
        switch self {
        case .oversize(let length, let limit): "frame of \(length) bytes is over the limit of \(limit) bytes"
        case .emptyFrame: "empty frame"
        case .truncated(let have, let need): "connection closed inside a frame (\(have) of \(need) bytes)"
        }
    }
}

/// Encodes one frame: length prefix + payload.
public enum FrameEncoder {
    public static func encode(_ payload: [UInt8], limit: Int) throws(FrameError) -> [UInt8] {
        guard !payload.isEmpty else { throw .emptyFrame }
        guard payload.count <= limit else { throw .oversize(length: payload.count, limit: limit) }
        let n = UInt32(payload.count)
        var out: [UInt8] = [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)]
        out.append(contentsOf: payload)
        return out
    }

    /// A frame in two parts, for a writer that sends them in order: the length and the payload's
    /// first `headBytes - 4` bytes (a copy of at most that much), then `payload[restFrom...]`
    /// sent from the payload itself. With `headBytes` a TLS record's size, the records are the
    /// ones a whole encoded frame would give, without copying the frame behind its length.
    public static func split(_ payload: [UInt8], limit: Int, headBytes: Int) throws(FrameError) -> (head: [UInt8], restFrom: Int) {
        guard !payload.isEmpty else { throw .emptyFrame }
        guard payload.count <= limit else { throw .oversize(length: payload.count, limit: limit) }
        let n = UInt32(payload.count)
        let first = min(payload.count, max(1, headBytes - 4))
        var head: [UInt8] = []
        head.reserveCapacity(4 + first)
        head += [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)]
        head.append(contentsOf: payload[0..<first])
        return (head, first)
    }
}

/// Splits a byte stream into frames. Bytes come in by `feed` (a copy) or by `read`, which lets
/// the caller's source write straight into the decoder's memory: a frame of `directBytes` or more
/// then goes into an array of its own, which `next` hands out without another copy.
public struct FrameDecoder: Sendable {
    public let limit: Int
    /// Buffered bytes are `buffer[start..<end]`; the rest of `buffer` is room to read into.
    private var buffer: [UInt8] = []
    private var start = 0
    private var end = 0
    /// A large frame being read into its own array: `large[0..<largeFilled]` has arrived.
    private var large: [UInt8]?
    private var largeFilled = 0
    /// Frames from this size up to `maxDirectBytes` are read into their own array (a peer that
    /// sends only a header costs at most that much memory before its bytes arrive).
    static let directBytes = 16 * 1024
    static let maxDirectBytes = 512 * 1024

    public init(limit: Int) {
        precondition(limit > 0 && limit <= Int(UInt32.max))
        self.limit = limit
    }

    /// Bytes held that are not yet a whole frame.
    public var pendingBytes: Int { end - start + (large == nil ? 0 : 4 + largeFilled) }

    public mutating func feed(_ bytes: some Sequence<UInt8>) {
        if bytes.withContiguousStorageIfAvailable({ feed(UnsafeRawBufferPointer($0)) }) == nil {
            Array(bytes).withUnsafeBytes { feed($0) }
        }
    }

    private mutating func feed(_ bytes: UnsafeRawBufferPointer) {
        var rest = bytes
        if let count = large?.count, largeFilled < count {  // (no binding of the array: it is written in place)
            let n = min(rest.count, count - largeFilled)
            let from = largeFilled
            large!.withUnsafeMutableBytes { UnsafeMutableRawBufferPointer(rebasing: $0[from..<(from + n)]).copyMemory(from: UnsafeRawBufferPointer(rebasing: rest[0..<n])) }
            largeFilled += n
            rest = UnsafeRawBufferPointer(rebasing: rest[n...])
        }
        guard !rest.isEmpty else { return }
        makeRoom(rest.count)
        let at = end
        buffer.withUnsafeMutableBytes { UnsafeMutableRawBufferPointer(rebasing: $0[at..<(at + rest.count)]).copyMemory(from: rest) }
        end += rest.count
    }

    /// Lets `source` write up to `maxBytes` straight into the decoder (into a large frame's own
    /// array while one is arriving: only up to its end, so no byte of the next frame goes there);
    /// returns what `source` returned (the bytes it wrote; 0 at end of stream).
    public mutating func read<E: Error>(maxBytes: Int = 64 * 1024, from source: (UnsafeMutableRawBufferPointer) throws(E) -> Int) throws(E) -> Int {
        precondition(maxBytes > 0, "an empty buffer would read as the end of the stream")
        // (A whole large frame waiting for `next`: what comes now follows it, in the buffer.)
        // Array's withUnsafeMutableBytes rethrows untyped errors: the result carries E out.
        var result: Result<Int, E> = .success(0)
        if let count = large?.count, largeFilled < count {
            let from = largeFilled
            large!.withUnsafeMutableBytes { raw in
                do throws(E) { result = .success(try source(UnsafeMutableRawBufferPointer(rebasing: raw[from..<min(raw.count, from + maxBytes)]))) } catch { result = .failure(error) }
            }
            let n = try result.get()
            precondition(n >= 0 && largeFilled + n <= large!.count, "a source wrote past the buffer it was given")
            largeFilled += n
            return n
        }
        makeRoom(maxBytes)
        let from = end
        buffer.withUnsafeMutableBytes { raw in
            do throws(E) { result = .success(try source(UnsafeMutableRawBufferPointer(rebasing: raw[from..<(from + maxBytes)]))) } catch { result = .failure(error) }
        }
        let n = try result.get()
        precondition(n >= 0 && n <= maxBytes, "a source wrote past the buffer it was given")
        end += n
        return n
    }

    /// The next whole frame, nil if more bytes are needed, or an error for a frame that must never be
    /// accepted (the caller closes the connection: the stream cannot be resynchronised).
    public mutating func next() throws(FrameError) -> [UInt8]? {
        if let frame = large {
            guard largeFilled == frame.count else { return nil }
            large = nil
            largeFilled = 0
            return frame
        }
        let available = end - start
        guard available >= 4 else { return nil }
        let b = start
        let length = Int(buffer[b]) << 24 | Int(buffer[b + 1]) << 16 | Int(buffer[b + 2]) << 8 | Int(buffer[b + 3])
        guard length > 0 else { throw .emptyFrame }
        guard length <= limit else { throw .oversize(length: length, limit: limit) }
        guard available >= 4 + length else {
            if length >= Self.directBytes && length <= Self.maxDirectBytes { startLarge(length, have: available - 4) }
            return nil
        }
        let frame = Array(buffer[(b + 4)..<(b + 4 + length)])
        start += 4 + length
        if start == end { start = 0; end = 0 }
        return frame
    }

    /// Call at end of stream: an incomplete frame is an error, not silently dropped.
    public func finish() throws(FrameError) {
        if let frame = large, largeFilled < frame.count { throw .truncated(have: largeFilled, need: frame.count) }
        let available = end - start
        guard available == 0 else {
            if available < 4 { throw .truncated(have: available, need: 4) }
            let b = start
            let length = Int(buffer[b]) << 24 | Int(buffer[b + 1]) << 16 | Int(buffer[b + 2]) << 8 | Int(buffer[b + 3])
            // (A whole frame not yet taken by `next` is no cut.)
            if available < 4 + length { throw .truncated(have: available - 4, need: length) }
            return
        }
    }

    /// Moves the start of a large frame (all that is buffered: it is not whole) into its own array.
    private mutating func startLarge(_ length: Int, have: Int) {
        // Left uninitialized (bytes, so no object is ever read from it): `next` hands the frame
        // out only once reads or feeds have written every byte, in order.
        var frame = [UInt8](unsafeUninitializedCapacity: length) { _, count in count = length }
        let from = start + 4
        frame.withUnsafeMutableBytes { dst in
            buffer.withUnsafeBytes { src in
                UnsafeMutableRawBufferPointer(rebasing: dst[0..<have]).copyMemory(from: UnsafeRawBufferPointer(rebasing: src[from..<(from + have)]))
            }
        }
        large = frame
        largeFilled = have
        start = 0
        end = 0
    }

    /// Room for `count` more bytes after `end`: moves the buffered bytes to the front, then grows.
    private mutating func makeRoom(_ count: Int) {
        if end + count <= buffer.count { return }
        if start > 0 {
            let n = end - start
            if n > 0 {
                let from = start
                buffer.withUnsafeMutableBytes { raw in
                    UnsafeMutableRawBufferPointer(rebasing: raw[0..<n]).copyMemory(from: UnsafeRawBufferPointer(rebasing: raw[from..<(from + n)]))
                }
            }
            start = 0
            end = n
        }
        if end + count > buffer.count { buffer.append(contentsOf: repeatElement(0, count: end + count - buffer.count)) }
    }
}
