import ShoalCore
import ShoalThreads

/// Runs blocking work (sockets, TLS handshakes, SQLite) on a thread of its own, never on Swift's
/// cooperative pool, and returns its result to the awaiting test.
public func onThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    let t = BlockingThread(name: name)
    defer { t.shutdown() }
    return try await t.run(body)
}
