import ShoalCore

/// Counts one link's pull: documents announced that we lacked, documents received of those, and
/// samples of the received count over time for the rate. Time is the node's `now` (the driver's
/// clock), so tests measure it in virtual time.
///
/// A sync is the span while announced documents are outstanding. Between batches (an
/// acknowledgement's round trip) nothing may be outstanding for a moment: a batch announced within
/// `lingerMillis` of the last one finishing continues the same sync, so its counts keep adding up;
/// a later one starts a new sync from zero. While the last batch was full (more may come), the
/// progress stays shown through such a gap, so status does not flicker between batches; after a
/// short batch it is gone as soon as everything announced is held.
struct ProgressMeter {
    static let windowMillis: UInt64 = 5_000
    static let sampleMillis: UInt64 = 250
    static let lingerMillis: UInt64 = 2_000
    /// A rate needs this much time behind it.
    static let minimumSpanMillis: UInt64 = 500
    /// Bounds the samples (one per `sampleMillis` over the window, and the baseline).
    static let maxSamples = Int(windowMillis / sampleMillis) + 2

    private(set) var announced = 0
    private(set) var received = 0
    /// (when, received then), oldest first, at least `sampleMillis` apart (the newest may move).
    private(set) var samples: [(at: UInt64, received: Int)] = []
    /// When outstanding last dropped to zero (nil: during a sync, or never).
    private var finishedAt: UInt64?
    /// The most changes one announce on this link carried, and whether the latest was that full.
    private(set) var largestBatch = 0
    private(set) var moreMayCome = false

    var outstanding: Int { announced - received }

    /// An announce of `batchCount` changes came, `count` of them documents we lack. `fullBatch`:
    /// the most a batch carries by our settings. A batch as large as that (or as the largest seen
    /// here, for a pusher with a smaller limit) says the pusher likely has more; a shorter one that
    /// it reached its end. (A pusher's filters and echoes can shorten a batch: best effort.)
    mutating func announce(_ count: Int, batchCount: Int, fullBatch: Int, now: UInt64) {
        if batchCount > 0 {
            moreMayCome = batchCount >= fullBatch || (largestBatch > 0 && batchCount >= largestBatch)
            largestBatch = max(largestBatch, batchCount)
        }
        guard count > 0 else { return }
        if outstanding == 0 {
            if finishedAt.map({ now >= $0 + ProgressMeter.lingerMillis }) ?? true {
                announced = 0
                received = 0
                samples = [(now, 0)]
            }
            finishedAt = nil
        }
        announced += count
    }

    /// `count` of the announced documents arrived (or turned out to be held already).
    mutating func receive(_ count: Int, now: UInt64) {
        guard count > 0, outstanding > 0 else { return }
        received += min(count, outstanding)
        if let last = samples.last, samples.count > 1, now < samples[samples.count - 2].at + ProgressMeter.sampleMillis {
            // Within one sample period of the one before: move the newest sample forward.
            samples[samples.count - 1] = (max(last.at, now), received)
        } else {
            samples.append((now, received))
        }
        let horizon = now >= ProgressMeter.windowMillis ? now - ProgressMeter.windowMillis : 0
        // Keep the newest sample older than the window as its baseline.
        while samples.count > 2, samples[1].at <= horizon { samples.removeFirst() }
        if samples.count > ProgressMeter.maxSamples { samples.removeFirst(samples.count - ProgressMeter.maxSamples) }
        if outstanding == 0 { finishedAt = now }
    }

    /// The progress now, or nil when no sync runs (nothing outstanding, and no more expected).
    func progress(now: UInt64) -> SyncProgress? {
        let betweenBatches = moreMayCome && announced > 0 && finishedAt.map { now < $0 + ProgressMeter.lingerMillis } == true
        guard outstanding > 0 || betweenBatches else { return nil }
        return SyncProgress(received: received, announced: announced, perSecond: rate(now: now), moreMayCome: moreMayCome)
    }

    /// Documents per second over the last `windowMillis` up to `now`: a stall brings it down.
    func rate(now: UInt64) -> Int? {
        let horizon = now >= ProgressMeter.windowMillis ? now - ProgressMeter.windowMillis : 0
        // The oldest sample inside the window, or the newest before it.
        guard let base = samples.last(where: { $0.at <= horizon }) ?? samples.first, now > base.at else { return nil }
        let span = now - base.at
        guard span >= ProgressMeter.minimumSpanMillis else { return nil }
        let moved = UInt64(received - base.received)
        return Int(moved * 1000 / span)
    }
}
