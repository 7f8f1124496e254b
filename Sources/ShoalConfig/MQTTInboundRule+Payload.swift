import ShoalCore

/// One message turned into the document an inbound rule writes: its id and body. Pure, so the
/// runtime, the tests and the simulator turn the same bytes into the same document.
public struct MQTTInboundDocument: Sendable, Equatable {
    public var id: DocumentID
    /// Always a JSON object.
    public var body: JSONValue
    /// `body.compactText`: what the store writes (and what was measured against the limit).
    public var bodyText: String
    /// The topic's named fields.
    public var fields: [String: String]

    public init(id: DocumentID, body: JSONValue, bodyText: String, fields: [String: String]) {
        self.id = id
        self.body = body
        self.bodyText = bodyText
        self.fields = fields
    }
}

/// Why a message became no document; counted per reason (`shoal mqtt status`, /metrics).
public enum MQTTDropReason: String, Error, CaseIterable, Sendable {
    case notUTF8 = "not_utf8"
    case notJSON = "not_json"
    /// The body printed is over the store's limit.
    case tooLarge = "too_large"
    /// The id template gave no valid document id (empty, over 250 bytes, control characters).
    case badID = "bad_id"
    /// The time field is there but is no number or non-empty string.
    case badTime = "bad_time"
    /// The store refused the write (the runtime's reason; the rules never give it).
    case storeError = "store_error"
}

extension MQTTInboundRule {
    /// A payload over this many times the body limit is `too_large` unread: whitespace and
    /// escapes seldom make a body four times its printed size, and a flood of huge payloads must
    /// not be parsed.
    public static let payloadSlack = 4

    /// The document for one message, or why there is none; nil when the topic does not match
    /// this rule's filter. `arrivalMillis` and `counter` (0…999) key a series document whose
    /// payload has no time field (`MQTTArrivalClock` gives them). In merge mode the body is the
    /// message's alone: merge it (`merged`) and measure it again before writing.
    public func document(topic: String, payload: [UInt8], maxBodyBytes: Int, arrivalMillis: Int64, counter: Int) -> Result<MQTTInboundDocument, MQTTDropReason>? {
        guard let fields = filter.match(topic) else { return nil }
        return document(topic: topic, fields: fields, payload: payload, maxBodyBytes: maxBodyBytes, arrivalMillis: arrivalMillis, counter: counter)
    }

    /// As above, for a topic already matched (`fields` from `filter.match(topic)`).
    public func document(topic: String, fields: [String: String], payload: [UInt8], maxBodyBytes: Int,
                         arrivalMillis: Int64, counter: Int) -> Result<MQTTInboundDocument, MQTTDropReason> {
        let slack = MQTTInboundRule.payloadSlack
        guard payload.count <= (maxBodyBytes > Int.max / slack ? Int.max : maxBodyBytes * slack) else { return .failure(.tooLarge) }
        guard let text = String(validating: payload, as: UTF8.self) else { return .failure(.notUTF8) }
        let value: JSONValue
        if self.payload == .text {
            value = .string(text)
        } else {
            do { value = try JSONValue.parse(bytes: payload, limits: .init(maxBytes: max(payload.count, 1))) } catch { return .failure(.notJSON) }
        }
        var timeSource: [String: JSONValue] = [:]
        var body: [String: JSONValue]
        if case .object(let members) = value {
            body = members
            timeSource = members
            if topicFields { for (k, v) in fields where body[k] == nil { body[k] = .string(v) } }
        } else {
            body = ["value": value]
            for (k, v) in fields where body[k] == nil { body[k] = .string(v) }
        }
        var idText = id.render(fields.merging([MQTTTopicFilter.topicPlaceholder: topic]) { own, _ in own })
        if mode == .series {
            switch MQTTInboundRule.timeKey(timeField.flatMap { timeSource[$0] }, arrivalMillis: arrivalMillis, counter: counter) {
            case .success(let key): idText += "@" + key
            case .failure(let reason): return .failure(reason)
            }
        }
        guard let docID = try? DocumentID(idText) else { return .failure(.badID) }
        let object = JSONValue.object(body)
        let printed = object.compactText
        guard printed.utf8.count <= maxBodyBytes else { return .failure(.tooLarge) }
        return .success(MQTTInboundDocument(id: docID, body: object, bodyText: printed, fields: fields))
    }

    /// A series document's time key: the time field's value when the payload has it (so a
    /// redelivered message keys the same document), else arrival millis (13 digits) and the
    /// counter (3 digits), which sort in arrival order.
    public static func timeKey(_ value: JSONValue?, arrivalMillis: Int64, counter: Int) -> Result<String, MQTTDropReason> {
        switch value {
        case nil: return .success(arrivalKey(millis: arrivalMillis, counter: counter))
        case .string(let s)?: return s.isEmpty ? .failure(.badTime) : .success(s)
        case .number(let n)?: return .success(integerText(n) ?? n)
        case .null?, .bool?, .array?, .object?: return .failure(.badTime)
        }
    }

    /// `1700000000123` and `007` → `1700000000123007`.
    public static func arrivalKey(millis: Int64, counter: Int) -> String {
        precondition(millis >= 0 && millis <= 9_999_999_999_999, "arrival millis \(millis) do not fit 13 digits")
        precondition((0...999).contains(counter), "an arrival counter is 0...999, got \(counter)")
        let m = String(millis)
        let c = String(counter)
        return String(repeating: "0", count: 13 - m.count) + m + String(repeating: "0", count: 3 - c.count) + c
    }

    /// A JSON number's text as an integer when its value is one (`1.7e12` → `1700000000000`),
    /// nil when it has a fraction or is too big to say exactly.
    static func integerText(_ n: String) -> String? {
        if let i = Int64(n) { return String(i) }
        guard let d = Double(n), d == d.rounded(), abs(d) < 9_007_199_254_740_992 else { return nil }
        return String(Int64(d))
    }

    /// Merge mode: the incoming body's top-level fields over the existing document's. An existing
    /// document that is missing (or not an object) is replaced.
    public static func merged(existing: JSONValue?, incoming: JSONValue) -> JSONValue {
        guard case .object(var base)? = existing, case .object(let top) = incoming else { return incoming }
        for (k, v) in top { base[k] = v }
        return .object(base)
    }
}

/// Arrival keys for series documents without a time field: increasing and unique within a run,
/// even when many messages arrive in one millisecond or the clock steps back. A key can repeat
/// only after a restart with the clock set back, and then it replaces an older document.
public struct MQTTArrivalClock: Sendable {
    public private(set) var millis: Int64 = -1
    public private(set) var counter = 0

    public init() {}

    /// The (millis, counter) pair for a message that arrived at `nowMillis`.
    public mutating func next(nowMillis: Int64) -> (millis: Int64, counter: Int) {
        if nowMillis > millis {
            millis = nowMillis
            counter = 0
        } else if counter < 999 {
            counter += 1
        } else {
            millis += 1
            counter = 0
        }
        return (millis, counter)
    }
}
