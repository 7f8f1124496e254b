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
                let isPath = current.contains("/") || current.hasSuffix(".yaml") || current.hasSuffix(".yml")
                throw ConfigError(mark: fromMark, key: from == nil ? "" : "extends",
                                  message: isPath ? "\(current): no such file" : "no board \"\(current)\" (known boards: \(known))")
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

    /// Loads, merges and validates a board. Every section is read, so one error does not hide the
    /// next: the error thrown carries all of them (see `ConfigError.also`).
    public func loadBoard(_ name: String) throws(ConfigError) -> BoardConfig {
        let (node, sources) = try boardTree(name)
        var top = try ConfigReader(node, path: "")
        let id = ConfigLoader.boardID(fromPath: sources.last ?? name)
        var errors = ConfigErrors()
        var board = BoardConfig(id: id, name: id, support: .experimental, model: nil,
                                storagePath: "/var/lib/shoal", durability: .full, controlSocket: "/run/shoal/control.sock")
        board.sources = sources
        errors.attempt { () throws(ConfigError) in
            guard var b = try top.mapping("board") else {
                throw ConfigError(mark: node.mark, key: "board", message: "is required (name, support, model)")
            }
            // Every board file names itself: a name inherited through extends would call a Pi 5 "Shoal base".
            var inner = ConfigErrors()
            if sources.count > 1, let own = b.node.entries?.first(where: { $0.key == "name" }), let leaf = sources.last, own.keyMark.file != leaf {
                inner.add(ConfigError(mark: node.mark, key: "board.name",
                                      message: "is required in every board file, not inherited (\(own.keyMark.file) names itself \"\(ConfigLoader.describe(own.value))\")"))
            }
            inner.attempt { () throws(ConfigError) in board.name = try b.requiredString("name") }
            inner.attempt { () throws(ConfigError) in board.support = try b.choice("support", as: BoardConfig.Support.self) ?? .experimental }
            inner.attempt { () throws(ConfigError) in board.model = try b.string("model") }
            inner.attempt { () throws(ConfigError) in try b.finish() }
            try inner.check()
        }
        errors.attempt { () throws(ConfigError) in try ConfigLoader.readLED(&top, into: &board) }
        errors.attempt { () throws(ConfigError) in try ConfigLoader.readConsole(&top, into: &board) }
        errors.attempt { () throws(ConfigError) in
            if var r = try top.mapping("wifi") {
                let i = try r.string("interface", default: "none")
                board.wifiInterface = i == "none" ? nil : i
                try r.finish()
            }
        }
        errors.attempt { () throws(ConfigError) in
            if var r = try top.mapping("bluetooth") {
                let a = try r.string("adapter", default: "none")
                board.bluetoothAdapter = a == "none" ? nil : a
                try r.finish()
            }
        }
        errors.attempt { () throws(ConfigError) in
            if var r = try top.mapping("storage") {
                board.storagePath = try r.requiredString("path")
                let d = try r.string("durability", default: "full")
                guard let durability = StorageDurability(rawValue: d) else {
                    throw ConfigError(mark: r.mark(of: "durability"), key: "storage.durability", message: "\"\(d)\" is not one of: full, normal")
                }
                board.durability = durability
                try r.finish()
            }
        }
        errors.attempt { () throws(ConfigError) in
            if var r = try top.mapping("control") {
                board.controlSocket = try r.requiredString("socket")
                try r.finish()
            }
        }
        errors.attempt { () throws(ConfigError) in if var r = try top.mapping("mesh") { try board.mesh.apply(&r) } }
        errors.attempt { () throws(ConfigError) in if var r = try top.mapping("log") { try board.log.apply(&r) } }
        errors.attempt { () throws(ConfigError) in try top.finish() }
        try errors.check()
        return board
    }

    static func describe(_ node: ConfigNode) -> String {
        if case .scalar(let text, _) = node.value { return text }
        return node.kindName
    }

    static func readLED(_ top: inout ConfigReader, into board: inout BoardConfig) throws(ConfigError) {
        guard var r = try top.mapping("led") else { return }
        var errors = ConfigErrors()
        errors.attempt { () throws(ConfigError) in board.led.driver = try r.choice("driver", as: BoardConfig.LEDDriver.self) ?? .none }
        errors.attempt { () throws(ConfigError) in board.led.chip = try r.string("chip") }
        errors.attempt { () throws(ConfigError) in board.led.line = try r.int("line", in: 0...1023) }
        errors.attempt { () throws(ConfigError) in board.led.activeLow = try r.bool("activeLow") ?? false }
        errors.attempt { () throws(ConfigError) in board.led.name = try r.string("name") }
        if errors.isEmpty {
            switch board.led.driver {
            case .gpiod:
                if board.led.chip == nil || board.led.line == nil {
                    errors.add(ConfigError(mark: r.node.mark, key: "led", message: "the gpiod driver needs chip and line"))
                }
            case .sysfs:
                if board.led.name.map({ $0.isEmpty || $0.contains("/") }) ?? true {
                    errors.add(ConfigError(mark: r.node.mark, key: "led.name", message: "the sysfs driver needs the LED's name under /sys/class/leds (e.g. ACT)"))
                }
            case .console, .none: break
            }
        }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
    }

    static func readConsole(_ top: inout ConfigReader, into board: inout BoardConfig) throws(ConfigError) {
        guard var r = try top.mapping("console") else { return }
        var errors = ConfigErrors()
        errors.attempt { () throws(ConfigError) in
            let d = try r.string("device", default: "none")
            guard d == "none" || d == "stdout" || d.hasPrefix("/") else {
                throw ConfigError(mark: r.mark(of: "device"), key: "console.device", message: "expected a device path (/dev/serial0), stdout or none")
            }
            board.console.device = d
        }
        errors.attempt { () throws(ConfigError) in
            let baud = try r.int("baud", in: 1200...4_000_000) ?? 115_200
            guard ConfigLoader.standardBauds.contains(baud) else {
                throw ConfigError(mark: r.mark(of: "baud"), key: "console.baud", message: "\(baud) is not a standard baud rate")
            }
            board.console.baud = baud
        }
        errors.attempt { () throws(ConfigError) in board.console.statusIntervalSeconds = try r.int("statusIntervalSeconds", in: 0...86_400) ?? 60 }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
    }

    static let standardBauds: Set<Int64> = [1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600, 1_000_000, 1_500_000, 2_000_000, 3_000_000, 4_000_000]

    /// `pi4b` from `/etc/shoal/boards/pi4b.yaml`.
    public static func boardID(fromPath path: String) -> String {
        var base = path.split(separator: "/").last.map(String.init) ?? path
        if base.hasSuffix(".yaml") { base.removeLast(5) } else if base.hasSuffix(".yml") { base.removeLast(4) }
        return base
    }

    /// Loads and validates a site file, reading it to its end: the error thrown carries every
    /// mistake found (see `ConfigError.also`). Files it names are checked by the runtime, which
    /// reads them (`rootCertificatesMark` says where).
    /// `checkFiles` looks at the files the site names (the runtime reads them; this module reads
    /// no file), so their errors are reported with the rest.
    public func loadSite(text: String, file: String, checkFiles: ((SiteConfig) -> ConfigError?)? = nil) throws(ConfigError) -> SiteConfig {
        let node = try parse(text, file)
        var top = try ConfigReader(node, path: "")
        var errors = ConfigErrors()
        var site = SiteConfig(group: "", identityLabel: "shoal", collections: [], source: file)
        errors.attempt { () throws(ConfigError) in
            let group = try top.requiredString("group")
            guard group.utf8.count <= 255 else {
                throw ConfigError(mark: top.mark(of: "group"), key: "group", message: "a group id has at most 255 bytes")
            }
            site.group = group
        }
        errors.attempt { () throws(ConfigError) in
            guard var r = try top.mapping("identity") else { return }
            var inner = ConfigErrors()
            inner.attempt { () throws(ConfigError) in
                let label = try r.string("label", default: "shoal")
                guard !label.isEmpty, label.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }), !label.hasPrefix(".") else {
                    throw ConfigError(mark: r.mark(of: "label"), key: "identity.label", message: "a label uses letters, digits, '-', '_' and '.' only")
                }
                site.identityLabel = label
            }
            inner.attempt { () throws(ConfigError) in site.identityValidDays = try r.int("validDays", in: 1...36_500) ?? 365 }
            inner.attempt { () throws(ConfigError) in try r.finish() }
            try inner.check()
        }
        errors.attempt { () throws(ConfigError) in
            var inner = ConfigErrors()
            for (i, item) in (try top.sequence("collections") ?? []).enumerated() {
                inner.attempt { () throws(ConfigError) in
                    let c = try ConfigLoader.collection(item, index: i)
                    guard !site.collections.contains(where: { $0.name == c.name }) else {
                        throw ConfigError(mark: item["name"]?.mark ?? item.mark, key: "collections[\(i)].name", message: "\(c.name) is listed twice")
                    }
                    site.collections.append(c)
                }
            }
            try inner.check()
        }
        if !site.collections.contains(where: { $0.name == .default }) {
            site.collections.insert(SiteConfig.CollectionSettings(name: .default), at: 0)
        }
        errors.attempt { () throws(ConfigError) in
            guard var r = try top.mapping("authenticator") else { return }
            var inner = ConfigErrors()
            inner.attempt { () throws(ConfigError) in
                site.rootCertificatesPath = try r.string("rootCertificates")
                if site.rootCertificatesPath != nil { site.rootCertificatesMark = r.mark(of: "rootCertificates") }
            }
            inner.attempt { () throws(ConfigError) in
                var bad = ConfigErrors()
                for (i, item) in (try r.sequence("allowedPeers") ?? []).enumerated() {
                    guard case .scalar(let text, _) = item.value, text.count == 64, text.allSatisfy(\.isHexDigit) else {
                        bad.add(ConfigError(mark: item.mark, key: "authenticator.allowedPeers[\(i)]",
                                              message: "a peer id is 64 hex digits (`shoal identity show` on that gateway prints it)"))
                        continue
                    }
                    site.allowedPeers.append(text.lowercased())
                }
                try bad.check()
            }
            inner.attempt { () throws(ConfigError) in try r.finish() }
            try inner.check()
        }
        errors.attempt { () throws(ConfigError) in
            guard var r = try top.mapping("trust") else { return }
            var inner = ConfigErrors()
            for (list, what) in [("adminKeys", "an admin public key: the hex `shoal trust keygen` printed, or the path of its PEM file"),
                                 ("crlFiles", "the path of a CRL file (PEM or DER; `shoal trust crl` writes one)")] {
                inner.attempt { () throws(ConfigError) in
                    var bad = ConfigErrors()
                    for (i, item) in (try r.sequence(list) ?? []).enumerated() {
                        guard case .scalar(let text, _) = item.value, !text.isEmpty else {
                            bad.add(ConfigError(mark: item.mark, key: "trust.\(list)[\(i)]", message: "expected \(what)"))
                            continue
                        }
                        let entry = SiteConfig.TrustSettings.Item(text: text, mark: item.mark, key: "trust.\(list)[\(i)]")
                        if list == "adminKeys" { site.trust.adminKeys.append(entry) } else { site.trust.crlFiles.append(entry) }
                    }
                    try bad.check()
                }
            }
            inner.attempt { () throws(ConfigError) in site.trust.warnDays = try r.int("warnDays", in: 0...365) ?? 14 }
            inner.attempt { () throws(ConfigError) in try r.finish() }
            try inner.check()
        }
        errors.attempt { () throws(ConfigError) in
            guard var r = try top.mapping("updates") else { return }
            site.updates = try ConfigLoader.updates(&r)
        }
        errors.attempt { () throws(ConfigError) in
            guard var r = try top.mapping("replication") else { return }
            var inner = ConfigErrors()
            inner.attempt { () throws(ConfigError) in
                if let text = try r.string("listen"), text != "none" {
                    guard let hp = HostPort(parsing: text), !hp.isName else {
                        throw ConfigError(mark: r.mark(of: "listen"), key: "replication.listen", message: "expected a numeric address:port (0.0.0.0:4984, [::]:4984) or none")
                    }
                    site.listenAddress = hp
                }
            }
            inner.attempt { () throws(ConfigError) in
                var bad = ConfigErrors()
                for (i, item) in (try r.sequence("peers") ?? []).enumerated() {
                    guard case .scalar(let text, _) = item.value, let hp = HostPort(parsing: text), hp.port != 0 else {
                        bad.add(ConfigError(mark: item.mark, key: "replication.peers[\(i)]",
                                              message: "expected host:port (192.168.1.20:4984, gw2.local:4984, [fe80::2%eth0]:4984)"))
                        continue
                    }
                    site.staticPeers.append(hp)
                }
                try bad.check()
            }
            inner.attempt { () throws(ConfigError) in try r.finish() }
            try inner.check()
        }
        errors.attempt { () throws(ConfigError) in
            guard let list = try top.sequence("transports") else { return }
            var transports: [SiteTransport] = []
            for (i, item) in list.enumerated() {
                guard case .scalar(let text, _) = item.value, let transport = SiteTransport(rawValue: text) else {
                    throw ConfigError(mark: item.mark, key: "transports[\(i)]", message: "expected wifi or bluetooth")
                }
                if !transports.contains(transport) { transports.append(transport) }
            }
            guard !transports.isEmpty else {
                throw ConfigError(mark: top.mark(of: "transports"), key: "transports", message: "name at least one transport: [wifi], [bluetooth] or [wifi, bluetooth]")
            }
            site.transports = transports
        }
        errors.attempt { () throws(ConfigError) in
            guard var r = try top.mapping("storage") else { return }
            var inner = ConfigErrors()
            inner.attempt { () throws(ConfigError) in site.blobBudgetBytes = try r.byteSize("blobBudget") }
            inner.attempt { () throws(ConfigError) in
                guard let n = try r.byteSize("maxBlobSize") else { return }
                guard n <= BlobReference.maxLength else {
                    throw ConfigError(mark: r.mark(of: "maxBlobSize"), key: "storage.maxBlobSize", message: "at most 4GB (Shoal's largest blob)")
                }
                site.maxBlobBytes = n
            }
            inner.attempt { () throws(ConfigError) in try r.finish() }
            try inner.check()
        }
        errors.attempt { () throws(ConfigError) in
            guard var r = try top.mapping("http") else { return }
            try site.http.apply(&r)
        }
        errors.attempt { () throws(ConfigError) in
            guard var r = try top.mapping("mqtt") else { return }
            try site.mqtt.apply(&r, collections: site.collections.map(\.name))
        }
        errors.attempt { () throws(ConfigError) in
            guard var r = try top.mapping("uplink") else { return }
            try site.uplink.apply(&r, collections: site.collections.map(\.name))
        }
        site.meshNode = top.raw("mesh")
        site.logNode = top.raw("log")
        errors.attempt { () throws(ConfigError) in try top.finish() }
        // Validate the overrides now, so a bad site file fails at load, not at first use.
        if let m = site.meshNode {
            errors.attempt { () throws(ConfigError) in
                var r = try ConfigReader(m, path: "mesh")
                var mesh = MeshOptions()
                try mesh.apply(&r)
            }
        }
        if let l = site.logNode {
            errors.attempt { () throws(ConfigError) in
                var r = try ConfigReader(l, path: "log")
                var log = LogSettings()
                try log.apply(&r)
            }
        }
        if let checkFiles, let e = checkFiles(site) { errors.add(e) }
        try errors.check()
        return site
    }

    /// One entry of `collections:`.
    static func collection(_ item: ConfigNode, index i: Int) throws(ConfigError) -> SiteConfig.CollectionSettings {
        var r = try ConfigReader(item, path: "collections[\(i)]")
        let text = try r.requiredString("name")
        let name: CollectionName
        do { name = try CollectionName(parsing: text) } catch {
            throw ConfigError(mark: r.mark(of: "name"), key: "collections[\(i)].name", message: error.reason)
        }
        var c = SiteConfig.CollectionSettings(name: name)
        var errors = ConfigErrors()
        errors.attempt { () throws(ConfigError) in c.push = try r.bool("push") ?? true }
        errors.attempt { () throws(ConfigError) in c.pull = try r.bool("pull") ?? true }
        errors.attempt { () throws(ConfigError) in c.resolver = try r.resolverSpec("resolver") ?? .fieldMerge }
        errors.attempt { () throws(ConfigError) in
            if let ids = try r.stringList("documentIDs") {
                for (k, id) in ids.enumerated() where (try? DocumentID(id)) == nil {
                    throw ConfigError(mark: r.mark(of: "documentIDs"), key: "collections[\(i)].documentIDs[\(k)]", message: "\"\(id)\" is not a valid document id")
                }
                c.documentIDs = ids
            }
        }
        errors.attempt { () throws(ConfigError) in c.pushFilter = try r.filterSpec("pushFilter") }
        errors.attempt { () throws(ConfigError) in c.pullFilter = try r.filterSpec("pullFilter") }
        errors.attempt { () throws(ConfigError) in c.ttlSeconds = try r.durationSeconds("ttl") }
        errors.attempt { () throws(ConfigError) in c.maxDocuments = try r.int("maxDocuments", in: 1...1_000_000_000_000) }
        errors.attempt { () throws(ConfigError) in c.maxBytes = try r.byteSize("maxBytes") }
        errors.attempt { () throws(ConfigError) in c.indexes = try r.indexList("indexes") ?? [] }
        errors.attempt { () throws(ConfigError) in
            guard let text = try r.string("blobs") else { return }
            guard let fetch = BlobFetch(rawValue: text) else {
                throw ConfigError(mark: r.mark(of: "blobs"), key: "collections[\(i)].blobs", message: "\"\(text)\" is not one of: eager, onDemand")
            }
            c.blobs = fetch
        }
        errors.attempt { () throws(ConfigError) in try r.finish() }
        try errors.check()
        return c
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

extension ConfigLoader {
    /// `updates: { releaseKeys: [...], installDir: /var/lib/shoal/updates, confirmSeconds: 120, holdOffSeconds: 300, enabled: true }`.
    static func updates(_ r: inout ConfigReader) throws(ConfigError) -> SiteConfig.UpdateSettings {
        var u = SiteConfig.UpdateSettings()
        var inner = ConfigErrors()
        inner.attempt { () throws(ConfigError) in
            var bad = ConfigErrors()
            for (i, item) in (try r.sequence("releaseKeys") ?? []).enumerated() {
                guard case .scalar(let text, _) = item.value, !text.isEmpty else {
                    bad.add(ConfigError(mark: item.mark, key: "updates.releaseKeys[\(i)]",
                                        message: "expected a release public key: the hex `shoal release keygen` printed, or the path of its PEM file"))
                    continue
                }
                u.releaseKeys.append(SiteConfig.TrustSettings.Item(text: text, mark: item.mark, key: "updates.releaseKeys[\(i)]"))
            }
            try bad.check()
        }
        inner.attempt { () throws(ConfigError) in
            if let dir = try r.string("installDir") {
                guard dir.hasPrefix("/"), dir.count > 1, !dir.split(separator: "/").contains("..") else {
                    throw ConfigError(mark: r.mark(of: "installDir"), key: "updates.installDir", message: "an absolute directory without '..' (/var/lib/shoal/updates)")
                }
                u.installDir = dir.hasSuffix("/") ? String(dir.dropLast()) : dir
            }
        }
        inner.attempt { () throws(ConfigError) in u.confirmSeconds = try r.int("confirmSeconds", in: 10...3600) ?? 120 }
        inner.attempt { () throws(ConfigError) in u.holdOffSeconds = try r.int("holdOffSeconds", in: 0...86_400) ?? 300 }
        inner.attempt { () throws(ConfigError) in u.enabled = try r.bool("enabled") ?? !u.releaseKeys.isEmpty }
        inner.attempt { () throws(ConfigError) in
            if u.enabled && u.releaseKeys.isEmpty {
                throw ConfigError(mark: r.mark(of: "enabled"), key: "updates.enabled", message: "updates need at least one release key (updates.releaseKeys) to check releases with")
            }
        }
        inner.attempt { () throws(ConfigError) in try r.finish() }
        try inner.check()
        return u
    }
}
