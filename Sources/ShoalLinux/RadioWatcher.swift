import CBlueZ
import Glibc
import ShoalCore
import Synchronization

/// What the radios look like now: the Wi-Fi interface, the Bluetooth adapter, and rfkill.
public struct RadioSnapshot: Sendable, Equatable {
    public var wifiInterface: String?
    public var wifi: HardwareProbe.InterfaceState = .missing
    public var bluetoothAdapter: String?
    public var bluetoothPresent = false
    public var bluetoothUp = false
    /// rfkill blocks by type (soft: `rfkill block`, airplane mode; hard: a switch or the firmware).
    public var wifiBlock = RFKill.Block()
    public var bluetoothBlock = RFKill.Block()

    public init() {}

    /// Whether Wi-Fi can carry links, and if not, why.
    /// Whether the Wi-Fi transport (TCP) can carry links, and why not. A board that names no
    /// interface has nothing to watch: TCP links still run over static peers and the listen
    /// address on whatever interface routes them; only DNS-SD discovery needs the interface. The
    /// second value then says so (it is a note, not a reason it is down).
    public var wifiUsable: (Bool, String?) {
        guard let i = wifiInterface else { return (true, "no Wi-Fi interface on this board: static peers and listen only, no DNS-SD discovery") }
        if wifiBlock.hard { return (false, "Wi-Fi is hard-blocked (rfkill: a switch or the firmware)") }
        if wifiBlock.soft { return (false, "Wi-Fi is soft-blocked (rfkill unblock wifi)") }
        return wifi == .up ? (true, nil) : (false, "\(i) is \(wifi.rawValue)")
    }

    public var bluetoothUsable: (Bool, String?) {
        guard let a = bluetoothAdapter else { return (false, "the board names no Bluetooth adapter") }
        if bluetoothBlock.hard { return (false, "Bluetooth is hard-blocked (rfkill)") }
        if bluetoothBlock.soft { return (false, "Bluetooth is soft-blocked (rfkill unblock bluetooth)") }
        if !bluetoothPresent { return (false, "no adapter \(a)") }
        return bluetoothUp ? (true, nil) : (false, "\(a) is down")
    }
}

/// /dev/rfkill's events: 8 bytes each (idx u32, type u8, op u8, soft u8, hard u8; newer kernels
/// append fields, which are skipped by the length the kernel reports). Opening the device first
/// replays an ADD for every radio switch there is.
public struct RFKill: Sendable {
    public struct Block: Sendable, Equatable {
        public var soft = false
        public var hard = false
        public init(soft: Bool = false, hard: Bool = false) {
            self.soft = soft
            self.hard = hard
        }
    }
    public enum Kind: UInt8, Sendable { case all = 0, wlan = 1, bluetooth = 2 }
    public enum Op: UInt8, Sendable { case add = 0, del = 1, change = 2, changeAll = 3 }

    /// Per switch index: its kind and block.
    public private(set) var switches: [UInt32: (kind: UInt8, block: Block)] = [:]
    public init() {}

    /// Applies one event record (at least 8 bytes); false for a malformed one (ignored).
    @discardableResult
    public mutating func apply(_ record: ArraySlice<UInt8>) -> Bool {
        guard record.count >= 8 else { return false }
        let b = Array(record.prefix(8))
        let idx = UInt32(b[0]) | UInt32(b[1]) << 8 | UInt32(b[2]) << 16 | UInt32(b[3]) << 24  // host order (little-endian here)
        guard let op = Op(rawValue: b[5]) else { return false }
        let block = Block(soft: b[6] != 0, hard: b[7] != 0)
        switch op {
        case .add, .change: switches[idx] = (b[4], block)
        case .del: switches[idx] = nil
        case .changeAll:
            for (k, v) in switches where b[4] == Kind.all.rawValue || v.kind == b[4] { switches[k] = (v.kind, block) }
        }
        return true
    }

    /// Any switch of this kind blocked (a gateway has one of each, normally).
    public func block(_ kind: Kind) -> Block {
        var out = Block()
        for v in switches.values where v.kind == kind.rawValue {
            out.soft = out.soft || v.block.soft
            out.hard = out.hard || v.block.hard
        }
        return out
    }
}

/// Watches the radios on a thread of its own and reports each change of `RadioSnapshot` (and the
/// first one) through `onChange`. Wakes on a link or address change (an rtnetlink socket), on an
/// rfkill event (/dev/rfkill), and at least every second (the Bluetooth adapter's state is polled).
public final class RadioWatcher: Sendable {
    let wifiInterface: String?
    let bluetoothAdapter: String?
    let rfkillPath: String
    let sysfsNet: String
    let onChange: @Sendable (RadioSnapshot) -> Void
    let stopping = Atomic<Bool>(false)
    /// The watcher's thread, joined by `stop`.
    let workers = WorkerGroup()

    public init(wifiInterface: String?, bluetoothAdapter: String?, rfkillPath: String = "/dev/rfkill",
                sysfsNet: String = "/sys/class/net", onChange: @escaping @Sendable (RadioSnapshot) -> Void) {
        self.wifiInterface = wifiInterface
        self.bluetoothAdapter = bluetoothAdapter
        self.rfkillPath = rfkillPath
        self.sysfsNet = sysfsNet
        self.onChange = onChange
    }

    @discardableResult
    public func start() -> Bool { workers.spawn("radios") { self.loop() } }

    /// Stops the watcher and joins its thread (it wakes at least every second); returns the
    /// threads it had to abandon after 3 s.
    @discardableResult
    public func stop() -> [String] {
        stopping.store(true, ordering: .relaxed)
        return workers.join(timeoutMillis: 3000)
    }

    func bluetooth() -> (present: Bool, up: Bool) {
        guard let a = bluetoothAdapter else { return (false, false) }
        let id = hci_devid(a)
        guard id >= 0 else { return (false, false) }
        var info = hci_dev_info()
        guard hci_devinfo(id, &info) == 0 else { return (true, false) }
        return (true, info.flags & (1 << UInt32(HCI_UP)) != 0)
    }

    private func loop() {
        let netlink = LinkEvents.socket()
        var rfkillFD: Int32 = -1
        var rfkill = RFKill()
        var last: RadioSnapshot?
        var pending = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 8192)
        while !stopping.load(ordering: .relaxed) {
            if rfkillFD < 0 { rfkillFD = (try? SystemCall.run("open(\(rfkillPath))") { open(rfkillPath, O_RDONLY | O_NONBLOCK | O_CLOEXEC) }) ?? -1 }
            var snapshot = RadioSnapshot()
            snapshot.wifiInterface = wifiInterface
            snapshot.bluetoothAdapter = bluetoothAdapter
            if let i = wifiInterface { snapshot.wifi = HardwareProbe.interfaceState(i, sysfs: sysfsNet) }
            (snapshot.bluetoothPresent, snapshot.bluetoothUp) = bluetooth()
            snapshot.wifiBlock = rfkill.block(.wlan)
            snapshot.bluetoothBlock = rfkill.block(.bluetooth)
            if snapshot != last {
                last = snapshot
                onChange(snapshot)
            }
            // A descriptor of -1 (no netlink, no rfkill) is ignored by poll: it then only waits.
            var fds = [pollfd(fd: netlink, events: Int16(POLLIN), revents: 0), pollfd(fd: rfkillFD, events: Int16(POLLIN), revents: 0)]
            if (try? SystemCall.poll(&fds, timeoutMillis: 1000, "poll(radio events)")) == nil { SystemCall.pause(millis: 1000) }
            if netlink >= 0 && fds[0].revents & Int16(POLLIN) != 0 {
                // The content does not matter: any link or address change means "look again".
                while let n = try? SystemCall.nonBlocking("recv(rtnetlink)", { buffer.withUnsafeMutableBytes { recv(netlink, $0.baseAddress, 8192, Int32(MSG_DONTWAIT)) } }), n > 0 {}
            }
            if rfkillFD >= 0 && fds[1].revents != 0 {
                let fd = rfkillFD
                let result: Int?? = try? SystemCall.nonBlocking("read(rfkill)") { buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 8192) } }
                if case .some(.some(let n)) = result, n > 0 {
                    pending += buffer.prefix(n)
                    // Records are 8 bytes on the kernels this runs on (a newer kernel's longer
                    // records arrive one per read: take the first 8 of each read then).
                    if n % 8 != 0 { rfkill.apply(pending.prefix(8)[...]); pending.removeAll() }
                    while pending.count >= 8 {
                        rfkill.apply(pending.prefix(8)[...])
                        pending.removeFirst(8)
                    }
                } else if case .some(.none) = result {
                    // Nothing to read after all (EAGAIN).
                } else {
                    close(rfkillFD)  // end of file (a FIFO's writer went away) or the device failed: reopen
                    rfkillFD = -1
                }
            }
        }
        if netlink >= 0 { close(netlink) }
        if rfkillFD >= 0 { close(rfkillFD) }
    }
}
