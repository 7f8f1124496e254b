import Foundation
import Testing

extension ProcessSuites {
    /// Every input in Tests/Fuzz/corpus — the seeds and every crash libFuzzer ever found, kept as
    /// `crash-…` files — replayed through the fuzz targets' code (shoal-fuzz built without libFuzzer).
    @Suite("Fuzz corpus replay")
    struct FuzzCorpusTests {
        static let corpus: String = {
            var parts = #filePath.split(separator: "/").map(String.init)
            parts.removeLast(2)
            return "/" + parts.joined(separator: "/") + "/Fuzz/corpus"
        }()

        @Test("each target's corpus replays without a crash", arguments: ["frame", "message", "json", "site", "board", "certificate", "control", "hub", "trust", "query", "release"])
        func replay(_ target: String) throws {
            let binary = (Shoal.binary as NSString).deletingLastPathComponent + "/shoal-fuzz"
            let p = Process()
            p.executableURL = URL(fileURLWithPath: binary)
            p.arguments = [target, Self.corpus + "/" + target]
            let out = Pipe()
            p.standardOutput = out
            try p.run()
            let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            #expect(p.terminationStatus == 0, "\(text)")
            #expect(text.contains("no crash") && !text.contains(": 0 inputs"), "\(text)")
        }
    }
}
