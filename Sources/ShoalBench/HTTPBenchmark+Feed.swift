import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime
import ShoalThreads

/// The change feed's figures: write → SSE event latency, and the RSS that open SSE clients cost.
extension HTTPBenchmark {
    /// One write through the control socket; its sequence.
    static func put(_ client: ControlClient, id: String, body: JSONValue) throws -> Int64 {
        let change = try client.call(["op": "doc.put", "collection": .string(collection), "id": .string(id), "body": body])
        guard let sequence = change["sequence"]?.int64Value else { throw ConfigurationFailure(message: "doc.put answered without a sequence: \(change.compactText)") }
        return sequence
    }

    static func feedPath(since: Int64) -> String { "/v1/changes?feed=sse&since=\(since)&collection=\(collection)" }

    /// `writes` writes through the control socket, one at a time; each is timed from just before
    /// it is sent until a thread of this process reading `/v1/changes?feed=sse` sees its sequence
    /// (one clock for both). Returns the sorted latencies and how many never came (2 s each).
    static func feedLatency(_ gateway: Gateway, writes: Int, body: JSONValue) throws -> ([Double], Int) {
        let writer = try ControlClient(path: gateway.controlSocket)
        let since = try put(writer, id: "feed-start", body: body)
        let sse = try SSEClient(port: gateway.port, path: feedPath(since: since))
        struct Seen { var at: [Int64: ContinuousClock.Instant] = [:]; var stop = false; var failure: String? }
        let seen = Locked(Seen())
        let gate = ConditionLock()
        let reader = WorkerGroup()
        guard reader.spawn("bench-sse", { [sse] in
            while !seen.withLock({ $0.stop }) {
                do {
                    let open = try sse.pump(timeoutMillis: 100) { id in
                        let now = ContinuousClock.now
                        gate.withLock { seen.withLock { $0.at[id] = now }; gate.broadcast() }
                    }
                    if !open { seen.withLock { $0.failure = "the SSE stream ended" }; return }
                } catch {
                    seen.withLock { $0.failure = "reading the SSE stream: \(error)" }
                    return
                }
            }
        }) else { throw ConfigurationFailure(message: "cannot start the SSE reader thread") }
        defer {
            seen.withLock { $0.stop = true }
            _ = reader.join(timeoutMillis: 2000)
            sse.close()
        }
        var millis: [Double] = [], lost = 0
        for i in 0..<writes {
            let start = ContinuousClock.now
            let sequence = try put(writer, id: "feed-\(i)", body: body)
            let deadline = ContinuousClock.now + .seconds(2)
            let arrived = gate.withLock { () -> ContinuousClock.Instant? in
                while true {
                    if let at = seen.withLock({ $0.at[sequence] }) { return at }
                    let left = deadline - ContinuousClock.now
                    if left <= .zero || seen.withLock({ $0.failure != nil }) { return nil }
                    gate.wait(timeoutMillis: max(1, Int(left.secondsDouble * 1000)))
                }
            }
            if let failure = seen.withLock({ $0.failure }) { throw ConfigurationFailure(message: failure) }
            if let arrived { millis.append((arrived - start).secondsDouble * 1000) } else { lost += 1 }
        }
        return (millis.sorted(), lost)
    }

    /// The gateway's VmRSS before `sseClients` SSE clients connect, with them connected and idle,
    /// and once `burstWrites` writes have reached every one of them.
    static func sseMemory(_ gateway: Gateway, settings: Settings, body: JSONValue, into result: inout Result) throws {
        let writer = try ControlClient(path: gateway.controlSocket)
        let since = try put(writer, id: "rss-start", body: body)
        usleep(1_000_000)
        result.rssBeforeKB = residentKB(gateway.pid)
        var clients: [SSEClient] = []
        defer { for c in clients { c.close() } }
        for _ in 0..<settings.sseClients {
            let c = try SSEClient(port: gateway.port, path: feedPath(since: since))
            clients.append(c)
        }
        // Each has its answer's head (the feed holds it).
        for c in clients {
            let deadline = monotonicMillis() + 5000
            while c.status == 0 && monotonicMillis() < deadline { try c.pump(timeoutMillis: 100) }
            guard c.status == 200 else { throw ConfigurationFailure(message: "an SSE client got status \(c.status) (0: nothing within 5 s)") }
        }
        usleep(1_000_000)
        result.rssOpenKB = residentKB(gateway.pid)
        var last = since
        for i in 0..<settings.burstWrites { last = try put(writer, id: "rss-\(i)", body: body) }
        let deadline = monotonicMillis() + 20_000
        while monotonicMillis() < deadline {
            let behind = clients.filter { $0.lastID < last && !$0.ended }
            if behind.isEmpty { break }
            var fds = behind.map { pollfd(fd: $0.stream.fd, events: Int16(POLLIN), revents: 0) }
            _ = poll(&fds, nfds_t(fds.count), 100)
            for (c, p) in zip(behind, fds) where p.revents != 0 { try c.pump(timeoutMillis: 0) }
        }
        result.rssAfterBurstKB = residentKB(gateway.pid)
        result.sseClientsReached = clients.filter { $0.lastID >= last }.count
    }
}
