import ShoalCore
import ShoalTesting
import ShoalWire
import Testing

@Suite("Frames")
struct FrameDecoderTests {
    @Test("splits a stream into frames whatever the read sizes")
    func splitsStream() throws {
        let frames: [[UInt8]] = [[1], [2, 3], Array(repeating: 9, count: 1000)]
        var stream: [UInt8] = []
        for f in frames { stream += try FrameEncoder.encode(f, limit: 4096) }
        for chunk in [1, 3, 7, 4096] {
            var d = FrameDecoder(limit: 4096)
            var got: [[UInt8]] = []
            var i = 0
            while i < stream.count {
                d.feed(stream[i..<min(i + chunk, stream.count)])
                i += chunk
                while let f = try d.next() { got.append(f) }
            }
            #expect(got == frames)
            try d.finish()
        }
    }

    @Test("rejects an oversize length before buffering its payload")
    func oversize() {
        var d = FrameDecoder(limit: 16)
        d.feed([0xFF, 0xFF, 0xFF, 0xFF])
        #expect(throws: FrameError.oversize(length: 0xFFFF_FFFF, limit: 16)) { try d.next() }
        #expect(throws: FrameError.self) { try FrameEncoder.encode(Array(repeating: 0, count: 17), limit: 16) }
    }

    @Test("rejects empty frames and reports a stream cut inside a frame")
    func emptyAndTruncated() throws {
        var d = FrameDecoder(limit: 16)
        d.feed([0, 0, 0, 0])
        #expect(throws: FrameError.emptyFrame) { try d.next() }
        var t = FrameDecoder(limit: 16)
        t.feed([0, 0, 0, 5, 1, 2])
        #expect(try t.next() == nil)
        #expect(throws: FrameError.truncated(have: 2, need: 5)) { try t.finish() }
    }

    @Test("a control message that is not a JSON object is a bad request, not a crash")
    func controlMessages() {
        if case .success = ControlMessage.decode(Array("[1]".utf8)) { Issue.record("an array was accepted") }
        if case .success = ControlMessage.decode([0xFF, 0xFE]) { Issue.record("garbage was accepted") }
        if case .failure = ControlMessage.decode(Array(#"{"op":"ping"}"#.utf8)) { Issue.record("a good request was refused") }
    }

    @Test("random bytes never crash the decoder")
    func fuzzish() {
        var rng = SeededRandom(seed: 42)
        for _ in 0..<2000 {
            var d = FrameDecoder(limit: 256)
            let n = Int(rng.next() % 64)
            d.feed((0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
            while true {
                guard let f = try? d.next() else { break }
                _ = ControlMessage.decode(f)
            }
        }
    }
}
