import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalWire
import Synchronization

/// Running one link's TLS session on its own thread: what the node queued goes out, what comes in
/// is decoded and checked there and posted to the node thread.
extension ReplicationDriver {
    /// Runs one link on the calling thread until it closes. An accepted link is announced to the
    /// node only once its first frame (the peer's HELLO) arrived: a static-peer probe (a handshake,
    /// then goodbye) is not a link.
    package nonisolated func run(_ io: LinkIO, outgoing: Bool) {
        var announced = outgoing
        if outgoing { post(.opened(io.id, io, outgoing: true)) }
        var decoder = FrameDecoder(limit: ReplicationMessage.frameLimit)
        let bodyLimit = maxBodyBytes
        var failure: String?
        var writeBroken = false  // part of a frame went out: nothing more may follow it
        loop: while !isStopping && !io.isClosed {
            do {
                for payload in io.takeOutbox() { try Self.writeFrame(payload, to: io.session, timeoutMillis: 30_000) }
                // Decrypted straight into the decoder (a large frame into its own array): no copy.
                let n = try decoder.read { (raw) throws(TLSError) -> Int in try io.session.read(into: raw, timeoutMillis: 1000) }
                if n == 0 { break loop }
                // Decoding and checking documents happen here, on the link's thread, so the node's
                // thread only resolves and writes.
                while let frame = try decoder.next() {
                    if !announced {
                        announced = true
                        post(.opened(io.id, io, outgoing: false))
                    }
                    post(.frame(io.id, ReplicationNode.prepare(frame, maxBodyBytes: bodyLimit), bytes: frame.count))
                }
            } catch TLSError.timeout {
                continue  // the read's 1 s: look at the outbox again (a write's timeout is a FrameWriteError)
            } catch {
                if error is FrameWriteError { writeBroken = true }
                log.verbose(.replication, "link \(io.id): \(error)")
                if !io.isClosed && !isStopping { failure = "\(error)" }
                break loop
            }
        }
        // What the node queued last (an error frame before a close) goes out if it can (not
        // behind half a frame: the peer would read it as the rest of that one).
        for payload in io.takeOutbox() where !writeBroken {
            if let frame = try? FrameEncoder.encode(payload, limit: ReplicationMessage.frameLimit) { try? io.session.write(frame, timeoutMillis: 1000) }
        }
        io.session.close()
        if let drained = (io.stream as? L2CAPStream)?.drainedWhileWriting ?? (io.stream as? TCPStream)?.drainedWhileWriting, drained > 0 {
            log.verbose(.replication, "link \(io.id) (\(io.transport.rawValue)) read \(drained) bytes while its writes waited for the peer")
        }
        if announced { post(.closed(io.id, error: failure)) } else { log.debug(.mesh, "a peer probed us (\(io.session.peerID.short))") }
    }
}

/// A frame's write failed or timed out: part of it may have gone out, so the link must close
/// (mbedTLS would send the rest of a pending record ahead of whatever is written next).
package struct FrameWriteError: Error, CustomStringConvertible {
    package let underlying: TLSError
    package var description: String { "a frame could not be written whole: \(underlying)" }
}

extension ReplicationDriver {
    /// One frame out: its length with the payload's first bytes (one TLS record's worth), then
    /// the rest straight from the payload, so a batch is not copied whole behind its length.
    /// Both writes share `timeoutMillis`; any failure of either is a `FrameWriteError`.
    package static func writeFrame(_ payload: [UInt8], to session: TLSSession, timeoutMillis: Int) throws {
        let (head, from) = try FrameEncoder.split(payload, limit: ReplicationMessage.frameLimit, headBytes: 16 * 1024)
        let started = ContinuousClock.now
        do throws(TLSError) { try session.write(head, timeoutMillis: timeoutMillis) } catch { throw FrameWriteError(underlying: error) }
        guard from < payload.count else { return }
        let spent = started.duration(to: .now).components
        let left = max(1, timeoutMillis - Int(spent.seconds) * 1000 - Int(spent.attoseconds / 1_000_000_000_000_000))
        var failure: TLSError?
        payload.withUnsafeBytes { raw in
            do throws(TLSError) { try session.write(UnsafeRawBufferPointer(rebasing: raw[from...]), timeoutMillis: left) } catch { failure = error }
        }
        if let failure { throw FrameWriteError(underlying: failure) }
    }
}

/// Admission for incoming TCP connections before their TLS handshake ends: at most
/// `perAddress` handshakes from one remote address and `total` from all at once. A refused
/// connection is closed at once; the warning is said at most once per address every 10 s.
struct HandshakeAdmission: Sendable {
    static let perAddress = 4
    static let total = 32
    enum Decision: Equatable { case admitted, refused(String?) }
    private(set) var pending: [String: Int] = [:]
    private(set) var inFlight = 0
    private var refused: [String: (count: Int, lastSaidMillis: Int)] = [:]

    mutating func admit(_ address: String, nowMillis: Int) -> Decision {
        let mine = pending[address, default: 0]
        guard mine < Self.perAddress, inFlight < Self.total else {
            var r = refused[address] ?? (0, Int.min / 2)
            r.count += 1
            defer { refused[address] = r }
            guard nowMillis - r.lastSaidMillis >= 10_000 else { return .refused(nil) }
            r.lastSaidMillis = nowMillis
            let why = mine >= Self.perAddress ? "\(mine) handshakes from it in progress (at most \(Self.perAddress))"
                                               : "\(inFlight) handshakes in progress (at most \(Self.total))"
            let n = r.count
            r.count = 0
            return .refused("refusing connections from \(address): \(why); \(n) refused since the last warning")
        }
        pending[address] = mine + 1
        inFlight += 1
        return .admitted
    }

    mutating func release(_ address: String) {
        guard let n = pending[address] else { return }
        pending[address] = n > 1 ? n - 1 : nil
        inFlight -= 1
        if refused.count > 1024 { refused = [:] }
    }
}
