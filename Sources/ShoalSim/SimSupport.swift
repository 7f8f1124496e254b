import Glibc
import ShoalCore
import ShoalMesh
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalWire

/// Lets a node's clock read the simulation's virtual time without holding the simulation strongly.
final class SimClockReading: @unchecked Sendable {  // a weak reference read on the simulation's one thread
    weak var sim: Simulation?
    init(_ sim: Simulation) { self.sim = sim }
    func read() -> UInt64 { sim?.now ?? 0 }
}

func formatSeconds(_ ms: UInt64) -> String {
    let tenths = ms / 100
    return "\(tenths / 10).\(tenths % 10)s"
}

func makeDirectories(_ path: String) throws {
    var current = ""
    for part in path.split(separator: "/") {
        current += "/" + part
        if mkdir(current, 0o700) != 0 && errno != EEXIST { throw SimError(message: "cannot create \(current): errno \(errno)") }
    }
}

func removeTree(_ path: String) {
    guard let d = opendir(path) else { unlink(path); return }
    while let e = readdir(d) {
        let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name == "." || name == ".." { continue }
        let child = path + "/" + name
        var st = stat()
        if lstat(child, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR { removeTree(child) } else { unlink(child) }
    }
    closedir(d)
    rmdir(path)
}

public struct SimError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// A binary heap of timed events; ties keep insertion order, so a seed replays exactly.
struct EventQueue {
    struct Entry { let at: UInt64; let seq: UInt64; let event: Simulation.Event }
    var heap: [Entry] = []
    var seq: UInt64 = 0

    mutating func push(at: UInt64, _ e: Simulation.Event) {
        seq += 1
        heap.append(Entry(at: at, seq: seq, event: e))
        var i = heap.count - 1
        while i > 0 {
            let p = (i - 1) / 2
            guard less(heap[i], heap[p]) else { break }
            heap.swapAt(i, p)
            i = p
        }
    }

    func peek() -> Entry? { heap.first }

    mutating func pop() -> Entry? {
        guard !heap.isEmpty else { return nil }
        heap.swapAt(0, heap.count - 1)
        let top = heap.removeLast()
        var i = 0
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < heap.count && less(heap[l], heap[m]) { m = l }
            if r < heap.count && less(heap[r], heap[m]) { m = r }
            if m == i { break }
            heap.swapAt(i, m)
            i = m
        }
        return top
    }

    func less(_ a: Entry, _ b: Entry) -> Bool { (a.at, a.seq) < (b.at, b.seq) }
    var count: Int { heap.count }
}
