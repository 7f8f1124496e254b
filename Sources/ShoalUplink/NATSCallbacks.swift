import CNATS
import Glibc
import ShoalCore
import ShoalThreads

// libnats's C callbacks and what they reach: boxes found by token in a table, never by address
// (see CallbackTable), and the collectors they fill. NATSClient.swift hands them to libnats.

/// The consumer's Swift callback, for libnats's C one.
final class DeliveryBox: Sendable {
    /// The boxes libnats's handler can reach, by token.
    static let table = CallbackTable<DeliveryBox>()
    private let deliver: @Sendable (HubMessage) -> Void
    private let open = Locked(true)
    private let dropping = Locked(false)
    init(_ deliver: @escaping @Sendable (HubMessage) -> Void) { self.deliver = deliver }
    /// Holding the lock while delivering: `shut` returns only once no delivery runs.
    func handle(_ m: HubMessage) {
        guard !dropping.withLock({ $0 }) else { return }
        open.withLock { if $0 { deliver(m) } }
    }
    func shut() { open.withLock { $0 = false } }
    /// Deliveries from now on are dropped; one under way is not waited for.
    func abandon() { dropping.withLock { $0 = true } }
}

let natsConsumerDelivered: natsMsgHandler = { _, _, msg, closure in
    guard let msg else { return }
    defer { natsMsg_Destroy(msg) }
    guard let closure else { return }
    var meta: UnsafeMutablePointer<jsMsgMetaData>?
    var seq: UInt64 = 0
    var pending: UInt64 = 0
    if natsMsg_GetMetaData(&meta, msg) == NATS_OK, let meta {
        seq = meta.pointee.Sequence.Stream
        pending = meta.pointee.NumPending
        jsMsgMetaData_Destroy(meta)
    }
    guard seq > 0 else { return }  // not a stream message (a status or heartbeat libnats let through)
    DeliveryBox.table.find(closure)?.handle(NATSClient.read(msg, sequence: seq, pending: pending))
}

/// What a connection's callbacks reach, through `table`: in it from the connect until libnats's
/// closed callback.
final class CallbackBoxes: Sendable {
    static let table = CallbackTable<CallbackBoxes>()
    /// How many exist (tests check that none outlives its connection).
    static let live = Locked(0)
    let errors: AsyncErrors
    let acks: AckCollector
    let lost = ConnectionWatch()
    init(errors: AsyncErrors, acks: AckCollector) {
        self.errors = errors
        self.acks = acks
        CallbackBoxes.live.withLock { $0 += 1 }
    }
    deinit { CallbackBoxes.live.withLock { $0 -= 1 } }
}

let natsConnectionClosed: natsConnectionHandler = { _, closure in
    CallbackBoxes.table.remove(closure)
}

let natsConnectionLost: natsConnectionHandler = { _, closure in
    CallbackBoxes.table.find(closure)?.lost.fire(false)
}

let natsConnectionBack: natsConnectionHandler = { _, closure in
    CallbackBoxes.table.find(closure)?.lost.fire(true)
}

/// Objects that libnats's C callbacks reach by a token (a number in the closure pointer) rather
/// than by address: a callback that comes after its object was taken out finds nothing, where a
/// freed address would be a crash.
final class CallbackTable<Item: AnyObject & Sendable>: Sendable {
    private let state = Locked<(next: UInt, items: [UInt: Item])>((1, [:]))

    /// The token for `item`, to hand to libnats as the callback's closure.
    func add(_ item: Item) -> UnsafeMutableRawPointer {
        let n = state.withLock { s in defer { s.next += 1 }; s.items[s.next] = item; return s.next }
        return UnsafeMutableRawPointer(bitPattern: n)!  // n starts at 1: never nil
    }

    func find(_ token: UnsafeMutableRawPointer?) -> Item? {
        guard let token else { return nil }
        let n = UInt(bitPattern: token)
        return state.withLock { $0.items[n] }
    }

    func remove(_ token: UnsafeMutableRawPointer?) {
        guard let token else { return }
        let n = UInt(bitPattern: token)
        // The item is released outside the lock (its deinit may take other locks).
        let item = state.withLock { $0.items.removeValue(forKey: n) }
        _ = item
    }
}

/// Whom to tell when libnats finds the connection lost or made again.
final class ConnectionWatch: Sendable {
    private let handler = Locked<(@Sendable (Bool) -> Void)?>(nil)
    func set(_ f: @escaping @Sendable (Bool) -> Void) { handler.withLock { $0 = f } }
    func fire(_ connected: Bool) { handler.withLock { $0 }?(connected) }
}

/// The server's asynchronous errors, filled by libnats's callback thread.
final class AsyncErrors: Sendable {
    private let last = Locked<String?>(nil)
    func record(_ text: String) { last.withLock { $0 = text } }
    func take() -> String? { last.withLock { t in defer { t = nil }; return t } }
}

let natsAsyncError: natsErrHandler = { nc, _, err, closure in
    guard let boxes = CallbackBoxes.table.find(closure) else { return }
    var text: UnsafePointer<CChar>?
    var what = String(cString: natsStatus_GetText(err))
    if let nc, natsConnection_GetLastError(nc, &text) != NATS_OK, let text {
        let detail = String(cString: text)
        if !detail.isEmpty { what = detail }
    }
    boxes.errors.record(what)
}

/// Publishes in flight: `NATSClient.send`'s receipt for `wait`.
public struct PublishTicket: Sendable {
    let tokens: [Int]
    let early: [Int: PublishResult]
    public var count: Int { tokens.count }
}

/// Publish acknowledgements, matched to their publish by the message itself (libnats hands the
/// callback the message it sent), filled by libnats's callback thread.
final class AckCollector: @unchecked Sendable {  // every field only under lock
    private let lock = ConditionLock()
    private var next = 0
    private var tokenOf: [UInt: Int] = [:]
    private var messageOf: [Int: UInt] = [:]
    private var results: [Int: PublishResult] = [:]

    private static func key(_ msg: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(msg))) }

    func register(_ msg: OpaquePointer) -> Int {
        lock.withLock {
            next += 1
            tokenOf[Self.key(msg)] = next
            messageOf[next] = Self.key(msg)
            return next
        }
    }

    func forget(_ token: Int) {
        lock.withLock {
            if let k = messageOf.removeValue(forKey: token) { tokenOf[k] = nil }
            results[token] = nil
        }
    }

    func record(_ msg: OpaquePointer, _ r: PublishResult) {
        lock.withLock {
            guard let token = tokenOf.removeValue(forKey: Self.key(msg)) else { return }  // given up on
            messageOf[token] = nil
            results[token] = r
            lock.broadcast()
        }
    }

    /// The results of `tokens` once all came, or what came within the time; the rest are forgotten.
    func wait(_ tokens: [Int], timeoutMillis: Int, forgetRest: Bool = true) -> [Int: PublishResult] {
        let deadline = ContinuousClock.now + .milliseconds(timeoutMillis)
        return lock.withLock {
            while !tokens.allSatisfy({ results[$0] != nil }) {
                let left = deadline - ContinuousClock.now
                guard left > .zero else { break }
                lock.wait(timeoutMillis: max(1, Int(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)))
            }
            var out: [Int: PublishResult] = [:]
            for t in tokens {
                if let r = results.removeValue(forKey: t) {
                    out[t] = r
                } else if forgetRest, let k = messageOf.removeValue(forKey: t) {
                    tokenOf[k] = nil
                }
            }
            return out
        }
    }
}

/// libnats's acknowledgement callback (a C function: it captures nothing).
let natsPublishAcknowledged: jsPubAckHandler = { _, msg, pa, pae, closure in
    defer { natsMsg_Destroy(msg) }
    guard let msg, let acks = CallbackBoxes.table.find(closure)?.acks else { return }
    if let pa {
        acks.record(msg, .stored(sequence: pa.pointee.Sequence))
    } else if let pae {
        if pae.pointee.ErrCode == JSStreamWrongLastSequenceErr {
            acks.record(msg, .wrongLastSequence)
        } else if pae.pointee.ErrCode == JSStreamMessageExceedsMaximumErr {
            acks.record(msg, .tooLarge(pae.pointee.ErrText.map { String(cString: $0) } ?? "message size exceeds the stream's maximum"))
        } else {
            let text = pae.pointee.ErrText.map { String(cString: $0) } ?? String(cString: natsStatus_GetText(pae.pointee.Err))
            acks.record(msg, .failed(pae.pointee.ErrCode.rawValue == 0 ? text : "\(text) (JetStream error \(pae.pointee.ErrCode.rawValue))"))
        }
    } else {
        acks.record(msg, .failed("acknowledged with neither a result nor an error"))
    }
}
