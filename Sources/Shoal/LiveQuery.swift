import ShoalCore
import ShoalStore
import ShoalThreads

/// One push of a live query (`QueryBuilder.live()`): the whole result and, by document id, what
/// changed since the previous push. The first push has every document in `added`.
public struct LiveQueryResult: Sendable {
    /// 1 for the first push, then 2, 3, …
    public let number: Int
    /// The matching documents, in the query's order (at most its limit).
    public let documents: [Document]
    /// Ids new to the result, whose document changed, and gone from it.
    public let added: [String]
    public let changed: [String]
    public let removed: [String]
    /// Every change to the store up to this sequence is reflected.
    public let sequence: Int64
}

extension QueryBuilder {
    /// The query's result now, and again each time a change to the collection (a local write or
    /// delete, or a replicated one) alters it: re-evaluated only when that collection changes, at
    /// most once per `minIntervalMillis` and after `coalesceMillis` (a burst of writes costs one
    /// evaluation), pushed only when the result differs. A thread of its own evaluates it until the
    /// stream is dropped or its task cancelled (the thread then ends within 250 ms) or the database
    /// closes (the stream then ends with an error). At most `Database.maxLiveQueries` at once.
    ///
    ///     for try await r in db.query("readings").where(.field("site") == "east").order(by: "-updatedAt").limit(20).live() {
    ///         show(r.documents)
    ///     }
    public func live(coalesceMillis: Int = LiveQueryPacing.standard.coalesceMillis,
                     minIntervalMillis: Int = LiveQueryPacing.standard.minIntervalMillis) throws(ShoalError) -> AsyncThrowingStream<LiveQueryResult, any Error> {
        let name = try Database.name(collection)
        let store = database.store, slots = database.liveQueries
        var state: LiveQueryState
        do {
            state = try LiveQueryState(store: store, query: try query(), in: name,
                                       pacing: LiveQueryPacing(coalesceMillis: coalesceMillis, minIntervalMillis: minIntervalMillis))
        } catch let e as QueryError {
            throw ShoalError("invalid query of \(collection): \(e)")
        } catch { throw ShoalError("cannot query \(collection): \(error)") }
        guard slots.take() else { throw ShoalError(slots.fullMessage) }
        let (stream, continuation) = AsyncThrowingStream<LiveQueryResult, any Error>.makeStream(bufferingPolicy: .bufferingNewest(16))
        let flag = DoneFlag()
        continuation.onTermination = { _ in
            flag.set()
            store.wake()
        }
        let full = name.description
        let started = DetachedThread.start(name: "shoal-live-query") { [state] in
            var state = state
            defer { slots.release() }
            do {
                while let u = try state.next(store, isCancelled: { flag.isSet }) {
                    continuation.yield(LiveQueryResult(
                        number: u.number,
                        documents: u.result.rows.map { Document(collection: full, id: $0.id, json: $0.body) },
                        added: u.added, changed: u.changed, removed: u.removed, sequence: u.sequence))
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: ShoalError("live query of \(full) ended: \(error)"))
            }
        }
        if !started {
            slots.release()
            continuation.finish(throwing: ShoalError("cannot start a thread for a live query of \(full)"))
        }
        return stream
    }

    /// How many live queries this database has open now.
    public var liveQueryCount: Int { database.liveQueries.count }
}
