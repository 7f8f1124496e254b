import Glibc
import ShoalCore

// This file must not import CBlueZ: under whole-module optimisation, a file importing it that uses
// SOCK_* made those constants vanish from the module's other files (see LinkEvents.swift). The few
// kernel ABI values L2CAP needs are spelled out here instead (linux/bluetooth headers).
enum BluetoothABI {
    static let family: Int32 = 31  // AF_BLUETOOTH
    static let protoL2CAP: Int32 = 0
    static let solBluetooth: Int32 = 274
    static let sndMTU: Int32 = 12  // BT_SNDMTU (read: the peer's MTU, what one write may carry)
    static let rcvMTU: Int32 = 13  // BT_RCVMTU
    static let addressLEPublic: UInt8 = 1
    static let addressLERandom: UInt8 = 2
}

/// `struct sockaddr_l2` (14 bytes).
struct SockaddrL2 {
    var family = UInt16(BluetoothABI.family)
    var psm: UInt16 = 0  // little endian on the wire: this is a little-endian host (x86, ARM)
    var address: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0)
    var cid: UInt16 = 0
    var addressType: UInt8 = BluetoothABI.addressLEPublic
    static let length = socklen_t(14)
}

/// A Bluetooth device address, "AA:BB:CC:DD:EE:FF" (stored reversed on the wire).
public struct BluetoothAddress: Sendable, Hashable, CustomStringConvertible {
    public let bytes: [UInt8]  // wire order (least significant first)
    public let isRandom: Bool

    public init?(_ text: String, random: Bool = false) {
        let parts = text.split(separator: ":")
        guard parts.count == 6, let b = Optional(parts.compactMap { UInt8($0, radix: 16) }), b.count == 6 else { return nil }
        bytes = b.reversed()
        isRandom = random
    }

    public init(wire: [UInt8], random: Bool) {
        bytes = Array(wire.prefix(6))
        isRandom = random
    }

    public var description: String {
        bytes.reversed().map { ($0 < 16 ? "0" : "") + String($0, radix: 16, uppercase: true) }.joined(separator: ":")
    }

    var tuple: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) { (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5]) }
}

/// An L2CAP LE credit-based channel (SOCK_SEQPACKET) as a byte stream: each write goes out in
/// SDUs of at most the peer's MTU (BT_SNDMTU), each read returns what one SDU carried (buffered,
/// so a small read loses nothing). Non-blocking with poll and timeouts, and a wake-up pipe that
/// interrupts a read, as TCPStream has. Data written just before close can be lost on these
/// channels: the protocol above acknowledges what matters.
///
/// A write that waits for credits keeps reading: what arrives meanwhile is kept here for the next
/// read. The kernel gives the peer credits only for room in our socket's receive buffer (Linux
/// computes LE credits from it since "compute LE flow credits based on recvbuf space"; Debian's
/// 6.1 has it), so two gateways that both write a burst at once, each on a thread that reads only
/// between writes, would each wait for credits the other never returns — both links silent until
/// a timeout. Draining while we wait breaks that cycle. What we hold is bounded (`maxHeldBytes`):
/// a peer that keeps sending while we cannot write gets its link closed, and replication resumes
/// from its checkpoint on the next one.
public final class L2CAPStream: ByteStream, @unchecked Sendable {  // one socket, owned by its link's thread (wake() writes a pipe from any)
    private let fd: Int32
    private let wakeFD: Int32
    private let wakeWriteFD: Int32
    private var closed = false
    /// What one write may carry, and one read may bring.
    public let sendMTU: Int
    public let receiveMTU: Int
    public let peer: BluetoothAddress
    /// Received and not yet read: whole SDUs, in order.
    private var held: [UInt8] = []
    private var heldHead = 0
    /// The peer closed the channel (seen while draining); reads return 0 once `held` is empty.
    private var ended = false
    private var scratch: [UInt8]
    /// Bytes drained during writes that may wait here before the link is given up.
    public static let maxHeldBytes = 8 << 20
    /// Bytes read while a write waited for credits, since the stream opened (for logs and tests).
    public private(set) var drainedWhileWriting = 0

    init(fd: Int32, peer: BluetoothAddress) {
        self.fd = fd
        self.peer = peer
        (wakeFD, wakeWriteFD) = TCPStream.wakePipe()
        sendMTU = Int(L2CAPStream.option(fd, BluetoothABI.sndMTU) ?? 23)
        receiveMTU = Int(L2CAPStream.option(fd, BluetoothABI.rcvMTU) ?? 23)
        // One SDU per recv: the buffer must hold a whole one.
        scratch = [UInt8](repeating: 0, count: max(receiveMTU, 256))
    }

    deinit {
        close()
        if wakeFD >= 0 { Glibc.close(wakeFD) }
        if wakeWriteFD >= 0 { Glibc.close(wakeWriteFD) }
    }

    static func option(_ fd: Int32, _ name: Int32) -> UInt16? {
        var v: UInt16 = 0
        var len = socklen_t(2)
        return (try? SystemCall.run("getsockopt(SOL_BLUETOOTH)") { getsockopt(fd, BluetoothABI.solBluetooth, name, &v, &len) }) != nil ? v : nil
    }

    /// A system error as an L2CAP stream's: the link gone (reset, not connected, the peer out of
    /// range) is a close, the rest a failure naming the call.
    static func io<T>(_ body: () throws(SystemError) -> T) throws(StreamError) -> T {
        do { return try body() } catch {
            if [EPIPE, ECONNRESET, ENOTCONN].contains(error.code) { throw .closed }
            throw .failed("L2CAP \(error)")
        }
    }

    /// A non-blocking L2CAP socket bound to the LE public address type, with our receive MTU asked
    /// for. The order matters: the kernel takes BT_RCVMTU only on a socket whose source address
    /// type is LE, which `bind` sets — asked before it, the request is refused (EINVAL) and the
    /// channel keeps the default 672.
    static func boundSocket(receiveMTU: UInt16) throws(StreamError) -> (fd: Int32, mtuRefused: String?) {
        let fd: Int32
        do {
            fd = try SystemCall.run("socket(AF_BLUETOOTH, L2CAP)") {
                Glibc.socket(BluetoothABI.family, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), BluetoothABI.protoL2CAP)
            }
        } catch { throw .failed("cannot make an L2CAP socket: \(error) (no Bluetooth in this kernel?)") }
        var local = SockaddrL2()
        do {
            try SystemCall.run("bind(L2CAP)") { withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, SockaddrL2.length) } } }
        } catch {
            Glibc.close(fd)
            throw .failed("cannot bind an L2CAP socket: \(error)")
        }
        var mtu = receiveMTU
        do { try SystemCall.run("setsockopt(BT_RCVMTU)") { setsockopt(fd, BluetoothABI.solBluetooth, BluetoothABI.rcvMTU, &mtu, 2) } } catch {
            return (fd, "the kernel refused a receive MTU of \(receiveMTU): \(error)")
        }
        return (fd, nil)
    }

    /// Connects to `psm` on `peer` (an LE address) within `timeoutMillis`.
    public static func connect(to peer: BluetoothAddress, psm: UInt16, receiveMTU: UInt16 = 4096, timeoutMillis: Int) throws(StreamError) -> L2CAPStream {
        let fd = try boundSocket(receiveMTU: receiveMTU).fd  // a refused MTU shows in the channel's receiveMTU
        var remote = SockaddrL2()
        remote.psm = psm
        remote.address = peer.tuple
        remote.addressType = peer.isRandom ? BluetoothABI.addressLERandom : BluetoothABI.addressLEPublic
        let what = "L2CAP connect to \(peer) psm \(psm)"
        do { try connectAndWait(fd, &remote, what, timeoutMillis: timeoutMillis) } catch {
            Glibc.close(fd)
            if error.code == ETIMEDOUT { throw .timeout }
            throw .failed("\(error)")
        }
        return L2CAPStream(fd: fd, peer: peer)
    }

    /// A non-blocking connect, waited for up to `timeoutMillis`, then asked how it went.
    private static func connectAndWait(_ fd: Int32, _ remote: inout SockaddrL2, _ what: String, timeoutMillis: Int) throws(SystemError) {
        let rc = withUnsafePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, SockaddrL2.length) } }
        if rc != 0 {
            let e = errno
            guard e == EINPROGRESS || e == EAGAIN || e == EINTR else { throw SystemError(call: what, code: e) }
        }
        guard try SystemCall.poll(fd, Int16(POLLOUT), timeoutMillis: timeoutMillis, "poll(\(what))") != 0 else {
            throw SystemError(call: what, code: ETIMEDOUT)
        }
        let err = try SystemCall.option(fd, SOL_SOCKET, SO_ERROR, "getsockopt(SO_ERROR)")
        guard err == 0 else { throw SystemError(call: what, code: err) }
    }

    public func wake() {
        var b: UInt8 = 1
        // A full pipe already holds a wake-up; a missing one (-1) leaves the read to its timeout.
        _ = try? SystemCall.nonBlocking("write(wake pipe)") { Glibc.write(wakeWriteFD, &b, 1) }
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        if heldHead < held.count { return take(buffer) }
        if ended || closed { return 0 }
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
        if wakeFD >= 0 { fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)) }
        let n = try L2CAPStream.io { () throws(SystemError) in try SystemCall.poll(&fds, timeoutMillis: timeoutMillis, "poll(read)") }
        if fds.count > 1 && fds[1].revents != 0 {
            var drain = [UInt8](repeating: 0, count: 64)
            _ = try? SystemCall.nonBlocking("read(wake pipe)") { Glibc.read(wakeFD, &drain, 64) }
            if fds[0].revents == 0 { throw .timeout }
        }
        if n == 0 { throw .timeout }
        switch try receiveOne() {
        case .got: return take(buffer)
        case .none: throw .timeout
        case .end: return 0
        }
    }

    private enum Received { case got, none, end }

    /// One SDU from the socket into `held`, without waiting.
    private func receiveOne() throws(StreamError) -> Received {
        let result: Int?
        do { result = try SystemCall.nonBlocking("recv") { scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) } } } catch {
            // The link is gone (reset, not connected, the peer out of range): the stream's end.
            if [ECONNRESET, ENOTCONN, EPIPE, ETIMEDOUT, EHOSTDOWN].contains(error.code) { ended = true; return .end }
            throw .failed("L2CAP \(error)")
        }
        guard let got = result else { return .none }
        if got == 0 { ended = true; return .end }
        if heldHead > 0 && heldHead == held.count { held.removeAll(keepingCapacity: true); heldHead = 0 }
        held.append(contentsOf: scratch[0..<got])
        return .got
    }

    private func take(_ buffer: UnsafeMutableRawBufferPointer) -> Int {
        let n = min(buffer.count, held.count - heldHead)
        held.withUnsafeBytes { src in buffer.baseAddress!.copyMemory(from: src.baseAddress! + heldHead, byteCount: n) }
        heldHead += n
        if heldHead == held.count {
            held.removeAll(keepingCapacity: held.capacity <= 64 * 1024)
            heldHead = 0
        } else if heldHead >= 64 * 1024 {
            held.removeFirst(heldHead)
            heldHead = 0
        }
        return n
    }

    public func write(_ bytes: UnsafeRawBufferPointer, timeoutMillis: Int) throws(StreamError) -> Int {
        guard !closed else { throw .closed }
        let chunk = min(bytes.count, sendMTU)
        let deadline = monotonicMillis() + timeoutMillis
        while true {
            if let sent = try L2CAPStream.io({ () throws(SystemError) in try SystemCall.nonBlocking("send") { send(fd, bytes.baseAddress, chunk, Int32(MSG_NOSIGNAL)) } }) {
                return sent
            }
            // No credits (or no room): wait for them, reading whatever the peer sends meanwhile.
            let left = deadline - monotonicMillis()
            if left <= 0 { throw .timeout }
            let events = Int16(POLLOUT) | (ended ? 0 : Int16(POLLIN))
            let came = try L2CAPStream.io { () throws(SystemError) in try SystemCall.poll(fd, events, timeoutMillis: left, "poll(send)") }
            if came == 0 { throw .timeout }
            if came & Int16(POLLIN) != 0 && !ended {
                while held.count - heldHead < L2CAPStream.maxHeldBytes {
                    let before = held.count - heldHead
                    guard try receiveOne() == .got else { break }
                    drainedWhileWriting += held.count - heldHead - before
                }
                if held.count - heldHead >= L2CAPStream.maxHeldBytes {
                    throw .failed("the peer sent \(L2CAPStream.maxHeldBytes >> 20) MB that waited unread while our writes got no credits")
                }
            }
        }
    }

    public func close() {
        guard !closed else { return }
        closed = true
        shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
    }
}

/// A listening L2CAP LE socket on a dynamic PSM (0x80–0xFF, chosen by the kernel).
public final class L2CAPListener: @unchecked Sendable {  // one listening socket
    private let fd: Int32
    public let psm: UInt16
    /// Why the kernel did not take our receive MTU (channels then use its default), or nil.
    public let mtuRefused: String?
    private var closed = false

    public init(receiveMTU: UInt16 = 4096) throws(StreamError) {
        let (fd, refused) = try L2CAPStream.boundSocket(receiveMTU: receiveMTU)
        mtuRefused = refused
        var bound = SockaddrL2()
        var len = SockaddrL2.length
        do {
            try SystemCall.run("listen(L2CAP)") { listen(fd, 8) }
            try SystemCall.run("getsockname(L2CAP)") { withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } } }
        } catch {
            Glibc.close(fd)
            throw .failed("cannot listen for L2CAP LE channels: \(error)")
        }
        self.fd = fd
        psm = bound.psm
    }

    /// The next channel, or nil after `timeoutMillis`.
    public func accept(timeoutMillis: Int) throws(StreamError) -> L2CAPStream? {
        guard !closed else { throw .closed }
        var remote = SockaddrL2()
        var len = SockaddrL2.length
        let taken: Int32?
        do { taken = try L2CAPListener.take(fd, &remote, &len, timeoutMillis: timeoutMillis) } catch { throw .failed("\(error)") }
        guard let c = taken else { return nil }
        let t = remote.address
        return L2CAPStream(fd: c, peer: BluetoothAddress(wire: [t.0, t.1, t.2, t.3, t.4, t.5], random: remote.addressType == BluetoothABI.addressLERandom))
    }

    /// The next channel's descriptor (non-blocking, close-on-exec), or nil if none came in time
    /// or it was gone again before we took it (EAGAIN, ECONNABORTED).
    private static func take(_ fd: Int32, _ remote: inout SockaddrL2, _ len: inout socklen_t, timeoutMillis: Int) throws(SystemError) -> Int32? {
        guard try SystemCall.poll(fd, Int16(POLLIN), timeoutMillis: timeoutMillis, "poll(L2CAP listener)") != 0 else { return nil }
        let c = withUnsafeMutablePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(fd, $0, &len) } }
        if c < 0 {
            let e = errno
            if e == EAGAIN || e == EWOULDBLOCK || e == ECONNABORTED || e == EINTR { return nil }
            throw SystemError(call: "accept(L2CAP)", code: e)
        }
        do { try SystemCall.setNonBlockingCloseOnExec(c, "L2CAP channel") } catch {
            Glibc.close(c)
            throw error
        }
        return c
    }

    public func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }
}
