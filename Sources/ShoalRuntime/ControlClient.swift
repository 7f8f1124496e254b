import ShoalCore
import ShoalLinux
import ShoalWire

/// The CLI's side of the control socket: one request, one reply; or a stream for `changes --follow`.
public final class ControlClient {
    public enum Failure: Error, CustomStringConvertible {
        case unreachable(path: String, why: String)
        case protocolError(String)
        case remote(ControlError)

        public var description: String {
            switch self {
            case .unreachable(let path, let why):
                "cannot reach a running shoal at \(path) (\(why)); is `shoal run` up? pass --socket or set SHOAL_SOCKET"
            case .protocolError(let why): "control socket: \(why)"
            case .remote(let e): e.message
            }
        }
    }

    let socket: UnixSocket
    var decoder = FrameDecoder(limit: ControlMessage.frameLimit)
    public let path: String

    public init(path: String) throws(Failure) {
        self.path = path
        do { socket = try UnixSocket.connect(path: path) } catch {
            throw .unreachable(path: path, why: String(describing: error))
        }
    }

    /// Finds the socket: --socket, then $SHOAL_SOCKET, then the stock board's path, then the sim
    /// board's (relative to the current directory).
    public static func resolveSocket(_ explicit: String?) -> String {
        if let explicit { return explicit }
        if let env = ProcessEnvironment.get("SHOAL_SOCKET"), !env.isEmpty { return env }
        for candidate in ["/run/shoal/control.sock", ".shoal/sim/control.sock"] where Files.exists(candidate) {
            return candidate
        }
        return "/run/shoal/control.sock"
    }

    public func send(_ request: JSONValue) throws(Failure) {
        do { try socket.writeAll(try ControlMessage.encode(request)) } catch {
            throw .protocolError("sending: \(error)")
        }
    }

    /// The next frame as a JSON object; nil at end of stream.
    public func receive(timeoutMillis: Int32 = 30_000) throws(Failure) -> [String: JSONValue]? {
        while true {
            do {
                if let frame = try decoder.next() {
                    switch ControlMessage.decode(frame) {
                    case .success(let object): return object
                    case .failure(let e): throw Failure.protocolError(e.message)
                    }
                }
                guard let bytes = try socket.read(timeoutMillis: timeoutMillis) else {
                    throw Failure.protocolError("no answer within \(timeoutMillis / 1000)s")
                }
                if bytes.isEmpty { return nil }
                decoder.feed(bytes)
            } catch let f as Failure {
                throw f
            } catch {
                throw .protocolError("\(error)")
            }
        }
    }

    /// Sends a request and returns its result, or throws the gateway's error.
    public func call(_ request: JSONValue) throws(Failure) -> JSONValue {
        try send(request)
        guard let reply = try receive() else { throw .protocolError("gateway closed the connection") }
        return try ControlClient.unwrap(reply)
    }

    public static func unwrap(_ reply: [String: JSONValue]) throws(Failure) -> JSONValue {
        if reply["ok"]?.boolValue == true { return reply["result"] ?? .null }
        let e = reply["error"]
        let code = ControlError.Code(rawValue: e?["code"]?.stringValue ?? "") ?? .internalError
        throw .remote(ControlError(code: code, message: e?["message"]?.stringValue ?? "unknown error"))
    }
}
