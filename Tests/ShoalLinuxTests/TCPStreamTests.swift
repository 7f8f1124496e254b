import Foundation
import ShoalCore
import ShoalLinux
import ShoalTesting
import Synchronization
import Testing

@Suite("TCP")
struct TCPTests {
    /// Each side writes 12 MB before it reads a byte — more than the sockets' buffers hold (about
    /// 4 MB here). A link's thread reads only between writes, so without reading while a write
    /// waits both would wait for each other until the write timeout.
    @Test("both ends writing more than the buffers hold at once: neither write waits for the other to read")
    func bothWriteAtOnce() async throws {
        let listener = try TCPListener(ipv4: "127.0.0.1")
        let port = listener.port
        let client = try TCPStream.connect(ipv4: "127.0.0.1", port: port, timeoutMillis: 2000)
        let server = try #require(try listener.accept(timeoutMillis: 2000))
        let total = 12 << 20
        @Sendable func exchange(_ s: TCPStream, _ seed: UInt8) throws -> (drained: Int, intact: Bool) {
            // A 251-byte pattern (prime, so SDU or segment sizes never line up with it) per side.
            func pattern(_ seed: UInt8) -> [UInt8] {
                let block = (0..<251).map { UInt8(truncatingIfNeeded: $0 &* 7) &+ seed }
                var all: [UInt8] = []
                all.reserveCapacity(total + 251)
                while all.count < total { all += block }
                return Array(all[0..<total])
            }
            let out = pattern(seed)
            var sent = 0
            while sent < total {
                sent += try out.withUnsafeBytes { raw in try s.write(UnsafeRawBufferPointer(rebasing: raw[sent...]), timeoutMillis: 10_000) }
            }
            var got: [UInt8] = []
            got.reserveCapacity(total)
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            while got.count < total {
                let n = try buffer.withUnsafeMutableBytes { try s.read(into: $0, timeoutMillis: 10_000) }
                if n == 0 { break }
                got += buffer[0..<n]
            }
            let other: UInt8 = seed == 1 ? 2 : 1
            let intact = got == pattern(other)
            return (s.drainedWhileWriting, intact)
        }
        async let a = onThread("duplex-a") { try exchange(client, 1) }
        async let b = onThread("duplex-b") { try exchange(server, 2) }
        let (ra, rb) = try await (a, b)
        #expect(ra.intact && rb.intact, "a byte was lost, doubled or reordered")
        #expect(ra.drained + rb.drained > 0, "no write read while it waited: the test did not fill the buffers")
        client.close()
        server.close()
    }

    @Test("a dual-stack listener on [::] takes IPv6 and IPv4 connections; an interface's state is read from sysfs")
    func dualStackAndInterfaces() async throws {
        let listener = try TCPListener(host: "::", port: 0)
        let port = listener.port
        try await onThread("tcp-v6") {
            for host in ["::1", "127.0.0.1"] {
                let client = try TCPStream.connect(host: host, port: port, timeoutMillis: 2000)
                let server = try #require(try listener.accept(timeoutMillis: 2000))
                var byte: [UInt8] = [42]
                _ = try byte.withUnsafeBytes { try client.write($0, timeoutMillis: 1000) }
                byte = [0]
                let n = try byte.withUnsafeMutableBytes { try server.read(into: $0, timeoutMillis: 1000) }
                #expect(n == 1 && byte == [42], "over \(host)")
                client.close()
                server.close()
            }
            #expect(throws: SystemError.self) { _ = try TCPStream.connect(host: "not-an-address", port: port, timeoutMillis: 100) }
        }
        // A fake /sys/class/net: up with a carrier, up without one, administratively down, missing.
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        for (name, flags, oper) in [("wlan0", "0x1003", "up"), ("wlan1", "0x1003", "lowerlayerdown"), ("wlan2", "0x1002", "down"), ("veth0", "0x1003", "unknown")] {
            try Files.makeDirectories(dir.path + "/" + name)
            try Files.write(dir.path + "/\(name)/flags", flags + "\n")
            try Files.write(dir.path + "/\(name)/operstate", oper + "\n")
        }
        #expect(HardwareProbe.interfaceState("wlan0", sysfs: dir.path) == .up)
        #expect(HardwareProbe.interfaceState("wlan1", sysfs: dir.path) == .noCarrier)
        #expect(HardwareProbe.interfaceState("wlan2", sysfs: dir.path) == .down)
        #expect(HardwareProbe.interfaceState("veth0", sysfs: dir.path) == .up)
        #expect(HardwareProbe.interfaceState("wlan9", sysfs: dir.path) == .missing)
        #expect(HardwareProbe.interfaceState("../x", sysfs: dir.path) == .missing)
    }
}
