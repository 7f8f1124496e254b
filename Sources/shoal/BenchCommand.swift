import Glibc
import ShoalBench
import ShoalCore
import ShoalLinux
import ShoalStore
import ShoalReplication
import ShoalTLS
import ShoalRuntime

extension CLI {
    static func bench(_ args: [String]) throws -> Int32 {
        let a = try Arguments.parse(args, command: "bench", valueOptions: ["--docs", "--batch", "--rounds", "--durability", "--dir", "--handshakes", "--megabytes", "--port", "--baseline-binary", "--seconds", "--connections", "--changes", "--burst", "--publisher", "--count", "--body-bytes", "--samples", "--storage", "--from"])
        if helpIfAsked(a, "bench") { return ExitCode.ok }
        try a.expectPositionals(0...1, command: "bench", usage: "bench [all|store|tls|replication|latency|http|mqtt|uplink|backup|query|live-query|blob-store|blob|storage|stall|instructions] [--storage sd-card|sync=MS,stall=MS,every=S]")
        var profile: SlowStorage.Profile?
        if let text = a.values["--storage"] {
            guard let p = SlowStorage.Profile.parse(text) else {
                throw UsageError(command: "bench", message: "--storage is sd-card or sync=MS[,stall=MS][,every=S] (say sync=20,stall=2000,every=10), not \"\(text)\"")
            }
            profile = p
        }
        if a.positionals.first == "storage" { return try benchStorage(a, profile: profile ?? .sdCard) }
        if a.positionals.first == "stall" { return try benchStall(a, profile: profile ?? .sdCard) }
        if let profile {
            // Every store this process opens from here on goes through the profile; gateways the
            // benchmark starts as child processes (`shoal run`) keep the disk as it is.
            try SlowStorage.install(profile)
            out("storage profile \(profile.summary) (the stores of this process; child gateways use the disk as it is)")
        }
        defer {
            if profile != nil {
                let c = SlowStorage.counters
                out("storage profile: \(c.syncs) syncs, \(c.stalls) stalls, \(c.waitedMillis) ms waited")
            }
        }
        if a.positionals.isEmpty || a.positionals[0] == "all" { return try benchAll(a) }
        if a.positionals[0] == "tls" { return try benchTLS(a) }
        if a.positionals[0] == "replication" { return try benchReplication(a) }
        if a.positionals[0] == "http" { return try benchHTTP(a) }
        if a.positionals[0] == "mqtt" { return try benchMQTT(a) }
        if a.positionals[0] == "uplink" { return try benchUplink(a) }
        if a.positionals[0] == "backup" { return try benchBackup(a) }
        if a.positionals[0] == "query" { return try benchQuery(a) }
        if a.positionals[0] == "live-query" { return try benchLiveQuery(a) }
        if a.positionals[0] == "blob-store" { return try benchBlobStore(a) }
        if a.positionals[0] == "blob" { return try benchBlob(a) }
        if a.positionals[0] == "instructions" { return try benchInstructions(a) }
        if a.positionals[0] == "latency" { return try benchLatency(a) }
        guard a.positionals[0] == "store" else { throw UsageError(command: "bench", message: "unknown benchmark \"\(a.positionals[0])\" (all, store, tls, replication, latency, http, mqtt, uplink, backup, query, live-query, blob-store, blob, storage, stall, instructions)") }
        let docs = try a.int("--docs", command: "bench", default: 20_000, range: 1...10_000_000)
        let batch = try a.int("--batch", command: "bench", default: 100, range: 1...100_000)
        let rounds = try a.int("--rounds", command: "bench", default: 3, range: 1...50)
        let durabilityText = a.values["--durability"] ?? "full"
        guard let durability = Durability(rawValue: durabilityText) else { throw UsageError(command: "bench", message: "--durability is full or normal") }
        var template = Array("\(a.values["--dir"] ?? "/tmp")/shoal-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw UsageError(command: "bench", message: "cannot create a directory under \(a.values["--dir"] ?? "/tmp")") }
        let dir = String(cString: made)
        defer { rmdir(dir) }
        out("store benchmark: \(docs) documents, batches of \(batch), durability \(durability.rawValue), \(rounds) rounds, in \(dir)")
        let r = try StoreBenchmark.run(directory: dir, documents: docs, batch: batch, durability: durability, rounds: rounds,
                                       logger: Logger(sink: MemoryLogSink(), level: .none))
        out("  body size                 \(r.bodyBytes) bytes")
        out("  baseline (bare C API)     \(fmt(r.baselineMedian)) docs/s   rounds: \(r.baselineDocsPerSecond.map(fmt).joined(separator: ", "))")
        out("  shoal store               \(fmt(r.storeMedian)) docs/s   rounds: \(r.storeDocsPerSecond.map(fmt).joined(separator: ", "))")
        out("  ratio store/baseline      \(fmt2(r.ratio))   (goal >= 0.70)")
        return ExitCode.ok
    }

    static func fmt(_ x: Double) -> String { String(Int(x.rounded())) }
    static func fmt2(_ x: Double) -> String {
        let v = Int((x * 100).rounded())
        return "\(v / 100).\(v % 100 < 10 ? "0" : "")\(v % 100)"
    }
}

extension CLI {
    /// `shoal bench storage`: the disk's fdatasync, then durable commits and store writes on the
    /// disk and through a slow-storage profile, in the same run.
    static func benchStorage(_ a: Arguments, profile: SlowStorage.Profile) throws -> Int32 {
        let samples = try a.int("--samples", command: "bench", default: 200, range: 10...100_000)
        let dir = try benchDirectory(a)
        defer { _ = system("rm -rf '\(dir)'") }
        out("storage benchmark: this disk (\(dir)) against the profile \(profile.summary)")
        let r = try StorageBenchmark.run(directory: dir, profile: profile, samples: samples, logger: Logger(sink: MemoryLogSink(), level: .none))
        out("  disk: 4 KiB write + fdatasync   median \(fmt2(r.diskSyncMedian)) ms, p99 \(fmt2(r.diskSyncP99)) ms (\(samples) samples; what fio --rw=write --bs=4k --fdatasync=1 times)")
        out("  durable 1-row commit, bare SQLite  disk \(fmt2(r.commitMillisDisk)) ms, profile \(fmt2(r.commitMillisProfile)) ms (\(fmt2(r.syncsPerCommit)) syncs per commit)")
        out("  store writes, batches of 100, full disk \(fmt(r.storeDisk)) docs/s, profile \(fmt(r.storeProfile)) docs/s (bare SQLite through the profile \(fmt(r.baselineProfile)), ratio store/bare \(fmt2(r.storeProfile / r.baselineProfile)))")
        out("  \(r.writers) writers at once, 1-doc writes through the profile: one commit each \(fmt(r.alone.rate)) writes/s (\(r.alone.syncs) syncs), group commit \(fmt(r.grouped.rate)) writes/s (\(r.grouped.syncs) syncs), ratio \(fmt2(r.grouped.rate / r.alone.rate))")
        return ExitCode.ok
    }

    /// `shoal bench stall`: `status` from a gateway whose storage stalls (the profile's stall, or
    /// 2 s), against `status` with no stall, in the same run.
    static func benchStall(_ a: Arguments, profile: SlowStorage.Profile) throws -> Int32 {
        let stalls = try a.int("--samples", command: "bench", default: 20, range: 1...1000)
        let dir = try benchDirectory(a)
        defer { _ = system("rm -rf '\(dir)'") }
        out("stall benchmark: a sim-board gateway in this process, its store through \(profile.summary); \(stalls) forced stalls under a document write, status asked every 50 ms while each lasts")
        let r = try StallBenchmark.run(directory: dir, profile: profile, stalls: stalls) { out("  " + $0) }
        func pct(_ xs: [Double], _ p: Int) -> Double { xs.isEmpty ? 0 : xs[min(xs.count - 1, xs.count * p / 100)] }
        let worst = r.worstPerStall.sorted()
        out("  status, no stall            median \(fmt2(pct(r.quiet, 50))) ms, worst \(fmt2(r.quiet.last ?? 0)) ms (\(r.quiet.count) asks)")
        out("  status during a stall       median \(fmt2(pct(r.duringStalls, 50))) ms, worst \(fmt2(r.duringStalls.last ?? 0)) ms (\(r.duringStalls.count) asks)")
        out("  slowest status per stall    median \(fmt2(pct(worst, 50))) ms, worst \(fmt2(worst.last ?? 0)) ms over \(worst.count) stalls   (goal <= 100)")
        out("  stalled write acknowledged  median \(fmt2(pct(r.writeMillis.sorted(), 50))) ms (the stall is \(r.profile.stallMillis) ms)")
        return ExitCode.ok
    }

    /// `shoal bench instructions`: instructions per replicated document on each side (callgrind).
    static func benchInstructions(_ a: Arguments) throws -> Int32 {
        let large = try a.int("--docs", command: "bench", default: 5000, range: 100...1_000_000)
        let small = large / 5
        let port = UInt16(try a.int("--port", command: "bench", default: 47_915, range: 1024...65_535))
        let dir = try benchDirectory(a)
        defer {
            if ProcessEnvironment.get("SHOAL_BENCH_KEEP") == nil { _ = system("rm -rf '\(dir)'") } else { out("  kept: \(dir) (read it again with --from)") }
        }
        out("instruction benchmark: a pusher and a puller gateway (shoal run, sim board) under valgrind's callgrind, pulls of \(small) and \(large) ~1 KB documents over TLS on 127.0.0.1:\(port); per document = the difference / \(large - small)")
        // --from DIR: read the callgrind files of an earlier run kept with SHOAL_BENCH_KEEP=1.
        let r = try InstructionBenchmark.run(directory: dir, small: small, large: large, port: port, reuse: a.values["--from"]) { out("  " + $0) }
        func cell(_ x: Double) -> String { let t = fmt(x); return String(repeating: " ", count: max(0, 10 - t.count)) + t }
        out("  instructions per replicated \(r.bodyBytes)-byte document (self cost, by where it was spent):")
        out("    \("".padding(22))    pusher     puller")
        for c in InstructionBenchmark.categories {
            out("    \(c.padding(22)) \(cell(r.pusher.perDocument[c] ?? 0)) \(cell(r.puller.perDocument[c] ?? 0))")
        }
        out("    \("total".padding(22)) \(cell(r.pusher.total)) \(cell(r.puller.total))")
        return ExitCode.ok
    }

    static func benchTLS(_ a: Arguments) throws -> Int32 {
        let handshakes = try a.int("--handshakes", command: "bench", default: 200, range: 1...100_000)
        let megabytes = try a.int("--megabytes", command: "bench", default: 64, range: 1...100_000)
        let rounds = try a.int("--rounds", command: "bench", default: 5, range: 1...50)
        out("TLS benchmark: \(handshakes) handshakes each way, \(megabytes) MiB × \(rounds) rounds of bulk data, in-memory pipe")
        let r = try TLSBenchmark.run(handshakes: handshakes, megabytes: megabytes, rounds: rounds)
        out("  cipher suite              \(r.cipherSuite)")
        out("  full handshake            \(fmt2(r.fullHandshakeCPUMillis)) ms CPU, client + server together")
        out("    each side               client \(fmt2(r.clientCPUMillis)) ms, server \(fmt2(r.serverCPUMillis)) ms (goal <= 10 per handshake)")
        out("  resumed handshake         \(fmt2(r.resumedHandshakeCPUMillis)) ms CPU")
        out("  baseline (bare mbedTLS)   \(fmt(TLSBenchmark.median(r.baselineMBps))) MB/s   rounds: \(r.baselineMBps.map(fmt).joined(separator: ", "))")
        out("  shoal TLSSession          \(fmt(TLSBenchmark.median(r.sessionMBps))) MB/s   rounds: \(r.sessionMBps.map(fmt).joined(separator: ", "))")
        out("  ratio session/baseline    \(fmt2(r.ratio))   (goal >= 0.80)")
        return ExitCode.ok
    }
}

extension CLI {
    static func benchReplication(_ a: Arguments) throws -> Int32 {
        let docs = try a.int("--docs", command: "bench", default: 10_000, range: 1...1_000_000)
        let rounds = try a.int("--rounds", command: "bench", default: 3, range: 1...20)
        let port = UInt16(try a.int("--port", command: "bench", default: 47_911, range: 1024...65_535))
        var template = Array("\(a.values["--dir"] ?? "/tmp")/shoal-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw UsageError(command: "bench", message: "cannot create a directory") }
        let dir = String(cString: made)
        defer { _ = system("rm -rf '\(dir)'") }
        out("replication benchmark: initial pull of \(docs) documents between two processes over TLS on 127.0.0.1:\(port), \(rounds) rounds")
        let durability = Durability(rawValue: a.values["--durability"] ?? "full") ?? .full
        let r = try ReplicationBenchmark.run(documents: docs, rounds: rounds, directory: dir, port: port, durability: durability)
        out("  puller durability         \(durability.rawValue)")
        out("  body size                 \(r.bodyBytes) bytes")
        out("  pull rate                 \(fmt(r.median)) docs/s   rounds: \(r.docsPerSecond.map(fmt).joined(separator: ", "))   (goal >= 20000)")
        out("  frame bytes per document  \(fmt(r.wireBytesPerDocument)) (both directions; \(fmt2(r.wireBytesPerDocument / Double(r.bodyBytes))) × the body)")
        return ExitCode.ok
    }
}

extension CLI {
    /// `shoal bench latency`: an import on one gateway until its peer holds all of it.
    static func benchLatency(_ a: Arguments) throws -> Int32 {
        let rounds = try a.int("--rounds", command: "bench", default: 5, range: 1...50)
        let port = UInt16(try a.int("--port", command: "bench", default: 47_913, range: 1024...65_535))
        let dir = try benchDirectory(a)
        defer { _ = system("rm -rf '\(dir)'") }
        out("latency benchmark: ~1 KB documents imported into a gateway (shoal run, its control socket, 500 per request) until its peer (this process, durability full, over TLS on 127.0.0.1:\(port)) holds them all; \(rounds) rounds each")
        let r = try LatencyBenchmark.run(sizes: [1_000, 10_000], rounds: rounds, directory: dir, port: port) { out($0) }
        for line in latencyLines(r) { out(line) }
        return ExitCode.ok
    }

    /// The figures of `shoal bench latency` (medians over the rounds) against their goals.
    static func latencyLines(_ r: LatencyBenchmark.Result) -> [String] {
        r.bySize.map { size, samples in
            let imp = LatencyBenchmark.median(samples.map(\.importMillis)), arr = LatencyBenchmark.median(samples.map(\.arrivalMillis))
            let rounds = samples.map { "\(fmt($0.importMillis))/\(fmt($0.arrivalMillis))" }.joined(separator: ", ")
            let goal = size <= 1_000 ? "on the peer - import \(fmt2(arr - imp)) ms (goal <= 50)" : "on the peer / import \(fmt2(arr / imp)) (goal <= 1.30)"
            return "  \(size) documents: import \(fmt(imp)) ms, on the peer \(fmt(arr)) ms after the start; \(goal)   rounds import/peer ms: \(rounds)"
        }
    }

    /// `shoal bench blob-store`: blobs in SQLite chunk rows against plain files, and SHA-256.
    static func benchBlobStore(_ a: Arguments) throws -> Int32 {
        let rounds = try a.int("--rounds", command: "bench", default: 3, range: 1...50)
        let durability = try benchDurability(a)
        let dir = try benchDirectory(a)
        defer { _ = system("rm -rf '\(dir)'") }
        out("blob-store benchmark: blobs through the store (64 KiB chunk rows) vs files (tmp + fsync + rename), durability \(durability.rawValue), \(rounds) rounds, in \(dir)")
        let r = try BlobStoreBenchmark.run(directory: dir, rounds: rounds, durability: durability, logger: Logger(sink: MemoryLogSink(), level: .none))
        for s in r.shapes {
            out("  \(s.name.padding(12)) store \(fmt2(s.storeMedian)) MB/s, files \(fmt2(s.filesMedian)) MB/s, ratio store/files \(fmt2(s.ratio))")
            out("               rounds: store \(s.storeMBps.map(fmt2).joined(separator: ", ")); files \(s.filesMBps.map(fmt2).joined(separator: ", "))")
        }
        out("  SHA-256      ShoalCore \(fmt2(r.hasherMBps)) MB/s, mbedTLS \(fmt2(r.mbedTLSMBps)) MB/s, ratio \(fmt2(r.hasherMBps / r.mbedTLSMBps))")
        return ExitCode.ok
    }
}

extension CLI {
    /// `--durability full|normal` (default full).
    static func benchDurability(_ a: Arguments) throws -> Durability {
        guard let d = Durability(rawValue: a.values["--durability"] ?? "full") else { throw UsageError(command: "bench", message: "--durability is full or normal") }
        return d
    }

    /// `shoal bench blob`: a blob moved between two processes over TLS on loopback, against TLS bulk data.
    static func benchBlob(_ a: Arguments) throws -> Int32 {
        let rounds = try a.int("--rounds", command: "bench", default: 3, range: 1...20)
        let port = UInt16(try a.int("--port", command: "bench", default: 47_913, range: 1024...65_535))
        let largest = try a.int("--megabytes", command: "bench", default: 64, range: 1...1024)
        let durability = try benchDurability(a)
        let dir = try benchDirectory(a)
        defer { _ = system("rm -rf '\(dir)'") }
        let sizes = largest > 10 ? [10, largest] : [largest]
        out("blob benchmark: one blob (\(sizes.map { "\($0) MiB" }.joined(separator: ", "))) referenced by one document, pulled from a second process over TLS on 127.0.0.1:\(port), puller durability \(durability.rawValue), \(rounds) rounds")
        var settings = ReplicationSettings()
        // SHOAL_BENCH_BLOB_CHUNKS_PER_STORE: the puller's blobChunksPerStore (1: a store call per chunk).
        if let n = ProcessEnvironment.get("SHOAL_BENCH_BLOB_CHUNKS_PER_STORE").flatMap({ Int($0) }) {
            settings.blobChunksPerStore = n
            out("  puller blobChunksPerStore \(n)")
        }
        let r = try BlobBenchmark.run(megabytes: sizes, rounds: rounds, directory: dir, port: port, durability: durability, settings: settings)
        out("  baseline (TLS bulk)       \(fmt2(r.tlsMedian)) MB/s   rounds: \(r.tlsMBps.map(fmt2).joined(separator: ", "))   (TLSSession pair, in-memory pipe, \(sizes.max() ?? 0) MiB)")
        for s in r.shapes {
            out("  blob \("\(s.megabytes) MiB".padding(20)) \(fmt2(s.median)) MB/s   rounds: \(s.mbps.map(fmt2).joined(separator: ", "))")
            out("    ratio blob/TLS bulk     \(fmt2(s.median / r.tlsMedian))   (goal >= 0.70)")
            out("    store write, same bytes \(fmt2(s.storeMedian)) MB/s (BlobWriter here, 1 MiB appends; rounds: \(s.storeMBps.map(fmt2).joined(separator: ", "))), ratio blob/store \(fmt2(s.median / s.storeMedian))")
            out("    wire bytes per blob byte \(fmt2(s.wireBytesPerBlobByte)) (frames both ways); chunks verified \(s.counters.chunksVerified), redundant pieces \(s.counters.redundantPieces), unproven chunks \(s.counters.unprovenChunks)")
        }
        return ExitCode.ok
    }
}
