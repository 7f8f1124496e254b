/// The ObjectBox seed's mesh options, with its names and defaults. The board file may override
/// them, the site file overrides the board. Zero means "does not stop by time" for the discovery
/// durations, as in the seed. The mesh manager (a later issue) reads them; they are validated here.
public struct MeshOptions: Sendable, Equatable {
    public var maxConnectionCount: Int64 = 3
    public var backoffMillis: Int64 = 10_000
    public var evictionBackoffMillis: Int64 = 30_000
    /// 0 seeds from the current time.
    public var randomSeed: Int64 = 0
    public var requestTimeoutMillis: Int64 = 5_000
    public var advertisingDelayMillis: Int64 = 2_000
    public var advertisingRetryMillis: Int64 = 5_000
    public var advertisingRetryMaxMillis: Int64 = 60_000
    public var connectDelayMillis: Int64 = 1_000
    public var initialDiscoveryDurationSeconds: Int64 = 30
    public var discoveryDurationSeconds: Int64 = 15
    public var discoveryPauseSeconds: Int64 = 45
    public var discoveryPauseJitterSeconds: Int64 = 15
    public var txLogBatchSizeKb: Int64 = 100
    public var txLogBatchMaxCount: Int64 = 1_000
    public var txLogMaxAgeSeconds: Int64 = 28_800

    public init() {}

    static let day: Int64 = 86_400
    /// Each option's key and allowed range. Ranges keep a typo from becoming a radio storm.
    static var fields: [(key: String, range: ClosedRange<Int64>, path: WritableKeyPath<MeshOptions, Int64>)] { [
        ("maxConnectionCount", 1...16, \.maxConnectionCount),
        ("backoffMillis", 0...3_600_000, \.backoffMillis),
        ("evictionBackoffMillis", 0...3_600_000, \.evictionBackoffMillis),
        ("randomSeed", Int64.min...Int64.max, \.randomSeed),
        ("requestTimeoutMillis", 1...3_600_000, \.requestTimeoutMillis),
        ("advertisingDelayMillis", 0...3_600_000, \.advertisingDelayMillis),
        ("advertisingRetryMillis", 1...3_600_000, \.advertisingRetryMillis),
        ("advertisingRetryMaxMillis", 1...86_400_000, \.advertisingRetryMaxMillis),
        ("connectDelayMillis", 0...3_600_000, \.connectDelayMillis),
        ("initialDiscoveryDurationSeconds", 0...day, \.initialDiscoveryDurationSeconds),
        ("discoveryDurationSeconds", 0...day, \.discoveryDurationSeconds),
        ("discoveryPauseSeconds", 0...day, \.discoveryPauseSeconds),
        ("discoveryPauseJitterSeconds", 0...day, \.discoveryPauseJitterSeconds),
        ("txLogBatchSizeKb", 1...16_384, \.txLogBatchSizeKb),
        ("txLogBatchMaxCount", 1...100_000, \.txLogBatchMaxCount),
        ("txLogMaxAgeSeconds", 60...(365 * day), \.txLogMaxAgeSeconds),
    ] }

    /// Applies the keys present in a `mesh:` mapping over these options.
    public mutating func apply(_ reader: inout ConfigReader) throws(ConfigError) {
        var errors = ConfigErrors()
        for field in MeshOptions.fields {
            errors.attempt { () throws(ConfigError) in
                if let v = try reader.int(field.key, in: field.range) { self[keyPath: field.path] = v }
            }
        }
        errors.attempt { () throws(ConfigError) in try reader.finish() }
        try errors.check()
        if let (key, message) = crossProblem() {
            throw ConfigError(mark: reader.mark(of: key), key: reader.keyPath(key), message: message)
        }
    }

    /// What no single range can say: an option that must not pass another. nil when consistent.
    func crossProblem() -> (key: String, message: String)? {
        if advertisingRetryMaxMillis < advertisingRetryMillis {
            return ("advertisingRetryMaxMillis", "must be at least advertisingRetryMillis (\(advertisingRetryMillis))")
        }
        if discoveryPauseJitterSeconds > discoveryPauseSeconds {
            return ("discoveryPauseJitterSeconds", "must not exceed discoveryPauseSeconds (\(discoveryPauseSeconds)): a pause cannot be negative")
        }
        return nil
    }

    /// The checks a board or site file gets (every range, then the options that must not pass
    /// each other), for options set in code (`import Shoal`): the first problem as the option's key
    /// and the files' message, or nil.
    public func problem() -> (key: String, message: String)? {
        for field in MeshOptions.fields {
            let v = self[keyPath: field.path]
            if !field.range.contains(v) { return (field.key, ConfigReader.outOfRange(v, field.range)) }
        }
        return crossProblem()
    }

    /// Every option as (name, value), in the seed's order.
    public var all: [(String, Int64)] { MeshOptions.fields.map { ($0.key, self[keyPath: $0.path]) } }
}
