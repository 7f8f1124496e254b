import ShoalThreads

/// A response body written by another thread while the client reads it (server-sent events, a
/// long poll). Bounded: `send` refuses what would take the bytes not yet taken by the client past
/// `maxBuffered`, and the producer holds back (a slow reader lags, it never grows the gateway's
/// memory) — except that while less than half of it is pending, one send always goes in, so an
/// event bigger than the room left (a document near 1 MiB) is sent, not retried forever. So at
/// most maxBuffered/2 plus one send are ever pending. When the buffer is empty the connection is
/// suspended (no thread waits, no busy loop) and the next `send` or `finish` resumes it.
public final class HTTPStream: @unchecked Sendable {  // all state under `state`'s lock
    struct State {
        var buffer: [UInt8] = []
        var readOffset = 0
        var finished = false
        /// The client went away (or the server stopped): sends are dropped.
        var closed = false
        var suspended = false
        var connection: OpaquePointer?
        /// The server's resume call (set with `connection` when the response is queued).
        var resume: (@Sendable (OpaquePointer) -> Void)?
    }

    let state = Locked(State())
    public let maxBuffered: Int
    /// The server serving it, while it is open (so the server can end it on stop).
    let server = Locked<HTTPServer?>(nil)
    /// Called once when the client has gone (connection closed) or the server stopped.
    let onClose = Locked<(@Sendable () -> Void)?>(nil)

    public init(maxBuffered: Int = 256 * 1024) {
        self.maxBuffered = maxBuffered
    }

    /// Appends bytes for the client. False when the client is gone or the buffer is full (the
    /// caller keeps its cursor and tries again later).
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        let appended = state.withLock { s -> Bool in
            guard !s.closed, !s.finished else { return false }
            let pending = s.buffer.count - s.readOffset
            if pending >= maxBuffered / 2 && pending + bytes.count > maxBuffered { return false }
            s.buffer.append(contentsOf: bytes)
            resumeIfSuspended(&s)
            return true
        }
        return appended
    }

    @discardableResult
    public func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    /// Bytes the client has not taken yet.
    public var buffered: Int { state.withLock { $0.buffer.count - $0.readOffset } }
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Ends the body once what is buffered has been sent.
    public func finish() {
        state.withLock { s in
            s.finished = true
            resumeIfSuspended(&s)
        }
    }

    /// Runs `body` once the client has gone (at once if it already has).
    public func whenClosed(_ body: @escaping @Sendable () -> Void) {
        let now = state.withLock { $0.closed }
        if now { body(); return }
        onClose.withLock { $0 = body }
        if state.withLock({ $0.closed }) { fireClose() }
    }

    /// Resumes the connection if the reader suspended it, under the stream's lock: so a server
    /// stopping cannot find the stream not suspended while its resume is still to come (which
    /// libmicrohttpd answers with an abort, or a resume of a freed connection). The lock order is
    /// the reader's own (stream lock, then libmicrohttpd's), so this cannot deadlock.
    private func resumeIfSuspended(_ s: inout State) {
        guard s.suspended, let c = s.connection, let resume = s.resume else { return }
        s.suspended = false
        resume(c)
    }

    /// The server attaches the stream to its connection when it queues the response.
    func attach(_ connection: OpaquePointer, resume: @escaping @Sendable (OpaquePointer) -> Void) {
        state.withLock { s in
            s.connection = connection
            s.resume = resume
        }
    }

    /// libmicrohttpd's reader: copies what is buffered; with nothing buffered, suspends the
    /// connection (`suspend` is called under the lock, so a concurrent send sees it) and returns 0.
    func read(into out: UnsafeMutableRawBufferPointer, suspend: (OpaquePointer) -> Void) -> Int {
        state.withLock { s in
            let available = s.buffer.count - s.readOffset
            if available == 0 {
                if s.finished || s.closed { return -1 }
                if let c = s.connection {
                    s.suspended = true
                    suspend(c)
                }
                return 0
            }
            let n = min(available, out.count)
            s.buffer.withUnsafeBytes { src in
                out.baseAddress!.copyMemory(from: src.baseAddress! + s.readOffset, byteCount: n)
            }
            s.readOffset += n
            if s.readOffset == s.buffer.count {
                s.buffer.removeAll(keepingCapacity: s.buffer.capacity <= 16 * 1024)
                s.readOffset = 0
            } else if s.readOffset > 64 * 1024 {
                s.buffer.removeFirst(s.readOffset)
                s.readOffset = 0
            }
            return n
        }
    }

    /// The connection is gone (libmicrohttpd freed the response) or the server is stopping.
    func markClosed() {
        state.withLock { s in
            s.closed = true
            s.connection = nil
            s.suspended = false
        }
        fireClose()
    }

    private func fireClose() {
        let body = onClose.withLock { b -> (@Sendable () -> Void)? in
            let out = b
            b = nil
            return out
        }
        body?()
    }

    /// Resumes a suspended connection so it sees the end (the server stops).
    func wakeForStop() {
        state.withLock { s in
            s.finished = true
            resumeIfSuspended(&s)
        }
    }
}
