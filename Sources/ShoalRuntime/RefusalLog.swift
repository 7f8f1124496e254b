/// The refusing side's memory of whom it refused: one warning per peer (or per address, when the
/// handshake broke before the peer showed its certificate) per window, the others quiet but
/// counted, and said with the next warning. A peer we refuse learns why from our alert and
/// redials once per its backoffMillis; what the window guards against is a peer that dials faster
/// (an older Shoal, a probe of every static address, a hostile client).
struct RefusalLog: Sendable {
    /// Kept at most; past it the oldest entries are forgotten (one more warning each, at worst).
    static let capacity = 1024
    private var said: [String: (atMillis: Int, quiet: Int)] = [:]

    /// Whether to warn about `key` now: the number refused quietly since the last warning, or nil
    /// to stay quiet (counted).
    mutating func note(_ key: String, nowMillis: Int, windowMillis: Int) -> Int? {
        if var entry = said[key], nowMillis - entry.atMillis < windowMillis {
            entry.quiet += 1
            said[key] = entry
            return nil
        }
        let quiet = said[key]?.quiet ?? 0
        if said[key] == nil && said.count >= Self.capacity {
            let oldest = said.sorted { $0.value.atMillis < $1.value.atMillis }.prefix(Self.capacity / 4).map(\.key)
            for k in oldest { said[k] = nil }
        }
        said[key] = (nowMillis, 0)
        return quiet
    }
}
