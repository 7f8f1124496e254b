import ShoalHTTP
import ShoalStatus

extension HTTPAPI {
    /// `GET /metrics`: Prometheus's text format (`GatewayMetrics`). Counts each collection in the
    /// store on this (libmicrohttpd's) thread; never cached, so each scrape is the gateway now.
    func metrics() throws -> HTTPResponse {
        var m = gateway.metrics(store: opened.store)
        let all = servers.withLock { $0 }
        let buffers = all.flatMap(\.streamBuffers)
        m.http = GatewayMetrics.HTTP(connections: all.reduce(0) { $0 + $1.openConnections }, idleConnectionsClosed: all.reduce(0) { $0 + $1.idleConnectionsClosed },
                                     streams: buffers.count, bufferedBytes: buffers.reduce(0, +), largestBufferBytes: buffers.max() ?? 0)
        return HTTPResponse(status: 200, contentType: MetricsExposition.contentType, text: m.text, headers: [("Cache-Control", "no-cache")])
    }
}
