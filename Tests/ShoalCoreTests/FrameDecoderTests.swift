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

    @Test("reading straight into the decoder gives the same frames, large ones (own array) and small, whatever the read sizes; feed and read mix")
    func readsInPlace() throws {
        var rng = SeededRandom(seed: 7)
        // Small, at the direct threshold, large, over the direct limit (buffered again), small.
        let sizes = [1, 300, 16 * 1024 - 1, 16 * 1024, 100_000, 600_000, 5, 70_000]
        let frames: [[UInt8]] = sizes.map { n in (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
        var stream: [UInt8] = []
        for f in frames { stream += try FrameEncoder.encode(f, limit: 1 << 20) }
        for maxRead in [1, 7, 4096, 16 * 1024 + 5, 64 * 1024, 1 << 20] {
            var d = FrameDecoder(limit: 1 << 20)
            var got: [[UInt8]] = []
            var i = 0
            var reads = 0
            while i < stream.count {
                reads += 1
                if reads % 5 == 0 {
                    // Every fifth chunk by feed (a copy), the rest written in place.
                    let n = min(maxRead, stream.count - i)
                    d.feed(stream[i..<(i + n)])
                    i += n
                } else {
                    let n = d.read(maxBytes: maxRead) { raw in
                        let n = min(raw.count, stream.count - i, Int(rng.next() % UInt64(maxRead)) + 1)
                        stream.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: raw[0..<n]).copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[i..<(i + n)])) }
                        return n
                    }
                    i += n
                }
                while let f = try d.next() { got.append(f) }
            }
            #expect(got == frames, "max read \(maxRead)")
            #expect(d.pendingBytes == 0)
            try d.finish()
        }
        // Cut inside a large frame: an error that says how much arrived.
        var cut = FrameDecoder(limit: 1 << 20)
        cut.feed(Array(stream.prefix(4 + 1 + 4 + 300 + 4 + 16 * 1024 - 1 + 4 + 16 * 1024 + 4 + 20_000)))
        while try cut.next() != nil {}
        #expect(throws: FrameError.truncated(have: 20_000, need: 100_000)) { try cut.finish() }
        // A large frame is handed out in the memory the reads wrote into: no copy.
        var direct = FrameDecoder(limit: 1 << 20)
        let big = [UInt8](repeating: 7, count: 20_000)
        let framed = try FrameEncoder.encode(big, limit: 1 << 20)
        _ = direct.read(maxBytes: 4) { raw in framed.withUnsafeBytes { raw.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[0..<4])) }; return 4 }
        #expect(try direct.next() == nil)
        var wroteAt: UnsafeMutableRawPointer?
        _ = direct.read(maxBytes: 64 * 1024) { raw in
            wroteAt = raw.baseAddress
            framed.withUnsafeBytes { raw.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[4...])) }
            return big.count
        }
        let handed = try #require(try direct.next())
        #expect(handed == big)
        #expect(handed.withUnsafeBytes { $0.baseAddress } == UnsafeRawPointer(wroteAt))
        // A source that throws: the error comes through, typed, and nothing is counted as read.
        struct Broken: Error {}
        var failing = FrameDecoder(limit: 64)
        #expect(throws: Broken.self) { try failing.read { (_) throws(Broken) -> Int in throw Broken() } }
        #expect(failing.pendingBytes == 0)
    }

    @Test("a frame split for writing (length and first bytes, then the rest) is byte for byte the encoded frame")
    func splitForWriting() throws {
        for n in [1, 16_379, 16_380, 16_381, 100_000] {
            let payload = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let (head, from) = try FrameEncoder.split(payload, limit: 1 << 20, headBytes: 16 * 1024)
            #expect(head + payload[from...] == (try FrameEncoder.encode(payload, limit: 1 << 20)), "payload of \(n)")
            #expect(head.count <= 16 * 1024)
        }
        #expect(throws: FrameError.emptyFrame) { try FrameEncoder.split([], limit: 16, headBytes: 16 * 1024) }
        #expect(throws: FrameError.oversize(length: 17, limit: 16)) { try FrameEncoder.split(Array(repeating: 0, count: 17), limit: 16, headBytes: 16 * 1024) }
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
