import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime

/// `shoal bench http`: the local HTTP API of a real `shoal run` child (sim board, durability
/// full, a fresh data directory, a free loopback port), against the same operations through its
/// control socket in the same run. Four figures: GET of one document and PUT of ~1 KB documents
/// (wrk, requests/s and p99) beside the control socket driven by as many client threads as wrk
/// has connections; the change feed's latency from a write to its SSE event; and the gateway's
/// RSS added by 100 open SSE clients. What a reader would get wrong: wrk, the control clients and
/// the gateway share the machine's cores, so the ratios say more than the absolute figures.
public enum HTTPBenchmark {
    public struct Settings: Sendable {
        /// wrk's connections and the control socket's client threads (the control socket serves 16).
        public var connections = 16
        public var wrkThreads = 2
        public var secondsPerLoad = 8
        public var feedWrites = 1000
        public var sseClients = 100
        public var burstWrites = 200
        public init() {}
    }

    /// One load run: how many requests answered per second, and the 99th percentile of their time.
    public struct Load: Sendable {
        public var requestsPerSecond: Double
        public var p99Millis: Double
        public var requests: Int
        /// Answers other than 2xx/3xx, and socket errors.
        public var errors: Int
    }

    public struct Result: Sendable {
        public var settings: Settings
        public var port: UInt16
        /// Nil when wrk is not installed (`wrkMissing` says how to get it).
        public var httpGet: Load?
        public var httpPut: Load?
        public var controlGet: Load
        public var controlPut: Load
        public var wrkMissing: String?
        /// Write → event on `/v1/changes?feed=sse`, each write alone (sorted, milliseconds).
        public var feedMillis: [Double]
        public var feedLost: Int
        public var rssBeforeKB: Int
        public var rssOpenKB: Int
        public var rssAfterBurstKB: Int
        public var sseClientsReached: Int

        public var feedMedianMillis: Double { HTTPBenchmark.percentile(feedMillis, 0.5) }
        public var feedP99Millis: Double { HTTPBenchmark.percentile(feedMillis, 0.99) }
        /// The larger of the two: with the clients open, and once a burst reached them all.
        public var rssAddedKB: Int { max(rssOpenKB, rssAfterBurstKB) - rssBeforeKB }
    }

    static let collection = "bench.http"
    static let getID = "get-target"

    /// Runs every figure; `progress` hears a line as each part starts.
    public static func run(directory: String, settings: Settings = Settings(), progress: (String) -> Void = { _ in }) throws -> Result {
        let gateway = try Gateway(directory: directory)
        defer { gateway.stop() }
        let body = StoreBenchmark.body(0)
        do {
            let setup = try ControlClient(path: gateway.controlSocket)
            _ = try setup.call(["op": "doc.put", "collection": .string(collection), "id": .string(getID), "body": try JSONValue.parse(body)])
        }
        let wrk = ChildProcess.find("wrk")
        let wrkMissing = wrk == nil ? "wrk is not installed (apt-get install wrk); the HTTP load figures are skipped" : nil
        let docPath = "/v1/collections/\(collection)/docs/"
        var result = Result(settings: settings, port: gateway.port, httpGet: nil, httpPut: nil,
                            controlGet: Load(requestsPerSecond: 0, p99Millis: 0, requests: 0, errors: 0),
                            controlPut: Load(requestsPerSecond: 0, p99Millis: 0, requests: 0, errors: 0),
                            wrkMissing: wrkMissing, feedMillis: [], feedLost: 0, rssBeforeKB: 0, rssOpenKB: 0, rssAfterBurstKB: 0, sseClientsReached: 0)
        let url = "http://127.0.0.1:\(gateway.port)\(docPath)"
        if let wrk {
            progress("wrk GET \(docPath)\(getID), \(settings.connections) connections, \(settings.secondsPerLoad) s")
            result.httpGet = try runWrk(wrk, url: url + getID, script: nil, directory: directory, settings: settings)
        }
        progress("control socket doc.get, \(settings.connections) client threads, \(settings.secondsPerLoad) s")
        result.controlGet = try controlLoad(gateway.controlSocket, settings: settings) { _, _ in
            ["op": "doc.get", "collection": .string(collection), "id": .string(getID)]
        }
        let document = try JSONValue.parse(body)
        if let wrk {
            progress("wrk PUT of \(body.utf8.count)-byte documents, a new id each, \(settings.connections) connections, \(settings.secondsPerLoad) s")
            let script = directory + "/put.lua"
            try Files.write(script, putScript(path: docPath, body: body))
            result.httpPut = try runWrk(wrk, url: url, script: script, directory: directory, settings: settings)
        }
        progress("control socket doc.put, \(settings.connections) client threads, \(settings.secondsPerLoad) s")
        result.controlPut = try controlLoad(gateway.controlSocket, settings: settings) { thread, n in
            ["op": "doc.put", "collection": .string(collection), "id": .string("control-\(thread)-\(n)"), "body": document]
        }
        progress("SSE change feed: \(settings.feedWrites) writes, each awaited on /v1/changes?feed=sse")
        (result.feedMillis, result.feedLost) = try feedLatency(gateway, writes: settings.feedWrites, body: document)
        progress("RSS: \(settings.sseClients) SSE clients open, then \(settings.burstWrites) writes that reach them all")
        try sseMemory(gateway, settings: settings, body: document, into: &result)
        return result
    }

    /// The `p` quantile of sorted values (nearest rank).
    public static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        let rank = Int((p * Double(sorted.count)).rounded(.up)) - 1
        return sorted[min(sorted.count - 1, max(0, rank))]
    }

    /// VmRSS of a process in KiB (0 if it cannot be read).
    public static func residentKB(_ pid: pid_t) -> Int {
        guard let status = try? Files.read("/proc/\(pid)/status") else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
        }
        return 0
    }
}
