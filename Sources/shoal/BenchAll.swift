import Glibc
import ShoalBench
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalSim
import ShoalStore
import ShoalTLS

/// `shoal bench` (or `shoal bench all`): every figure the proof asks for, each beside a baseline
/// measured in the same run, then one table. Figures, not pass/fail: the ratios are what compare
/// across machines.
extension CLI {
    struct BenchRow {
        var figure: String
        var shoal: String
        var baseline: String
        var ratio: Double?
        var goal: String
    }

    static func benchAll(_ a: Arguments) throws -> Int32 {
        var rows: [BenchRow] = []
        let quiet = Logger(sink: MemoryLogSink(), level: .none)
        var template = Array("\(a.values["--dir"] ?? "/tmp")/shoal-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw UsageError(command: "bench", message: "cannot create a directory") }
        let dir = String(cString: made)
        defer { _ = system("rm -rf '\(dir)'") }
        let started = ContinuousClock.now

        out("1/12 store writes: 20,000 × ~1 KB documents in batches of 100, durability full, 3 rounds, against a bare SQLite C-API loop")
        let store = try StoreBenchmark.run(directory: dir, documents: 20_000, batch: 100, durability: .full, rounds: 3, logger: quiet)
        rows.append(BenchRow(figure: "store writes (docs/s)", shoal: fmt(store.storeMedian), baseline: "\(fmt(store.baselineMedian)) bare SQLite",
                             ratio: store.ratio, goal: ">= 0.90"))

        out("2/12 TLS bulk: 32 MiB × 3 rounds through Shoal's TLS session against bare mbedtls_ssl_write/read on the same sessions")
        let tls = try TLSBenchmark.run(handshakes: 50, megabytes: 32, rounds: 3)
        rows.append(BenchRow(figure: "TLS bulk (MB/s)", shoal: fmt(TLSBenchmark.median(tls.sessionMBps)),
                             baseline: "\(fmt(TLSBenchmark.median(tls.baselineMBps))) bare mbedTLS", ratio: tls.ratio, goal: ">= 0.80"))
        rows.append(BenchRow(figure: "TLS full handshake (ms CPU, both sides)", shoal: fmt2(tls.fullHandshakeCPUMillis),
                             baseline: "\(fmt2(tls.resumedHandshakeCPUMillis)) resumed", ratio: nil, goal: "<= 10 per side"))

        let port = UInt16(try a.int("--port", command: "bench", default: 47_911, range: 1024...65_535))
        out("3/12 replication: initial pull of 10,000 × ~1 KB documents from a second process over TLS on 127.0.0.1:\(port), 3 rounds")
        let pull = try ReplicationBenchmark.run(documents: 10_000, rounds: 3, directory: dir + "/pull", port: port, durability: .full)
        rows.append(BenchRow(figure: "2-process pull, 10,000 × 1 KB (docs/s)", shoal: fmt(pull.median),
                             baseline: "\(fmt(store.baselineMedian)) bare SQLite writes", ratio: pull.median / store.baselineMedian, goal: ">= 0.70"))
        rows.append(BenchRow(figure: "  frame bytes per pulled document", shoal: fmt(pull.wireBytesPerDocument),
                             baseline: "\(pull.bodyBytes) body", ratio: pull.wireBytesPerDocument / Double(pull.bodyBytes), goal: "<= 1.10"))

        out("4/12 latency: 1,000 and 10,000 × ~1 KB documents imported into a gateway (control socket) until its peer (this process, over TLS) holds them all, 3 rounds each")
        let latency = try LatencyBenchmark.run(sizes: [1_000, 10_000], rounds: 3, directory: dir + "/latency", port: port &+ 2) { _ in }
        for (size, samples) in latency.bySize {
            let imp = LatencyBenchmark.median(samples.map(\.importMillis)), arr = LatencyBenchmark.median(samples.map(\.arrivalMillis))
            if size <= 1_000 {
                rows.append(BenchRow(figure: "\(size) imported → all on the peer, after the import (ms)", shoal: fmt(arr - imp),
                                     baseline: "\(fmt(imp)) import", ratio: nil, goal: "<= 50"))
            } else {
                rows.append(BenchRow(figure: "\(size) imported → all on the peer (ms)", shoal: fmt(arr), baseline: "\(fmt(imp)) import",
                                     ratio: arr / imp, goal: "<= 1.30"))
            }
        }

        out("5/12 SD-card profile (+20 ms per sync, 2 s stalls): store writes and group commit through it, a 10,000-document pull into it, status during 20 stalls")
        if SlowStorage.profile != nil {
            out("    skipped: --storage already puts every store of this run through a profile")
            rows.append(BenchRow(figure: "SD-card profile", shoal: "skipped", baseline: "-", ratio: nil, goal: "(run without --storage)"))
        } else {
            for sub in ["/storage", "/stall"] { try Files.makeDirectories(dir + sub) }
            let storage = try StorageBenchmark.run(directory: dir + "/storage", profile: .sdCard, samples: 200, logger: quiet)
            rows.append(BenchRow(figure: "SD card: store writes, batches of 100 (docs/s)", shoal: fmt(storage.storeProfile),
                                 baseline: "\(fmt(storage.baselineProfile)) bare SQLite", ratio: storage.storeProfile / storage.baselineProfile, goal: ">= 0.90"))
            rows.append(BenchRow(figure: "SD card: 8 writers, group commit (writes/s)", shoal: fmt(storage.grouped.rate),
                                 baseline: "\(fmt(storage.alone.rate)) a commit each", ratio: storage.grouped.rate / storage.alone.rate, goal: "-"))
            try SlowStorage.install(.sdCard)
            let slowPull: ReplicationBenchmark.Result
            do {
                defer { SlowStorage.uninstall() }
                slowPull = try ReplicationBenchmark.run(documents: 10_000, rounds: 1, directory: dir + "/pull-sd", port: port &+ 4, durability: .full)
            }
            rows.append(BenchRow(figure: "SD card: pull, 10,000 × 1 KB, full (docs/s)", shoal: fmt(slowPull.median),
                                 baseline: "\(fmt(pull.median)) on the disk", ratio: slowPull.median / pull.median, goal: ">= 5,000/s"))
            // In a process of its own: its gateway runs in-process and is left running at the end.
            let log = dir + "/stall.log"
            let child = try ChildProcess(path: ChildProcess.currentExecutable, arguments: ["bench", "stall", "--samples", "20", "--dir", dir + "/stall"], output: log)
            let status = child.wait()
            // "slowest status per stall    median X ms, worst Y ms over N stalls"
            let line = ((try? Files.read(log)) ?? nil)?.split(separator: "\n").first { $0.contains("slowest status per stall") }
            let numbers = line.map { l in l.split(whereSeparator: { $0 == " " || $0 == "," }).compactMap { Double($0) } } ?? []
            if status == 0, numbers.count >= 3 {
                rows.append(BenchRow(figure: "SD card: slowest status per 2 s stall (ms)", shoal: fmt2(numbers[1]),
                                     baseline: "\(fmt2(numbers[0])) median of \(Int(numbers[2]))", ratio: nil, goal: "<= 100"))
            } else {
                out("    the stall benchmark failed (exit \(status)); its output: \(log)")
                rows.append(BenchRow(figure: "SD card: status during stalls", shoal: "failed", baseline: "-", ratio: nil, goal: "<= 100"))
            }
        }

        out("6/12 instructions per replicated 1 KB document on each side (valgrind's callgrind; pulls of 1,000 and 5,000)")
        let benchGateway = Files.directory(of: ChildProcess.currentExecutable) + "/shoal-bench-gateway"
        if !Files.exists(benchGateway) {
            out("    skipped: \(benchGateway) is missing (make bench copies it beside dist/shoal)")
            rows.append(BenchRow(figure: "instructions per document", shoal: "skipped", baseline: "-", ratio: nil, goal: "(no shoal-bench-gateway)"))
        } else if Files.exists(InstructionBenchmark.valgrind) {
            let ins = try InstructionBenchmark.run(directory: dir + "/instructions", small: 1_000, large: 5_000, port: port &+ 6) { _ in }
            // What 79f1b51 (before this issue's second session) counted, handshakes left out: a
            // fixed reference, since instruction counts do not change from run to run.
            for (side, figure, before) in [("pusher", ins.pusher, 94_578.0), ("puller", ins.puller, 214_407.0)] {
                let split = ["TLS", "SQLite", "Swift runtime, libc"].map { "\($0) \(fmt(figure.perDocument[$0] ?? 0))" }.joined(separator: ", ")
                rows.append(BenchRow(figure: "instructions per doc, \(side) (\(split))", shoal: fmt(figure.total),
                                     baseline: "\(fmt(before)) at 79f1b51", ratio: figure.total / before, goal: "<= 0.50"))
            }
        } else {
            out("    skipped: \(InstructionBenchmark.valgrind) is not installed (make bench-instructions installs valgrind)")
            rows.append(BenchRow(figure: "instructions per document", shoal: "skipped", baseline: "-", ratio: nil, goal: "(no valgrind)"))
        }

        out("7/12 simulator: 100 writes of 1 KB on a 10-node full mesh (bytes sent against one body per node), and one write across a 20-node line")
        var traffic = SimScenario()
        traffic.config.nodes = 10
        traffic.writes = 100
        traffic.editTenths = 0
        traffic.deleteTenths = 0
        traffic.seconds = 120
        traffic.config.directory = dir
        let t = try traffic.run()
        let perDoc = Double(t.bytesDuringWrites) / Double(max(1, traffic.writes * (traffic.config.nodes - 1)))
        rows.append(BenchRow(figure: "bytes per replicated doc, 10-node sim", shoal: fmt(perDoc),
                             baseline: "\(fmt(Double(t.idealBytes) / Double(max(1, traffic.writes * (traffic.config.nodes - 1))))) ideal",
                             ratio: t.bytesRatio, goal: "<= 1.50"))
        var line = SimScenario()
        line.config.nodes = 20
        line.config.topology = .line
        line.probeLatency = true
        line.writes = 0
        line.seconds = 60
        line.config.directory = dir
        let l = try line.run()
        if let probe = l.probeMillis, let bound = l.probePathLatencyMillis, bound > 0 {
            rows.append(BenchRow(figure: "a write across a 20-node line (ms, virtual)", shoal: "\(probe)",
                                 baseline: "\(bound) hop bound (\(l.probeHops ?? 0) hops)", ratio: Double(probe) / Double(bound), goal: "<= 2.00"))
        } else {
            rows.append(BenchRow(figure: "a write across a 20-node line", shoal: "did not arrive", baseline: "-", ratio: nil, goal: "<= 2.00"))
        }

        out("8/12 memory: a gateway (sim board) idle, then holding 100,000 documents")
        let (idle, loaded) = try benchRSS(dir: dir + "/rss")
        rows.append(BenchRow(figure: "RSS with 100,000 documents (MB)", shoal: fmt2(Double(loaded) / 1024),
                             baseline: "\(fmt2(Double(idle) / 1024)) idle", ratio: Double(loaded) / Double(max(1, idle)), goal: "<= 3.00"))

        out("9/12 HTTP API: wrk GET and PUT against the control socket, 5 s each; SSE write → event; RSS of 100 SSE clients")
        var httpSettings = HTTPBenchmark.Settings()
        httpSettings.secondsPerLoad = 5
        let http = try HTTPBenchmark.run(directory: dir + "/http", settings: httpSettings) { out("    " + $0) }
        rows += httpRows(http)

        out("10/12 MQTT bridge: a paho publisher at QoS 1 into the gateway (durability full and normal) against the same into mosquitto_sub; changes out; RSS under a burst")
        let mqtt = try MQTTBenchmark.run(directory: dir + "/mqtt", settings: try mqttSettings(a)) { out("    " + $0) }
        for skipped in mqtt.skipped { out("    skipped: " + skipped) }
        rows += mqttRows(mqtt)

        out("11/12 NATS JetStream uplink: 10,000 × 1 KB documents from gateway A through a nats-server of its own to gateway B, against a raw acknowledged publish loop")
        if Files.exists(UplinkBenchmark.Settings().server) {
            let uplink = try UplinkBenchmark.run(directory: dir + "/uplink") { out("    " + $0) }
            rows += uplinkRows(uplink)
        } else {
            out("    skipped: /usr/sbin/nats-server is not installed (make deps installs nats-server)")
            rows.append(BenchRow(figure: "NATS uplink", shoal: "skipped", baseline: "-", ratio: nil, goal: "(no nats-server)"))
        }

        out("12/12 binary size")
        let size = Files.size(ChildProcess.currentExecutable) ?? 0
        var baselineSize: Int?
        if let path = a.values["--baseline-binary"] { baselineSize = Files.size(path) }
        rows.append(BenchRow(figure: "binary size (MB)", shoal: fmt2(Double(size) / 1_048_576),
                             baseline: baselineSize.map { "\(fmt2(Double($0) / 1_048_576)) trivial program" } ?? "(no --baseline-binary)",
                             ratio: baselineSize.map { Double(size) / Double(max(1, $0)) }, goal: "-"))

        out("")
        out("shoal bench, \(benchDate()), \(benchMachine()), \(Int((ContinuousClock.now - started).secondsDouble)) s")
        let w0 = max(8, rows.map(\.figure.count).max() ?? 0), w1 = max(6, rows.map(\.shoal.count).max() ?? 0)
        let w2 = max(8, rows.map(\.baseline.count).max() ?? 0)
        func pad(_ s: String, _ w: Int) -> String { s + String(repeating: " ", count: max(0, w - s.count)) }
        out("  \(pad("figure", w0))  \(pad("shoal", w1))  \(pad("baseline", w2))  ratio  goal")
        for r in rows {
            out("  \(pad(r.figure, w0))  \(pad(r.shoal, w1))  \(pad(r.baseline, w2))  \(pad(r.ratio.map(fmt2) ?? "-", 5))  \(r.goal)")
        }
        return ExitCode.ok
    }

    /// Starts `shoal run` on the sim board, reads its RSS idle (after 3 s), writes 100,000 small
    /// documents through its control socket, and reads it again (after 3 s more).
    static func benchRSS(dir: String) throws -> (idleKB: Int, loadedKB: Int) {
        try Files.makeDirectories(dir)
        let child = try ChildProcess(path: ChildProcess.currentExecutable,
                                     arguments: ["run", "--board", "sim", "--data-dir", dir, "--log-level", "warning"])
        defer { _ = child.stop() }
        let socket = dir + "/control.sock"
        var client: ControlClient?
        for _ in 0..<200 where client == nil {
            client = try? ControlClient(path: socket)
            if client == nil { usleep(50_000) }
        }
        guard let client else { throw ConfigurationFailure(message: "the gateway for the memory figure did not start") }
        sleep(3)
        let idle = rssKB(child.pid)
        var n = 0
        while n < 100_000 {
            var batch: [JSONValue] = []
            for _ in 0..<1000 {
                batch.append(["id": .string("rss-\(n)"), "body": ["sensor": .string("t\(n % 97)"), "seq": .int(Int64(n)), "celsius": .double(21.5)]])
                n += 1
            }
            _ = try client.call(["op": "doc.putMany", "collection": "sensors.readings", "documents": .array(batch)])
        }
        sleep(3)
        return (idle, rssKB(child.pid))
    }

    static func rssKB(_ pid: pid_t) -> Int { HTTPBenchmark.residentKB(pid) }

    /// The HTTP API's rows: each load beside the control socket's, the feed's p99 beside its
    /// median, the SSE clients' memory beside the gateway's before.
    static func httpRows(_ r: HTTPBenchmark.Result) -> [BenchRow] {
        var rows: [BenchRow] = []
        func load(_ figure: String, _ http: HTTPBenchmark.Load?, _ control: HTTPBenchmark.Load, goal: String) {
            let baseline = "\(fmt(control.requestsPerSecond)) control socket"
            guard let http else {
                rows.append(BenchRow(figure: figure, shoal: "no wrk", baseline: baseline, ratio: nil, goal: goal))
                return
            }
            rows.append(BenchRow(figure: figure, shoal: fmt(http.requestsPerSecond), baseline: baseline,
                                 ratio: http.requestsPerSecond / max(1, control.requestsPerSecond), goal: goal))
            rows.append(BenchRow(figure: "  p99 (ms)", shoal: fmt2(http.p99Millis), baseline: "\(fmt2(control.p99Millis)) control socket",
                                 ratio: http.p99Millis / max(0.001, control.p99Millis), goal: "-"))
        }
        load("HTTP GET one document (req/s, wrk)", r.httpGet, r.controlGet, goal: ">= 10,000/s")
        load("HTTP PUT 1 KB, durability full (req/s)", r.httpPut, r.controlPut, goal: ">= 3,000/s")
        rows.append(BenchRow(figure: "SSE write → event p99 (ms)", shoal: fmt2(r.feedP99Millis), baseline: "\(fmt2(r.feedMedianMillis)) median",
                             ratio: nil, goal: "<= 20"))
        rows.append(BenchRow(figure: "RSS added by \(r.settings.sseClients) SSE clients (MB)", shoal: fmt2(Double(r.rssAddedKB) / 1024),
                             baseline: "\(fmt2(Double(r.rssBeforeKB) / 1024)) gateway before", ratio: nil, goal: "<= 5"))
        return rows
    }

    /// The MQTT bridge's rows: each ingest and the changes' publish rate beside the publisher
    /// into mosquitto_sub, the burst's peak RSS beside the gateway's before.
    static func mqttRows(_ r: MQTTBenchmark.Result) -> [BenchRow] {
        var rows: [BenchRow] = []
        let baseline = r.baseline.map { "\(fmt($0.rate)) publisher → mosquitto_sub" } ?? "(no mosquitto_sub)"
        func ratio(_ rate: Double) -> Double? { r.baseline.map { rate / max(1, $0.rate) } }
        for (name, ingest) in [("full", r.full), ("normal", r.normal)] {
            guard let g = ingest else { continue }
            rows.append(BenchRow(figure: "MQTT ingest, QoS 1, durability \(name) (msg/s)\(g.complete ? "" : ", incomplete")", shoal: fmt(g.rate),
                                 baseline: baseline, ratio: ratio(g.rate), goal: ">= 0.50, >= 5,000/s"))
        }
        if let o = r.outbound {
            rows.append(BenchRow(figure: "MQTT publish of changes (msg/s)\(o.complete ? "" : ", incomplete")", shoal: fmt(o.rate),
                                 baseline: baseline, ratio: ratio(o.rate), goal: "-"))
        }
        if let b = r.burst {
            rows.append(BenchRow(figure: "RSS peak increase, \(b.messages)-message MQTT burst (MB)", shoal: "+" + fmt2(Double(b.peakIncreaseKB) / 1024),
                                 baseline: "\(fmt2(Double(b.rssBeforeKB) / 1024)) gateway before", ratio: nil, goal: "bounded (256/batch, 100 in flight)"))
        }
        if rows.isEmpty { rows.append(BenchRow(figure: "MQTT bridge", shoal: "skipped", baseline: "-", ratio: nil, goal: "(see the skipped lines above)")) }
        return rows
    }

    static func benchDate() -> String {
        var now = time(nil)
        var tm = tm()
        gmtime_r(&now, &tm)
        var buffer = [CChar](repeating: 0, count: 64)
        strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M UTC", &tm)
        return String(cString: buffer)
    }

    static func benchMachine() -> String {
        let model = (try? Files.read("/proc/cpuinfo"))?.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { String($0.split(separator: ":", maxSplits: 1).last?.drop { $0 == " " } ?? "") } ?? "unknown CPU"
        var u = utsname()
        uname(&u)
        let arch = withUnsafeBytes(of: &u.machine) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
        return "\(sysconf(Int32(_SC_NPROCESSORS_ONLN))) × \(model), \(arch)"
    }
}
