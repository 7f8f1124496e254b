import Glibc
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

/// How many seconds `condition` took to hold, checking every `every` seconds for up to `within`;
/// nil if it never did. A condition that throws has not held yet (a store read while the store
/// restarts). For tests that report the time as well as the outcome.
public func timeUntil(within seconds: Double = 30, every: Double = 0.05, _ condition: () throws -> Bool) async -> Double? {
    let start = monotonicMillis()
    let deadline = start + Int(seconds * 1000)
    while true {
        if (try? condition()) == true { return Double(monotonicMillis() - start) / 1000 }
        if monotonicMillis() >= deadline { return nil }
        try? await Task.sleep(for: .milliseconds(Int(every * 1000)))
    }
}

/// `eventually` for code on plain threads (process harnesses, the network lab): blocks the
/// calling thread between checks. Checks once more at the deadline.
public func eventuallyBlocking(within seconds: Double, every: Double = 0.1, _ condition: () -> Bool) -> Bool {
    let deadline = monotonicMillis() + Int(seconds * 1000)
    while monotonicMillis() < deadline {
        if condition() { return true }
        usleep(useconds_t(every * 1_000_000))
    }
    return condition()
}
