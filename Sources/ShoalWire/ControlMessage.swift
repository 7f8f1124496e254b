import ShoalCore

/// The control socket's messages: one JSON object per frame. A request is `{"op": …, …}`; a reply
/// is `{"ok": true, "result": …}` or `{"ok": false, "error": {"code": …, "message": …}}`.
/// `changes` with `follow: true` keeps the connection open and sends `{"change": …}` frames.
/// List answers are pages: at most `pageBudgetBytes` of items, with `"more": true` when cut short.
public enum ControlMessage {
    /// Frames on the control socket never exceed this (a document is at most 1 MiB in Shoal).
    public static let frameLimit = 4 << 20
    /// A list answer (`doc.list`, `changes`, `conflicts`) stops adding items before their JSON
    /// passes this, and says `"more": true`; the client asks again from where it stopped (a
    /// cursor each op names). So any limit works whatever the documents' size.
    public static let pageBudgetBytes = 3 << 20

    public static func encode(_ value: JSONValue) throws(FrameError) -> [UInt8] {
        try FrameEncoder.encode(Array(value.compactText.utf8), limit: frameLimit)
    }

    /// Decodes one frame's payload into a JSON object, or says why it is not one.
    public static func decode(_ payload: [UInt8]) -> Result<[String: JSONValue], ControlError> {
        do {
            let value = try JSONValue.parse(bytes: payload)
            guard let object = value.objectValue else {
                return .failure(ControlError(code: .badRequest, message: "a control message is a JSON object"))
            }
            return .success(object)
        } catch {
            return .failure(ControlError(code: .badRequest, message: "\(error)"))
        }
    }

    public static func success(_ result: JSONValue) -> JSONValue { ["ok": true, "result": result] }
    public static func failure(_ error: ControlError) -> JSONValue {
        ["ok": false, "error": ["code": .string(error.code.rawValue), "message": .string(error.message)]]
    }
}

/// An error the control socket reports to its client.
public struct ControlError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        case badRequest = "bad_request"
        case notFound = "not_found"
        case invalidDocument = "invalid_document"
        case unavailable = "unavailable"
        case internalError = "internal"
    }
    public let code: Code
    public let message: String
    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }
    public var description: String { message }
}
