import CAvahi
import CBlueZ
import CGPIOD
import Glibc

/// Quick looks at the hardware and daemons a board file names, for `shoal status` and the doctor.
/// Each answers in well under a second and changes nothing. The drivers that use these parts
/// (LED, BLE, DNS-SD) come with their own issues.
public enum HardwareProbe {
    /// /proc/device-tree/model without its trailing NUL, or nil off a device-tree board.
    public static func deviceTreeModel(path: String = "/proc/device-tree/model") -> String? {
        guard let text = readSmallFile(path) else { return nil }
        let trimmed = String(text.prefix { $0 != "\0" && $0 != "\n" })
        return trimmed.isEmpty ? nil : trimmed
    }

    /// Whether a GPIO chip can be opened (`gpiochip4`, `/dev/gpiochip4`, or a label), and its line count.
    public static func gpioChip(_ name: String) -> (present: Bool, lines: Int) {
        guard let chip = gpiod_chip_open_lookup(name) else { return (false, 0) }
        defer { gpiod_chip_close(chip) }
        return (true, Int(gpiod_chip_num_lines(chip)))
    }

    public enum GPIOLineState: Equatable, Sendable {
        case missingChip, noSuchLine(count: Int), used(by: String), free, inaccessible(String)
    }

    /// Whether a GPIO line exists and is free (looked at, not requested).
    public static func gpioLine(chip name: String, line offset: Int) -> GPIOLineState {
        guard let chip = gpiod_chip_open_lookup(name) else {
            return errno == EACCES || errno == EPERM ? .inaccessible(String(cString: strerror(errno))) : .missingChip
        }
        defer { gpiod_chip_close(chip) }
        let count = Int(gpiod_chip_num_lines(chip))
        guard offset >= 0, offset < count, let line = gpiod_chip_get_line(chip, UInt32(offset)) else { return .noSuchLine(count: count) }
        if gpiod_line_is_used(line) { return .used(by: gpiod_line_consumer(line).map { String(cString: $0) } ?? "the kernel") }
        return .free
    }

    /// The index of a Bluetooth adapter (`hci0`), or nil if the kernel has no such device.
    public static func bluetoothAdapter(_ name: String) -> Int? {
        let id = hci_devid(name)
        return id < 0 ? nil : Int(id)
    }

    /// Whether a network interface exists (has an index).
    public static func networkInterface(_ name: String) -> Bool { if_nametoindex(name) != 0 }

    public enum InterfaceState: String, Sendable {
        case missing, down, noCarrier = "no carrier", up
    }

    /// A network interface's state from /sys/class/net (of this process's network namespace):
    /// administratively up and with a carrier (operstate up, or unknown for links that do not say).
    public static func interfaceState(_ name: String, sysfs: String = "/sys/class/net") -> InterfaceState {
        guard !name.contains("/"), let flagsText = readSmallFile("\(sysfs)/\(name)/flags") else { return .missing }
        let hex = flagsText.trimmingPrefix("0x").prefix { $0.isHexDigit }
        guard let flags = Int(hex, radix: 16), flags & Int(IFF_UP) != 0 else { return .down }
        let oper = (readSmallFile("\(sysfs)/\(name)/operstate") ?? "unknown").prefix { $0 != "\n" }
        return oper == "up" || oper == "unknown" ? .up : .noCarrier
    }

    /// Whether avahi-daemon answers on the D-Bus system bus. Talks to the daemon only; sends
    /// nothing on the network.
    public static func avahiDaemon() -> (reachable: Bool, detail: String) {
        guard let poll = avahi_simple_poll_new() else { return (false, "avahi_simple_poll_new failed") }
        defer { avahi_simple_poll_free(poll) }
        var error: Int32 = 0
        guard let client = avahi_client_new(avahi_simple_poll_get(poll), AvahiClientFlags(0), nil, nil, &error) else {
            return (false, String(cString: avahi_strerror(error)))
        }
        defer { avahi_client_free(client) }
        let version = avahi_client_get_version_string(client).map { String(cString: $0) } ?? "unknown version"
        return (true, version)
    }

    public static var libgpiodVersion: String { String(cString: gpiod_version_string()) }

    static func readSmallFile(_ path: String, max: Int = 4096) -> String? {
        guard let fd = try? SystemCall.run("open(\(path))", { open(path, O_RDONLY | O_CLOEXEC) }) else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: max)
        guard let n = try? SystemCall.run("read(\(path))", { buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, max) } }) else { return nil }
        return String(decoding: buffer.prefix(n), as: UTF8.self)
    }
}
