import Foundation
import ShoalCore
import ShoalLinux
import ShoalTLS
import ShoalTesting
import Synchronization
import Testing

/// Runs blocking work on a thread of its own (never the cooperative pool).
func onThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    let t = BlockingThread(name: name)
    defer { t.shutdown() }
    return try await t.run(body)
}

func selfSigned(_ cn: String) throws -> Identity { try Identity.createSelfSigned(.init(commonName: cn)) }

/// Handshakes a client and a server over an in-memory pipe, each on its own thread.
func handshake(client: TLSContext, server: TLSContext, saved: TLSSavedSession? = nil)
    async -> (client: Result<TLSSession, TLSError>, server: Result<TLSSession, TLSError>, pipe: (MemoryPipeEnd, MemoryPipeEnd))
{
    let (a, b) = MemoryPipe.pair()
    async let s: Result<TLSSession, TLSError> = (try? await onThread("server") { () -> Result<TLSSession, TLSError> in
        do { return .success(try TLSSession.accept(over: b, context: server)) } catch let e as TLSError { return .failure(e) }
    }) ?? .failure(.io("thread"))
    async let c: Result<TLSSession, TLSError> = (try? await onThread("client") { () -> Result<TLSSession, TLSError> in
        do { return .success(try TLSSession.connect(over: a, context: client, resuming: saved)) } catch let e as TLSError { return .failure(e) }
    }) ?? .failure(.io("thread"))
    return (await c, await s, (a, b))
}

func failure<T>(_ r: Result<T, TLSError>) -> TLSError? { if case .failure(let e) = r { return e }; return nil }

@Suite("Mutual TLS sessions")
struct TLSSessionTests {
    @Test("self-signed identities on each other's allow-list handshake both ways and agree on peer ids")
    func selfSignedBothWays() async throws {
        let alice = try selfSigned("alice"), bob = try selfSigned("bob")
        for (cid, sid) in [(alice, bob), (bob, alice)] {
            let client = try TLSContext(role: .client, identity: cid, authenticator: .trust(allowedPeers: [sid.peerID]))
            let server = try TLSContext(role: .server, identity: sid, authenticator: .trust(allowedPeers: [cid.peerID]))
            let r = await handshake(client: client, server: server)
            let c = try r.client.get(), s = try r.server.get()
            #expect(c.peerID == sid.peerID)
            #expect(s.peerID == cid.peerID)
            // Application data both ways.
            try await onThread("c") { try c.write(Array("ping".utf8), timeoutMillis: 2000) }
            let got = try await onThread("s") { () -> [UInt8] in
                var buf = [UInt8](repeating: 0, count: 16)
                let n = try buf.withUnsafeMutableBytes { try s.read(into: $0, timeoutMillis: 2000) }
                return Array(buf.prefix(n))
            }
            #expect(got == Array("ping".utf8))
            c.close()
            let eof = try await onThread("s") { () -> Int in
                var buf = [UInt8](repeating: 0, count: 16)
                return try buf.withUnsafeMutableBytes { try s.read(into: $0, timeoutMillis: 2000) }
            }
            #expect(eof == 0)  // close_notify reads as end of stream
        }
    }

    @Test("CA-signed identities handshake with the CA as root, both ways")
    func caSigned() async throws {
        let ca = try Identity.createCertificateAuthority(.init(commonName: "Fleet CA"))
        let a = try Identity.createSigned(.init(commonName: "gw-a"), caKey: ca.key, caCertificate: ca.certificate)
        let b = try Identity.createSigned(.init(commonName: "gw-b"), caKey: ca.key, caCertificate: ca.certificate)
        let auth = PeerAuthenticator.rootCertificates([ca.certificate])
        let r = await handshake(client: try TLSContext(role: .client, identity: a, authenticator: auth),
                                server: try TLSContext(role: .server, identity: b, authenticator: auth))
        #expect(try r.client.get().peerID == b.peerID)
        #expect(try r.server.get().peerID == a.peerID)
    }

    @Test("a callback authenticator sees the peer id and chain and decides")
    func callbackAuthenticator() async throws {
        let a = try selfSigned("a"), b = try selfSigned("b")
        let seen = Locked<[String]>([])
        let auth = PeerAuthenticator.callback { id, chain in
            seen.withLock { $0.append(id.description) }
            return chain.first?.subject == "CN=b, O=Shoal"
        }
        let r = await handshake(client: try TLSContext(role: .client, identity: a, authenticator: auth),
                                server: try TLSContext(role: .server, identity: b, authenticator: .callback { _, _ in false }))
        _ = try r.client.get()
        #expect(seen.withLock { $0 } == [b.peerID.description])
        #expect(failure(r.server) == .rejectedByAuthenticator(peer: a.peerID.description))
    }

    struct Refusal: Sendable, CustomStringConvertible {
        let name: String
        let make: @Sendable () throws -> (client: Identity, serverAuth: PeerAuthenticator, expected: (PeerID) -> TLSError)
        var description: String { name }
    }

    static let refusalCases: [Refusal] = [
        Refusal(name: "expired") {
            let ca = try Identity.createCertificateAuthority(.init(commonName: "CA"))
            let old = try Identity.createSigned(.init(commonName: "old", notBefore: Identity.now() - 10 * 86_400, validDays: 2), caKey: ca.key, caCertificate: ca.certificate)
            return (old, .rootCertificates([ca.certificate]), { .expired(peer: $0.description) })
        },
        Refusal(name: "not yet valid") {
            let future = try Identity.createSelfSigned(.init(commonName: "future", notBefore: Identity.now() + 5 * 86_400, validDays: 30))
            return (future, .trust(allowedPeers: [future.peerID]), { .notYetValid(peer: $0.description) })
        },
        Refusal(name: "signed by another CA") {
            let ours = try Identity.createCertificateAuthority(.init(commonName: "Our CA"))
            let theirs = try Identity.createCertificateAuthority(.init(commonName: "Their CA"))
            let stranger = try Identity.createSigned(.init(commonName: "stranger"), caKey: theirs.key, caCertificate: theirs.certificate)
            return (stranger, .rootCertificates([ours.certificate]), { .unknownCA(peer: $0.description) })
        },
        Refusal(name: "missing clientAuth") {
            var req = Identity.Request(commonName: "server-only")
            req.extendedKeyUsages = [.serverAuth]
            let id = try Identity.createSelfSigned(req)
            return (id, .trust(allowedPeers: [id.peerID]), { .wrongKeyUsage(peer: $0.description, missing: "clientAuth") })
        },
        Refusal(name: "missing serverAuth") {
            var req = Identity.Request(commonName: "client-only")
            req.extendedKeyUsages = [.clientAuth]
            let id = try Identity.createSelfSigned(req)
            return (id, .trust(allowedPeers: [id.peerID]), { .wrongKeyUsage(peer: $0.description, missing: "serverAuth") })
        },
        Refusal(name: "self-signed, not on the allow-list") {
            let id = try selfSigned("unlisted")
            return (id, .trust(allowedPeers: [try selfSigned("someone-else").peerID]), { .notInAllowList(peer: $0.description) })
        },
    ]

    @Test("a peer is refused with the right error, and no application data crosses", arguments: refusalCases)
    func refusedPeer(_ refusal: Refusal) async throws {
        let (clientID, serverAuth, expected) = try refusal.make()
        let server = try selfSigned("server")
        let client = try TLSContext(role: .client, identity: clientID, authenticator: .trust(allowedPeers: [server.peerID]))
        let serverContext = try TLSContext(role: .server, identity: server, authenticator: serverAuth)
        let r = await handshake(client: client, server: serverContext)
        #expect(failure(r.server) == expected(clientID.peerID))
        // The client's handshake finished before the server judged it; what it sends now is
        // never handed to the server's application (accept threw), and its next read fails.
        if case .success(let c) = r.client {
            _ = try? await onThread("c") { try c.write(Array("secret".utf8), timeoutMillis: 500) }
            let read = try await onThread("c") { () -> Int in
                var buf = [UInt8](repeating: 0, count: 16)
                return (try? buf.withUnsafeMutableBytes { try c.read(into: $0, timeoutMillis: 2000) }) ?? -1
            }
            #expect(read <= 0)
        }
    }

    @Test("the client refuses a server it does not trust, before sending anything")
    func clientRefusesServer() async throws {
        let client = try selfSigned("client"), server = try selfSigned("server")
        let r = await handshake(client: try TLSContext(role: .client, identity: client, authenticator: .trust(allowedPeers: [])),
                                server: try TLSContext(role: .server, identity: server, authenticator: .trust(allowedPeers: [client.peerID])))
        #expect(failure(r.client) == .notInAllowList(peer: server.peerID.description))
        if case .success(let s) = r.server {
            let read = try await onThread("s") { () -> Int in
                var buf = [UInt8](repeating: 0, count: 16)
                return (try? buf.withUnsafeMutableBytes { try s.read(into: $0, timeoutMillis: 2000) }) ?? -1
            }
            #expect(read <= 0)  // the server's application never sees a byte from the refusing client
        }
    }

    @Test("a peer that never answers times out; one that closes mid-handshake is reported as such")
    func silentAndClosingPeers() async throws {
        let id = try selfSigned("x")
        let client = try TLSContext(role: .client, identity: id, authenticator: .trust(allowedPeers: []), handshakeTimeoutMillis: 300)
        let (a, b) = MemoryPipe.pair()
        let silent = try await onThread("c") { () -> TLSError? in
            do { _ = try TLSSession.connect(over: a, context: client); return nil } catch let e as TLSError { return e }
        }
        #expect(silent == .timeout)
        _ = b

        let (c, d) = MemoryPipe.pair()
        // The closing peer starts on a thread of its own, right here: started from the cooperative
        // pool, a busy test run could start it after the client's 300 ms handshake timeout.
        DetachedThread.start(name: "closer") {
            var buf = [UInt8](repeating: 0, count: 64)
            _ = try? buf.withUnsafeMutableBytes { try d.read(into: $0, timeoutMillis: 2000) }  // part of the ClientHello
            d.close()
        }
        let closed = try await onThread("c") { () -> TLSError? in
            do { _ = try TLSSession.connect(over: c, context: client); return nil } catch let e as TLSError { return e }
        }
        #expect(closed == .closedDuringHandshake)
    }

    @Test("garbage instead of a handshake is a protocol error, never a crash", arguments: 0..<40)
    func garbageHandshake(_ seed: Int) async throws {
        let id = try selfSigned("s")
        let server = try TLSContext(role: .server, identity: id, authenticator: .trust(allowedPeers: []), handshakeTimeoutMillis: 500)
        var rng = SeededRandom(seed: UInt64(seed))
        var junk = (0..<Int.random(in: 1...3000, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
        if seed % 2 == 0 { junk.replaceSubrange(0..<min(3, junk.count), with: [0x16, 0x03, 0x03].prefix(junk.count)) }  // looks like a TLS record
        let (a, b) = MemoryPipe.pair()
        try a.writeAll(junk, timeoutMillis: 1000)
        a.close()
        let error = try await onThread("s") { () -> TLSError? in
            do { _ = try TLSSession.accept(over: b, context: server); return nil } catch let e as TLSError { return e }
        }
        #expect(error != nil)
    }

    @Test("a client resumes a saved session, and the peer is verified again")
    func resumption() async throws {
        let a = try selfSigned("a"), b = try selfSigned("b")
        let client = try TLSContext(role: .client, identity: a, authenticator: .trust(allowedPeers: [b.peerID]))
        let server = try TLSContext(role: .server, identity: b, authenticator: .trust(allowedPeers: [a.peerID]))
        let first = await handshake(client: client, server: server)
        let c1 = try first.client.get()
        #expect(!c1.resumed)
        let saved = try #require(c1.save())
        c1.close()
        let second = await handshake(client: client, server: server, saved: saved)
        let c2 = try second.client.get()
        #expect(c2.resumed)
        #expect(c2.peerID == b.peerID)
        #expect(try second.server.get().peerID == a.peerID)
    }
}

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
