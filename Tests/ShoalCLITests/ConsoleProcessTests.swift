import Foundation
import Glibc
import ShoalTesting
import Testing

// glibc's pseudo-terminal calls (declared under _XOPEN_SOURCE, which Swift's Glibc module does not
// set); plain C ABI: ints and a char pointer.
@_silgen_name("posix_openpt") private func openMasterPTY(_ flags: Int32) -> Int32
@_silgen_name("grantpt") private func grantPTY(_ fd: Int32) -> Int32
@_silgen_name("unlockpt") private func unlockPTY(_ fd: Int32) -> Int32
@_silgen_name("ptsname") private func slaveName(_ fd: Int32) -> UnsafeMutablePointer<CChar>?

extension ProcessSuites {
    /// A gateway whose board puts its console on a pseudo-terminal (as a Pi's /dev/serial0) and its
    /// LED on a fake sysfs tree: the console answers commands and survives garbage; the LED blinks.
    @Suite("Serial console and status LED", .serialized)
    struct ConsoleProcessTests {
        /// A pty pair: the master stays here; the slave's path goes into the board file.
        final class PTY {
            let master: Int32
            let slavePath: String
            init() throws {
                master = openMasterPTY(O_RDWR | O_NOCTTY)
                guard master >= 0, grantPTY(master) == 0, unlockPTY(master) == 0, let name = slaveName(master) else {
                    throw CocoaError(.fileNoSuchFile)
                }
                slavePath = String(cString: name)
                _ = fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK)
            }
            deinit { close(master) }

            /// Writes all of `bytes` (the pty takes a few KB at a time; the gateway drains it).
            func send(_ bytes: [UInt8]) {
                var offset = 0
                let deadline = Date().addingTimeInterval(20)
                while offset < bytes.count && Date() < deadline {
                    let n = bytes[offset...].withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
                    if n > 0 { offset += n } else { usleep(2000) }
                }
            }

            /// Everything the gateway wrote until `until` appears or `timeout` passes.
            func read(until text: String, timeout: Double = 10) -> String {
                var out = [UInt8]()
                let deadline = Date().addingTimeInterval(timeout)
                var buffer = [UInt8](repeating: 0, count: 4096)
                while Date() < deadline {
                    let n = buffer.withUnsafeMutableBytes { Glibc.read(master, $0.baseAddress, 4096) }
                    if n > 0 { out += buffer.prefix(n) } else { usleep(20_000) }
                    if String(decoding: out, as: UTF8.self).contains(text) { break }
                }
                return String(decoding: out, as: UTF8.self)
            }
        }

        @Test("status, peers, retry, help and garbage over a pty; a line-noise flood; the sysfs LED toggles with the pattern")
        func consoleAndLED() throws {
            let pty = try PTY()
            let base = TemporaryDirectory()
            defer { base.remove() }
            let leds = base.path + "/leds"
            try FileManager.default.createDirectory(atPath: leds + "/ACT", withIntermediateDirectories: true)
            try "1\n".write(toFile: leds + "/ACT/max_brightness", atomically: false, encoding: .utf8)
            try "none [mmc0] timer\n".write(toFile: leds + "/ACT/trigger", atomically: false, encoding: .utf8)
            try "0\n".write(toFile: leds + "/ACT/brightness", atomically: false, encoding: .utf8)
            let board = base.path + "/console-board.yaml"
            try """
            extends: sim
            board:
              name: Console test board
              support: community
            led:
              driver: sysfs
              name: ACT
            console:
              device: \(pty.slavePath)
              baud: 115200
              statusIntervalSeconds: 2
            """.write(toFile: board, atomically: true, encoding: .utf8)
            let g = try RunningGateway(dataDir: base.path + "/data", board: board, env: ["SHOAL_SYSFS_LEDS": leds])
            defer { _ = g.stop() }

            #expect(pty.read(until: "type help").contains("shoal console: type help"))
            pty.send(Array("help\r".utf8))
            let help = pty.read(until: "this list")
            #expect(help.contains("status") && help.contains("peers") && help.contains("retry"), "\(help)")
            pty.send(Array("status\r".utf8))
            let status = pty.read(until: "led:")
            #expect(status.contains("shoal ") && status.contains("| docs ") && status.contains("led: "), "\(status)")
            pty.send(Array("peers\r".utf8))
            #expect(pty.read(until: "no peers known").contains("no peers known"))
            pty.send(Array("retry radios\r".utf8))
            #expect(pty.read(until: "radios now").contains("retrying the radios now"))
            // Garbage: control bytes, invalid UTF-8, escape sequences, an unknown word, then a flood
            // of line noise with an overlong line; the console answers and still works afterwards.
            pty.send([0x00, 0xFF, 0xFE, 0x1B, 0x5B, 0x41, 0x07] + Array("reboot now please\r".utf8))
            let unknown = pty.read(until: "type help")
            #expect(unknown.contains("unknown command") && unknown.contains("reboot"), "\(unknown)")
            var noise: [UInt8] = []
            var x: UInt32 = 12345
            for _ in 0..<20_000 { x = x &* 1_103_515_245 &+ 12345; let b = UInt8(truncatingIfNeeded: x >> 16); noise.append(b == 0x0D || b == 0x0A ? 0x41 : b) }
            pty.send(noise + [0x0D])
            #expect(pty.read(until: "ignored").contains("longer than"))
            pty.send(Array("status\r".utf8))
            #expect(pty.read(until: "led:").contains("led: "))
            // Status lines keep coming on their own (every 2 s here).
            #expect(pty.read(until: "| mesh", timeout: 5).contains("| mesh"))

            // The LED: Shoal took it from its trigger and drives brightness with the pattern
            // (discovering: a 100 ms blink every 2 s).
            #expect((try? String(contentsOfFile: leds + "/ACT/trigger", encoding: .utf8)) == "none")
            var seen = Set<String>()
            let deadline = Date().addingTimeInterval(6)
            while Date() < deadline && seen.count < 2 {
                // A plain file stands in for sysfs: a read between its truncation and the write sees "".
                if let v = try? String(contentsOfFile: leds + "/ACT/brightness", encoding: .utf8), !v.isEmpty { seen.insert(v) }
                usleep(10_000)
            }
            #expect(seen == ["0", "1"], "brightness took both values: \(seen)")
            let json = try Shoal.json(g.cli(["status", "--json"])) as? [String: Any]
            #expect((json?["led"] as? String)?.isEmpty == false)
            #expect(g.process.isRunning)
            _ = g.stop()
            // Given back on the way out.
            #expect((try? String(contentsOfFile: leds + "/ACT/trigger", encoding: .utf8)) == "mmc0")
        }
    }
}
