import Foundation
import ShoalCore
import ShoalLinux
import ShoalTesting
import Synchronization
import Testing
import ShoalThreads

@Suite("Radio manager")
struct RadioTests {
    static func event(_ idx: UInt32, _ kind: RFKill.Kind, _ op: RFKill.Op, soft: Bool, hard: Bool) -> [UInt8] {
        [UInt8(idx & 0xFF), UInt8(idx >> 8 & 0xFF), 0, 0, kind.rawValue, op.rawValue, soft ? 1 : 0, hard ? 1 : 0]
    }

    @Test("rfkill events: add, change, change-all, delete; malformed records are ignored")
    func rfkillEvents() {
        var r = RFKill()
        let added = r.apply(Self.event(0, .wlan, .add, soft: false, hard: false)[...]) && r.apply(Self.event(1, .bluetooth, .add, soft: false, hard: true)[...])
        #expect(added)
        #expect(r.block(.wlan) == RFKill.Block() && r.block(.bluetooth) == RFKill.Block(soft: false, hard: true))
        r.apply(Self.event(0, .wlan, .change, soft: true, hard: false)[...])
        #expect(r.block(.wlan).soft)
        r.apply(Self.event(0, .all, .changeAll, soft: false, hard: false)[...])
        #expect(r.block(.wlan) == RFKill.Block() && r.block(.bluetooth) == RFKill.Block())
        r.apply(Self.event(1, .bluetooth, .del, soft: false, hard: false)[...])
        #expect(r.switches.count == 1)
        let short = r.apply([1, 2, 3][...]), unknownOp = r.apply([0, 0, 0, 0, 1, 9, 1, 1][...])
        #expect(!short && !unknownOp)
        #expect(r.block(.wlan) == RFKill.Block())
    }

    @Test("the watcher reports an interface going down and up, and rfkill blocks, within a second or two")
    func watcher() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        try Files.makeDirectories(dir.path + "/net/wlan0")
        try Files.write(dir.path + "/net/wlan0/flags", "0x1003\n")
        try Files.write(dir.path + "/net/wlan0/operstate", "up\n")
        let fifo = dir.path + "/rfkill"
        #expect(mkfifo(fifo, 0o600) == 0)
        let seen = Locked<[RadioSnapshot]>([])
        let w = RadioWatcher(wifiInterface: "wlan0", bluetoothAdapter: nil, rfkillPath: fifo, sysfsNet: dir.path + "/net") { s in
            seen.withLock { $0.append(s) }
        }
        #expect(w.start())
        defer { w.stop() }
        func waitFor(_ what: String, _ p: @escaping (RadioSnapshot) -> Bool) -> Bool {
            for _ in 0..<300 {
                if let last = seen.withLock({ $0.last }), p(last) { return true }
                usleep(10_000)
            }
            Issue.record("no \(what) within 3 s: \(seen.withLock { $0 })")
            return false
        }
        #expect(waitFor("first report") { $0.wifiUsable.0 })
        // The "kernel" writes rfkill events: Wi-Fi soft-blocked, then unblocked.
        let writer = open(fifo, O_WRONLY)
        #expect(writer >= 0)
        defer { close(writer) }
        var e = Self.event(0, .wlan, .add, soft: false, hard: false) + Self.event(0, .wlan, .change, soft: true, hard: false)
        _ = e.withUnsafeBytes { write(writer, $0.baseAddress, $0.count) }
        #expect(waitFor("soft block") { $0.wifiBlock.soft && $0.wifiUsable.1?.contains("soft-blocked") == true })
        e = Self.event(0, .wlan, .change, soft: false, hard: false)
        _ = e.withUnsafeBytes { write(writer, $0.baseAddress, $0.count) }
        #expect(waitFor("unblock") { !$0.wifiBlock.soft && $0.wifiUsable.0 })
        // The interface loses its carrier, then goes down, then comes back.
        try Files.write(dir.path + "/net/wlan0/operstate", "lowerlayerdown\n")
        #expect(waitFor("no carrier") { $0.wifi == .noCarrier && !$0.wifiUsable.0 })
        try Files.write(dir.path + "/net/wlan0/flags", "0x1002\n")
        #expect(waitFor("down") { $0.wifi == .down })
        try Files.write(dir.path + "/net/wlan0/flags", "0x1003\n")
        try Files.write(dir.path + "/net/wlan0/operstate", "up\n")
        #expect(waitFor("up again") { $0.wifiUsable.0 })
    }
}
