import Foundation
import ShoalCore
import ShoalLinux
import Synchronization
import ShoalTesting
import Testing
import ShoalThreads

/// The network lab (../shared/LABS.md, part 1): gateways in network namespaces of their own, each
/// with its own D-Bus system bus and avahi-daemon, joined by veth links to a bridge in one more
/// namespace. Real mDNS, real TCP, real TLS; nothing multicasts in the host's namespace.
///
/// Namespaces are `<prefix>-br` (the bridge `br0`) and `<prefix>-g<i>`, whose veth is named
/// `wlan0` (the generic-linux board's Wi-Fi interface) with 10.77.0.<i>/24 and an IPv6 link-local
/// address.
///
/// A lab of several sites (`init(sites:)`, the NATS uplink's tests): one bridge per site, its own
/// layer 2 (each node's avahi-daemon sees its site only, so gateways of one group mesh within a
/// site and never across), site s (0-based) on the bridge namespace `<prefix>-br` (s = 0) or
/// `<prefix>-br<s+1>`, subnet 10.78.<s+1>.0/24 (clear of the single-site 10.77.0.x); nodes are
/// numbered across sites (g1–g3 at site 0, g4–g6 at site 1 for `sites: [3, 3]`), node i at
/// 10.78.<s+1>.<i>. `addHost` adds a namespace without avahi (a nats-server's) with a leg `eth<s>`
/// on each of the sites it names, at `.<octet>` of each site's subnet; it forwards nothing, so a
/// hub on the legs of both sites is reachable from each while the sites cannot reach each other.
/// `link(host, site:, up:)` cuts one leg (the hub's outage or a partition from it). Everything the lab starts it stops, and every namespace it made it deletes, in
/// `teardown()` (also run from `deinit`); a lab left behind by a killed test run is removed by the
/// next one (its prefix names a pid that is gone).
final class NetLab: @unchecked Sendable {
    /// Root, and the tools the lab runs.
    static var available: Bool {
        guard getuid() == 0 else { return false }
        return ["ip", "dbus-daemon", "avahi-daemon", "avahi-browse", "avahi-publish", "unshare"].allSatisfy { tool($0) != nil }
    }

    static func tool(_ name: String) -> String? {
        for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] where FileManager.default.isExecutableFile(atPath: "\(dir)/\(name)") {
            return "\(dir)/\(name)"
        }
        return nil
    }

    final class Node: @unchecked Sendable {
        let index: Int
        let ns: String
        let dir: String
        /// The site (bridge) it is on, and its IPv4 address there.
        let site: Int
        let address: String
        var dbus: ChildProcess?
        var avahi: ChildProcess?
        var gateway: LabGateway?
        var bus: String { "unix:path=\(dir)/bus.sock" }
        init(index: Int, ns: String, dir: String, site: Int = 0, address: String = "") {
            self.index = index
            self.ns = ns
            self.dir = dir
            self.site = site
            self.address = address
        }
    }

    /// A namespace without avahi or D-Bus (a nats-server's), with a leg `eth<s>` on each of its
    /// sites; `addresses[s]` is its IPv4 address at site s.
    final class Host: @unchecked Sendable {
        let name: String
        let ns: String
        let dir: String
        let addresses: [Int: String]
        init(name: String, ns: String, dir: String, addresses: [Int: String]) {
            self.name = name
            self.ns = ns
            self.dir = dir
            self.addresses = addresses
        }
    }

    let prefix: String
    let base: TemporaryDirectory
    /// Each site's subnet, its first three octets ("10.78.1").
    let subnets: [String]
    var nodes: [Node] = []
    var hosts: [Host] = []
    /// Whether nodes get a D-Bus bus and an avahi-daemon (false: static peers only, no DNS-SD).
    let avahi: Bool
    private var tornDown = false

    /// One site: `count` gateway nodes at 10.77.0.<i>; `avahi: false` starts no D-Bus or
    /// avahi-daemon in them (gateways link by static peers only).
    convenience init(nodes count: Int, avahi: Bool = true) throws {
        try self.init(sites: [count], subnets: ["10.77.0"], avahi: avahi)
    }

    /// One bridge per site, `sites[s]` gateway nodes on site s (numbered on across sites), at
    /// `subnets[s]`.<index> (default 10.78.<s+1>).
    init(sites: [Int], subnets: [String]? = nil, avahi: Bool = true) throws {
        NetLab.removeStale()
        prefix = "shl\(getpid())"
        base = TemporaryDirectory()
        self.avahi = avahi
        self.subnets = subnets ?? sites.indices.map { "10.78.\($0 + 1)" }
        do {
            var i = 0
            for (site, count) in sites.enumerated() {
                let br = bridgeNamespace(site)
                try NetLab.run(["ip", "netns", "add", br])
                try NetLab.run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
                try NetLab.run(["ip", "-n", br, "link", "set", "br0", "up"])
                for _ in 0..<count {
                    i += 1
                    try addNode(i, site: site)
                }
            }
        } catch {
            teardown()
            throw error
        }
    }

    deinit { teardown() }

    /// The namespace holding site `site`'s bridge `br0`.
    func bridgeNamespace(_ site: Int) -> String { site == 0 ? "\(prefix)-br" : "\(prefix)-br\(site + 1)" }

    /// The nodes at one site.
    func nodes(atSite site: Int) -> [Node] { nodes.filter { $0.site == site } }

    /// Adds a namespace `<prefix>-<name>` (name: up to 8 characters) with a leg `eth<s>` on each
    /// site in `sites`, at `<subnet of s>.<octet>`; loopback up. It routes nothing between its legs.
    @discardableResult
    func addHost(_ name: String, sites: [Int], octet: Int) throws -> Host {
        let ns = "\(prefix)-\(name)"
        var addresses: [Int: String] = [:]
        for s in sites { addresses[s] = "\(subnets[s]).\(octet)" }
        let host = Host(name: name, ns: ns, dir: base.path + "/\(name)", addresses: addresses)
        try FileManager.default.createDirectory(atPath: host.dir, withIntermediateDirectories: true)
        hosts.append(host)
        try NetLab.run(["ip", "netns", "add", ns])
        try NetLab.run(["ip", "-n", ns, "link", "set", "lo", "up"])
        for s in sites {
            let peer = "x\(name)\(s)"
            try NetLab.run(["ip", "link", "add", "eth\(s)", "netns", ns, "type", "veth", "peer", "name", peer, "netns", bridgeNamespace(s)])
            try NetLab.run(["ip", "-n", bridgeNamespace(s), "link", "set", peer, "master", "br0", "up"])
            try NetLab.run(["ip", "-n", ns, "addr", "add", "\(addresses[s]!)/24", "dev", "eth\(s)"])
            try NetLab.run(["ip", "-n", ns, "link", "set", "eth\(s)", "up"])
        }
        return host
    }

    /// Takes a host's leg on `site` down (the host unreachable from that site: TCP connections
    /// stall, no reset) or up again.
    func link(_ host: Host, site: Int, up: Bool) throws {
        try NetLab.run(["ip", "-n", host.ns, "link", "set", "eth\(site)", up ? "up" : "down"])
    }

    /// Runs a command in a namespace to completion; its exit status and output (never throws on
    /// a non-zero status).
    func exec(in ns: String, _ args: [String], timeout: Double = 30) -> (status: Int32, output: String) {
        do {
            return (0, try NetLab.run(["ip", "netns", "exec", ns] + args, timeout: timeout))
        } catch {
            return (1, "\(error)")
        }
    }

    /// True when a TCP connection from namespace `ns` to address:port is accepted within 3 s.
    func canConnect(from ns: String, to address: String, port: UInt16) -> Bool {
        exec(in: ns, ["python3", "-c", "import socket; socket.create_connection(('\(address)', \(port)), timeout=3).close()"], timeout: 10).status == 0
    }

    /// One more gateway node on `site` (numbered after the last), e.g. a gateway that arrives later.
    @discardableResult
    func addNode(site: Int = 0) throws -> Node {
        try addNode((nodes.map(\.index).max() ?? 0) + 1, site: site)
        return nodes[nodes.count - 1]
    }

    private func addNode(_ i: Int, site: Int = 0) throws {
        let ns = "\(prefix)-g\(i)", br = bridgeNamespace(site)
        let node = Node(index: i, ns: ns, dir: base.path + "/g\(i)", site: site, address: "\(subnets[site]).\(i)")
        try FileManager.default.createDirectory(atPath: node.dir, withIntermediateDirectories: true)
        nodes.append(node)
        try NetLab.run(["ip", "netns", "add", ns])
        try NetLab.run(["ip", "link", "add", "wlan0", "netns", ns, "type", "veth", "peer", "name", "p\(i)", "netns", br])
        try NetLab.run(["ip", "-n", br, "link", "set", "p\(i)", "master", "br0", "up"])
        try NetLab.run(["ip", "-n", ns, "addr", "add", "\(node.address)/24", "dev", "wlan0"])
        try NetLab.run(["ip", "-n", ns, "link", "set", "wlan0", "up"])
        try NetLab.run(["ip", "-n", ns, "link", "set", "lo", "up"])
        guard avahi else { return }
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>system</type>
          <listen>unix:path=\(node.dir)/bus.sock</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow user="*"/>
            <allow own="*"/>
            <allow send_type="method_call"/>
            <allow send_type="method_return"/>
            <allow send_type="signal"/>
            <allow send_type="error"/>
            <allow receive_type="method_call"/>
            <allow receive_type="method_return"/>
            <allow receive_type="signal"/>
            <allow receive_type="error"/>
          </policy>
          <includedir>/usr/share/dbus-1/system.d</includedir>
          <includedir>/etc/dbus-1/system.d</includedir>
        </busconfig>
        """.write(toFile: node.dir + "/bus.conf", atomically: true, encoding: .utf8)
        try """
        [server]
        host-name=\(ns)
        allow-interfaces=wlan0
        use-ipv4=yes
        use-ipv6=yes
        [wide-area]
        enable-wide-area=no
        [publish]
        publish-workstation=no
        publish-hinfo=no
        """.write(toFile: node.dir + "/avahi.conf", atomically: true, encoding: .utf8)
        node.dbus = try NetLab.spawn(["ip", "netns", "exec", ns, "dbus-daemon", "--config-file=\(node.dir)/bus.conf", "--nofork"],
                                     log: node.dir + "/dbus.log")
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: node.dir + "/bus.sock") && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        try startAvahi(node)
    }

    /// avahi-daemon in the node's namespace, on the node's bus, with its pid directory on a tmpfs
    /// of a mount namespace of its own (so several daemons do not see each other's pid file).
    func startAvahi(_ node: Node) throws {
        node.avahi = try NetLab.spawn(
            ["ip", "netns", "exec", node.ns, "env", "DBUS_SYSTEM_BUS_ADDRESS=\(node.bus)", "unshare", "-m", "sh", "-c",
             "mkdir -p /run/avahi-daemon && mount -t tmpfs tmpfs /run/avahi-daemon && exec avahi-daemon -f \(node.dir)/avahi.conf --no-drop-root --no-chroot"],
            log: node.dir + "/avahi.log")
    }

    func stopAvahi(_ node: Node) {
        node.avahi?.stop(signal: SIGTERM)
        node.avahi = nil
    }

    /// Takes a node's Wi-Fi link down (a partition) or up (healed).
    func link(_ node: Node, up: Bool) throws {
        try NetLab.run(["ip", "-n", node.ns, "link", "set", "wlan0", up ? "up" : "down"])
    }

    /// `avahi-browse -rpt TYPE` inside a node's namespace: the resolved lines (`=;…`).
    func browse(from node: Node, type: String) throws -> [String] {
        let out = try NetLab.run(["ip", "netns", "exec", node.ns, "env", "DBUS_SYSTEM_BUS_ADDRESS=\(node.bus)", "avahi-browse", "-rpt", type], timeout: 10)
        return out.split(separator: "\n").map(String.init).filter { $0.hasPrefix("=;") }
    }

    /// Starts `shoal run` on the generic-linux board in a node's namespace.
    @discardableResult
    func startGateway(_ node: Node, site: String, dataDir: String? = nil, board: String = "generic-linux") throws -> LabGateway {
        let g = try LabGateway(node: node, site: site, dataDir: dataDir ?? node.dir + "/data", board: board)
        node.gateway = g
        return g
    }

    func teardown() {
        guard !tornDown else { return }
        tornDown = true
        for n in nodes {
            n.gateway?.kill9()
            stopAvahi(n)
            n.dbus?.stop(signal: SIGTERM)
            n.dbus = nil
        }
        NetLab.deleteNamespaces(withPrefix: prefix + "-")
        base.remove()
    }

    /// Namespaces of labs whose test process is gone.
    static func removeStale() {
        guard let out = try? run(["ip", "netns", "list"]) else { return }
        var prefixes = Set<String>()
        for line in out.split(separator: "\n") {
            let name = String(line.split(separator: " ").first ?? "")
            guard name.hasPrefix("shl"), let dash = name.firstIndex(of: "-"), let pid = Int32(name[name.index(name.startIndex, offsetBy: 3)..<dash]) else { continue }
            if pid != getpid() && kill(pid, 0) != 0 { prefixes.insert(String(name[..<dash]) + "-") }
        }
        for p in prefixes { deleteNamespaces(withPrefix: p) }
    }

    static func deleteNamespaces(withPrefix prefix: String) {
        guard let out = try? run(["ip", "netns", "list"]) else { return }
        for line in out.split(separator: "\n") {
            let name = String(line.split(separator: " ").first ?? "")
            guard name.hasPrefix(prefix) else { continue }
            // Whatever still runs in it (a gateway, a daemon) goes first.
            if let pids = try? run(["ip", "netns", "pids", name]) {
                for p in pids.split(separator: "\n").compactMap({ Int32($0) }) { kill(p, SIGKILL) }
            }
            _ = try? run(["ip", "netns", "del", name])
        }
    }

    struct CommandFailed: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs a command to completion (killed after `timeout` s); its standard output. posix_spawn
    /// and waitpid (ChildProcess), output through a file: Foundation's Process lost track of
    /// children here once daemons were running.
    @discardableResult
    static func run(_ args: [String], timeout: Double = 30) throws -> String {
        let tmp = NSTemporaryDirectory() + "netlab-\(getpid())-\(UUID().uuidString.prefix(8)).out"
        defer { try? FileManager.default.removeItem(atPath: tmp) }
        let p = try ChildProcess(path: tool(args[0]) ?? args[0], arguments: Array(args.dropFirst()), output: tmp)
        let deadline = Date().addingTimeInterval(timeout)
        var status = p.exitStatus()
        while status == nil && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.005)
            status = p.exitStatus()
        }
        if status == nil {
            p.stop(signal: SIGKILL)
            status = 137
        }
        let o = (try? String(contentsOfFile: tmp, encoding: .utf8)) ?? ""
        guard status == 0 else { throw CommandFailed(description: "\(args.joined(separator: " ")): exit \(status ?? -1): \(o)") }
        return o
    }

    /// Starts a long-running command with its output (and errors) in a file.
    static func spawn(_ args: [String], log: String) throws -> ChildProcess {
        try ChildProcess(path: tool(args[0]) ?? args[0], arguments: Array(args.dropFirst()), output: log)
    }
}

/// `shoal run` inside a lab node (the process is `ip netns exec`, which becomes shoal: one pid).
final class LabGateway: @unchecked Sendable {
    let node: NetLab.Node
    let dataDir: String
    let site: String
    /// The board it runs (`generic-linux`: DNS-SD on wlan0; `sim`: static peers only).
    let board: String
    var process: ChildProcess?
    var socket: String { dataDir + "/control.sock" }
    var log: String { dataDir + "/../shoal-\(node.index).log" }

    init(node: NetLab.Node, site: String, dataDir: String, board: String = "generic-linux") throws {
        self.node = node
        self.site = site
        self.board = board
        self.dataDir = dataDir
        try FileManager.default.createDirectory(atPath: dataDir, withIntermediateDirectories: true)
        try start()
    }

    func start() throws {
        process = try NetLab.spawn(
            ["ip", "netns", "exec", node.ns, "env", "DBUS_SYSTEM_BUS_ADDRESS=\(node.bus)", LabGateway.binary, "run", "--board", board,
             "--data-dir", dataDir, "--config", site, "--log-level", "verbose"],
            log: dataDir + "/shoal.log")
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if FileManager.default.fileExists(atPath: socket), (try? Shoal.run(["status", "--socket", socket]).status) == 0 { return }
            guard isRunning else { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        Issue.record("gateway g\(node.index) did not come up: \((try? String(contentsOfFile: dataDir + "/shoal.log", encoding: .utf8)) ?? "")")
    }

    /// The shoal the gateways run: the test build's, or `SHOAL_LAB_BINARY` (e.g. dist/shoal, for
    /// the release build's figures).
    static let binary = ProcessInfo.processInfo.environment["SHOAL_LAB_BINARY"] ?? Shoal.binary

    var pid: Int32 { process?.pid ?? -1 }
    var isRunning: Bool { process?.exitStatus() == nil }

    func kill9() {
        process?.stop(signal: SIGKILL)
    }

    /// SIGTERM: a clean stop (the store is closed).
    func stop() {
        _ = process?.stop(signal: SIGTERM)
    }

    func cli(_ args: [String], stdin: String? = nil) throws -> Shoal.Result {
        try Shoal.run(args + ["--socket", socket], stdin: stdin)
    }

    func put(_ id: String, _ json: String, collection: String = "sensors.readings") -> Bool {
        (try? cli(["doc", "put", collection, id, json]).status) == 0
    }

    /// The body's compact text, or nil if the gateway does not have the document.
    func get(_ id: String, collection: String = "sensors.readings") -> String? {
        guard let r = try? cli(["doc", "get", collection, id]), r.status == 0 else { return nil }
        return r.stdout.filter { !$0.isWhitespace }
    }

    func status() -> [String: Any] {
        guard let r = try? cli(["status", "--json"]), r.status == 0 else { return [:] }
        return (try? Shoal.json(r)) as? [String: Any] ?? [:]
    }

    /// The gateway's log lines about links (for a failure's message): the last `count`.
    func linkLog(last count: Int = 60) -> String {
        let text = (try? String(contentsOfFile: dataDir + "/shoal.log", encoding: .utf8)) ?? ""
        let lines = text.split(separator: "\n").filter { $0.contains("link") || $0.contains("dial") || $0.contains("mesh") }
        return "g\(node.index)'s log about links:\n" + lines.suffix(count).joined(separator: "\n")
    }

    func counter(_ name: String) -> Int {
        ((status()["counters"] as? [String: Any])?[name] as? Int) ?? -1
    }

    func documentCount() -> Int {
        ((status()["store"] as? [String: Any])?["documents"] as? Int) ?? -1
    }

    /// The port and name DNS-SD publishes, from `shoal status`'s Wi-Fi line.
    func published() -> (name: String, port: Int)? {
        guard let wifi = (status()["transports"] as? [String: Any])?["wifi"] as? [String: Any],
              let d = wifi["discovery"] as? String,
              let q1 = d.range(of: "as \""), let q2 = d.range(of: "\" on port ", range: q1.upperBound..<d.endIndex) else { return nil }
        let name = String(d[q1.upperBound..<q2.lowerBound])
        let port = Int(d[q2.upperBound...].prefix { $0.isNumber }) ?? 0
        return (name, port)
    }

    /// CPU seconds used so far (user + system) and resident memory in kB, from /proc.
    func cpuAndRSS() -> (cpu: Double, rssKB: Int) {
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
        let ticks = fields.count > 13 ? (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0) : 0
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }.map { Int($0.split(separator: " ").dropFirst().first ?? "0") ?? 0 } ?? 0
        return (ticks / Double(sysconf(Int32(_SC_CLK_TCK))), rss)
    }
}

/// Seconds from now until each gateway holds document `id` (nil: not within `timeout`), each
/// polled by a thread of its own (resolution: one `shoal doc get`, ~10–40 ms).
func arrivalTimes(of id: String, on gateways: [LabGateway], timeout: Double, after write: () -> Bool) -> [Double?] {
    let times = Locked<[Double?]>(Array(repeating: nil, count: gateways.count))
    let started = Date()
    guard write() else { return times.withLock { $0 } }
    DispatchQueue.concurrentPerform(iterations: gateways.count) { i in
        while Date().timeIntervalSince(started) < timeout {
            if gateways[i].get(id) != nil {
                let t = Date().timeIntervalSince(started)
                times.withLock { $0[i] = t }
                return
            }
        }
    }
    return times.withLock { $0 }
}

