/// How far a pull of documents from a peer has come: documents received of those announced, the
/// rate over the last few seconds, and an estimate of the time left. Shown on the console line, in
/// `shoal status` (all links together) and in `shoal peers` / `shoal peer` (per peer) while a sync
/// runs, and gone when it is done.
///
/// What a reader gets wrong: `announced` is what the peer has announced *so far*, not everything
/// it holds. A pusher announces a catch-up in batches (`batchWindow` batches of `batchMaxCount`
/// changes ahead of what we acknowledged), so during a large catch-up the total grows until the last
/// batch is announced, and the estimate covers only what is announced. `moreMayCome` says the last
/// batch announced was a full one (so the pusher likely holds more): the text then marks the total
/// and the estimate with "+". Documents we already held count in neither figure; live changes
/// (pushes) are not a sync and are not counted.
public struct SyncProgress: Sendable, Equatable {
    public var received: Int
    public var announced: Int
    /// Documents per second over the recent window; nil until measured (the first half second).
    public var perSecond: Int?
    /// The last batch announced was full: the peer likely has more to announce.
    public var moreMayCome: Bool

    public init(received: Int, announced: Int, perSecond: Int?, moreMayCome: Bool = false) {
        self.received = received
        self.announced = announced
        self.perSecond = perSecond
        self.moreMayCome = moreMayCome
    }

    public var remaining: Int { max(0, announced - received) }

    /// Seconds left for what is announced at the recent rate (rounded up); nil while no rate is
    /// known or nothing moves.
    public var estimateSeconds: Int? {
        guard let rate = perSecond, rate > 0, remaining > 0 else { return nil }
        return (remaining + rate - 1) / rate
    }

    /// Several links' progress as one (`shoal status`, the console line): counts and rates add up.
    public static func combined(_ parts: [SyncProgress]) -> SyncProgress? {
        guard !parts.isEmpty else { return nil }
        let rates = parts.compactMap(\.perSecond)
        return SyncProgress(received: parts.reduce(0) { $0 + $1.received }, announced: parts.reduce(0) { $0 + $1.announced },
                            perSecond: rates.isEmpty ? nil : rates.reduce(0, +), moreMayCome: parts.contains { $0.moreMayCome })
    }

    /// "4,120/10,000 docs 2,050/s ~3 s" (rate and estimate when known); "4,120/10,000+ docs
    /// 2,050/s ~3 s+" while more may come.
    public var text: String {
        let more = moreMayCome ? "+" : ""
        var s = "\(SyncProgress.grouped(received))/\(SyncProgress.grouped(announced))\(more) docs"
        if let rate = perSecond { s += " \(SyncProgress.grouped(rate))/s" }
        if let left = estimateSeconds { s += " ~\(SyncProgress.roughDuration(left))\(more)" }
        return s
    }

    public var json: JSONValue {
        [
            "received": .int(Int64(received)), "announced": .int(Int64(announced)),
            "perSecond": perSecond.map { .int(Int64($0)) } ?? .null,
            "estimateSeconds": estimateSeconds.map { .int(Int64($0)) } ?? .null,
            "moreMayCome": .bool(moreMayCome),
        ]
    }

    /// Reads back what `json` wrote (nil for null or something else).
    public init?(json v: JSONValue?) {
        guard let v, let received = v["received"]?.int64Value, let announced = v["announced"]?.int64Value else { return nil }
        self.init(received: Int(received), announced: Int(announced), perSecond: v["perSecond"]?.int64Value.map { Int($0) },
                  moreMayCome: v["moreMayCome"]?.boolValue ?? false)
    }

    /// 1234567 → "1,234,567".
    public static func grouped(_ n: Int) -> String {
        let digits = String(n.magnitude)
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(c)
        }
        return n < 0 ? "-" + out : out
    }

    /// 42 → "42 s", 150 → "3 min", 4000 → "1 h 7 min".
    public static func roughDuration(_ seconds: Int) -> String {
        if seconds < 60 { return "\(seconds) s" }
        if seconds < 3600 { return "\((seconds + 30) / 60) min" }
        let minutes = (seconds + 30) / 60
        return "\(minutes / 60) h \(minutes % 60) min"
    }
}
