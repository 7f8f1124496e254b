import Foundation
import Testing

/// Shoal's lock is ShoalThreads' `Locked` (a pthread mutex): Synchronization's `Mutex` waits on a
/// futex ThreadSanitizer cannot see, so the sanitizer run reports every access it guards as a race,
/// and only when the timing happens to show it (a `Mutex` in the trust book passed the TSan run
/// three times, then failed CI). This keeps it out of the sources for good.
@Suite("Source rules")
struct LockRuleTests {
    @Test("no Synchronization.Mutex in Sources/: state shared between threads sits in Locked")
    func noMutex() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let sources = root.appendingPathComponent("Sources")
        let files = try #require(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
        var seen = 0
        var offenders: [String] = []
        for case let url as URL in files where url.pathExtension == "swift" {
            seen += 1
            let text = try String(contentsOf: url, encoding: .utf8)
            for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
                if code.contains("Mutex<") || code.contains("Mutex(") {
                    offenders.append("\(url.path.dropFirst(root.path.count + 1)):\(n + 1): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(seen > 100, "the scan found the sources")
        #expect(offenders.isEmpty, "use ShoalThreads.Locked instead:\n\(offenders.joined(separator: "\n"))")
    }
}
