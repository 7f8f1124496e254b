import Glibc
import ShoalBench
import ShoalRuntime

/// `shoal bench mqtt`: the MQTT bridge's ingest (durability full and normal) against the same
/// publisher into mosquitto_sub, the publish rate of changes, and the RSS under a burst
/// (MQTTBenchmark says how each is taken).
extension CLI {
    static func benchMQTT(_ a: Arguments) throws -> Int32 {
        let settings = try mqttSettings(a)
        let dir = try benchDirectory(a)
        defer { _ = system("rm -rf '\(dir)'") }
        out("MQTT benchmark: `shoal run` children (sim board) and a mosquitto of their own per part on a free loopback port, in \(dir); a paho publisher at QoS 1, 100 in flight, \(settings.messages) messages per ingest run")
        let r = try MQTTBenchmark.run(directory: dir, settings: settings) { out("  … " + $0) }
        for line in mqttReport(r) { out(line) }
        return ExitCode.ok
    }

    static func mqttSettings(_ a: Arguments) throws -> MQTTBenchmark.Settings {
        var s = MQTTBenchmark.Settings()
        s.messages = try a.int("--docs", command: "bench", default: s.messages, range: 1...10_000_000)
        s.changes = try a.int("--changes", command: "bench", default: s.changes, range: 1...10_000_000)
        s.burst = try a.int("--burst", command: "bench", default: s.burst, range: 1...10_000_000)
        s.publisherScript = a.values["--publisher"]
        return s
    }

    static func mqttReport(_ r: MQTTBenchmark.Result) -> [String] {
        var lines = r.skipped.map { "  skipped: " + $0 }
        if r.mosquittoVersion != "?" { lines.append("  broker: mosquitto \(r.mosquittoVersion), persistence off, max_inflight_messages 100, on 127.0.0.1") }
        let base = r.baseline
        for (i, b) in r.baselineRuns.enumerated() {
            let which = r.baselineRuns.count > 1 ? (i == 0 ? "before" : "after ") : ""
            lines.append("  ingest, publisher → mosquitto_sub -q 1 \(which)  \(fmt(b.rate)) msg/s\(b.complete ? "" : " (incomplete: timed out)")   (baseline\(r.baselineRuns.count > 1 && b.rate == base?.rate ? ", the faster: the ratios use it" : ""); the publisher's own rate \(fmt(b.publisherRate)) msg/s)")
        }
        for (name, ingest) in [("full  ", r.full), ("normal", r.normal)] {
            guard let g = ingest else { continue }
            let ratio = base.map { "ratio gateway/baseline \(fmt2(g.rate / max(1, $0.rate)))" } ?? "no baseline"
            let partial = g.complete ? "" : " (only \(g.received) of \(g.messages) committed: nothing moved for 30 s)"
            lines.append("  ingest → gateway, durability \(name)    \(fmt(g.rate)) msg/s committed\(partial)   \(ratio) (goal >= 0.5), absolute goal >= 5000 msg/s; the publisher's own rate \(fmt(g.publisherRate)) msg/s")
        }
        if r.baseline != nil || r.full != nil || r.normal != nil {
            lines.append("  each ingest run: its wall time, then the CPU seconds of each part (\(sysconf(Int32(_SC_NPROCESSORS_ONLN))) cores):")
            let named = r.baselineRuns.enumerated().map { i, b in ("mosquitto_sub baseline" + (r.baselineRuns.count > 1 ? (i == 0 ? ", before" : ", after") : ""), b) } + [("gateway, full", r.full), ("gateway, normal", r.normal)].compactMap { n, g in g.map { (n, $0) } }
            for (name, run) in named {
                lines.append("    \(name): \(fmt2(run.seconds)) s wall; CPU " + run.cpu.map { "\($0.part) \(fmt2($0.seconds))" }.joined(separator: ", "))
            }
        }
        if let o = r.outbound {
            let ratio = base.map { "ratio to the publisher → mosquitto_sub baseline \(fmt2(o.rate / max(1, $0.rate)))" } ?? "no baseline"
            let partial = o.complete ? "" : " (incomplete: about \(o.received) of \(o.changes) acknowledged)"
            lines.append("  changes → outbound rule → mosquitto_sub   \(fmt(o.rate)) msg/s over \(o.changes) documents\(partial)   \(ratio); the writes took \(fmt2(o.writeSeconds)) s")
        }
        if let b = r.burst {
            func mb(_ kb: Int) -> String { fmt2(Double(kb) / 1024) }
            let partial = b.committed >= Int64(b.messages) ? "" : ", only \(b.committed) committed"
            lines.append("  RSS, \(b.messages)-message burst   before \(mb(b.rssBeforeKB)) MB, peak \(mb(b.rssPeakKB)) MB, after \(mb(b.rssAfterKB)) MB: peak +\(mb(b.peakIncreaseKB)) MB (\(b.samples) samples, 50 ms apart; \(fmt(Double(b.committed) / max(0.001, b.seconds))) msg/s committed\(partial))")
            lines.append("    (goal: bounded — the bridge reads at most 256 messages per batch and keeps at most 100 publishes in flight; the rest waits at the broker)")
        }
        return lines
    }
}
