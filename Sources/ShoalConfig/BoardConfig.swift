import ShoalCore

/// One hardware variant, after `extends:` was merged: what the board has and where things live.
/// Boards differ by data only; no code asks which board it runs on.
public struct BoardConfig: Sendable, Equatable {
    public enum Support: String, Sendable, CaseIterable {
        /// Tested on the hardware by us.
        case supported
        /// Expected to work; reports welcome.
        case community
        case experimental
        /// Runs without hardware (the `sim` board).
        case simulated
        /// A base that only other boards extend; `shoal run` refuses it.
        case abstract
    }

    public enum LEDDriver: String, Sendable, CaseIterable { case gpiod, sysfs, console, none }

    public struct LED: Sendable, Equatable {
        public var driver: LEDDriver = .none
        /// gpiod: the chip (`gpiochip4` or `/dev/gpiochip4`) and line offset.
        public var chip: String?
        public var line: Int64?
        public var activeLow = false
        /// sysfs: the LED's name under /sys/class/leds (`ACT`, `led0`).
        public var name: String?
    }

    public struct Console: Sendable, Equatable {
        /// A tty device (`/dev/serial0`), `stdout`, or `none`.
        public var device = "none"
        public var baud: Int64 = 115_200
        public var statusIntervalSeconds: Int64 = 60
    }

    /// The file's name without `.yaml`: what `--board` takes.
    public var id: String
    public var name: String
    public var support: Support
    /// A prefix of /proc/device-tree/model that identifies this board for `--board auto`.
    public var model: String?
    public var led = LED()
    public var console = Console()
    /// The Wi-Fi interface, or nil for none.
    public var wifiInterface: String?
    /// The Bluetooth adapter (`hci0`), or nil for none.
    public var bluetoothAdapter: String?
    public var storagePath: String
    public var durability: StorageDurability
    public var controlSocket: String
    public var mesh = MeshOptions()
    public var log = LogSettings()
    /// The files this board was merged from, base first.
    public var sources: [String] = []
}

/// Log levels: one for all domains, then per-domain overrides.
public struct LogSettings: Sendable, Equatable {
    public var level: LogLevel = .info
    public var domains: [LogDomain: LogLevel] = [:]
    public init() {}

    mutating func apply(_ reader: inout ConfigReader) throws(ConfigError) {
        if let text = try reader.string("level") {
            guard let l = LogLevel(name: text) else {
                throw ConfigError(mark: reader.mark(of: "level"), key: reader.keyPath("level"),
                                  message: "\"\(text)\" is not a level (debug, verbose, info, warning, error, none)")
            }
            level = l
        }
        if var d = try reader.mapping("domains") {
            for entry in d.node.entries ?? [] {
                guard let domain = LogDomain(rawValue: entry.key) else {
                    let names = LogDomain.allCases.map(\.rawValue).joined(separator: ", ")
                    throw ConfigError(mark: entry.keyMark, key: d.keyPath(entry.key), message: "unknown log domain (known: \(names))")
                }
                guard let text = try d.string(entry.key), let l = LogLevel(name: text) else {
                    throw ConfigError(mark: entry.value.mark, key: d.keyPath(entry.key),
                                      message: "not a level (debug, verbose, info, warning, error, none)")
                }
                domains[domain] = l
            }
            try d.finish()
        }
        try reader.finish()
    }
}

/// How hard the store works to keep an acknowledged write (`storage.durability`): `full` survives
/// power loss; `normal` is faster and may lose the last commits.
public enum StorageDurability: String, Sendable, Equatable, CaseIterable {
    case full, normal
}
