import ShoalCore
import ShoalTLS
import ShoalWire
import ShoalThreads

/// Real mutual-TLS sessions over a simulated link (`SimConfig.tls`): each connection runs a real
/// mbedTLS handshake over an in-memory pipe (the two sides on two threads), and every frame is
/// encrypted by the sender's session and decrypted by the receiver's when the simulation delivers
/// it. Bytes on the medium are then the real ciphertext.
final class SimTLSLink {
    let a: TLSSession
    let b: TLSSession
    let aStream: CountingStream
    let bStream: CountingStream
    var decoders = [FrameDecoder(limit: ReplicationMessage.frameLimit), FrameDecoder(limit: ReplicationMessage.frameLimit)]
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)

    /// Handshakes `client` (the dialler, side a) with `server` (side b).
    init(client: TLSContext, server: TLSContext) throws {
        // Large enough that the simulation's in-flight frames never fill it (it never blocks).
        let (pa, pb) = MemoryPipe.pair(capacity: 256 << 20)
        aStream = CountingStream(pa)
        bStream = CountingStream(pb)
        let box = HandshakeBox()
        let serverStream = bStream
        let started = DetachedThread.start(name: "sim-tls") {
            let r: Result<TLSSession, TLSError>
            do throws(TLSError) { r = .success(try TLSSession.accept(over: serverStream, context: server)) } catch {
                r = .failure(error)
                serverStream.close()
            }
            box.finish(r)
        }
        guard started else { throw SimError(message: "cannot start a TLS handshake thread") }
        let clientResult: Result<TLSSession, TLSError>
        do throws(TLSError) { clientResult = .success(try TLSSession.connect(over: aStream, context: client)) } catch { clientResult = .failure(error) }
        if case .failure = clientResult { pa.close() }
        let serverResult = box.wait()
        a = try clientResult.get()
        b = try serverResult.get()
    }

    /// Encrypts a frame from side `fromA`; returns the ciphertext bytes it put on the medium.
    func send(_ payload: [UInt8], fromA: Bool) throws -> Int {
        let stream = fromA ? aStream : bStream
        let before = stream.written
        try (fromA ? a : b).write(try FrameEncoder.encode(payload, limit: ReplicationMessage.frameLimit), timeoutMillis: 1000)
        return stream.written - before
    }

    /// Decrypts the next frame arriving on side `toA` (its ciphertext is already in the pipe).
    func receive(toA: Bool) throws -> [UInt8] {
        let side = toA ? 0 : 1
        let session = toA ? a : b
        while true {
            if let frame = try decoders[side].next() { return frame }
            let n = try buffer.withUnsafeMutableBytes { raw in try session.read(into: raw, timeoutMillis: 1000) }
            guard n > 0 else { throw SimError(message: "TLS stream ended") }
            decoders[side].feed(buffer[0..<n])
        }
    }

    func close() {
        a.close()
        b.close()
    }
}

/// Counts the bytes written through a stream (the ciphertext a session sends).
final class CountingStream: ByteStream, @unchecked Sendable {  // `written` is touched only by the one session writing through it
    let inner: any ByteStream
    var written = 0
    init(_ inner: any ByteStream) { self.inner = inner }
    func read(into buffer: UnsafeMutableRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        try inner.read(into: buffer, timeoutMillis: timeoutMillis)
    }
    func write(_ bytes: UnsafeRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        let n = try inner.write(bytes, timeoutMillis: timeoutMillis)
        written += n
        return n
    }
    func close() { inner.close() }
}

final class HandshakeBox: @unchecked Sendable {  // `result` only under `lock`
    let lock = ConditionLock()
    var result: Result<TLSSession, TLSError>?
    func finish(_ r: Result<TLSSession, TLSError>) { lock.withLock { result = r; lock.broadcast() } }
    func wait() -> Result<TLSSession, TLSError> {
        lock.withLock {
            while result == nil { lock.wait() }
            return result!
        }
    }
}
