import Glibc
import ShoalCore
import ShoalLinux

/// The HTTP benchmark's reader of one server-sent-events stream: it sends one GET over loopback
/// TCP, skips the answer's head, undoes chunked transfer encoding and reports each event's `id:`.
/// Not a general HTTP client: it takes the status line at its word and reads nothing but ids
/// (the change feed's ids are sequences, which is all the benchmark matches on).
final class SSEClient: @unchecked Sendable {  // used by one thread at a time (handed over, never shared)
    enum Framing { case head, chunkSize, chunkData, chunkEnd, plain, ended }

    let stream: TCPStream
    private(set) var status = 0
    /// The highest `id:` seen so far (-1: none).
    private(set) var lastID: Int64 = -1
    private(set) var bytesReceived = 0
    private var framing = Framing.head
    private var head: [UInt8] = []
    private var sizeLine: [UInt8] = []
    private var chunkLeft = 0
    private var line: [UInt8] = []

    init(port: UInt16, path: String) throws {
        stream = try TCPStream.connect(ipv4: "127.0.0.1", port: port, timeoutMillis: 2000)
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".utf8)
        var sent = 0
        while sent < request.count {
            sent += try request[sent...].withUnsafeBytes { try stream.write($0, timeoutMillis: 2000) }
        }
    }

    var ended: Bool { framing == .ended }

    /// Reads what has arrived, waiting at most `timeoutMillis` for the first byte; `onID` is
    /// called for each event id in order. Returns false once the stream has ended.
    @discardableResult
    func pump(timeoutMillis: Int, onID: (Int64) -> Void = { _ in }) throws -> Bool {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let n: Int
        do { n = try buffer.withUnsafeMutableBytes { try stream.read(into: $0, timeoutMillis: timeoutMillis) } } catch StreamError.timeout {
            return !ended
        }
        if n == 0 { framing = .ended; return false }
        bytesReceived += n
        for byte in buffer[0..<n] { take(byte, onID) }
        return !ended
    }

    private func take(_ byte: UInt8, _ onID: (Int64) -> Void) {
        switch framing {
        case .head:
            head.append(byte)
            guard head.count >= 4, head.suffix(4).elementsEqual([13, 10, 13, 10]) else { return }
            let text = String(decoding: head, as: UTF8.self)
            status = Int(text.split(separator: " ").dropFirst().first ?? "") ?? 0
            framing = text.lowercased().contains("transfer-encoding: chunked") ? .chunkSize : .plain
            head = []
        case .chunkSize:
            if byte != 10 { sizeLine.append(byte); return }
            let hex = String(decoding: sizeLine.prefix { $0 != 13 && $0 != 59 }, as: UTF8.self)  // up to CR or ';'
            sizeLine = []
            chunkLeft = Int(hex, radix: 16) ?? 0
            framing = chunkLeft == 0 ? .ended : .chunkData
        case .chunkData:
            body(byte, onID)
            chunkLeft -= 1
            if chunkLeft == 0 { framing = .chunkEnd }
        case .chunkEnd:
            if byte == 10 { framing = .chunkSize }
        case .plain:
            body(byte, onID)
        case .ended:
            break
        }
    }

    /// One byte of the event stream itself: lines, of which only `id: N` matters here.
    private func body(_ byte: UInt8, _ onID: (Int64) -> Void) {
        guard byte == 10 else { line.append(byte); return }
        defer { line.removeAll(keepingCapacity: true) }
        guard line.count > 4, line.starts(with: Array("id: ".utf8)) else { return }
        if let id = Int64(String(decoding: line.dropFirst(4), as: UTF8.self)) {
            lastID = max(lastID, id)
            onID(id)
        }
    }

    func close() { stream.close() }
}
