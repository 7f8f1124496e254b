import ShoalCore

/// Where board files come from: a directory on the gateway, the copies built into the binary.
/// A name may also be a path to a `.yaml` file; `extends:` resolves through the same source.
public protocol BoardSource: Sendable {
    /// The file for a board name (or a path), as (path shown in errors, text), or nil.
    func boardFile(named name: String, relativeTo: String?) -> (path: String, text: String)?
    /// Every board name this source knows.
    func boardNames() -> [String]
}

/// Loads and validates board and site files.
public struct ConfigLoader: Sendable {
    public let parse: ConfigParser
    public let source: any BoardSource
    public static let maxExtendsDepth = 8

    public init(parse: @escaping ConfigParser, source: any BoardSource) {
        self.parse = parse
        self.source = source
    }

    /// The merged tree of a board: its `extends:` chain, base first.
    public func boardTree(_ name: String) throws(ConfigError) -> (node: ConfigNode, sources: [String]) {
        var chain: [(path: String, node: ConfigNode)] = []
        var next: String? = name
        var from: String? = nil
        var fromMark = SourceMark(file: "--board", line: 0, column: 0)
        while let current = next {
            guard let file = source.boardFile(named: current, relativeTo: from) else {
                let known = source.boardNames().joined(separator: ", ")
                throw ConfigError(mark: fromMark, key: from == nil ? "" : "extends",
                                  message: "no board \"\(current)\" (known boards: \(known))")
            }
            if chain.contains(where: { $0.path == file.path }) {
                throw ConfigError(mark: fromMark, key: "extends", message: "extends loops back to \(file.path)")
            }
            guard chain.count < ConfigLoader.maxExtendsDepth else {
                throw ConfigError(mark: fromMark, key: "extends", message: "more than \(ConfigLoader.maxExtendsDepth) levels of extends")
            }
            let node = try parse(file.text, file.path)
            guard case .mapping(var entries) = node.value else {
                throw ConfigError(mark: node.mark, key: "", message: "a board file is a mapping of keys, found \(node.kindName)")
            }
            next = nil
            if let i = entries.firstIndex(where: { $0.key == "extends" }) {
                guard case .scalar(let parent, _) = entries[i].value.value, !parent.isEmpty else {
                    throw ConfigError(mark: entries[i].value.mark, key: "extends", message: "expected the name of a board file")
                }
                next = parent
                fromMark = entries[i].value.mark
                entries.remove(at: i)
            }
            from = file.path
            chain.append((file.path, ConfigNode(.mapping(entries), mark: node.mark)))
        }
        var merged = ConfigNode(.mapping([]), mark: chain[0].node.mark)
        for link in chain.reversed() { merged = merged.merged(with: link.node) }
        return (merged, chain.reversed().map(\.path))
    }

    /// Loads, merges and validates a board.
    public func loadBoard(_ name: String) throws(ConfigError) -> BoardConfig {
        let (node, sources) = try boardTree(name)
        var top = try ConfigReader(node, path: "")
        let id = ConfigLoader.boardID(fromPath: sources.last ?? name)

        guard var b = try top.mapping("board") else {
            throw ConfigError(mark: node.mark, key: "board", message: "is required (name, support, model)")
        }
        let boardName = try b.requiredString("name")
        let support = try b.choice("support", as: BoardConfig.Support.self) ?? .experimental
        let model = try b.string("model")
        try b.finish()

        var board = BoardConfig(id: id, name: boardName, support: support, model: model,
                                storagePath: "/var/lib/shoal", durability: .full, controlSocket: "/run/shoal/control.sock")
        board.sources = sources

        if var r = try top.mapping("led") {
            board.led.driver = try r.choice("driver", as: BoardConfig.LEDDriver.self) ?? .none
            board.led.chip = try r.string("chip")
            board.led.line = try r.int("line", in: 0...1023)
            board.led.activeLow = try r.bool("activeLow") ?? false
            board.led.name = try r.string("name")
            switch board.led.driver {
            case .gpiod:
                guard board.led.chip != nil, board.led.line != nil else {
                    throw ConfigError(mark: r.node.mark, key: "led", message: "the gpiod driver needs chip and line")
                }
            case .sysfs:
                guard let n = board.led.name, !n.isEmpty, !n.contains("/") else {
                    throw ConfigError(mark: r.node.mark, key: "led.name", message: "the sysfs driver needs the LED's name under /sys/class/leds (e.g. ACT)")
                }
            case .console, .none: break
            }
            try r.finish()
        }
        if var r = try top.mapping("console") {
            board.console.device = try r.string("device", default: "none")
            board.console.baud = try r.int("baud", in: 1200...4_000_000) ?? 115_200
            board.console.statusIntervalSeconds = try r.int("statusIntervalSeconds", in: 0...86_400) ?? 60
            let d = board.console.device
            guard d == "none" || d == "stdout" || d.hasPrefix("/") else {
                throw ConfigError(mark: r.mark(of: "device"), key: "console.device", message: "expected a device path (/dev/serial0), stdout or none")
            }
            guard ConfigLoader.standardBauds.contains(board.console.baud) else {
                throw ConfigError(mark: r.mark(of: "baud"), key: "console.baud", message: "\(board.console.baud) is not a standard baud rate")
            }
            try r.finish()
        }
        if var r = try top.mapping("wifi") {
            let i = try r.string("interface", default: "none")
            board.wifiInterface = i == "none" ? nil : i
            try r.finish()
        }
        if var r = try top.mapping("bluetooth") {
            let a = try r.string("adapter", default: "none")
            board.bluetoothAdapter = a == "none" ? nil : a
            try r.finish()
        }
        if var r = try top.mapping("storage") {
            board.storagePath = try r.requiredString("path")
            let d = try r.string("durability", default: "full")
            guard let durability = StorageDurability(rawValue: d) else {
                throw ConfigError(mark: r.mark(of: "durability"), key: "storage.durability", message: "\"\(d)\" is not one of: full, normal")
            }
            board.durability = durability
            try r.finish()
        }
        if var r = try top.mapping("control") {
            board.controlSocket = try r.requiredString("socket")
            try r.finish()
        }
        if var r = try top.mapping("mesh") { try board.mesh.apply(&r) }
        if var r = try top.mapping("log") { try board.log.apply(&r) }
        try top.finish()
        return board
    }

    static let standardBauds: Set<Int64> = [1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600, 1_000_000, 1_500_000, 2_000_000, 3_000_000, 4_000_000]

    /// `pi4b` from `/etc/shoal/boards/pi4b.yaml`.
    public static func boardID(fromPath path: String) -> String {
        var base = path.split(separator: "/").last.map(String.init) ?? path
        if base.hasSuffix(".yaml") { base.removeLast(5) } else if base.hasSuffix(".yml") { base.removeLast(4) }
        return base
    }

    /// Loads and validates a site file.
    public func loadSite(text: String, file: String) throws(ConfigError) -> SiteConfig {
        let node = try parse(text, file)
        var top = try ConfigReader(node, path: "")
        let group = try top.requiredString("group")
        guard group.utf8.count <= 255 else {
            throw ConfigError(mark: top.mark(of: "group"), key: "group", message: "a group id has at most 255 bytes")
        }
        var label = "shoal"
        var validDays: Int64 = 365
        if var r = try top.mapping("identity") {
            label = try r.string("label", default: "shoal")
            validDays = try r.int("validDays", in: 1...36_500) ?? 365
            guard !label.isEmpty, label.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }), !label.hasPrefix(".") else {
                throw ConfigError(mark: r.mark(of: "label"), key: "identity.label", message: "a label uses letters, digits, '-', '_' and '.' only")
            }
            try r.finish()
        }
        var collections: [SiteConfig.CollectionSettings] = []
        for (i, item) in (try top.sequence("collections") ?? []).enumerated() {
            var r = try ConfigReader(item, path: "collections[\(i)]")
            let text = try r.requiredString("name")
            let name: CollectionName
            do { name = try CollectionName(parsing: text) } catch {
                throw ConfigError(mark: r.mark(of: "name"), key: "collections[\(i)].name", message: error.reason)
            }
            guard !collections.contains(where: { $0.name == name }) else {
                throw ConfigError(mark: r.mark(of: "name"), key: "collections[\(i)].name", message: "\(name) is listed twice")
            }
            var c = SiteConfig.CollectionSettings(name: name)
            c.push = try r.bool("push") ?? true
            c.pull = try r.bool("pull") ?? true
            c.resolver = try r.resolverSpec("resolver") ?? .lastWriteWins
            if let ids = try r.stringList("documentIDs") {
                for (k, id) in ids.enumerated() where (try? DocumentID(id)) == nil {
                    throw ConfigError(mark: r.mark(of: "documentIDs"), key: "collections[\(i)].documentIDs[\(k)]", message: "\"\(id)\" is not a valid document id")
                }
                c.documentIDs = ids
            }
            c.pushFilter = try r.filterSpec("pushFilter")
            c.pullFilter = try r.filterSpec("pullFilter")
            try r.finish()
            collections.append(c)
        }
        if !collections.contains(where: { $0.name == .default }) {
            collections.insert(SiteConfig.CollectionSettings(name: .default), at: 0)
        }
        var rootsPath: String?
        var allowed: [String] = []
        if var r = try top.mapping("authenticator") {
            rootsPath = try r.string("rootCertificates")
            for (i, item) in (try r.sequence("allowedPeers") ?? []).enumerated() {
                guard case .scalar(let text, _) = item.value, text.count == 64, text.allSatisfy(\.isHexDigit) else {
                    throw ConfigError(mark: item.mark, key: "authenticator.allowedPeers[\(i)]",
                                      message: "a peer id is 64 hex digits (`shoal identity show` on that gateway prints it)")
                }
                allowed.append(text.lowercased())
            }
            try r.finish()
        }
        var listen: HostPort?
        var peers: [HostPort] = []
        if var r = try top.mapping("replication") {
            if let text = try r.string("listen"), text != "none" {
                guard let hp = HostPort(parsing: text) else {
                    throw ConfigError(mark: r.mark(of: "listen"), key: "replication.listen", message: "expected address:port (0.0.0.0:4984, [::]:4984) or none")
                }
                listen = hp
            }
            for (i, item) in (try r.sequence("peers") ?? []).enumerated() {
                guard case .scalar(let text, _) = item.value, let hp = HostPort(parsing: text), hp.port != 0 else {
                    throw ConfigError(mark: item.mark, key: "replication.peers[\(i)]", message: "expected address:port (192.168.1.20:4984, [fe80::2%eth0]:4984)")
                }
                peers.append(hp)
            }
            try r.finish()
        }
        var transports: [SiteTransport] = [.wifi]
        if let list = try top.sequence("transports") {
            transports = []
            for (i, item) in list.enumerated() {
                guard case .scalar(let text, _) = item.value, let transport = SiteTransport(rawValue: text) else {
                    throw ConfigError(mark: item.mark, key: "transports[\(i)]", message: "expected wifi or bluetooth")
                }
                if !transports.contains(transport) { transports.append(transport) }
            }
            guard !transports.isEmpty else {
                throw ConfigError(mark: top.mark(of: "transports"), key: "transports", message: "name at least one transport: [wifi], [bluetooth] or [wifi, bluetooth]")
            }
        }
        let mesh = top.raw("mesh")
        let log = top.raw("log")
        try top.finish()
        var site = SiteConfig(group: group, identityLabel: label, collections: collections, rootCertificatesPath: rootsPath,
                              allowedPeers: allowed, listenAddress: listen, staticPeers: peers, identityValidDays: validDays,
                              meshNode: mesh, logNode: log, source: file)
        site.transports = transports
        // Validate the overrides now, so a bad site file fails at load, not at first use.
        _ = try applying(site, to: BoardConfig(id: "check", name: "check", support: .simulated, storagePath: "/", durability: .full, controlSocket: "/"))
        site.source = file
        return site
    }

    /// The board with the site's mesh and log overrides applied.
    public func applying(_ site: SiteConfig, to board: BoardConfig) throws(ConfigError) -> BoardConfig {
        var b = board
        if let m = site.meshNode {
            var r = try ConfigReader(m, path: "mesh")
            try b.mesh.apply(&r)
        }
        if let l = site.logNode {
            var r = try ConfigReader(l, path: "log")
            try b.log.apply(&r)
        }
        return b
    }

    /// The board whose `model` is a prefix of the device-tree model string (longest match wins).
    public func boardMatching(model: String) -> String? {
        let trimmed = model.trimmingNULs
        var best: (id: String, length: Int)?
        for name in source.boardNames() {
            guard let board = try? loadBoard(name), board.support != .abstract, let m = board.model, !m.isEmpty else { continue }
            if trimmed.hasPrefix(m), m.count > (best?.length ?? 0) { best = (name, m.count) }
        }
        return best?.id
    }
}

extension String {
    /// /proc/device-tree/model ends with a NUL byte.
    var trimmingNULs: String {
        var s = self
        while let last = s.last, last == "\0" || last == "\n" { s.removeLast() }
        return s
    }
}
