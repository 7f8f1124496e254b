import ShoalCore
import ShoalThreads

/// How often a live query may be evaluated again.
public struct LiveQueryPacing: Sendable, Equatable {
    /// After the first change of a collection is noticed, wait this long so the changes that
    /// follow it are evaluated together (a burst of writes costs one evaluation).
    public var coalesceMillis: Int
    /// At least this long between two evaluations (at most 1000/minIntervalMillis per second).
    public var minIntervalMillis: Int
    public init(coalesceMillis: Int = 25, minIntervalMillis: Int = 100) {
        self.coalesceMillis = max(0, coalesceMillis)
        self.minIntervalMillis = max(0, minIntervalMillis)
    }
    public static let standard = LiveQueryPacing()
}

/// One push of a live query: the whole result (bounded by the query's limit) and how it differs
/// from the previous push, by document id. The first push has every row in `added`.
public struct LiveQueryUpdate: Sendable, Equatable {
    /// 1 for the first push, then 2, 3, …
    public var number: Int
    public var result: QueryResult
    /// Ids of rows new to the result, of rows whose body changed (or whose updatedAt did), and of
    /// rows gone from it, each in result order (`removed`: in the previous result's order). An
    /// aggregate query's updates have none of these: compare `result.groups`.
    public var added: [String]
    public var changed: [String]
    public var removed: [String]
    /// The store's last sequence read before the evaluation: every change up to it is included.
    public var sequence: Int64
    /// How many times the query has been evaluated so far (pushes that differed and ones that did not).
    public var evaluations: Int
}

/// A query kept live over one collection: `poll` evaluates it again only when that collection has
/// changed (local writes, deletes, replicated changes and purges all move its change feed), no
/// sooner than the pacing allows, and returns an update only when the result differs from the
/// last one returned. Not thread-safe: one owner polls it (a thread of its own, or the HTTP feed).
public struct LiveQueryState: Sendable {
    public let query: Query
    public let collection: CollectionName
    public let pacing: LiveQueryPacing
    private var seen: Int64 = 0
    private var dirtySince: ContinuousClock.Instant?
    private var lastEvaluation: ContinuousClock.Instant?
    private var last: QueryResult?
    private var pushed = 0
    public private(set) var evaluations = 0

    /// Checks the query once (it is compiled and run, so a malformed one throws here).
    public init(store: DocumentStore, query: Query, in collection: CollectionName, pacing: LiveQueryPacing = .standard) throws(StoreError) {
        self.query = query
        self.collection = collection
        self.pacing = pacing
        _ = try store.explain(query, in: collection)
    }

    /// The store sequence up to which changes have been looked at (wait for changes after it).
    public var waitAfter: Int64 { seen }

    /// When `poll` next has work to do without a new change (nil: only after a change).
    public func due() -> ContinuousClock.Instant? {
        if last == nil { return .now }
        guard let dirtySince else { return nil }
        var at = dirtySince + .milliseconds(pacing.coalesceMillis)
        if let lastEvaluation { at = max(at, lastEvaluation + .milliseconds(pacing.minIntervalMillis)) }
        return at
    }

    /// Notices changes of the collection and evaluates the query when one is due; an update when
    /// the result differs from the last one returned (always for the first).
    public mutating func poll(_ store: DocumentStore, now: ContinuousClock.Instant = .now) throws(StoreError) -> LiveQueryUpdate? {
        let head = store.lastSequence
        if head > seen {
            // Only this collection's changes matter: one indexed row tells whether there is one.
            if dirtySince == nil, !(try store.changes(in: collection, since: seen, limit: 1)).isEmpty { dirtySince = now }
            seen = head
        }
        if last != nil {
            guard let due = due(), now >= due else { return nil }
        }
        let sequence = store.lastSequence
        let result = try store.query(query, in: collection)
        evaluations += 1
        lastEvaluation = now
        dirtySince = nil
        seen = max(seen, sequence)
        if let last, last == result { return nil }
        let update = LiveQueryState.diff(from: last, to: result, number: pushed + 1, sequence: sequence, evaluations: evaluations)
        last = result
        pushed += 1
        return update
    }

    static func diff(from old: QueryResult?, to new: QueryResult, number: Int, sequence: Int64, evaluations: Int) -> LiveQueryUpdate {
        var u = LiveQueryUpdate(number: number, result: new, added: [], changed: [], removed: [], sequence: sequence, evaluations: evaluations)
        guard !new.isAggregate else { return u }
        let before = Dictionary((old?.rows ?? []).map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let now = Set(new.rows.map(\.id))
        for row in new.rows {
            if let b = before[row.id] {
                if b != row { u.changed.append(row.id) }
            } else {
                u.added.append(row.id)
            }
        }
        u.removed = (old?.rows ?? []).map(\.id).filter { !now.contains($0) }
        return u
    }

    /// Blocks until there is an update, `isCancelled` turns true (checked at least every 250 ms),
    /// or the store closes (an error). For a thread that serves one live query.
    public mutating func next(_ store: DocumentStore, isCancelled: () -> Bool) throws(StoreError) -> LiveQueryUpdate? {
        while !isCancelled() {
            if let u = try poll(store) { return u }
            if let due = due() {
                let wait = due - .now
                // Nothing commits past Int64.max: a timed wait on the store (which `wake()` and
                // closing cut short), not a sleep that would hold a closing store up.
                if wait > .zero { _ = store.waitForChange(after: .max, timeoutMillis: max(1, min(250, Int(wait / .milliseconds(1))))) }
            } else {
                _ = store.waitForChange(after: seen, timeoutMillis: 250)
            }
        }
        return nil
    }
}

/// A count of live queries with a ceiling: a gateway holds at most `limit` at once.
public final class LiveQuerySlots: Sendable {
    public let limit: Int
    private let used = Locked(0)
    public init(limit: Int) { self.limit = limit }

    /// Takes a slot; false when all are taken.
    public func take() -> Bool {
        used.withLock { n in
            guard n < limit else { return false }
            n += 1
            return true
        }
    }
    public func release() { used.withLock { $0 = max(0, $0 - 1) } }
    public var count: Int { used.withLock { $0 } }
    public var fullMessage: String { "too many live queries: this gateway keeps at most \(limit) at once (end one, or run the query without following)" }
}

public enum LiveQueryLimits {
    /// Live queries one gateway serves at once (control socket and HTTP together).
    public static let perGateway = 64
}
