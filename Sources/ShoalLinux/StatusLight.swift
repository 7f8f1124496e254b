import CGPIOD
import Glibc

/// A status LED the board file names: something that can be lit and darkened. Drivers: a libgpiod
/// line, a sysfs LED, or nothing (console and none: the pattern shows in the log and the console
/// line instead).
public protocol StatusLight: AnyObject, Sendable {
    var description: String { get }
    func set(_ on: Bool) throws(SystemError)
    /// Gives the LED back (the line released, the sysfs trigger restored).
    func close()
}

/// An LED on a GPIO line through libgpiod (v1 API): requested as an output under the consumer
/// name `shoal-status`, active-low if the board says so. A line another program holds is an error
/// that names that program.
public final class GPIOLineLight: StatusLight, @unchecked Sendable {  // a libgpiod line, set by the LED thread alone
    private var chip: OpaquePointer?
    private var line: OpaquePointer?
    public let description: String

    public init(chip name: String, line offset: Int, activeLow: Bool, consumer: String = "shoal-status") throws(SystemError) {
        description = "GPIO line \(offset) of \(name)\(activeLow ? " (active low)" : "")"
        guard let c = gpiod_chip_open_lookup(name) else { throw SystemError(call: "gpiod_chip_open_lookup(\(name))", code: errno) }
        guard offset >= 0, offset < Int(gpiod_chip_num_lines(c)) else {
            gpiod_chip_close(c)
            throw SystemError(call: "line \(offset) of \(name) (it has \(gpiod_chip_num_lines(c)) lines)", code: EINVAL)
        }
        guard let l = gpiod_chip_get_line(c, UInt32(offset)) else {
            gpiod_chip_close(c)
            throw SystemError(call: "gpiod_chip_get_line(\(name), \(offset))", code: errno)
        }
        if gpiod_line_is_used(l) {
            let holder = gpiod_line_consumer(l).map { String(cString: $0) } ?? "the kernel"
            gpiod_chip_close(c)
            throw SystemError(call: "line \(offset) of \(name) is in use by \(holder)", code: EBUSY)
        }
        let flags = activeLow ? Int32(GPIOD_LINE_REQUEST_FLAG_ACTIVE_LOW) : 0
        guard gpiod_line_request_output_flags(l, consumer, flags, 0) == 0 else {
            let e = errno
            gpiod_chip_close(c)
            throw SystemError(call: "gpiod_line_request_output(\(name), \(offset))", code: e)
        }
        chip = c
        line = l
    }

    deinit { close() }

    public func set(_ on: Bool) throws(SystemError) {
        guard let line else { throw SystemError(call: "gpiod_line_set_value (released)", code: EBADF) }
        guard gpiod_line_set_value(line, on ? 1 : 0) == 0 else { throw SystemError(call: "gpiod_line_set_value", code: errno) }
    }

    public func close() {
        if let line { gpiod_line_release(line) }
        if let chip { gpiod_chip_close(chip) }
        line = nil
        chip = nil
    }
}

/// An LED the kernel exposes in /sys/class/leds/NAME (the Pi's ACT LED): its trigger is set to
/// `none` so Shoal owns it, and restored on close.
public final class SysfsLight: StatusLight, @unchecked Sendable {  // an open brightness file, written by the LED thread alone
    let directory: String
    let maxBrightness: Int
    let previousTrigger: String?
    public let description: String

    public init(name: String, root: String = "/sys/class/leds") throws(SystemError) {
        guard !name.isEmpty, !name.contains("/") else { throw SystemError(call: "LED name \"\(name)\"", code: EINVAL) }
        directory = root + "/" + name
        description = "LED \(name) (\(directory))"
        guard let max = try Files.read(directory + "/max_brightness"), let value = Int(max.prefix { $0.isNumber }), value > 0 else {
            throw SystemError(call: "read \(directory)/max_brightness", code: ENOENT)
        }
        maxBrightness = value
        // The trigger file lists them all with the current one in brackets: "none [mmc0] timer".
        let triggers = (try? Files.read(directory + "/trigger")) ?? nil
        previousTrigger = triggers.flatMap { t in
            guard let open = t.firstIndex(of: "["), let close = t.firstIndex(of: "]"), open < close else { return nil }
            return String(t[t.index(after: open)..<close])
        }
        try Files.write(directory + "/trigger", "none")
    }

    public func set(_ on: Bool) throws(SystemError) {
        try Files.write(directory + "/brightness", on ? String(maxBrightness) : "0")
    }

    public func close() {
        if let previousTrigger, previousTrigger != "none" { try? Files.write(directory + "/trigger", previousTrigger) }
    }
}
