/// What the status LED says, in order of precedence (the first that applies wins):
///
/// | signal        | pattern                                                   |
/// |---------------|-----------------------------------------------------------|
/// | dead          | solid on                                                  |
/// | error(class)  | 2 (identity), 3 (store) or 4 (radio) long blinks, pause   |
/// | booting       | fast blink, 5 per second                                  |
/// | syncing       | flicker, 10 per second                                    |
/// | connected(n)  | n short blinks (at most 5), pause: count the peers        |
/// | discovering   | one short blink every 2 s (a heartbeat)                   |
///
/// Pure: a pattern is a list of on/off steps repeated forever; `isOn(atMillis:)` reads it on any
/// clock, so tests check exact timelines and the simulator shows it without hardware.
public enum LEDSignal: Sendable, Equatable {
    case booting
    case discovering
    case connected(peers: Int)
    case syncing
    case error(LEDErrorClass)
    case dead
    /// Running, but something expires soon or has (the identity, the trust list's checkpoint).
    case expiring
}

public enum LEDErrorClass: String, Sendable, Equatable {
    case identity, store, radio
}

public struct LEDPattern: Sendable, Equatable {
    public struct Step: Sendable, Equatable {
        public var on: Bool
        public var millis: UInt64
    }
    public let name: String
    public let steps: [Step]
    public var periodMillis: UInt64 { steps.reduce(0) { $0 + $1.millis } }

    /// Whether the LED is lit `millis` after the pattern started.
    public func isOn(atMillis millis: UInt64) -> Bool {
        let period = periodMillis
        guard period > 0 else { return steps.first?.on ?? false }
        var t = millis % period
        for s in steps {
            if t < s.millis { return s.on }
            t -= s.millis
        }
        return false
    }

    /// One period drawn with one character per `tick` ms: ■ lit, · dark.
    public func sketch(tickMillis: UInt64 = 100) -> String {
        let n = Int(max(1, periodMillis / tickMillis))
        return String((0..<n).map { isOn(atMillis: UInt64($0) * tickMillis) ? "■" : "·" })
    }

    static func blinks(_ n: Int, on: UInt64, off: UInt64, pause: UInt64) -> [Step] {
        var s: [Step] = []
        for i in 0..<n {
            s.append(Step(on: true, millis: on))
            s.append(Step(on: false, millis: i == n - 1 ? pause : off))
        }
        return s
    }

    public static func pattern(for signal: LEDSignal) -> LEDPattern {
        switch signal {
        case .dead:
            return LEDPattern(name: "dead: solid on", steps: [Step(on: true, millis: 1000)])
        case .error(let c):
            let n = c == .identity ? 2 : c == .store ? 3 : 4
            return LEDPattern(name: "\(c.rawValue) error: \(n) long blinks", steps: blinks(n, on: 600, off: 300, pause: 1800))
        case .booting:
            return LEDPattern(name: "booting: fast blink", steps: blinks(1, on: 100, off: 0, pause: 100))
        case .syncing:
            return LEDPattern(name: "syncing: flicker", steps: blinks(1, on: 50, off: 0, pause: 50))
        case .connected(let peers):
            let n = min(max(peers, 1), 5)
            return LEDPattern(name: "connected: \(n)\(peers > 5 ? "+" : "") short blink\(n == 1 ? "" : "s")",
                              steps: blinks(n, on: 200, off: 300, pause: 1500))
        case .discovering:
            return LEDPattern(name: "discovering: heartbeat", steps: blinks(1, on: 100, off: 0, pause: 1900))
        case .expiring:
            return LEDPattern(name: "expiring: long-short blink", steps: [Step(on: true, millis: 800), Step(on: false, millis: 200),
                                                                         Step(on: true, millis: 150), Step(on: false, millis: 1850)])
        }
    }
}
