import Foundation
import ShoalCore
import ShoalLinux
import ShoalTesting
import Synchronization
import Testing

@Suite("Status LED drivers and the console's line reader")
struct LightAndConsoleTests {
    @Test("the sysfs driver takes the LED from its trigger, writes brightness, and gives it back")
    func sysfsLight() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try Files.makeDirectories(dir.path + "/ACT")
        try Files.write(dir.path + "/ACT/max_brightness", "255\n")
        try Files.write(dir.path + "/ACT/trigger", "none rc-feedback [mmc0] timer heartbeat\n")
        try Files.write(dir.path + "/ACT/brightness", "0\n")
        let light = try SysfsLight(name: "ACT", root: dir.path)
        #expect(try Files.read(dir.path + "/ACT/trigger") == "none")
        try light.set(true)
        #expect(try Files.read(dir.path + "/ACT/brightness") == "255")
        try light.set(false)
        #expect(try Files.read(dir.path + "/ACT/brightness") == "0")
        light.close()
        #expect(try Files.read(dir.path + "/ACT/trigger") == "mmc0")
        #expect(throws: SystemError.self) { _ = try SysfsLight(name: "missing", root: dir.path) }
        #expect(throws: SystemError.self) { _ = try SysfsLight(name: "../ACT", root: dir.path) }
    }

    @Test("a GPIO chip that does not exist is a clear error (the real line is tested on gpio-sim in the QEMU lab)")
    func gpioMissing() {
        #expect(throws: SystemError.self) { _ = try GPIOLineLight(chip: "gpiochip-none", line: 17, activeLow: false) }
    }

    @Test("console input: printable ASCII only, backspace edits, CR or LF ends a line, overlong lines are dropped whole")
    func consoleLines() throws {
        let c = try ConsoleWriter(device: "/dev/null", baud: 115_200)
        #expect(c.take(Array("help\r".utf8)) == ["help"])
        #expect(c.take(Array("sta".utf8)) == [] && c.take(Array("tus\n".utf8)) == ["status"])
        #expect(c.take([0x70, 0x65, 0x65, 0x08, 0x72, 0x73, 0x0D]) == ["pers"])
        #expect(c.take([0xFF, 0x00, 0x1B, 0x5B, 0x41, 0xC3, 0xA9, 0x0A]) == ["[A"])
        #expect(c.take(Array(repeating: 0x41, count: 5000) + [0x0D]) == [ConsoleWriter.overlongLine])
        #expect(c.take(Array("\r\n\r\npeers\r\n".utf8)) == ["peers"])
    }
}
