/// A reliable, ordered byte stream with blocking reads and writes that wait at most a timeout: what
/// TLS runs over. TCP sockets and Bluetooth L2CAP channels implement it (ShoalLinux), and so does
/// `MemoryPipe` for tests and the simulator. Implementations block the calling thread: use them
/// from threads of your own, never from Swift's cooperative pool.
public protocol ByteStream: AnyObject, Sendable {
    /// Reads up to `buffer.count` bytes. Returns 0 at end of stream; throws `.timeout` when
    /// nothing arrived within `timeoutMillis`.
    func read(into buffer: UnsafeMutableRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int
    /// Writes some of `bytes` (at least one), waiting at most `timeoutMillis` for room.
    func write(_ bytes: UnsafeRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int
    /// Closes both directions. Reads on the other end then see end of stream.
    func close()
}

public enum StreamError: Error, Sendable, Equatable, CustomStringConvertible {
    case timeout
    case closed
    case failed(String)

    public var description: String {
        switch self {
        case .timeout: "timed out"
        case .closed: "stream closed"
        case .failed(let why): why
        }
    }
}

extension ByteStream {
    /// Writes every byte or throws.
    public func writeAll(_ bytes: [UInt8], timeoutMillis: Int) throws(StreamError) {
        var offset = 0
        while offset < bytes.count {
            let start = offset
            let result: Result<Int, StreamError> = bytes.withUnsafeBytes { raw in
                do throws(StreamError) {
                    return .success(try write(UnsafeRawBufferPointer(rebasing: raw[start...]), timeoutMillis: timeoutMillis))
                } catch { return .failure(error) }
            }
            offset += try result.get()
        }
    }
}
