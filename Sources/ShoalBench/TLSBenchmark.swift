import Glibc
import ShoalCore
import ShoalTLS
import ShoalThreads

/// `shoal bench tls`: the cost of Shoal's TLS, measured in one run.
/// - Handshakes: full mutual-TLS handshakes (P-256 ECDHE-ECDSA, both sides verifying the other)
///   over an in-memory pipe, client and server on their own threads; CPU time of the process
///   divided by the count, so the figure is both sides together. Resumed handshakes the same way.
/// - Bulk: bytes through `TLSSession.write`/`read` against the same established sessions driven by
///   a bare `mbedtls_ssl_write`/`mbedtls_ssl_read` loop (same pipe, same callbacks), alternately;
///   the ratio is Shoal's wrapper against mbedTLS itself.
public enum TLSBenchmark {
    public struct Result: Sendable {
        public var handshakes: Int
        /// CPU per handshake, both sides together (process CPU time / count).
        public var fullHandshakeCPUMillis: Double
        public var resumedHandshakeCPUMillis: Double
        /// Each side's own thread CPU per full handshake.
        public var clientCPUMillis: Double
        public var serverCPUMillis: Double
        public var megabytes: Int
        public var sessionMBps: [Double]
        public var baselineMBps: [Double]
        public var cipherSuite: String
        public var ratio: Double { median(sessionMBps) / median(baselineMBps) }
    }

    public static func median(_ xs: [Double]) -> Double {
        let s = xs.sorted()
        return s.isEmpty ? 0 : s[s.count / 2]
    }

    static func cpuSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Runs `body` on a thread of its own and waits for it.
    static func joined<T>(_ body: @escaping @Sendable () -> T) -> () -> T {
        let lock = ConditionLock()
        nonisolated(unsafe) var result: T?
        DetachedThread.start {
            let r = body()
            lock.withLock {
                result = r
                lock.broadcast()
            }
        }
        return {
            lock.withLock {
                while result == nil { lock.wait() }
                return result!
            }
        }
    }

    static func threadCPUSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// A connected pair, and the CPU seconds each side's thread spent on the handshake.
    static func pair(_ client: TLSContext, _ server: TLSContext, saved: TLSSavedSession? = nil) throws -> (TLSSession, TLSSession, client: Double, server: Double) {
        let (a, b) = MemoryPipe.pair(capacity: 1 << 20)
        let wait = joined { () -> (Swift.Result<TLSSession, TLSError>, Double) in
            let t0 = threadCPUSeconds()
            do throws(TLSError) {
                let s = try TLSSession.accept(over: b, context: server)
                return (.success(s), threadCPUSeconds() - t0)
            } catch { return (.failure(error), 0) }
        }
        let t0 = threadCPUSeconds()
        let c = try TLSSession.connect(over: a, context: client, resuming: saved)
        let clientCPU = threadCPUSeconds() - t0
        let (result, serverCPU) = wait()
        return (c, try result.get(), clientCPU, serverCPU)
    }

    public static func run(handshakes: Int, megabytes: Int, rounds: Int) throws -> Result {
        let a = try Identity.createSelfSigned(.init(commonName: "bench-a"))
        let b = try Identity.createSelfSigned(.init(commonName: "bench-b"))
        let client = try TLSContext(role: .client, identity: a, authenticator: .trust(allowedPeers: [b.peerID]))
        let server = try TLSContext(role: .server, identity: b, authenticator: .trust(allowedPeers: [a.peerID]))

        _ = try pair(client, server)  // warm up
        var start = cpuSeconds()
        var saved: TLSSavedSession?
        var clientCPU = 0.0, serverCPU = 0.0
        for _ in 0..<handshakes {
            let (c, s, cc, sc) = try pair(client, server)
            clientCPU += cc
            serverCPU += sc
            saved = c.save()
            c.close()
            s.close()
        }
        let full = (cpuSeconds() - start) * 1000 / Double(handshakes)
        start = cpuSeconds()
        for _ in 0..<handshakes {
            let (c, s, _, _) = try pair(client, server, saved: saved)
            precondition(c.resumed, "resumption did not happen")
            c.close()
            s.close()
        }
        let resumed = (cpuSeconds() - start) * 1000 / Double(handshakes)

        let (c, s, _, _) = try pair(client, server)
        let suite = c.cipherSuite
        var result = Result(handshakes: handshakes, fullHandshakeCPUMillis: full, resumedHandshakeCPUMillis: resumed,
                            clientCPUMillis: clientCPU * 1000 / Double(handshakes), serverCPUMillis: serverCPU * 1000 / Double(handshakes),
                            megabytes: megabytes, sessionMBps: [], baselineMBps: [], cipherSuite: suite)
        let total = megabytes << 20
        for round in 0..<rounds {
            if round % 2 == 0 {
                result.baselineMBps.append(try bulk(c, s, total: total, bare: true))
                result.sessionMBps.append(try bulk(c, s, total: total, bare: false))
            } else {
                result.sessionMBps.append(try bulk(c, s, total: total, bare: false))
                result.baselineMBps.append(try bulk(c, s, total: total, bare: true))
            }
        }
        c.close()
        s.close()
        return result
    }

    /// Sends `total` bytes from `c` to `s` in 16 KiB writes; returns MB/s.
    static func bulk(_ c: TLSSession, _ s: TLSSession, total: Int, bare: Bool) throws -> Double {
        let chunk = [UInt8](repeating: 0xA5, count: 16 * 1024)
        let far = 600_000
        c.setDeadline(monotonicMillis() + far)
        s.setDeadline(monotonicMillis() + far)
        let began = ContinuousClock.now
        let writer = joined { () -> Bool in
            var sent = 0
            while sent < total {
                let n = min(chunk.count, total - sent)
                if bare {
                    do { sent += try chunk.withUnsafeBytes { try c.bareWrite(UnsafeRawBufferPointer(rebasing: $0[0..<n])) } ?? 0 } catch { return false }
                } else {
                    let ok = chunk.withUnsafeBytes { raw in
                        (try? c.write(UnsafeRawBufferPointer(rebasing: raw[0..<n]), timeoutMillis: far)) != nil
                    }
                    if !ok { return false }
                    sent += n
                }
            }
            return true
        }
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        var received = 0
        while received < total {
            if bare {
                let r = try buffer.withUnsafeMutableBytes { try s.bareRead(into: $0) }
                received += r ?? 0
            } else {
                let n = buffer.withUnsafeMutableBytes { raw in (try? s.read(into: raw, timeoutMillis: far)) ?? 0 }
                guard n > 0 else { throw TLSError.closed }
                received += n
            }
        }
        guard writer() else { throw TLSError.io("writer failed") }
        let seconds = (ContinuousClock.now - began).secondsDouble
        return Double(total) / 1_048_576 / seconds
    }
}
