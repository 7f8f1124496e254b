import Glibc
import ShoalBench
import ShoalRuntime

/// `shoal bench uplink`: the NATS JetStream uplink — gateway A's push and A → hub → gateway B end
/// to end against a raw acknowledged publish loop to the same nats-server in the same run, and
/// the bytes per document on the wire (UplinkBenchmark says how each is taken).
extension CLI {
    static func benchUplink(_ a: Arguments) throws -> Int32 {
        let settings = try uplinkSettings(a)
        let dir = try benchDirectory(a)
        defer { _ = system("rm -rf '\(dir)'") }
        out("uplink benchmark: a nats-server of its own (JetStream, file storage, loopback) in \(dir); \(settings.count) documents of \(settings.bodyBytes) bytes; two gateways (a store and the uplink's bridge each) in this process")
        let r = try UplinkBenchmark.run(directory: dir, settings: settings) { out("  … " + $0) }
        for line in uplinkReport(r) { out(line) }
        return ExitCode.ok
    }

    static func uplinkSettings(_ a: Arguments) throws -> UplinkBenchmark.Settings {
        var s = UplinkBenchmark.Settings()
        s.count = try a.int("--count", command: "bench", default: s.count, range: 1...1_000_000)
        s.bodyBytes = try a.int("--body-bytes", command: "bench", default: s.bodyBytes, range: 64...(1 << 20))
        return s
    }

    static func uplinkReport(_ r: UplinkBenchmark.Result) -> [String] {
        let n = Double(r.settings.count)
        var lines = ["  server: \(r.serverVersion); body \(r.bodyBytes) bytes; batches of 1,024, two in flight (the bridge's push)"]
        let base = r.baseline
        for (i, b) in r.baselineRuns.enumerated() {
            let which = i == 0 ? "before" : "after "
            lines.append("  baseline, NATSClient.publish with acks, \(which)  \(fmt(b.rate)) msg/s   (\(b.stored) of \(b.messages) stored in \(fmt2(b.seconds)) s\(b.rate == base?.rate ? "; the faster: the ratios use it" : ""))")
        }
        func ratio(_ rate: Double?) -> String {
            guard let rate, let base else { return "-" }
            return fmt2(rate / max(1, base.rate))
        }
        lines.append("  A's writes                      \(fmt(n / max(0.000_001, r.writeSeconds))) docs/s   (\(fmt2(r.writeSeconds)) s, batches of 100, one transaction each)")
        if let push = r.pushRate {
            lines.append("  A's push (first write → published == \(r.settings.count))   \(fmt(push)) docs/s   ratio push/baseline \(ratio(push)) (goal >= 0.50)")
        } else {
            lines.append("  A's push                        incomplete: \(r.published) of \(r.settings.count) published (nothing moved for \(r.settings.stallSeconds) s)")
        }
        if let e2e = r.endToEndRate {
            lines.append("  end to end (first write → B holds all)   \(fmt(e2e)) docs/s   ratio end-to-end/baseline \(ratio(e2e))")
        } else {
            lines.append("  end to end                      incomplete: B holds \(r.held) of \(r.settings.count)")
        }
        if let backlog = r.backlogRate {
            lines.append("  C's push of a backlog (start → published == \(r.settings.count), nothing written meanwhile)   \(fmt(backlog)) docs/s   ratio backlog/baseline \(ratio(backlog)); the uplink thread's CPU \(fmt2(r.backlogCPU)) s")
        } else {
            lines.append("  C's push of a backlog           incomplete: \(r.backlogPublished) of \(r.settings.count) published")
        }
        if let pushOnly = r.pushOnlyRate {
            lines.append("  D's push of a backlog, pull off (not taking its own documents back)   \(fmt(pushOnly)) docs/s   ratio \(ratio(pushOnly)); the uplink thread's CPU \(fmt2(r.pushOnlyCPU)) s")
        }
        lines.append("  boards: A published \(r.published), received back \(r.aReceived) (\(r.aUnchanged) already held); B applied \(r.bApplied); compare-and-set retries \(r.casRetries)")
        func perDoc(_ x: Int64) -> String { x < 0 ? "-" : fmt(Double(x) / n) }
        func times(_ x: Int64) -> String { x < 0 ? "-" : fmt2(Double(x) / n / Double(max(1, r.bodyBytes))) }
        lines.append("  bytes per document over the push, each connection at nats-server: messages (headers + body, /connz) | on the socket (protocol included, ss -ti)")
        lines.append("    A → hub     \(perDoc(r.a.inBytes)) | \(perDoc(r.a.wireIn))   (\(times(r.a.wireIn)) × the \(r.bodyBytes)-byte body on the socket; \(r.a.inMessages) messages)")
        lines.append("    hub → A     \(perDoc(r.a.outBytes)) | \(perDoc(r.a.wireOut))   (acknowledgements, and A's own documents back through its consumer; \(r.a.outMessages) messages)")
        lines.append("    hub → B     \(perDoc(r.b.outBytes)) | \(perDoc(r.b.wireOut))   (\(times(r.b.wireOut)) × the body on the socket; \(r.b.outMessages) messages)")
        lines.append("    B → hub     \(perDoc(r.b.inBytes)) | \(perDoc(r.b.wireIn))   (flow-control replies)")
        if !r.headers.isEmpty {
            let wire = r.a.wireIn >= 0 ? ", the rest on the socket \(fmt(Double(r.a.wireIn) / n - Double(r.bodyBytes) - Double(r.headerBytes))) (the HPUB line: subject of \(r.subjectBytes), reply inbox, sizes)" : ""
            lines.append("    of A → hub: body \(r.bodyBytes), headers \(r.headerBytes) (" + r.headers.map { "\($0.name) \($0.bytes)" }.joined(separator: ", ") + ")\(wire)")
        }
        lines.append("  CPU seconds over the end-to-end part (\(sysconf(Int32(_SC_NPROCESSORS_ONLN))) cores): " + r.cpu.map { "\($0.part) \(fmt2($0.seconds))" }.joined(separator: ", "))
        return lines
    }

    /// The uplink's rows for `shoal bench`'s table.
    static func uplinkRows(_ r: UplinkBenchmark.Result) -> [BenchRow] {
        let baseline = r.baseline.map { "\(fmt($0.rate)) raw publish + ack" } ?? "-"
        func ratio(_ rate: Double?) -> Double? { rate.flatMap { x in r.baseline.map { x / max(1, $0.rate) } } }
        let n = Double(r.settings.count)
        return [
            BenchRow(figure: "uplink push, \(r.settings.count) × \(r.bodyBytes) B (docs/s)", shoal: r.pushRate.map(fmt) ?? "incomplete",
                     baseline: baseline, ratio: ratio(r.pushRate), goal: ">= 0.50"),
            BenchRow(figure: "  uplink push of a written backlog (docs/s)", shoal: r.backlogRate.map(fmt) ?? "incomplete",
                     baseline: baseline, ratio: ratio(r.backlogRate), goal: "-"),
            BenchRow(figure: "  uplink end to end, A → hub → B (docs/s)", shoal: r.endToEndRate.map(fmt) ?? "incomplete",
                     baseline: baseline, ratio: ratio(r.endToEndRate), goal: "-"),
            BenchRow(figure: "  uplink bytes per document, A → hub\(r.a.wireIn >= 0 ? " (socket)" : " (messages)")",
                     shoal: fmt(Double(r.a.wireIn >= 0 ? r.a.wireIn : r.a.inBytes) / n), baseline: "\(r.bodyBytes) body",
                     ratio: Double(r.a.wireIn >= 0 ? r.a.wireIn : r.a.inBytes) / n / Double(max(1, r.bodyBytes)), goal: "-"),
        ]
    }
}
