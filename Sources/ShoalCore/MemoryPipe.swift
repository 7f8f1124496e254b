import ShoalThreads

/// Two connected in-memory `ByteStream`s, each direction a bounded buffer: a writer waits when the
/// reader is `capacity` bytes behind. For tests, benchmarks and the simulator.
public enum MemoryPipe {
    public static func pair(capacity: Int = 256 * 1024) -> (MemoryPipeEnd, MemoryPipeEnd) {
        let ab = PipeBuffer(capacity: capacity)
        let ba = PipeBuffer(capacity: capacity)
        return (MemoryPipeEnd(incoming: ba, outgoing: ab), MemoryPipeEnd(incoming: ab, outgoing: ba))
    }
}

/// One direction of a pipe.
final class PipeBuffer: @unchecked Sendable {  // the buffer only under its ConditionLock
    let lock = ConditionLock()
    let capacity: Int
    var bytes: [UInt8] = []
    var head = 0
    var closed = false
    /// `wake()` was called: the reader's wait ends with `.timeout` once.
    var woken = false

    init(capacity: Int) { self.capacity = capacity }
}

public final class MemoryPipeEnd: ByteStream, @unchecked Sendable {  // its state lives in the PipeBuffers, under their locks
    let incoming: PipeBuffer
    let outgoing: PipeBuffer

    init(incoming: PipeBuffer, outgoing: PipeBuffer) {
        self.incoming = incoming
        self.outgoing = outgoing
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        let b = incoming
        let deadline = monotonicMillis() + timeoutMillis
        return try b.lock.withLock { () throws(StreamError) -> Int in
            while b.bytes.count - b.head == 0 {
                if b.closed { return 0 }
                if b.woken { b.woken = false; throw .timeout }
                let left = deadline - monotonicMillis()
                if left <= 0 { throw .timeout }
                b.lock.wait(timeoutMillis: left)
            }
            let n = min(buffer.count, b.bytes.count - b.head)
            b.bytes.withUnsafeBytes { src in
                buffer.baseAddress!.copyMemory(from: src.baseAddress! + b.head, byteCount: n)
            }
            b.head += n
            if b.head == b.bytes.count {
                b.bytes.removeAll(keepingCapacity: true)
                b.head = 0
            } else if b.head > 65536 {
                b.bytes.removeFirst(b.head)
                b.head = 0
            }
            b.lock.broadcast()
            return n
        }
    }

    public func write(_ bytes: UnsafeRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        let b = outgoing
        let deadline = monotonicMillis() + timeoutMillis
        return try b.lock.withLock { () throws(StreamError) -> Int in
            while true {
                if b.closed { throw .closed }
                let room = b.capacity - (b.bytes.count - b.head)
                if room > 0 {
                    let n = min(room, bytes.count)
                    b.bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[0..<n]))
                    b.lock.broadcast()
                    return n
                }
                let left = deadline - monotonicMillis()
                if left <= 0 { throw .timeout }
                b.lock.wait(timeoutMillis: left)
            }
        }
    }

    /// Interrupts a read waiting on this end (it throws `.timeout` at once), as `TCPStream.wake()`
    /// does: the link's thread then sends what was queued.
    public func wake() {
        incoming.lock.withLock {
            incoming.woken = true
            incoming.lock.broadcast()
        }
    }

    public func close() {
        for b in [incoming, outgoing] {
            b.lock.withLock {
                b.closed = true
                b.lock.broadcast()
            }
        }
    }
}
