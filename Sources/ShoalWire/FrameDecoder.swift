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
}

/// Splits a byte stream into frames.
public struct FrameDecoder: Sendable {
    public let limit: Int
    private var buffer: [UInt8] = []
    private var consumed = 0

    public init(limit: Int) {
        precondition(limit > 0 && limit <= Int(UInt32.max))
        self.limit = limit
    }

    /// Bytes held that are not yet a whole frame.
    public var pendingBytes: Int { buffer.count - consumed }

    public mutating func feed(_ bytes: some Sequence<UInt8>) { buffer.append(contentsOf: bytes) }

    /// The next whole frame, nil if more bytes are needed, or an error for a frame that must never be
    /// accepted (the caller closes the connection: the stream cannot be resynchronised).
    public mutating func next() throws(FrameError) -> [UInt8]? {
        let available = buffer.count - consumed
        guard available >= 4 else { compact(); return nil }
        let b = consumed
        let length = Int(buffer[b]) << 24 | Int(buffer[b + 1]) << 16 | Int(buffer[b + 2]) << 8 | Int(buffer[b + 3])
        guard length > 0 else { throw .emptyFrame }
        guard length <= limit else { throw .oversize(length: length, limit: limit) }
        guard available >= 4 + length else { compact(); return nil }
        let frame = Array(buffer[(b + 4)..<(b + 4 + length)])
        consumed += 4 + length
        if consumed == buffer.count { buffer.removeAll(keepingCapacity: true); consumed = 0 }
        return frame
    }

    /// Call at end of stream: an incomplete frame is an error, not silently dropped.
    public func finish() throws(FrameError) {
        let available = buffer.count - consumed
        guard available == 0 else {
            if available < 4 { throw .truncated(have: available, need: 4) }
            let b = consumed
            let length = Int(buffer[b]) << 24 | Int(buffer[b + 1]) << 16 | Int(buffer[b + 2]) << 8 | Int(buffer[b + 3])
            throw .truncated(have: available - 4, need: length)
        }
    }

    private mutating func compact() {
        if consumed > 0 {
            buffer.removeFirst(consumed)
            consumed = 0
        }
    }
}
