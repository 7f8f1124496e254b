import Glibc
import ShoalBench
import ShoalRuntime

/// `shoal bench http`: the local HTTP API under wrk beside the control socket, the SSE change
/// feed's latency, and the memory 100 SSE clients cost (HTTPBenchmark says how each is taken).
extension CLI {
    static func benchHTTP(_ a: Arguments) throws -> Int32 {
        var settings = HTTPBenchmark.Settings()
        settings.secondsPerLoad = try a.int("--seconds", command: "bench", default: settings.secondsPerLoad, range: 1...600)
        settings.connections = try a.int("--connections", command: "bench", default: settings.connections, range: 1...16)
        let dir = try benchDirectory(a)
        defer { _ = system("rm -rf '\(dir)'") }
        out("HTTP benchmark: a `shoal run` child (sim board, durability full) in \(dir); wrk -t\(settings.wrkThreads) -c\(settings.connections) and \(settings.connections) control-socket client threads, \(settings.secondsPerLoad) s each")
        let r = try HTTPBenchmark.run(directory: dir + "/gateway", settings: settings) { out("  … " + $0) }
        for line in httpReport(r) { out(line) }
        return ExitCode.ok
    }

    static func benchDirectory(_ a: Arguments) throws -> String {
        var template = Array("\(a.values["--dir"] ?? "/tmp")/shoal-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw UsageError(command: "bench", message: "cannot create a directory under \(a.values["--dir"] ?? "/tmp")") }
        return String(cString: made)
    }

    static func httpReport(_ r: HTTPBenchmark.Result) -> [String] {
        var lines: [String] = []
        func load(_ what: String, _ http: HTTPBenchmark.Load?, _ control: HTTPBenchmark.Load, goal: String) {
            let c = "control \(fmt(control.requestsPerSecond)) req/s, p99 \(fmt2(control.p99Millis)) ms\(control.errors > 0 ? ", \(control.errors) errors" : "")"
            guard let http else {
                lines.append("  \(what)  http (no wrk)   \(c)   (goal \(goal))")
                return
            }
            lines.append("  \(what)  http \(fmt(http.requestsPerSecond)) req/s, p99 \(fmt2(http.p99Millis)) ms\(http.errors > 0 ? ", \(http.errors) errors" : "")   \(c)")
            lines.append("  \(String(repeating: " ", count: what.count))  ratio http/control: \(fmt2(http.requestsPerSecond / max(1, control.requestsPerSecond))) req/s, \(fmt2(http.p99Millis / max(0.001, control.p99Millis))) p99   (goal \(goal))")
        }
        if let missing = r.wrkMissing { lines.append("  " + missing) }
        load("GET one document  ", r.httpGet, r.controlGet, goal: ">= 10000 GET/s")
        load("PUT 1 KB, new ids ", r.httpPut, r.controlPut, goal: ">= 3000 PUT/s, durability full")
        lines.append("  SSE write → event  median \(fmt2(r.feedMedianMillis)) ms, p99 \(fmt2(r.feedP99Millis)) ms over \(r.feedMillis.count) writes\(r.feedLost > 0 ? ", \(r.feedLost) never came" : "")   (goal p99 <= 20 ms)")
        lines.append("  RSS, \(r.settings.sseClients) SSE clients  +\(fmt2(Double(r.rssAddedKB) / 1024)) MB (gateway \(fmt2(Double(r.rssBeforeKB) / 1024)) MB before, \(fmt2(Double(r.rssOpenKB) / 1024)) open, \(fmt2(Double(r.rssAfterBurstKB) / 1024)) after \(r.settings.burstWrites) writes reached \(r.sseClientsReached))   (goal <= 5 MB)")
        return lines
    }
}
