import ShoalCore

/// Waits for a condition that another thread or task makes true: checks it every `every`
/// seconds until it holds (true) or `within` seconds pass (false). For waits on real threads and
/// sockets; in virtual time, run the simulation until the condition instead.
public func eventually(within seconds: Double = 30, every: Double = 0.02, _ condition: () throws -> Bool) async rethrows -> Bool {
    let deadline = monotonicMillis() + Int(seconds * 1000)
    while true {
        if try condition() { return true }
        if monotonicMillis() >= deadline { return false }
        try? await Task.sleep(for: .milliseconds(Int(every * 1000)))
    }
}
