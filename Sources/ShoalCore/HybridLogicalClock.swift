/// A hybrid-logical-clock timestamp: wall-clock milliseconds in the high 48 bits, a logical counter
/// in the low 16. It orders events like a Lamport clock while staying close to real time, so
/// last-write-wins picks the write a person would call the last one.
public struct HLCTimestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(physicalMillis: UInt64, logical: UInt16) { rawValue = physicalMillis << 16 | UInt64(logical) }
    public var physicalMillis: UInt64 { rawValue >> 16 }
    public var logical: UInt16 { UInt16(truncatingIfNeeded: rawValue) }
    public static let zero = HLCTimestamp(rawValue: 0)
    public static func < (a: HLCTimestamp, b: HLCTimestamp) -> Bool { a.rawValue < b.rawValue }
    public var description: String { "\(physicalMillis).\(logical)" }
}

/// The node's hybrid logical clock. `tick` stamps a local write; `observe` folds in a peer's
/// timestamp so later local writes order after what we have seen — except that a peer more than
/// `maxDriftMillis` ahead of our wall clock cannot drag us forward past that bound (its
/// timestamps are still stored as its own; they just do not move our clock). Persist `last` and
/// restore it with `init(restoring:)`, so the clock never runs backwards across restarts.
public struct HybridLogicalClock: Sendable {
    public private(set) var last: HLCTimestamp
    public let maxDriftMillis: UInt64

    public init(restoring last: HLCTimestamp = .zero, maxDriftMillis: UInt64 = 60_000) {
        self.last = last
        self.maxDriftMillis = maxDriftMillis
    }

    /// A timestamp for a local event, after everything seen so far.
    public mutating func tick(wallMillis: UInt64) -> HLCTimestamp {
        if wallMillis > last.physicalMillis {
            last = HLCTimestamp(physicalMillis: wallMillis, logical: 0)
        } else if last.logical < UInt16.max {
            last = HLCTimestamp(physicalMillis: last.physicalMillis, logical: last.logical + 1)
        } else {
            last = HLCTimestamp(physicalMillis: last.physicalMillis + 1, logical: 0)
        }
        return last
    }

    /// Folds in a remote timestamp. Returns false (and leaves the clock alone) if the remote runs
    /// more than `maxDriftMillis` ahead of `wallMillis`: the caller flags that peer.
    @discardableResult
    public mutating func observe(_ remote: HLCTimestamp, wallMillis: UInt64) -> Bool {
        if remote.physicalMillis > wallMillis + maxDriftMillis { return false }
        if remote > last { last = remote }
        return true
    }
}
