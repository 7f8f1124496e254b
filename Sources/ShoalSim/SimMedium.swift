import Glibc
import ShoalCore
import ShoalMesh

/// How nodes are placed: which pairs can hear each other.
public enum SimTopology: String, Sendable, CaseIterable {
    /// Everyone hears everyone.
    case full
    /// Node i hears i-1 and i+1 only.
    case line
    /// A square-ish grid; each node hears its 4 neighbours.
    case grid
    /// A circle: node i hears i-1 and i+1, and the last hears the first.
    case ring
    /// Nodes scattered on a unit square; pairs closer than a radius hear each other (a radius at
    /// which the radio graph is almost always connected).
    case random
}

/// A link kind's figures. Wi-Fi-like: a few ms and megabytes per second; BLE-like: tens of ms
/// and tens of kilobytes per second, with a slower connection setup.
public struct SimLinkKind: Sendable {
    public var transport: MeshTransport
    public var latencyMillis: UInt64
    public var bytesPerSecond: UInt64
    public var connectMillis: UInt64
    /// What a lost frame costs before TCP/L2CAP gets it through (retransmission timeout).
    public var retransmitMillis: UInt64

    public static let wifi = SimLinkKind(transport: .wifi, latencyMillis: 3, bytesPerSecond: 2_500_000, connectMillis: 30, retransmitMillis: 200)
    public static let ble = SimLinkKind(transport: .bluetooth, latencyMillis: 30, bytesPerSecond: 40_000, connectMillis: 400, retransmitMillis: 300)
}

/// The radio medium: who hears whom, partitions, and the link figures.
public struct SimMedium: Sendable {
    public let count: Int
    public let topology: SimTopology
    public var kind: SimLinkKind
    /// Per-frame loss probability (a lost frame is retransmitted: it and those behind it are late).
    public var loss: Double
    /// Per-frame duplication and reordering (see SimConfig).
    public var duplicate = 0.0
    public var reorder = 0.0
    var inRange: [[Bool]]
    /// Nodes on side A of the current partition (nil: no partition).
    public var partition: Set<Int>?
    /// Pairs that cannot hear each other for now (a link cut by hand), as [low, high].
    public var blocked: Set<[Int]> = []
    /// Radios that are down, per node.
    public var radioDown: [Int: Set<MeshTransport>] = [:]

    public init(count: Int, topology: SimTopology, kind: SimLinkKind, loss: Double, rng: inout SeededRandom) {
        self.count = count
        self.topology = topology
        self.kind = kind
        self.loss = loss
        var r = Array(repeating: Array(repeating: false, count: count), count: count)
        switch topology {
        case .full:
            for i in 0..<count { for j in 0..<count where i != j { r[i][j] = true } }
        case .line:
            for i in 0..<count where i + 1 < count { r[i][i + 1] = true; r[i + 1][i] = true }
        case .ring:
            for i in 0..<count {
                let j = (i + 1) % count
                if i != j { r[i][j] = true; r[j][i] = true }
            }
        case .grid:
            let w = max(1, Int(Double(count).squareRoot().rounded(.up)))
            for i in 0..<count {
                if (i % w) + 1 < w, i + 1 < count { r[i][i + 1] = true; r[i + 1][i] = true }
                if i + w < count { r[i][i + w] = true; r[i + w][i] = true }
            }
        case .random:
            // Radius ~ sqrt(2 ln n / n) keeps a random geometric graph connected with high probability.
            let n = Double(max(count, 2))
            let radius = min(1.0, (2.2 * log(n) / n).squareRoot())
            let points = (0..<count).map { _ in (Double.random(in: 0..<1, using: &rng), Double.random(in: 0..<1, using: &rng)) }
            for i in 0..<count { for j in 0..<count where i != j {
                let dx = points[i].0 - points[j].0, dy = points[i].1 - points[j].1
                r[i][j] = (dx * dx + dy * dy).squareRoot() <= radius
            } }
        }
        inRange = r
    }

    /// Whether a and b can hear each other now.
    public func hears(_ a: Int, _ b: Int) -> Bool {
        guard a != b, inRange[a][b] else { return false }
        if let p = partition, p.contains(a) != p.contains(b) { return false }
        if !blocked.isEmpty && blocked.contains([min(a, b), max(a, b)]) { return false }
        return true
    }

    /// Whether a and b hear each other on transport `t` (both radios up).
    public func hears(_ a: Int, _ b: Int, on t: MeshTransport) -> Bool {
        guard hears(a, b) else { return false }
        if radioDown.isEmpty { return true }
        return !(radioDown[a]?.contains(t) ?? false) && !(radioDown[b]?.contains(t) ?? false)
    }

    /// Connected components of the radio graph among `up` nodes (what the mesh can at best join).
    public func components(up: Set<Int>) -> [Set<Int>] {
        var seen = Set<Int>()
        var out: [Set<Int>] = []
        for s in up.sorted() where !seen.contains(s) {
            var comp: Set<Int> = [s]
            var queue = [s]
            while let x = queue.popLast() {
                for y in up where !comp.contains(y) && hears(x, y) { comp.insert(y); queue.append(y) }
            }
            seen.formUnion(comp)
            out.append(comp)
        }
        return out
    }

    /// Minimum hops between every pair in range (for the figures), from node `from`.
    public func hops(from: Int) -> [Int?] {
        var d = [Int?](repeating: nil, count: count)
        d[from] = 0
        var queue = [from]
        var head = 0
        while head < queue.count {
            let x = queue[head]; head += 1
            for y in 0..<count where d[y] == nil && hears(x, y) { d[y] = d[x]! + 1; queue.append(y) }
        }
        return d
    }
}
