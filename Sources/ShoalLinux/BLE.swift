import CBlueZ
import Glibc
import ShoalCore
import Synchronization
import ShoalThreads

/// What a Shoal gateway advertises over Bluetooth LE, in the 31 bytes of a legacy advertisement
/// plus the 31 of its scan response:
/// - advertisement: the group's 128-bit service UUID (18 bytes) and manufacturer data (13 bytes:
///   company 0xFFFF, the protocol version, the L2CAP PSM, the first 6 bytes of the peer id) — a
///   scanner recognises a peer of its group from this alone (`btmgmt find` / `hcitool lescan`
///   show it);
/// - scan response: manufacturer data with the other 26 bytes of the peer id (active scanning
///   asks for it), so the mesh gets the whole id before it dials.
public struct BLEAdvert: Sendable, Equatable {
    public var serviceUUID: [UInt8]  // 16 bytes, as printed (big endian)
    public var version: UInt8
    public var psm: UInt16
    public var peer: [UInt8]  // 32 bytes

    public init(serviceUUID: [UInt8], version: UInt8, psm: UInt16, peer: [UInt8]) {
        self.serviceUUID = serviceUUID
        self.version = version
        self.psm = psm
        self.peer = peer
    }

    static let company: [UInt8] = [0xFF, 0xFF]  // "no company": for tests and prototypes

    /// The advertisement's AD structures (31 bytes).
    public var advertisingData: [UInt8] {
        var d: [UInt8] = [17, 0x07] + serviceUUID.reversed()  // complete list of 128-bit UUIDs, little endian
        d += [12, 0xFF] + BLEAdvert.company + [version, UInt8(psm & 0xFF), UInt8(psm >> 8)] + peer.prefix(6)
        return d
    }

    /// The scan response's AD structure (31 bytes).
    public var scanResponseData: [UInt8] { [30, 0xFF] + BLEAdvert.company + [0x01] + peer.dropFirst(6) }

    /// AD structures as (type, payload).
    static func structures(_ data: [UInt8]) -> [(UInt8, ArraySlice<UInt8>)] {
        var out: [(UInt8, ArraySlice<UInt8>)] = []
        var i = 0
        while i < data.count {
            let len = Int(data[i])
            guard len > 0, i + 1 + len <= data.count else { break }
            out.append((data[i + 1], data[(i + 2)..<(i + 1 + len)]))
            i += 1 + len
        }
        return out
    }

    /// The first part (from an advertisement), if it is a Shoal one of `serviceUUID`.
    static func parseAdvertisement(_ data: [UInt8], serviceUUID: [UInt8]) -> (version: UInt8, psm: UInt16, prefix: [UInt8])? {
        var uuidMatches = false
        var manufacturer: ArraySlice<UInt8>?
        for (type, payload) in structures(data) {
            if type == 0x06 || type == 0x07 {  // incomplete / complete 128-bit UUID lists
                var p = payload
                while p.count >= 16 {
                    if Array(p.prefix(16).reversed()) == serviceUUID { uuidMatches = true }
                    p = p.dropFirst(16)
                }
            }
            if type == 0xFF, payload.count == 11, Array(payload.prefix(2)) == company { manufacturer = payload }
        }
        guard uuidMatches, let m = manufacturer else { return nil }
        let b = Array(m)
        return (b[2], UInt16(b[3]) | UInt16(b[4]) << 8, Array(b[5..<11]))
    }

    /// The second part (from a scan response).
    static func parseScanResponse(_ data: [UInt8]) -> [UInt8]? {
        for (type, payload) in structures(data) where type == 0xFF && payload.count == 29 && Array(payload.prefix(2)) == company && payload[payload.startIndex + 2] == 0x01 {
            return Array(payload.dropFirst(3))
        }
        return nil
    }
}

/// Bluetooth LE discovery on one adapter through raw HCI commands (libbluetooth): advertising
/// (connectable, with a scan response) and active scanning, on a thread of its own that
/// reconciles what is wanted with what the controller does.
///
/// Why raw HCI rather than the kernel's management interface: it needs no bluetoothd (a gateway
/// image often runs none; the QEMU lab runs none), and each command's answer comes back at once
/// with its status, so "adapter down / busy / blocked" are told exactly. The cost: bluetoothd, if
/// it runs and advertises on the same adapter, would fight over the one legacy advertising set;
/// Shoal's unit does not start it and `shoal doctor` names the adapter it uses.
public final class BLEAgent: Sendable {
    public enum Event: Sendable {
        /// Advertising works (true) or failed, and why.
        case advertising(Bool, String?)
        /// A Shoal peer of our group: its address, advertisement and signal.
        case found(BluetoothAddress, BLEAdvert, rssi: Int8)
        /// Not heard for `lostAfterMillis` while scanning.
        case lost(BluetoothAddress)
        case scanning(Bool, String?)
    }

    public let adapter: String
    public let serviceUUID: [UInt8]
    let onEvent: @Sendable (Event) -> Void
    /// A peer not heard for this long (while scanning) is reported lost.
    public let lostAfterMillis = 10_000

    struct Wanted {
        var advert: BLEAdvert?
        var scan = false
        /// Dials in progress: scanning pauses (the kernel scans to make its own connections).
        var pauses = 0
    }
    let wanted = Locked(Wanted())
    let stopping = Atomic<Bool>(false)
    /// The agent's thread, joined by `stop`.
    let workers = WorkerGroup()
    /// Scanning is off in the controller (for `withScanningPaused`), and its change signalled.
    let scanOff = Atomic<Bool>(true)
    let scanOffChanged = ConditionLock()

    public init(adapter: String, serviceUUID: [UInt8], onEvent: @escaping @Sendable (Event) -> Void) {
        self.adapter = adapter
        self.serviceUUID = serviceUUID
        self.onEvent = onEvent
    }

    /// The adapter's address (nil: no such adapter).
    public static func address(of adapter: String) -> BluetoothAddress? {
        let id = hci_devid(adapter)
        guard id >= 0 else { return nil }
        var ba = bdaddr_t()
        guard hci_devba(id, &ba) == 0 else { return nil }
        return BluetoothAddress(wire: withUnsafeBytes(of: ba.b) { Array($0) }, random: false)
    }

    public func advertise(_ advert: BLEAdvert?) { wanted.withLock { $0.advert = advert } }
    public func scan(_ on: Bool) { wanted.withLock { $0.scan = on } }

    /// Runs `body` (a dial) with scanning off in the controller, waiting up to 2 s for it to stop.
    public func withScanningPaused<T>(_ body: () throws -> T) rethrows -> T {
        wanted.withLock { $0.pauses += 1 }
        defer { wanted.withLock { $0.pauses -= 1 } }
        let deadline = monotonicMillis() + 2000
        scanOffChanged.withLock {
            while !scanOff.load(ordering: .relaxed) {
                let left = deadline - monotonicMillis()
                if left <= 0 { break }
                scanOffChanged.wait(timeoutMillis: left)
            }
        }
        return try body()
    }

    func setScanOff(_ off: Bool) {
        scanOffChanged.withLock {
            scanOff.store(off, ordering: .relaxed)
            scanOffChanged.broadcast()
        }
    }

    @discardableResult
    public func start() -> Bool { workers.spawn("ble") { self.loop() } }

    /// Stops advertising and scanning and joins the agent's thread (3 s at most: an HCI command
    /// waits up to 1 s for the controller); returns the threads it had to abandon.
    @discardableResult
    public func stop() -> [String] {
        stopping.store(true, ordering: .relaxed)
        return workers.join(timeoutMillis: 3000)
    }

    // MARK: the thread

    struct Seen {
        var prefix: [UInt8]?
        var version: UInt8 = 0
        var psm: UInt16 = 0
        var rest: [UInt8]?
        var random = false
        var lastMillis = 0
        var reported: BLEAdvert?
        var rssi: Int8 = 0
    }

    /// Why the adapter cannot be used now, or nil.
    func adapterProblem() -> String? {
        let id = hci_devid(adapter)
        guard id >= 0 else { return "no Bluetooth adapter \(adapter)" }
        var info = hci_dev_info()
        guard hci_devinfo(id, &info) == 0 else { return "cannot read \(adapter): \(String(cString: strerror(errno)))" }
        if info.flags & (1 << UInt32(HCI_UP)) == 0 { return "\(adapter) is down" }
        return nil
    }

    /// The agent thread's own state: the raw HCI sockets and what the controller does now.
    struct Radio {
        /// Raw HCI socket for commands (-1: closed).
        var commands: Int32 = -1
        /// Raw HCI socket filtered to LE meta events.
        var events: Int32 = -1
        /// What the controller advertises now.
        var advertising: BLEAdvert?
        var advertisingError: String?
        var lastEnable = 0
        var lastScanEnable = 0
        var scanning = false
        var scanError: String?
        var seen: [BluetoothAddress: Seen] = [:]
        var lastAttempt = 0
        var lastAdapterCheck = 0
        var isOpen: Bool { commands >= 0 }
    }

    private func loop() {
        var r = Radio()
        var buffer = [UInt8](repeating: 0, count: Int(HCI_MAX_EVENT_SIZE))
        defer {
            if r.isOpen {
                if r.advertising != nil { _ = command(r.commands, OCF_LE_SET_ADVERTISE_ENABLE, [0]) }
                if r.scanning { _ = hci_le_set_scan_enable(r.commands, 0, 0, 1000) }
            }
            closeAll(&r)
        }
        while !stopping.load(ordering: .relaxed) {
            let now = monotonicMillis()
            let want = wanted.withLock { $0 }
            if !r.isOpen && (want.advert != nil || want.scan) && now - r.lastAttempt >= 1000 { open(&r, want, now: now) }
            // Checked once a second while open (each check opens two raw HCI sockets: every loop
            // turn made 20 socket opens a second on an idle gateway).
            if r.isOpen && now - r.lastAdapterCheck >= 1000 {
                r.lastAdapterCheck = now
                if let problem = adapterProblem() {
                    // Went away or down under us: start over (and tell).
                    closeAll(&r)
                    if want.advert != nil { r.advertisingError = problem; onEvent(.advertising(false, problem)) }
                    if want.scan { r.scanError = problem; onEvent(.scanning(false, problem)) }
                    r.seen = [:]
                    continue
                }
            }
            if r.isOpen {
                driveAdvertising(&r, want.advert, now: now)
                driveScanning(&r, want.scan && want.pauses == 0, now: now)
            }
            readReports(&r, &buffer)
            if r.scanning { expireLost(&r) }
        }
    }

    func closeAll(_ r: inout Radio) {
        if r.commands >= 0 { hci_close_dev(r.commands) }
        if r.events >= 0 { hci_close_dev(r.events) }
        r.commands = -1
        r.events = -1
        r.advertising = nil
        r.scanning = false
        setScanOff(true)
    }

    /// Opens the adapter's two HCI sockets, when it is usable; a problem is told once per change.
    func open(_ r: inout Radio, _ want: Wanted, now: Int) {
        r.lastAttempt = now
        if let problem = adapterProblem() {
            if want.advert != nil && r.advertisingError != problem { r.advertisingError = problem; onEvent(.advertising(false, problem)) }
            if want.scan && r.scanError != problem { r.scanError = problem; onEvent(.scanning(false, problem)) }
            return
        }
        let id = hci_devid(adapter)
        do {
            r.commands = try SystemCall.run("open HCI \(adapter)") { hci_open_dev(id) }
            r.events = try SystemCall.run("open HCI \(adapter)") { hci_open_dev(id) }
            var f = hci_filter()
            f.type_mask = 1 << UInt32(HCI_EVENT_PKT)
            f.event_mask.1 = 1 << UInt32(EVT_LE_META_EVENT - 32)
            let events = r.events
            try SystemCall.run("setsockopt(HCI_FILTER)") { setsockopt(events, SOL_HCI, HCI_FILTER, &f, socklen_t(MemoryLayout<hci_filter>.size)) }
            try SystemCall.setNonBlockingCloseOnExec(events, "HCI event socket")
        } catch {
            let why = "cannot open \(adapter): \(error)"
            closeAll(&r)
            if want.advert != nil { r.advertisingError = why; onEvent(.advertising(false, why)) }
        }
    }

    /// Advertising: set up when the content changes; re-enabled every second, since a controller
    /// stops advertising when a central connects.
    func driveAdvertising(_ r: inout Radio, _ advert: BLEAdvert?, now: Int) {
        if let a = advert {
            if r.advertising != a {
                if r.advertising != nil { _ = command(r.commands, OCF_LE_SET_ADVERTISE_ENABLE, [0]) }
                let problem = startAdvertising(r.commands, a)
                r.advertising = problem == nil ? a : nil
                r.lastEnable = now
                if problem != r.advertisingError || (problem == nil && r.advertisingError == nil) { onEvent(.advertising(problem == nil, problem)) }
                r.advertisingError = problem
            } else if now - r.lastEnable >= 1000 {
                r.lastEnable = now
                let status = command(r.commands, OCF_LE_SET_ADVERTISE_ENABLE, [1])
                if status != 0 && status != 0x0C { r.advertising = nil }  // 0x0C: already on
            }
        } else if r.advertising != nil {
            _ = command(r.commands, OCF_LE_SET_ADVERTISE_ENABLE, [0])
            r.advertising = nil
            r.advertisingError = nil
        }
    }

    /// Scanning: active (the scan response carries the rest of the peer id), off while a dial
    /// is in progress.
    func driveScanning(_ r: inout Radio, _ wanted: Bool, now: Int) {
        if wanted && !r.scanning {
            var rc = hci_le_set_scan_parameters(r.commands, 0x01, UInt16(0x0060).littleEndian, UInt16(0x0030).littleEndian, 0x00, 0x00, 1000)
            if rc == 0 { rc = hci_le_set_scan_enable(r.commands, 1, 0, 1000) }
            if rc == 0 {
                r.scanning = true
                r.lastScanEnable = now
                setScanOff(false)
                // Told every time scanning starts again (after a dial's pause too), not only after
                // an error: the transport's listener counts on it.
                onEvent(.scanning(true, nil))
                r.scanError = nil
            } else {
                let why = "cannot scan on \(adapter): \(String(cString: strerror(errno)))"
                if why != r.scanError { onEvent(.scanning(false, why)) }
                r.scanError = why
            }
        } else if r.scanning && wanted && now - r.lastScanEnable >= 2000 {
            // The kernel turns the controller's scan off after it made a connection (it scanned
            // for it, and believes nobody else scans): turn it on again. "Command disallowed"
            // means it is still on.
            r.lastScanEnable = now
            _ = hci_le_set_scan_enable(r.commands, 1, 0, 1000)
        } else if !wanted && r.scanning {
            _ = hci_le_set_scan_enable(r.commands, 0, 0, 1000)
            r.scanning = false
            setScanOff(true)
        }
    }

    /// Advertising reports that came within 100 ms (waits that long for them, or for nothing
    /// when the adapter is closed).
    func readReports(_ r: inout Radio, _ buffer: inout [UInt8]) {
        guard r.events >= 0 else {
            SystemCall.pause(millis: 100)
            return
        }
        let events = r.events
        guard let came = try? SystemCall.poll(events, Int16(POLLIN), timeoutMillis: 100, "poll(HCI events)"), came != 0 else { return }
        while let n = try? SystemCall.nonBlocking("read(HCI events)", { buffer.withUnsafeMutableBytes { Glibc.read(events, $0.baseAddress, $0.count) } }), n > 0 {
            if r.scanning { handle(Array(buffer[0..<n]), &r.seen, now: monotonicMillis()) }
        }
    }

    /// Peers not heard for `lostAfterMillis` while scanning are lost.
    func expireLost(_ r: inout Radio) {
        let now = monotonicMillis()
        for (address, s) in r.seen where now - s.lastMillis > lostAfterMillis {
            r.seen[address] = nil
            if s.reported != nil { onEvent(.lost(address)) }
        }
    }

    /// One HCI event packet: LE advertising reports of Shoal peers of our group.
    func handle(_ packet: [UInt8], _ seen: inout [BluetoothAddress: Seen], now: Int) {
        // [0x04][0x3E][len][subevent 0x02][count] then per report: type, address type, address(6), length, data, rssi.
        guard packet.count > 5, packet[0] == UInt8(HCI_EVENT_PKT), packet[1] == UInt8(EVT_LE_META_EVENT), packet[3] == UInt8(EVT_LE_ADVERTISING_REPORT) else { return }
        var i = 5
        for _ in 0..<Int(packet[4]) {
            guard i + 9 <= packet.count else { return }
            let type = packet[i], addressType = packet[i + 1]
            let address = BluetoothAddress(wire: Array(packet[(i + 2)..<(i + 8)]), random: addressType == 1)
            let len = Int(packet[i + 8])
            guard i + 9 + len + 1 <= packet.count else { return }
            let data = Array(packet[(i + 9)..<(i + 9 + len)])
            let rssi = Int8(bitPattern: packet[i + 9 + len])
            i += 10 + len
            if type == 0x04 {  // scan response
                guard var s = seen[address], let rest = BLEAdvert.parseScanResponse(data) else { continue }
                s.rest = rest
                s.lastMillis = now
                seen[address] = s
                report(address, &seen)
            } else if let part = BLEAdvert.parseAdvertisement(data, serviceUUID: serviceUUID) {
                var s = seen[address] ?? Seen()
                if s.prefix != part.prefix { s.rest = nil }
                s.prefix = part.prefix
                s.version = part.version
                s.psm = part.psm
                s.random = addressType == 1
                s.lastMillis = now
                s.rssi = rssi
                seen[address] = s
                report(address, &seen)
            }
        }
    }

    func report(_ address: BluetoothAddress, _ seen: inout [BluetoothAddress: Seen]) {
        guard let s = seen[address], let prefix = s.prefix, let rest = s.rest else { return }
        let advert = BLEAdvert(serviceUUID: serviceUUID, version: s.version, psm: s.psm, peer: prefix + rest)
        guard s.reported != advert else { return }
        seen[address]!.reported = advert
        onEvent(.found(address, advert, rssi: s.rssi))
    }

    /// Sets parameters (connectable undirected, 100–150 ms), data and scan response, and enables.
    func startAdvertising(_ dd: Int32, _ a: BLEAdvert) -> String? {
        let params: [UInt8] = [0xA0, 0x00, 0xF0, 0x00, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0x07, 0x00]
        var status = command(dd, OCF_LE_SET_ADVERTISING_PARAMETERS, params)
        if status == 0x0C {  // advertising on already (ours from before, or someone's): stop, retry
            _ = command(dd, OCF_LE_SET_ADVERTISE_ENABLE, [0])
            status = command(dd, OCF_LE_SET_ADVERTISING_PARAMETERS, params)
        }
        guard status == 0 else { return BLEAgent.describe(status, "set advertising parameters") }
        let data = a.advertisingData, scan = a.scanResponseData
        status = command(dd, OCF_LE_SET_ADVERTISING_DATA, [UInt8(data.count)] + data + [UInt8](repeating: 0, count: 31 - data.count))
        guard status == 0 else { return BLEAgent.describe(status, "set advertising data") }
        status = command(dd, OCF_LE_SET_SCAN_RESPONSE_DATA, [UInt8(scan.count)] + scan + [UInt8](repeating: 0, count: 31 - scan.count))
        guard status == 0 else { return BLEAgent.describe(status, "set scan response data") }
        status = command(dd, OCF_LE_SET_ADVERTISE_ENABLE, [1])
        guard status == 0 || status == 0x0C else { return BLEAgent.describe(status, "enable advertising") }
        return nil
    }

    static func describe(_ status: Int, _ what: String) -> String {
        switch status {
        case -1: return "\(what): no answer from the controller (\(String(cString: strerror(errno))))"
        case 0x0C: return "\(what): the controller refused (command disallowed: busy?)"
        case 0x07: return "\(what): the controller is out of memory"
        case 0x12: return "\(what): invalid parameters"
        default: return "\(what): controller status 0x\(String(status, radix: 16))"
        }
    }

    /// An LE controller command; its status (0: success), or -1 if there was no answer.
    func command(_ dd: Int32, _ ocf: Int32, _ params: [UInt8]) -> Int {
        var p = params
        var status: UInt8 = 0xFF
        let rc = p.withUnsafeMutableBytes { cp in
            withUnsafeMutablePointer(to: &status) { st in
                var req = hci_request()
                req.ogf = UInt16(OGF_LE_CTL)
                req.ocf = UInt16(ocf)
                req.cparam = cp.baseAddress
                req.clen = Int32(cp.count)
                req.rparam = UnsafeMutableRawPointer(st)
                req.rlen = 1
                return hci_send_req(dd, &req, 1000)
            }
        }
        return rc < 0 ? -1 : Int(status)
    }
}
