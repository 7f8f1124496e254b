import ShoalCore
import ShoalStore
import ShoalThreads

/// Blob uploads open on the control socket (`blob.begin` … `blob.append` … `blob.finish`), by
/// token: at most `maxOpen` at once, each dropped when idle for `idleMillis`.
///
/// What a reader gets wrong: an upload is checked out while a request uses it (the lock is never
/// held across a store call), so a second request on the same token meanwhile is told it is busy.
final class BlobUploads: Sendable {
    static let maxOpen = 8
    static let idleMillis: Int64 = 5 * 60 * 1000

    final class Entry: @unchecked Sendable {  // its writer is used only while checked out
        let writer: BlobWriter
        var lastUsedMillis: Int64
        init(_ writer: BlobWriter, now: Int64) {
            self.writer = writer
            lastUsedMillis = now
        }
    }

    enum Slot { case idle(Entry), busy }
    private let open = Locked<[String: Slot]>([:])

    /// Registers a new upload; nil when `maxOpen` are open (after dropping idle ones).
    func add(_ writer: BlobWriter, now: Int64) -> String? {
        let token = "u-" + SHA256.hex((0..<12).map { _ in UInt8.random(in: 0...255) })
        let stale = dropIdle(now: now)
        for w in stale { w.cancel() }
        let added = open.withLock { slots -> Bool in
            guard slots.count < BlobUploads.maxOpen else { return false }
            slots[token] = .idle(Entry(writer, now: now))
            return true
        }
        if !added { writer.cancel() }
        return added ? token : nil
    }

    enum Checkout { case entry(Entry), busy, unknown }

    func checkOut(_ token: String) -> Checkout {
        open.withLock { slots in
            switch slots[token] {
            case .idle(let e)?:
                slots[token] = .busy
                return .entry(e)
            case .busy?: return .busy
            case nil: return .unknown
            }
        }
    }

    /// Puts an upload back (still open) or forgets it (finished, cancelled or failed).
    func checkIn(_ token: String, _ entry: Entry?, now: Int64) {
        open.withLock { slots in
            if let entry {
                entry.lastUsedMillis = now
                slots[token] = .idle(entry)
            } else {
                slots[token] = nil
            }
        }
    }

    var count: Int { open.withLock { $0.count } }

    /// Forgets uploads idle too long and returns their writers, to cancel outside the lock.
    private func dropIdle(now: Int64) -> [BlobWriter] {
        open.withLock { slots in
            var out: [BlobWriter] = []
            for (token, slot) in slots {
                if case .idle(let e) = slot, now - e.lastUsedMillis > BlobUploads.idleMillis {
                    out.append(e.writer)
                    slots[token] = nil
                }
            }
            return out
        }
    }
}
