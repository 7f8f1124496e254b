/// ShoalLinux: everything that talks to the Linux kernel or a system daemon — sockets, the serial
/// console, systemd notify, and (the only importer of each) avahi-client, libbluetooth and libgpiod.
/// Every syscall goes through `SystemCall.run`, which retries EINTR and turns -1 into a typed error
/// that names the call.
import Glibc

public struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
    public let call: String
    public let code: Int32
    public init(call: String, code: Int32) {
        self.call = call
        self.code = code
    }
    public var description: String { "\(call): \(String(cString: strerror(code))) (errno \(code))" }
}

public enum SystemCall {
    /// Runs a syscall that returns -1 and sets errno on failure, retrying on EINTR.
    @discardableResult
    public static func run<T: FixedWidthInteger>(_ call: @autoclosure () -> String, _ body: () -> T) throws(SystemError) -> T {
        while true {
            let rc = body()
            if rc != -1 { return rc }
            let e = errno
            if e == EINTR { continue }
            throw SystemError(call: call(), code: e)
        }
    }
}
