import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalThreads

/// The load figures: wrk against the HTTP API, and the same operation through the control socket
/// from as many threads (one connection each) as wrk has connections, for the same time.
extension HTTPBenchmark {
    /// Runs wrk with `--latency` and reads its summary: requests/s, the 99 % line, errors.
    static func runWrk(_ wrk: String, url: String, script: String?, directory: String, settings: Settings) throws -> Load {
        let output = directory + "/wrk.out"
        unlink(output)
        var arguments = ["-t", "\(settings.wrkThreads)", "-c", "\(settings.connections)", "-d", "\(settings.secondsPerLoad)s", "--latency", "--timeout", "5s"]
        if let script { arguments += ["-s", script] }
        let child = try ChildProcess(path: wrk, arguments: arguments + [url], output: output)
        let status = child.wait()
        let text = (try? Files.read(output)) ?? ""
        guard status == 0, let load = parseWrk(text) else {
            throw ConfigurationFailure(message: "wrk \(arguments.joined(separator: " ")) \(url) ended with status \(status) and printed:\n\(text.suffix(1500))")
        }
        return load
    }

    /// wrk's summary: `Requests/sec: N`, the `99%` line of the latency distribution, `N requests
    /// in`, `Non-2xx or 3xx responses: N` and `Socket errors: connect A, read B, write C, timeout D`.
    static func parseWrk(_ text: String) -> Load? {
        var rate: Double?, p99: Double?, requests = 0, errors = 0
        for raw in text.split(separator: "\n") {
            let words = raw.split(separator: " ")
            guard let first = words.first else { continue }
            if first == "Requests/sec:", words.count > 1 { rate = Double(words[1]) }
            if first == "99%", words.count > 1 { p99 = millis(String(words[1])) }
            if words.count > 2, words[1] == "requests", words[2] == "in" { requests = Int(first) ?? 0 }
            if raw.contains("Non-2xx or 3xx responses:"), let last = words.last { errors += Int(last) ?? 0 }
            if first == "Socket", raw.contains("errors:") {
                for w in words where w.first?.isNumber == true { errors += Int(w.filter(\.isNumber)) ?? 0 }
            }
        }
        guard let rate, let p99 else { return nil }
        return Load(requestsPerSecond: rate, p99Millis: p99, requests: requests, errors: errors)
    }

    /// "812.00us", "1.23ms", "2.01s", "1.50m" in milliseconds.
    static func millis(_ text: String) -> Double? {
        let units: [(String, Double)] = [("us", 0.001), ("ms", 1), ("m", 60_000), ("s", 1000)]
        for (suffix, scale) in units where text.hasSuffix(suffix) {
            return Double(text.dropLast(suffix.count)).map { $0 * scale }
        }
        return nil
    }

    /// `settings.connections` threads, each with its own control connection, call `request(thread,
    /// n)` back to back for `secondsPerLoad` seconds, all started together.
    static func controlLoad(_ socket: String, settings: Settings, request: @escaping @Sendable (Int, Int) -> JSONValue) throws -> Load {
        struct Tally { var millis: [Double] = []; var errors = 0; var failure: String?; var ready = 0; var go = false }
        let tally = Locked(Tally())
        let gate = ConditionLock()
        let workers = WorkerGroup()
        let seconds = settings.secondsPerLoad
        for thread in 0..<settings.connections {
            let spawned = workers.spawn("bench-control") {
                var local: [Double] = []
                var errors = 0
                let client: ControlClient
                do { client = try ControlClient(path: socket) } catch {
                    tally.withLock { $0.failure = "\(error)" }
                    gate.withLock { tally.withLock { $0.ready += 1 }; gate.broadcast() }
                    return
                }
                gate.withLock {
                    tally.withLock { $0.ready += 1 }
                    gate.broadcast()
                    while !tally.withLock({ $0.go }) { gate.wait() }
                }
                let end = ContinuousClock.now + .seconds(seconds)
                var n = 0
                while true {
                    let start = ContinuousClock.now
                    if start >= end { break }
                    do { _ = try client.call(request(thread, n)) } catch { errors += 1 }
                    local.append((ContinuousClock.now - start).secondsDouble * 1000)
                    n += 1
                }
                tally.withLock { $0.millis += local; $0.errors += errors }
            }
            guard spawned else { throw ConfigurationFailure(message: "cannot start a control client thread") }
        }
        gate.withLock {
            while tally.withLock({ $0.ready }) < settings.connections { gate.wait() }
        }
        let start = ContinuousClock.now
        gate.withLock { tally.withLock { $0.go = true }; gate.broadcast() }
        let stuck = workers.join(timeoutMillis: (seconds + 30) * 1000)
        let elapsed = (ContinuousClock.now - start).secondsDouble
        let t = tally.withLock { $0 }
        if let failure = t.failure { throw ConfigurationFailure(message: "a control client could not connect: \(failure)") }
        guard stuck.isEmpty else { throw ConfigurationFailure(message: "control clients still blocked 30 s after the run: \(stuck.joined(separator: ", "))") }
        let sorted = t.millis.sorted()
        return Load(requestsPerSecond: Double(sorted.count) / elapsed, p99Millis: percentile(sorted, 0.99), requests: sorted.count, errors: t.errors)
    }

    /// The wrk script for PUT: a new id per request (thread index and count), the same ~1 KB body.
    static func putScript(path: String, body: String) -> String {
        """
        -- Written by `shoal bench http`: PUT of one ~1 KB document per request, a new id each time.
        local body = [==[\(body)]==]
        local count = 0
        local threads = 0
        function setup(thread)
          thread:set("thread_index", threads)
          threads = threads + 1
        end
        function request()
          count = count + 1
          return wrk.format("PUT", "\(path)wrk-" .. thread_index .. "-" .. count, { ["Content-Type"] = "application/json" }, body)
        end
        """
    }
}
