/// Runs the status LED's patterns on any clock (milliseconds): which signal applies, whether the
/// LED is lit at a given time, and when it next changes. Pure, so tests check exact timelines on
/// virtual time; the runtime drives a real LED with it, the simulator draws it.
public struct LEDEngine: Sendable {
    public private(set) var signal: LEDSignal
    public private(set) var pattern: LEDPattern
    /// When the current pattern started (a new signal restarts its pattern).
    public private(set) var startedAt: UInt64

    public init(signal: LEDSignal = .booting, now: UInt64) {
        self.signal = signal
        pattern = LEDPattern.pattern(for: signal)
        startedAt = now
    }

    /// Switches to `signal` (its pattern starts at `now`); false if it was already showing.
    @discardableResult
    public mutating func show(_ signal: LEDSignal, now: UInt64) -> Bool {
        guard signal != self.signal else { return false }
        self.signal = signal
        pattern = LEDPattern.pattern(for: signal)
        startedAt = now
        return true
    }

    public func isOn(at now: UInt64) -> Bool {
        pattern.isOn(atMillis: now >= startedAt ? now - startedAt : 0)
    }

    /// The first millisecond after `now` at which the LED changes (nil: a solid pattern).
    public func nextChange(after now: UInt64) -> UInt64? {
        let period = pattern.periodMillis
        let states = Set(pattern.steps.map(\.on))
        guard period > 0, states.count > 1 else { return nil }
        let elapsed = now >= startedAt ? now - startedAt : 0
        let base = elapsed - elapsed % period
        var t = base
        let current = isOn(at: now)
        // Step boundaries of this period and the next; the first after `now` that flips.
        for _ in 0..<2 {
            for s in pattern.steps {
                t += s.millis
                let at = startedAt + t
                if at > now && pattern.isOn(atMillis: t) != current { return at }
            }
        }
        return nil
    }

    /// The transitions (time, lit) in [from, to): for tests and sketches.
    public func timeline(from: UInt64, to: UInt64) -> [(at: UInt64, on: Bool)] {
        var out: [(UInt64, Bool)] = [(from, isOn(at: from))]
        var t = from
        while let next = nextChange(after: t), next < to {
            out.append((next, isOn(at: next)))
            t = next
        }
        return out
    }

    /// What the LED should say for a gateway, in the table's order of precedence.
    /// `radioError`: every configured transport is in error; `syncing`: documents moved lately.
    public static func signal(for status: GatewayStatus, syncing: Bool, radioError: Bool) -> LEDSignal {
        if status.state == .failed { return .dead }
        if status.identityProblem != nil { return .error(.identity) }
        if !status.storeRunning && status.state != .booting {
            return .error(.store)
        }
        if status.state == .booting { return .booting }
        if radioError { return .error(.radio) }
        if !status.warnings.isEmpty { return .expiring }
        if syncing { return .syncing }
        if status.connectedPeers > 0 { return .connected(peers: status.connectedPeers) }
        return .discovering
    }
}
