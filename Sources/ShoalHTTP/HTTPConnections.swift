import Glibc
import ShoalLinux
import ShoalThreads

/// The connections one server holds, and which of them are idle: accepted but with no request in
/// progress (nothing sent yet, half a header line, or between two keep-alive requests). When a new
/// connection takes the server past its limit, the idle one waiting longest is shut down to make
/// room, so clients that open connections and send nothing cannot lock everybody else out until
/// the idle timeout (libmicrohttpd alone stops accepting at its limit and leaves newcomers in the
/// listen backlog). A connection serving a request or a stream (SSE, a long poll) is never chosen.
///
/// Shut down, not closed: libmicrohttpd owns the socket, sees the end of it and closes it itself.
/// The shutdown happens under the lock that `closed` takes before libmicrohttpd closes the socket,
/// so the descriptor cannot have been reused by then.
final class HTTPConnections: Sendable {
    struct Entry {
        /// -1 once shut down here (it stays listed until libmicrohttpd closes it).
        var fd: Int32
        /// When it last became idle (accept or a finished request), in accept/finish order.
        var idleSince: UInt64
        var busy = false
    }

    struct State {
        var entries: [UnsafeMutableRawPointer: Entry] = [:]
        /// Entries not shut down yet.
        var live = 0
        var clock: UInt64 = 0
        var evicted = 0
    }

    private let state = Locked(State())
    let limit: Int

    init(limit: Int) { self.limit = max(1, limit) }

    /// Connections held and not shut down.
    var live: Int { state.withLock { $0.live } }
    /// Idle connections shut down to make room, since the start.
    var evicted: Int { state.withLock { $0.evicted } }

    /// A connection was accepted. Returns how many were shut down to keep within the limit.
    @discardableResult
    func started(_ connection: UnsafeMutableRawPointer, fd: Int32) -> Int {
        state.withLock { s in
            s.clock += 1
            s.entries[connection] = Entry(fd: fd, idleSince: s.clock)
            s.live += 1
            var shut = 0
            while s.live > limit {
                // The idle connection waiting longest; the new one only when every other is busy
                // (it has not had the chance to send its request yet).
                var victim: UnsafeMutableRawPointer?
                var since = UInt64.max
                for (key, e) in s.entries where !e.busy && e.fd >= 0 && key != connection && e.idleSince < since {
                    victim = key
                    since = e.idleSince
                }
                let key = victim ?? connection
                guard let e = s.entries[key], e.fd >= 0 else { break }
                _ = try? SystemCall.run("shutdown(idle HTTP connection)") { Glibc.shutdown(e.fd, Int32(SHUT_RDWR)) }
                s.entries[key] = Entry(fd: -1, idleSince: 0, busy: true)
                s.live -= 1
                s.evicted += 1
                shut += 1
                if key == connection { break }
            }
            return shut
        }
    }

    /// A request's headers are in: the connection is busy until the request completes.
    func requestStarted(_ connection: UnsafeMutableRawPointer) {
        state.withLock { s in
            if let e = s.entries[connection], e.fd >= 0 { s.entries[connection]?.busy = true }
        }
    }

    /// The request (or stream) ended: the connection waits for the next one.
    func requestCompleted(_ connection: UnsafeMutableRawPointer) {
        state.withLock { s in
            guard let e = s.entries[connection], e.fd >= 0 else { return }
            s.clock += 1
            s.entries[connection] = Entry(fd: e.fd, idleSince: s.clock)
        }
    }

    /// libmicrohttpd is about to close the socket.
    func closed(_ connection: UnsafeMutableRawPointer) {
        state.withLock { s in
            if let e = s.entries.removeValue(forKey: connection), e.fd >= 0 { s.live -= 1 }
        }
    }
}
