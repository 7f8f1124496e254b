import ShoalReplication

/// Control traffic (every frame that carries no document or blob data: gossip, announces,
/// requests, acknowledgements, keepalives) per link direction against the link's capacity. On
/// BLE-like links (40 kB/s) the question is whether control leaves room for data on every link, not
/// only on average over the mesh.
public struct SimControlLoad: Sendable {
    /// Per link direction and whole virtual second that carried control: its control bytes as a
    /// share of the link's bytes per second.
    public internal(set) var secondShares: [Double] = []
    /// Per link direction open at least `minLifeMillis`: its control bytes over its life against
    /// capacity × that life. The worst, and how many directions were counted.
    public internal(set) var worstLifeShare: Double = 0
    public internal(set) var directions = 0
    public static let minLifeMillis: UInt64 = 1_000

    public init() {}

    /// The share of counted seconds above `share` (0.1: a tenth of the capacity).
    public func secondsOver(_ share: Double) -> Double {
        secondShares.isEmpty ? 0 : Double(secondShares.filter { $0 > share }.count) / Double(secondShares.count)
    }

    public func percentile(_ p: Double) -> Double {
        let s = secondShares.sorted()
        return s.isEmpty ? 0 : s[min(s.count - 1, Int(Double(s.count) * p))]
    }

    mutating func fold(_ c: Simulation.Conn, capacity: UInt64, now: UInt64) {
        for side in 0..<2 {
            if c.controlInSecond[side] > 0 { secondShares.append(Double(c.controlInSecond[side]) / Double(capacity)) }
            let life = now - c.openedAt
            guard life >= Self.minLifeMillis else { continue }
            directions += 1
            worstLifeShare = max(worstLifeShare, Double(c.control[side]) * 1000 / (Double(capacity) * Double(life)))
        }
    }
}

extension Simulation {
    /// Counts a control frame's bytes on one direction of a link, by whole virtual second.
    func noteControl(_ c: inout Conn, side: Int, bytes: UInt64) {
        let second = now / 1000
        if c.controlSecond[side] != second {
            if c.controlInSecond[side] > 0 {
                controlLoadSoFar.secondShares.append(Double(c.controlInSecond[side]) / Double(kind(c.transport).bytesPerSecond))
            }
            c.controlSecond[side] = second
            c.controlInSecond[side] = 0
        }
        c.controlInSecond[side] += bytes
        c.control[side] += bytes
    }

    /// A connection is gone: its figures join the run's.
    func retire(_ c: Conn) {
        controlLoadSoFar.fold(c, capacity: kind(c.transport).bytesPerSecond, now: now)
    }

    /// The run's control load so far, links still open counted up to now.
    public var controlLoad: SimControlLoad {
        var load = controlLoadSoFar
        for (_, c) in conns.sorted(by: { $0.key < $1.key }) { load.fold(c, capacity: kind(c.transport).bytesPerSecond, now: now) }
        return load
    }
}
