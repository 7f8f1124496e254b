import Glibc
import ShoalCore
import ShoalRuntime
import ShoalTLS
import ShoalThreads
import Testing

@Suite("Frame writes on a link")
struct FrameWriteTests {
    @Test("a frame whose write times out part way is a FrameWriteError (the link closes), not a read timeout the link carries on from")
    func timeoutInsideAFrame() throws {
        let a = try Identity.createSelfSigned(.init(commonName: "a")), b = try Identity.createSelfSigned(.init(commonName: "b"))
        let client = try TLSContext(role: .client, identity: a, authenticator: .trust(allowedPeers: [b.peerID]))
        let server = try TLSContext(role: .server, identity: b, authenticator: .trust(allowedPeers: [a.peerID]))
        let (pa, pb) = MemoryPipe.pair(capacity: 64 * 1024)
        let accepted = Locked<Result<TLSSession, TLSError>?>(nil)
        #expect(DetachedThread.start(name: "accept") {
            let r: Result<TLSSession, TLSError>
            do throws(TLSError) { r = .success(try TLSSession.accept(over: pb, context: server)) } catch { r = .failure(error) }
            accepted.withLock { $0 = r }
        })
        let session = try TLSSession.connect(over: pa, context: client)
        while accepted.withLock({ $0 == nil }) { usleep(1000) }
        let peer = try #require(accepted.withLock { $0 }).get()
        // A small frame goes out whole; the peer never reads, so a 1 MB one fills the 64 KB pipe.
        try ReplicationDriver.writeFrame([1, 2, 3], to: session, timeoutMillis: 1000)
        #expect(throws: FrameWriteError.self) {
            try ReplicationDriver.writeFrame([UInt8](repeating: 1, count: 1 << 20), to: session, timeoutMillis: 200)
        }
        session.close()
        peer.close()
    }
}
