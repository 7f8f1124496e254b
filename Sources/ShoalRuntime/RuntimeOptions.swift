import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalTLS
import ShoalYAML

/// What `shoal run` was told on its command line.
public struct RuntimeOptions: Sendable {
    public var board: String = "auto"
    public var configPath: String?
    public var dataDir: String?
    public var socketPath: String?
    public var logLevel: LogLevel?
    public var boardDirectories = BoardFiles.defaultDirectories
    public init() {}
}

/// The board and site a gateway runs with, loaded and checked.
public struct LoadedConfig: Sendable {
    public var board: BoardConfig
    public var site: SiteConfig
    public var storePath: String
    public var socketPath: String
    /// The site's trusted roots, parsed at load so a bad file stops the boot with a clear error.
    public var trustedRoots: [Certificate]
    public var allowedPeers: Set<PeerID>
    /// The site's `trust.adminKeys` and `trust.crlFiles`, parsed at load like the roots.
    public var adminKeys: [AdminPublicKey] = []
    /// The site's `updates.releaseKeys`, parsed at load.
    public var releaseKeys: [AdminPublicKey] = []
    public var revocationList: RevocationList?
    public var identityDirectory: String { Files.directory(of: storePath) + "/identities" }

    public init(board: BoardConfig, site: SiteConfig, storePath: String, socketPath: String, trustedRoots: [Certificate], allowedPeers: Set<PeerID>) {
        self.board = board
        self.site = site
        self.storePath = storePath
        self.socketPath = socketPath
        self.trustedRoots = trustedRoots
        self.allowedPeers = allowedPeers
    }
}

/// A configuration problem found before anything started (exit code 3).
public struct ConfigurationFailure: Error, CustomStringConvertible {
    public let message: String
    public init(message: String) { self.message = message }
    public var description: String { message }
}

/// A board named on the command line (`--board`, `board show NAME`) that no file is for (exit 4,
/// "not found"); a board file's own `extends:` that names nothing is a configuration error.
public struct BoardNotFound: Error, CustomStringConvertible {
    public let message: String
    public init(message: String) { self.message = message }
    public var description: String { message }
}

public enum ConfigurationLoading {
    public static let defaultSitePath = "/etc/shoal/shoal.yaml"

    public static func loader(directories: [String]) -> ConfigLoader {
        ConfigLoader(parse: YAMLParser.parse, source: BoardFiles(directories: directories))
    }

    /// Resolves `--board auto` and names, loads the site file, applies overrides and CLI flags.
    public static func load(_ options: RuntimeOptions, logger: Logger) throws -> LoadedConfig {
        let loader = loader(directories: options.boardDirectories)
        var boardName = options.board
        if boardName == "auto" {
            let model = HardwareProbe.deviceTreeModel()
            if let model, let match = loader.boardMatching(model: model) {
                logger.info(.board, "--board auto: \"\(model)\" matches board \(match)")
                boardName = match
            } else {
                logger.warning(.board, "--board auto: \(model.map { "no board file matches \"\($0)\"" } ?? "no /proc/device-tree/model") ; using generic-linux")
                boardName = "generic-linux"
            }
        }
        var board = try loadBoard(boardName, loader)
        guard board.support != .abstract else {
            throw ConfigurationFailure(message: "board \(board.id) is abstract (a base for other boards); choose one of: \(runnableBoards(loader).joined(separator: ", "))")
        }
        let site: SiteConfig
        if let path = options.configPath {
            guard let text = try Files.read(path) else { throw ConfigurationFailure(message: "\(path): no such file (given with --config)") }
            site = try loader.loadSite(text: text, file: path, checkFiles: referencedFileProblem)
        } else if let text = try Files.read(defaultSitePath) {
            site = try loader.loadSite(text: text, file: defaultSitePath, checkFiles: referencedFileProblem)
        } else {
            site = try loader.loadSite(text: SiteConfig.embeddedDefault, file: "<built-in site>")
        }
        board = try loader.applying(site, to: board)
        if let dir = options.dataDir { board.storagePath = dir }
        let storePath = board.storagePath + "/shoal.db"
        let socketPath = options.socketPath ?? (options.dataDir.map { $0 + "/control.sock" } ?? board.controlSocket)
        let roots = try trustedRoots(site)
        let allowed = Set(site.allowedPeers.compactMap(PeerID.init(hex:)))
        var loaded = LoadedConfig(board: board, site: site, storePath: storePath, socketPath: socketPath, trustedRoots: roots, allowedPeers: allowed)
        loaded.adminKeys = try adminKeys(site)
        loaded.releaseKeys = try releaseKeys(site)
        loaded.revocationList = try revocationList(site)
        return loaded
    }

    /// Loads a board named on the command line; one that does not exist is `BoardNotFound`: a
    /// path says "no such file", a name lists the known boards.
    public static func loadBoard(_ name: String, _ loader: ConfigLoader) throws -> BoardConfig {
        guard loader.source.boardFile(named: name, relativeTo: nil) != nil else {
            if BoardFiles.isPath(name) { throw BoardNotFound(message: "\(name): no such file") }
            throw BoardNotFound(message: "no board \"\(name)\" (known boards: \(loader.source.boardNames().joined(separator: ", ")); a file needs a / or .yaml)")
        }
        return try loader.loadBoard(name)
    }

    /// The certificates in the file the site's `authenticator.rootCertificates` names, read and
    /// parsed. A missing file, or one with no certificate in it (a key, garbage), is an error at
    /// that line of the site file, so `board check --config` and `shoal run` both name it.
    public static func trustedRoots(_ site: SiteConfig) throws(ConfigError) -> [Certificate] {
        guard let path = site.rootCertificatesPath else { return [] }
        let mark = site.rootCertificatesMark ?? SourceMark(file: site.source, line: 0, column: 0)
        let key = "authenticator.rootCertificates"
        let text: String?
        do { text = try Files.read(path) } catch {
            throw ConfigError(mark: mark, key: key, message: "\(path): cannot be read (\(error))")
        }
        guard let text else {
            throw ConfigError(mark: mark, key: key, message: "\(path): no such file (the PEM of the CA that signs your gateways)")
        }
        guard text.contains("-----BEGIN CERTIFICATE-----") else {
            throw ConfigError(mark: mark, key: key, message: "\(path): no certificate in it (expected PEM blocks \"-----BEGIN CERTIFICATE-----\"; a key or a CSR is not a root)")
        }
        do {
            let chain = try Certificate(parsing: Array(text.utf8))
            return try chain.chainDER.map { der throws in try Certificate(parsing: der) }
        } catch {
            throw ConfigError(mark: mark, key: key, message: "\(path): \(error)")
        }
    }

    /// The site's admin keys: each written as hex, or as the path of a PEM public key file.
    public static func adminKeys(_ site: SiteConfig) throws(ConfigError) -> [AdminPublicKey] {
        try publicKeys(site.trust.adminKeys, what: "an admin public key: the .pub file `shoal trust keygen` wrote")
    }

    /// The site's release keys (`updates.releaseKeys`), written as admin keys are.
    public static func releaseKeys(_ site: SiteConfig) throws(ConfigError) -> [AdminPublicKey] {
        try publicKeys(site.updates.releaseKeys, what: "a release public key: the .pub file `shoal release keygen` wrote")
    }

    static func publicKeys(_ items: [SiteConfig.TrustSettings.Item], what: String) throws(ConfigError) -> [AdminPublicKey] {
        var keys: [AdminPublicKey] = []
        var errors = ConfigErrors()
        for item in items {
            errors.attempt { () throws(ConfigError) in
                let looksHex = item.text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x41 && $0 <= 0x46) }
                do {
                    if looksHex {
                        keys.append(try AdminPublicKey(hex: item.text))
                    } else {
                        let text: String?
                        do { text = try Files.read(item.text) } catch { throw ConfigError(mark: item.mark, key: item.key, message: "\(item.text): cannot be read (\(error))") }
                        guard let text else { throw ConfigError(mark: item.mark, key: item.key, message: "\(item.text): no such file (\(what))") }
                        keys.append(try AdminPublicKey(parsing: Array(text.utf8)))
                    }
                } catch let e as ConfigError { throw e } catch {
                    throw ConfigError(mark: item.mark, key: item.key, message: "\(looksHex ? "the key" : item.text): \(error)")
                }
            }
        }
        try errors.check()
        return keys
    }

    /// Every CRL the site's `trust.crlFiles` names, in one list for the chain check.
    public static func revocationList(_ site: SiteConfig) throws(ConfigError) -> RevocationList? {
        guard !site.trust.crlFiles.isEmpty else { return nil }
        var all: [UInt8] = []
        for item in site.trust.crlFiles {
            let text: String?
            do { text = try Files.read(item.text) } catch { throw ConfigError(mark: item.mark, key: item.key, message: "\(item.text): cannot be read (\(error))") }
            guard let text else { throw ConfigError(mark: item.mark, key: item.key, message: "\(item.text): no such file (a CRL, as `shoal trust crl` writes)") }
            guard text.contains("-----BEGIN X509 CRL-----") else {
                throw ConfigError(mark: item.mark, key: item.key, message: "\(item.text): no CRL in it (expected PEM blocks \"-----BEGIN X509 CRL-----\")")
            }
            do { _ = try RevocationList(parsing: Array(text.utf8)) } catch { throw ConfigError(mark: item.mark, key: item.key, message: "\(item.text): \(error)") }
            all += Array(text.utf8) + [0x0A]
        }
        do { return try RevocationList(parsing: all) } catch { throw ConfigError(mark: site.trust.crlFiles[0].mark, key: "trust.crlFiles", message: "\(error)") }
    }

    /// The problems with the files the site names (trusted roots, the MQTT brokers' files), for
    /// `ConfigLoader.loadSite(checkFiles:)`.
    public static func referencedFileProblem(_ site: SiteConfig) -> ConfigError? {
        var errors = ConfigErrors()
        errors.attempt { () throws(ConfigError) in _ = try trustedRoots(site) }
        errors.attempt { () throws(ConfigError) in _ = try adminKeys(site) }
        errors.attempt { () throws(ConfigError) in _ = try releaseKeys(site) }
        errors.attempt { () throws(ConfigError) in _ = try revocationList(site) }
        if let e = site.mqtt.fileProblems(read: { path throws in try Files.read(path) }) { errors.add(e) }
        if let e = site.uplink.fileProblems(read: { path throws in try Files.read(path) }) { errors.add(e) }
        return errors.combined
    }

    public static func runnableBoards(_ loader: ConfigLoader) -> [String] {
        loader.source.boardNames().filter { (try? loader.loadBoard($0))?.support != .abstract }
    }
}
