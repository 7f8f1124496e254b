import Glibc

/// Writes status lines to the board's console: `stdout`, or a serial tty set to raw mode at the
/// board's baud rate. Writes never block the gateway: a tty that is not taking bytes (no cable, a
/// stalled USB adapter) drops the line rather than stalling.
public final class ConsoleWriter: @unchecked Sendable {
    public let device: String
    private var fd: Int32
    private let owned: Bool

    public init(device: String, baud: Int64) throws(SystemError) {
        self.device = device
        if device == "stdout" {
            fd = STDOUT_FILENO
            owned = false
            return
        }
        fd = try SystemCall.run("open(\(device))") { open(device, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC) }
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
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                return false  // EAGAIN (line not draining), EIO (hang-up): drop, never block
            }
            offset += n
        }
        return true
    }
}
