import Glibc

/// The board's console: `stdout`, or a serial tty set to raw mode at the board's baud rate, which
/// also reads command lines. Writes never block the gateway: a tty that is not taking bytes (no
/// cable, a stalled USB adapter) drops the line rather than stalling. Reads take printable ASCII
/// only (other bytes are dropped; backspace edits), end a line at CR or LF, and drop a line longer
/// than `maxLine` — garbage on the wire cannot grow memory or reach the command interpreter.
public final class ConsoleWriter: @unchecked Sendable {  // one tty descriptor; writes serialised by the status service's console lock
    public let device: String
    private var fd: Int32
    private let owned: Bool
    public static let maxLine = 200
    /// What `take` returns for a line longer than `maxLine` (its bytes are dropped).
    public static let overlongLine = "\u{1}overlong"
    private var pending: [UInt8] = []
    private var overlong = false

    /// Whether the console reads commands (a tty, not stdout).
    public var isInteractive: Bool { owned && isatty(fd) == 1 }

    public init(device: String, baud: Int64) throws(SystemError) {
        self.device = device
        if device == "stdout" {
            fd = STDOUT_FILENO
            owned = false
            return
        }
        fd = try SystemCall.run("open(\(device))") { open(device, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC) }
        owned = true
        if isatty(fd) == 1 {
            var t = termios()
            try SystemCall.run("tcgetattr(\(device))") { tcgetattr(fd, &t) }
            cfmakeraw(&t)
            let speed = ConsoleWriter.speed(baud)
            cfsetispeed(&t, speed)
            cfsetospeed(&t, speed)
            t.c_cflag |= tcflag_t(CLOCAL | CREAD)
            try SystemCall.run("tcsetattr(\(device))") { tcsetattr(fd, TCSANOW, &t) }
        }
    }

    deinit { if owned && fd >= 0 { close(fd) } }

    static func speed(_ baud: Int64) -> speed_t {
        switch baud {
        case 9600: speed_t(B9600)
        case 19200: speed_t(B19200)
        case 38400: speed_t(B38400)
        case 57600: speed_t(B57600)
        case 230400: speed_t(B230400)
        case 460800: speed_t(B460800)
        case 921600: speed_t(B921600)
        default: speed_t(B115200)
        }
    }

    /// Writes one line (a newline is added). Returns false if the line was dropped.
    @discardableResult
    public func writeLine(_ line: String) -> Bool {
        let bytes = Array((line + (device == "stdout" ? "\n" : "\r\n")).utf8)
        var offset = 0
        while offset < bytes.count {
            // EAGAIN (the line is not draining), EIO (hang-up): drop the line, never block.
            let written = try? SystemCall.nonBlocking("write(console)") { bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) } }
            guard let n = written ?? nil else { return false }
            offset += n
        }
        return true
    }
}

extension ConsoleWriter {
    public enum ReadResult: Equatable, Sendable {
        case lines([String])
        /// The line hung up or failed (a USB adapter unplugged): reopen later.
        case disconnected(String)
    }

    /// Waits up to `timeoutMillis` for input; returns the complete lines read (maybe none).
    public func readLines(timeoutMillis: Int32) -> ReadResult {
        let came: Int16
        do { came = try SystemCall.poll(fd, Int16(POLLIN), timeoutMillis: Int(timeoutMillis), "poll(console)") } catch { return .disconnected("\(error)") }
        if came == 0 { return .lines([]) }
        if came & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 && came & Int16(POLLIN) == 0 { return .disconnected("hang-up") }
        var buffer = [UInt8](repeating: 0, count: 512)
        let got: Int?
        do { got = try SystemCall.nonBlocking("read(console)") { buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 512) } } } catch { return .disconnected("\(error)") }
        guard let n = got else { return .lines([]) }
        if n == 0 { return .disconnected("end of input") }
        return .lines(take(buffer.prefix(n)))
    }

    /// Line assembly (separate for tests): printable ASCII kept, BS/DEL erase, CR/LF end a line.
    public func take(_ bytes: some Sequence<UInt8>) -> [String] {
        var lines: [String] = []
        for b in bytes {
            switch b {
            case 0x0D, 0x0A:
                if !overlong && !pending.isEmpty { lines.append(String(decoding: pending, as: UTF8.self)) }
                if overlong { lines.append(ConsoleWriter.overlongLine) }
                pending.removeAll(keepingCapacity: true)
                overlong = false
            case 0x08, 0x7F:
                if !pending.isEmpty { pending.removeLast() }
            case 0x20...0x7E:
                if pending.count < ConsoleWriter.maxLine { pending.append(b) } else { overlong = true }
            default:
                break  // control characters, bytes of other encodings, line noise
            }
        }
        return lines
    }
}
