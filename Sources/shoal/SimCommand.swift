import Glibc
import ShoalCore
import ShoalMesh
import ShoalReplication
import ShoalSim

extension CLI {
    /// `shoal sim`: runs the mesh in the simulator and prints the figures a site planner wants.
    static func sim(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "sim",
                                    valueOptions: ["--nodes", "--topology", "--seconds", "--seed", "--seeds", "--loss", "--duplicate", "--reorder", "--kind",
                                                   "--writes", "--body", "--max-connections", "--dir", "--skew", "--burst", "--edits", "--resolver",
                                                   "--blobs", "--blob-bytes", "--max-control-share"],
                                    flagOptions: ["--partitions", "--crashes", "--dot", "--quiet", "--tls", "--trust", "--field-edits"])
        if helpIfAsked(a, "sim") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: "sim", usage: "sim [--nodes N] [--topology T] ...")
        var s = SimScenario()
        s.config.nodes = try a.int("--nodes", command: "sim", default: 10, range: 2...2_000)
        guard let topology = SimTopology(rawValue: a.values["--topology"] ?? "full") else {
            throw UsageError(command: "sim", message: "--topology is one of \(SimTopology.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(a.values["--topology"] ?? "")\"")
        }
        s.config.topology = topology
        switch a.values["--kind"] ?? "wifi" {
        case "wifi": s.config.kind = .wifi
        case "ble": s.config.kind = .ble
        case let other: throw UsageError(command: "sim", message: "--kind is wifi or ble, not \"\(other)\"")
        }
        s.seconds = UInt64(try a.int("--seconds", command: "sim", default: 300, range: 10...864_000))
        let firstSeed = UInt64(try a.int("--seed", command: "sim", default: 1, range: 0...Int.max))
        let seeds = try a.int("--seeds", command: "sim", default: 1, range: 1...1_000_000)
        if let text = a.values["--loss"] {
            guard let p = Double(text), p >= 0, p < 1 else { throw UsageError(command: "sim", message: "--loss is a probability in [0, 1), not \"\(text)\"") }
            s.config.loss = p
        }
        for (option, path) in [("--duplicate", \SimConfig.duplicate), ("--reorder", \SimConfig.reorder)] {
            guard let text = a.values[option] else { continue }
            guard let p = Double(text), p >= 0, p < 1 else { throw UsageError(command: "sim", message: "\(option) is a probability in [0, 1), not \"\(text)\"") }
            s.config[keyPath: path] = p
        }
        if let text = a.values["--max-control-share"] {
            guard let p = Double(text), p > 0, p <= 1 else { throw UsageError(command: "sim", message: "--max-control-share is a share of a link's capacity in (0, 1], not \"\(text)\"") }
            s.maxControlShare = p
        }
        s.writes = try a.int("--writes", command: "sim", default: 20, range: 0...100_000)
        s.bodyBytes = try a.int("--body", command: "sim", default: 1024, range: 16...1_000_000)
        s.burst = try a.int("--burst", command: "sim", default: 1, range: 1...100_000)
        if let e = a.values["--edits"] {
            guard e == "on" || e == "off" else { throw UsageError(command: "sim", message: "--edits is on or off, not \"\(e)\"") }
            if e == "off" { s.editTenths = 0; s.deleteTenths = 0 }
        }
        if let r = a.values["--resolver"] {
            guard let resolver = ConflictResolver.named(r), r == "fieldMerge" || r == "lastWriteWins" else {
                throw UsageError(command: "sim", message: "--resolver is fieldMerge or lastWriteWins, not \"\(r)\"")
            }
            s.config.resolver = resolver
        }
        s.config.mesh.maxConnectionCount = try a.int("--max-connections", command: "sim", default: 3, range: 1...16)
        s.config.maxSkewMillis = UInt64(try a.int("--skew", command: "sim", default: 0, range: 0...3_600_000))
        s.config.partitions = a.flags.contains("--partitions")
        s.config.tls = a.flags.contains("--tls")
        s.config.crashes = a.flags.contains("--crashes")
        s.config.trust = a.flags.contains("--trust")
        s.fieldEdits = a.flags.contains("--field-edits")
        s.blobs = try a.int("--blobs", command: "sim", default: 0, range: 0...1000)
        s.config.blobs = s.blobs > 0
        if let text = a.values["--blob-bytes"] {
            let parts = text.split(separator: "-").map { Int($0) }
            guard parts.count == 2, let lo = parts[0], let hi = parts[1], lo >= 0, lo <= hi, hi <= 1 << 30 else {
                throw UsageError(command: "sim", message: "--blob-bytes is MIN-MAX in bytes (e.g. 64000-4000000), not \"\(text)\"")
            }
            s.blobMinBytes = lo
            s.blobMaxBytes = hi
        }
        if s.config.trust && topology != .full {
            throw UsageError(command: "sim", message: "--trust runs on the full topology (the revoked node must not be the only path between others)")
        }
        let faults = s.config.partitions || s.config.crashes || s.config.maxSkewMillis > 0 || s.config.duplicate > 0 || s.config.reorder > 0
        // Faults come and go for the first half of the run; the second half shows the healing.
        s.config.faultsUntilMillis = faults ? s.seconds * 1000 / 2 : 0
        s.config.transportsFromKind()
        s.probeLatency = !faults
        var st = stat()
        s.config.directory = a.values["--dir"] ?? (stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp")
        let quiet = a.flags.contains("--quiet") || seeds > 1

        out("simulation: \(s.config.nodes) nodes, \(topology.rawValue) topology, \(s.config.kind.transport.rawValue)-like links "
            + "(\(s.config.kind.latencyMillis) ms, \(s.config.kind.bytesPerSecond / 1000) kB/s), loss \(s.config.loss), "
            + "maxConnectionCount \(s.config.mesh.maxConnectionCount), \(s.writes.counted("write")) of \(s.bodyBytes) bytes\(s.burst > 1 ? " in bursts of \(s.burst)" : ""), "
            + (faults ? "faults (\([s.config.partitions ? "partitions" : nil, s.config.crashes ? "crashes" : nil, s.config.maxSkewMillis > 0 ? "clock skew" : nil, s.config.duplicate > 0 ? "duplicated frames" : nil, s.config.reorder > 0 ? "reordered frames" : nil].compactMap { $0 }.joined(separator: ", "))) for \(s.seconds / 2) s, " : "no faults, ")
            + (s.config.trust ? "fleet trust (an operator revokes one node), " : "")
            + (s.blobs > 0 ? "\(s.blobs.counted("blob")) of \(s.blobMinBytes)–\(s.blobMaxBytes) bytes, " : "")
            + "up to \(s.seconds) s virtual, seed\(seeds > 1 ? "s \(firstSeed)…\(firstSeed + UInt64(seeds) - 1)" : " \(firstSeed)")")
        var failed = 0
        var reports: [SimReport] = []
        for k in 0..<seeds {
            s.config.seed = firstSeed + UInt64(k)
            let r = try s.run()
            reports.append(r)
            if !r.failures.isEmpty {
                failed += 1
                out("seed \(r.seed): FAILED — \(r.failures.joined(separator: "; "))  (replay: shoal sim \(replayArguments(a, seed: r.seed)))")
            } else if seeds > 1 && !a.flags.contains("--quiet") && (k + 1) % 50 == 0 {
                out("  \(k + 1) seeds run, \(failed) failed")
            }
            if !quiet { printReport(r, s) }
            if a.flags.contains("--dot") && seeds == 1 { out(r.dot, newline: false) }
        }
        if seeds > 1 { printSummary(reports, failed: failed) }
        return failed == 0 ? ExitCode.ok : ExitCode.failure
    }

    static func replayArguments(_ a: Arguments, seed: UInt64) -> String {
        var parts: [String] = []
        for (k, v) in a.values.sorted(by: { $0.key < $1.key }) where k != "--seed" && k != "--seeds" { parts.append("\(k) \(v)") }
        for f in a.flags.sorted() where f != "--quiet" { parts.append(f) }
        return (parts + ["--seed \(seed)"]).joined(separator: " ")
    }

    static func ms(_ v: UInt64?) -> String { v.map { "\($0) ms" } ?? "never" }

    static func printReport(_ r: SimReport, _ s: SimScenario) {
        let links = r.linksPerNode
        out("  mesh formed               \(ms(r.formedAtMillis)) (virtual)")
        if let p = r.probeMillis, let path = r.probePathLatencyMillis {
            out("  one write reached all     \(p) ms over \(r.probeHops ?? 0) hops; per-hop latencies sum to \(path) ms (ratio \(fmt2(Double(p) / Double(max(path, 1)))), goal <= 2)")
        }
        let faults = s.config.faultsUntilMillis > 0, trust = s.config.trust
        out("  converged                 \(ms(r.convergedAfterMillis)) after the last write\(faults ? " and the end of faults" : "")\(trust ? " and the operator's last entry" : "")")
        out("  bytes sent                \(r.bytesDuringWrites) during the writes; ideal (one body per node) \(r.idealBytes): ratio \(fmt2(r.bytesRatio))\(faults ? " (includes re-syncs after faults)" : trust ? " (includes the revocation's re-formed links)" : " (goal <= 1.2)")")
        let share = { (b: UInt64) in r.allBytes == 0 ? "0" : fmt2(100 * Double(b) / Double(r.allBytes)) }
        out("  control bytes             \(r.controlBytes) of \(r.allBytes) over the run: \(share(r.controlBytes)) % (gossip \(share(r.gossipBytes)) %) (goal <= 10 %)")
        let load = r.controlLoad
        out("  control per link          worst direction over its life \(fmt2(100 * load.worstLifeShare)) % of the link's capacity (\(load.directions) directions open >= 1 s; goal <= 10 %); per second: 99th percentile \(fmt2(100 * load.percentile(0.99))) %, worst \(fmt2(100 * load.percentile(1))) %, \(fmt2(100 * load.secondsOver(0.1))) % of \(load.secondShares.count) link-seconds over 10 %")
        out("  links per node            min \(links.min() ?? 0), max \(links.max() ?? 0), mean \(fmt2(Double(links.reduce(0, +)) / Double(max(1, links.count)))); total \(links.reduce(0, +) / 2)")
        if r.crashes + r.partitions + r.faultyFrames > 0 { out("  faults                    \(r.crashes.counted("crash", plural: "crashes")), \(r.partitions.counted("partition")), \(r.faultyFrames.counted("frame")) duplicated or reordered") }
        if let t = r.trust {
            out("  trust                     node \(t.victim ?? -1) revoked at \(ms(t.revokedAtMillis)); every other node knew \(ms(t.allKnewAfterMillis)) later; \(t.recorded) entries recorded (\(t.refusedAtRecord) refused), \(t.linksRefused) links refused, \(t.refusedByFilters) documents refused by filters, \(t.lateDocsHeld) late writes of the revoked node held (taken before the node knew)")
        }
        if r.blobCount > 0 {
            out("  blobs                     \(r.blobCount) held by every node: \(r.blobsHeld ? "yes" : "NO"); blob bytes \(r.blobBytes) against one copy per node \(r.blobIdealBytes): ratio \(fmt2(r.blobRatio))\(s.config.faultsUntilMillis > 0 ? " (includes re-fetches after faults)" : " (goal <= 1.2)"); chunks sent to a node that had them: \(r.blobChunksResent)")
        }
        out("  most frames in flight     \(r.maxFramesInFlight) on one link direction")
        out("  speed                     \(fmt2(Double(r.virtualMillis) / 1000)) virtual s in \(fmt2(r.wallSeconds)) s: \(fmt(r.speed)) virtual s per wall s")
        out("  invariants                \(r.failures.isEmpty ? "all held (connected mesh, budget, one link per pair, convergence, no lost write, no resurrected delete, bounded frames in flight and bytes)" : "FAILED: " + r.failures.joined(separator: "; "))")
    }

    static func printSummary(_ reports: [SimReport], failed: Int) {
        func median(_ xs: [Double]) -> Double { let s = xs.sorted(); return s.isEmpty ? 0 : s[s.count / 2] }
        let conv = reports.compactMap { $0.convergedAfterMillis.map { Double($0) } }
        out("  seeds                     \(reports.count) run, \(failed) failed")
        out("  converged (median, max)   \(fmt(median(conv))) ms, \(fmt(conv.max() ?? 0)) ms")
        out("  bytes ratio (median, max) \(fmt2(median(reports.map(\.bytesRatio)))), \(fmt2(reports.map(\.bytesRatio).max() ?? 0))")
        let withBlobs = reports.filter { $0.blobCount > 0 }
        if !withBlobs.isEmpty {
            out("  blob ratio (median, max)  \(fmt2(median(withBlobs.map(\.blobRatio)))), \(fmt2(withBlobs.map(\.blobRatio).max() ?? 0)); \(withBlobs.map(\.blobCount).reduce(0, +)) blobs, \(withBlobs.filter { !$0.blobsHeld }.count) seeds with a node lacking one, \(withBlobs.map(\.blobChunksResent).reduce(0, +)) chunks sent to a node that had them")
        }
        let life = reports.map(\.controlLoad.worstLifeShare), second = reports.map { $0.controlLoad.percentile(1) }
        out("  control per link          worst direction over its life (median, max) \(fmt2(100 * median(life))) %, \(fmt2(100 * (life.max() ?? 0))) %; worst second \(fmt2(100 * median(second))) %, \(fmt2(100 * (second.max() ?? 0))) % of the link's capacity")
        out("  frames in flight (max)    \(reports.map(\.maxFramesInFlight).max() ?? 0)")
        let faulty = reports.map(\.faultyFrames).reduce(0, +), crashes = reports.map(\.crashes).reduce(0, +), partitions = reports.map(\.partitions).reduce(0, +)
        if faulty + crashes + partitions > 0 { out("  faults (all seeds)        \(crashes.counted("crash", plural: "crashes")), \(partitions.counted("partition")), \(faulty.counted("frame")) duplicated or reordered") }
        let trust = reports.compactMap(\.trust)
        if !trust.isEmpty {
            let knew = trust.compactMap { t in t.allKnewAfterMillis.map { Double($0) } }
            out("  trust (all seeds)         \(trust.count) revocations; all others knew after (median, max) \(fmt(median(knew))) ms, \(fmt(knew.max() ?? 0)) ms; \(trust.map(\.recorded).reduce(0, +)) entries recorded, \(trust.map(\.linksRefused).reduce(0, +)) links refused, \(trust.map(\.refusedByFilters).reduce(0, +)) documents refused by filters, \(trust.map(\.lateDocsHeld).reduce(0, +)) late writes held, \(trust.map(\.linkViolations.count).reduce(0, +)) links to a revoked peer")
        }
        out("  speed (median)            \(fmt(median(reports.map(\.speed)))) virtual s per wall s")
    }
}

extension SimConfig {
    mutating func transportsFromKind() { mesh.transports = [kind.transport] }
}
