import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime

/// `shoal bench mqtt`: the MQTT bridge of a real `shoal run` child (sim board, a fresh data
/// directory) against a real mosquitto started for each part on a free loopback port with a
/// config of its own. Three figures, each beside a baseline taken in the same run:
///
/// - sustained ingest: a paho-mqtt publisher (Tests/MQTT/bench_publish.py) sends N messages at
///   QoS 1, each on its own topic `bench/<i>/state`, as fast as the broker takes them (100 in
///   flight); the gateway's inbound rule `bench/+n/state` makes each a document (replace, id
///   `{n}`). Rate = N / (first publish → all N committed, read from the control socket every
///   50 ms), for durability full and normal; baseline: the same publisher into `mosquitto_sub -q 1`
///   (first publish → its N-th message), before and after the gateways' runs, the faster counts;
/// - publish rate of changes: M documents written through the control socket (`doc.putMany`, as
///   `shoal doc import` does), an outbound rule on their collection; rate = M / (first write →
///   `mosquitto_sub -q 1` has all M);
/// - RSS under a burst: the gateway's VmRSS every 50 ms while 100,000 messages arrive as fast as
///   the publisher can send them.
///
/// What a reader would get wrong: the publisher, the broker, the subscriber and the gateway share
/// the machine's cores (two on the CI machine), and the Python publisher is often the slowest
/// part: the publisher's own rate (its PUBACKs) is printed beside each ingest figure, so a gateway
/// that keeps up with it shows as ratio ~1 against the publisher, not as a ceiling of its own.
public enum MQTTBenchmark {
    public struct Settings: Sendable {
        /// Messages per ingest run (`--docs`).
        public var messages = 50_000
        /// Documents written for the outbound figure (`--changes`).
        public var changes = 20_000
        /// Messages in the burst (`--burst`).
        public var burst = 100_000
        /// The publisher script; nil: looked for beside the executable's checkout and in the
        /// working directory (`publisherCandidates`).
        public var publisherScript: String?
        /// A run that makes no progress for this long ends, with what it has (a figure marked
        /// incomplete).
        public var stallSeconds = 30
        public init() {}
    }

    /// One ingest run: `messages` sent, `received` of them arrived (committed, for the gateway)
    /// `seconds` after the first publish.
    public struct Ingest: Sendable {
        public var messages: Int
        public var received: Int64
        public var seconds: Double
        /// The publisher's own rate: its messages over first publish → last PUBACK.
        public var publisherRate: Double
        /// CPU seconds (user + system) each part spent over the run: where the cores went.
        public var cpu: [(part: String, seconds: Double)] = []
        public var complete: Bool { received >= Int64(messages) }
        public var rate: Double { Double(received) / max(0.000_001, seconds) }
    }

    public struct Outbound: Sendable {
        public var changes: Int
        public var received: Int64
        /// First write → `mosquitto_sub` has all (or the stall).
        public var seconds: Double
        /// How long the writes themselves took (20 `doc.putMany` of 1,000).
        public var writeSeconds: Double
        public var complete: Bool { received >= Int64(changes) }
        public var rate: Double { Double(received) / max(0.000_001, seconds) }
    }

    public struct Burst: Sendable {
        public var messages: Int
        public var committed: Int64
        public var seconds: Double
        public var rssBeforeKB: Int
        public var rssPeakKB: Int
        public var rssAfterKB: Int
        public var samples: Int
        public var publisherRate: Double
        public var peakIncreaseKB: Int { rssPeakKB - rssBeforeKB }
    }

    public struct Result: Sendable {
        public var settings: Settings
        /// Why figures were skipped (a tool missing), one line each.
        public var skipped: [String] = []
        /// The baseline, taken before and after the gateways' ingest runs (the machine's load
        /// drifts); the ratios use the faster of the two.
        public var baselineRuns: [Ingest] = []
        public var baseline: Ingest? { baselineRuns.max { $0.rate < $1.rate } }
        public var full: Ingest?
        public var normal: Ingest?
        public var outbound: Outbound?
        public var burst: Burst?
        public var mosquittoVersion = "?"
    }

    /// The external programs, nil where missing (`missing` says what to install).
    struct Tools {
        var mosquitto: String?
        var mosquittoSub: String?
        var python: String?
        var script: String?
        /// Why the publisher cannot run, if it cannot.
        var publisherProblem: String?

        var publisher: Bool { publisherProblem == nil }
    }

    static let inCollection = "bench.state"
    static let outCollection = "bench.changes"

    /// Runs every figure it has the tools for; `progress` hears a line as each part starts.
    public static func run(directory: String, settings: Settings = Settings(), progress: (String) -> Void = { _ in }) throws -> Result {
        var result = Result(settings: settings)
        let tools = findTools(settings)
        guard let mosquitto = tools.mosquitto else {
            result.skipped.append("mosquitto is not installed (apt-get install mosquitto): every MQTT figure is skipped")
            return result
        }
        result.mosquittoVersion = Broker.version(mosquitto)
        if let problem = tools.publisherProblem {
            result.skipped.append("\(problem): the ingest and burst figures are skipped")
        }
        if tools.mosquittoSub == nil {
            result.skipped.append("mosquitto_sub is not installed (apt-get install mosquitto-clients): the baseline and the publish-rate figure are skipped")
        }
        try Files.makeDirectories(directory)
        if tools.publisher, let sub = tools.mosquittoSub {
            progress("baseline: the publisher, \(settings.messages) messages at QoS 1, into mosquitto_sub -q 1")
            result.baselineRuns.append(try baselineIngest(directory: directory + "/baseline-1", mosquitto: mosquitto, sub: sub, tools: tools, settings: settings))
        }
        for durability in ["full", "normal"] where tools.publisher || (durability == "full" && tools.mosquittoSub != nil) {
            let dir = directory + "/gateway-\(durability)"
            let broker = try Broker(directory: dir + "/broker", mosquitto: mosquitto)
            defer { broker.stop() }
            let gateway = try Gateway(directory: dir, durability: durability, broker: broker)
            defer { gateway.stop() }
            if tools.publisher {
                progress("gateway, durability \(durability): the publisher, \(settings.messages) messages at QoS 1 → bench/+n/state → \(inCollection)")
                let ingest = try gatewayIngest(gateway, broker: broker, tools: tools, settings: settings)
                if durability == "full" { result.full = ingest } else { result.normal = ingest }
            }
            if durability == "full", let sub = tools.mosquittoSub {
                progress("gateway, durability full: \(settings.changes) documents written through the control socket → outbound rule → mosquitto_sub -q 1")
                result.outbound = try outbound(gateway, broker: broker, sub: sub, settings: settings)
            }
        }
        if tools.publisher, let sub = tools.mosquittoSub {
            progress("baseline again: the publisher, \(settings.messages) messages at QoS 1, into mosquitto_sub -q 1")
            result.baselineRuns.append(try baselineIngest(directory: directory + "/baseline-2", mosquitto: mosquitto, sub: sub, tools: tools, settings: settings))
        }
        if tools.publisher {
            progress("RSS: a fresh gateway (durability full), \(settings.burst) messages as fast as the publisher sends them, VmRSS every 50 ms")
            let dir = directory + "/burst"
            let broker = try Broker(directory: dir + "/broker", mosquitto: mosquitto)
            defer { broker.stop() }
            let gateway = try Gateway(directory: dir, durability: "full", broker: broker)
            defer { gateway.stop() }
            result.burst = try burst(gateway, broker: broker, tools: tools, settings: settings)
        }
        return result
    }

    /// Where the publisher script may be: `Tests/MQTT/bench_publish.py` in the checkout the
    /// executable was built in (.build/<triple>/release/shoal, dist/shoal), then in the working
    /// directory.
    static func publisherCandidates() -> [String] {
        var dir = Files.directory(of: ChildProcess.currentExecutable)
        var candidates: [String] = []
        for _ in 0..<4 {
            candidates.append(dir + "/Tests/MQTT/bench_publish.py")
            dir = Files.directory(of: dir)
        }
        candidates.append(Files.absolute("Tests/MQTT/bench_publish.py"))
        return candidates
    }

    static func findTools(_ settings: Settings) -> Tools {
        var t = Tools()
        t.mosquitto = ChildProcess.find("mosquitto") ?? (Files.exists("/usr/sbin/mosquitto") ? "/usr/sbin/mosquitto" : nil)
        t.mosquittoSub = ChildProcess.find("mosquitto_sub")
        t.python = ChildProcess.find("python3")
        t.script = settings.publisherScript ?? publisherCandidates().first { Files.exists($0) }
        if t.python == nil {
            t.publisherProblem = "python3 is not installed (apt-get install python3)"
        } else if let script = settings.publisherScript, !Files.exists(script) {
            t.publisherProblem = "the publisher script \(script) (--publisher) does not exist"
        } else if t.script == nil {
            t.publisherProblem = "the publisher script Tests/MQTT/bench_publish.py is not found (looked in \(publisherCandidates().joined(separator: ", "))); run from the checkout or pass --publisher PATH"
        } else if let python = t.python {
            let check = try? ChildProcess(path: python, arguments: ["-c", "import paho.mqtt.client, paho.mqtt.enums"])
            if check?.wait() != 0 { t.publisherProblem = "paho-mqtt 2.x is not installed for \(python) (pip install paho-mqtt)" }
        }
        return t
    }

    /// CPU time (user + system, seconds) of a process, or of those of its threads named `thread`.
    static func cpuSeconds(_ pid: pid_t, thread: String? = nil) -> Double {
        func ticks(_ path: String) -> (name: Substring, ticks: Int)? {
            guard let stat = try? Files.read(path), let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")") else { return nil }
            // After the name: state (field 3) … utime (14), stime (15).
            let f = stat[stat.index(after: close)...].split(separator: " ")
            guard f.count > 12, let user = Int(f[11]), let system = Int(f[12]) else { return nil }
            return (stat[stat.index(after: open)..<close], user + system)
        }
        let hz = Double(max(1, sysconf(Int32(_SC_CLK_TCK))))
        guard let thread else { return Double(ticks("/proc/\(pid)/stat")?.ticks ?? 0) / hz }
        var total = 0
        for task in Files.list("/proc/\(pid)/task") {
            if let t = ticks("/proc/\(pid)/task/\(task)/stat"), t.name == thread { total += t.ticks }
        }
        return Double(total) / hz
    }

    /// CLOCK_MONOTONIC in nanoseconds: the clock the publisher script reports in.
    static func monotonicNanos() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}
