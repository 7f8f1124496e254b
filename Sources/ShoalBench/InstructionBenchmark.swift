import Glibc
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalRuntime
import ShoalStore
import ShoalTLS

/// `shoal bench instructions`: CPU cost per replicated ~1 KB document in instructions, which
/// valgrind's callgrind counts the same on every run whatever else the machine does. Both sides
/// are gateways (`shoal run`'s, from shoal-bench-gateway) under callgrind: a pusher with the documents preloaded, a puller that
/// dials it and pulls them all over TLS. Each side's count is split by where the instructions were
/// spent (self cost: TLS, framing, JSON, SQLite, Shoal's store code, the Swift runtime and libc,
/// the rest). Run twice, with `small` and `large` documents; the difference divided by the
/// difference in documents is the cost of one document, with start-up, handshake and shutdown gone.
public enum InstructionBenchmark {
    public static let categories = ["TLS", "framing", "JSON", "SQLite", "store", "Swift runtime, libc", "rest"]

    /// Instructions of one process, by category.
    public struct Profile: Sendable {
        public var total: Int64 = 0
        public var byCategory: [String: Int64] = [:]
        /// TLS handshakes' instructions (inclusive), left out of `total` and TLS: a run may dial
        /// more than once (a link dropped and redialled under callgrind's slowness), and a
        /// handshake is not the cost of a document.
        public var handshakes: Int64 = 0
    }

    public struct Side: Sendable {
        /// Instructions per document, by category and in total.
        public var perDocument: [String: Double]
        public var total: Double
    }

    public struct Result: Sendable {
        public var small: Int
        public var large: Int
        public var pusher: Side
        public var puller: Side
        public var bodyBytes: Int
    }

    public static let valgrind = "/usr/bin/valgrind"

    /// `reuse`: a directory of an earlier run (kept with SHOAL_BENCH_KEEP=1) whose callgrind
    /// files are read again instead of running the gateways.
    public static func run(directory: String, small: Int, large: Int, port: UInt16, reuse: String? = nil,
                           progress: @escaping @Sendable (String) -> Void) throws -> Result {
        var runs: [(push: Profile, pull: Profile)] = []
        if let reuse {
            for n in [small, large] { runs.append((try parse("\(reuse)/n\(n)/pusher.callgrind"), try parse("\(reuse)/n\(n)/puller.callgrind"))) }
        } else {
            guard Files.exists(valgrind) else { throw ConfigurationFailure(message: "\(valgrind) is not installed (apt-get install valgrind)") }
            for (i, n) in [small, large].enumerated() {
                progress("run \(i + 1)/2: \(n) documents, both gateways under callgrind")
                runs.append(try once(directory: directory + "/n\(n)", documents: n, port: port, progress: progress))
            }
        }
        func side(_ a: Profile, _ b: Profile) -> Side {
            let d = Double(large - small)
            var per: [String: Double] = [:]
            for c in categories { per[c] = Double((b.byCategory[c] ?? 0) - (a.byCategory[c] ?? 0)) / d }
            return Side(perDocument: per, total: Double(b.total - a.total) / d)
        }
        return Result(small: small, large: large, pusher: side(runs[0].push, runs[1].push), puller: side(runs[0].pull, runs[1].pull),
                      bodyBytes: StoreBenchmark.body(0).utf8.count)
    }

    static func once(directory: String, documents: Int, port: UInt16, progress: @escaping @Sendable (String) -> Void) throws -> (push: Profile, pull: Profile) {
        let quiet = Logger(sink: MemoryLogSink(), level: .none)
        let pushDir = directory + "/pusher", pullDir = directory + "/puller"
        try Files.makeDirectories(pushDir)
        try Files.makeDirectories(pullDir)
        let pusherID = try Identity.createSelfSigned(.init(commonName: "bench-pusher"))
        let pullerID = try Identity.createSelfSigned(.init(commonName: "bench-puller"))
        try IdentityStore(directory: pushDir + "/identities").save(pusherID, label: "shoal")
        try IdentityStore(directory: pullDir + "/identities").save(pullerID, label: "shoal")
        let readings = try CollectionName(parsing: "sensors.readings")
        try ReplicationBenchmark.preload(pushDir + "/shoal.db", as: pusherID, collection: readings, documents: documents, logger: quiet)
        // The gateway as `shoal run` runs it, from a binary valgrind can run (see its main.swift).
        let gateway = Files.directory(of: ChildProcess.currentExecutable) + "/shoal-bench-gateway"
        guard Files.exists(gateway) else {
            throw ConfigurationFailure(message: "\(gateway) is missing: build it beside shoal (swift build -c release --product shoal-bench-gateway; make release builds it)")
        }
        func site(_ path: String, _ text: String) throws {
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            guard fd >= 0 else { throw ConfigurationFailure(message: "cannot write \(path)") }
            _ = Array(text.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
        }
        try site(directory + "/pusher.yaml", """
            group: bench.instructions
            collections:
              - name: sensors.readings
            authenticator:
              allowedPeers: [\(pullerID.peerID)]
            replication:
              listen: 127.0.0.1:\(port)
            http:
              enabled: false
            """)
        try site(directory + "/puller.yaml", """
            group: bench.instructions
            collections:
              - name: sensors.readings
            authenticator:
              allowedPeers: [\(pusherID.peerID)]
            replication:
              listen: none
              peers: ["127.0.0.1:\(port)"]
            http:
              enabled: false
            """)
        func start(_ name: String, _ dir: String) throws -> ChildProcess {
            try ChildProcess(path: valgrind, arguments: ["--tool=callgrind", "--callgrind-out-file=\(directory)/\(name).callgrind",
                                                         gateway, "--board", "sim", "--data-dir", dir, "--config", "\(directory)/\(name).yaml", "--log-level", "warning"],
                             output: "\(directory)/\(name).log")
        }
        let pusher = try start("pusher", pushDir)
        var listening = false
        for _ in 0..<1200 where !listening {
            if let s = try? TCPStream.connect(ipv4: "127.0.0.1", port: port, timeoutMillis: 200) { s.close(); listening = true } else { usleep(100_000) }
        }
        guard listening else {
            _ = pusher.stop(graceMillis: 60_000)
            throw ConfigurationFailure(message: "the pusher under callgrind did not listen on 127.0.0.1:\(port) in 2 minutes (see \(directory)/pusher.log)")
        }
        let puller = try start("puller", pullDir)
        let started = ContinuousClock.now
        var held: Int64 = 0
        while held < Int64(documents) {
            sleep(1)
            if let c = try? ControlClient(path: pullDir + "/control.sock"), case .object(let o)? = try? c.call(["op": "status"]),
               case .object(let store)? = o["store"] {
                held = store["documents"]?.int64Value ?? 0
            }
            if ContinuousClock.now - started > .seconds(1800) {
                _ = puller.stop(graceMillis: 60_000)
                _ = pusher.stop(graceMillis: 60_000)
                throw ConfigurationFailure(message: "the puller under callgrind held \(held) of \(documents) documents after 30 minutes")
            }
        }
        progress("  pulled \(documents) in \(Int((ContinuousClock.now - started).secondsDouble)) s under callgrind; stopping both")
        // Callgrind writes its file when the process exits.
        _ = puller.stop(graceMillis: 120_000)
        _ = pusher.stop(graceMillis: 120_000)
        return (try parse(directory + "/pusher.callgrind"), try parse(directory + "/puller.callgrind"))
    }

    /// Self cost by category, from a callgrind output file (name compression, one event: Ir).
    public static func parse(_ path: String) throws -> Profile {
        guard let text = try Files.read(path, max: 1 << 30) else { throw ConfigurationFailure(message: "no callgrind output at \(path)") }
        var objects: [Substring: Substring] = [:], functions: [Substring: Substring] = [:]
        var object: Substring = "", function: Substring = ""
        var callee: (object: Substring, function: Substring) = ("", "")
        var afterCalls = false
        // libc and runtime work a C library asks for (SQLite zeroing pages, mbedTLS zeroizing
        // buffers) is that library's: the call's inclusive cost moves from the runtime to it.
        var moved: [String: Int64] = [:]
        var byKey: [String: Int64] = [:]  // "object\tfunction"
        var profile = Profile()
        func named(_ value: Substring, _ table: inout [Substring: Substring]) -> Substring {
            // "(12) name" defines id 12; "(12)" refers to it; a bare name is used as it is.
            guard value.first == "(", let close = value.firstIndex(of: ")") else { return value }
            let id = value[value.startIndex...close]
            let rest = value[value.index(after: close)...].drop { $0 == " " }
            if rest.isEmpty { return table[id] ?? id }
            table[id] = rest
            return rest
        }
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            guard let first = line.first else { continue }
            if first.isNumber || first == "+" || first == "-" || first == "*" {
                if afterCalls {  // a call's inclusive cost, not self
                    afterCalls = false
                    let from = category(object: String(object), function: String(function))
                    if callee.function == "mbedtls_ssl_handshake", !function.hasPrefix("mbedtls_"),
                       let cost = line.split(separator: " ").last.flatMap({ Int64($0) }) {
                        moved["TLS", default: 0] -= cost
                        profile.handshakes += cost
                    }
                    if from == "SQLite" || from == "TLS", category(object: String(callee.object), function: String(callee.function)) == "Swift runtime, libc",
                       let cost = line.split(separator: " ").last.flatMap({ Int64($0) }) {
                        moved[from, default: 0] += cost
                        moved["Swift runtime, libc", default: 0] -= cost
                    }
                    callee.object = object  // cob= names the next call's object only
                    continue
                }
                guard let cost = line.split(separator: " ").last.flatMap({ Int64($0) }) else { continue }
                byKey["\(object)\t\(function)", default: 0] += cost
                continue
            }
            if line.hasPrefix("ob=") { object = named(line.dropFirst(3), &objects); callee.object = object }
            else if line.hasPrefix("fn=") { function = named(line.dropFirst(3), &functions); callee.object = object }
            else if line.hasPrefix("cob=") { callee.object = named(line.dropFirst(4), &objects) }
            else if line.hasPrefix("cfn=") { callee.function = named(line.dropFirst(4), &functions) }
            else if line.hasPrefix("calls=") { afterCalls = true }
        }
        for (key, cost) in byKey {
            let parts = key.split(separator: "\t", maxSplits: 1, omittingEmptySubsequences: false)
            let c = category(object: parts.first.map(String.init) ?? "", function: parts.count > 1 ? String(parts[1]) : "")
            profile.byCategory[c, default: 0] += cost
            profile.total += cost
        }
        for (c, cost) in moved { profile.byCategory[c, default: 0] += cost }
        profile.total -= profile.handshakes
        return profile
    }

    /// Where a function's instructions count: by the library it is in, else by the Swift module
    /// its mangled name starts with (callgrind does not demangle Swift).
    public static func category(object: String, function: String) -> String {
        if object.contains("libmbed") || function.hasPrefix("$s8ShoalTLS") || function.hasPrefix("mbedtls_") { return "TLS" }
        if object.contains("libsqlite3") || function.hasPrefix("sqlite3") { return "SQLite" }
        if function.hasPrefix("$s9ShoalWire") { return "framing" }
        if function.hasPrefix("$s9ShoalCore") && function.contains("JSON") { return "JSON" }
        if function.hasPrefix("$s10ShoalStore") { return "store" }
        if object.contains("libc.so") || object.contains("ld-linux") || object.contains("libswift") || object.contains("libdispatch")
            || object.contains("libstdc++") || object.contains("libgcc") || function.hasPrefix("swift_") || function.hasPrefix("_swift")
            || function.hasPrefix("$ss") || function.hasPrefix("$sS") || function.hasPrefix("__") || function.hasPrefix("mem") || function.hasPrefix("malloc")
            || function.hasPrefix("free") || function.hasPrefix("pthread_") {
            return "Swift runtime, libc"
        }
        return "rest"
    }
}
