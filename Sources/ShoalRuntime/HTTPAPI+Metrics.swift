import ShoalHTTP
import ShoalStatus

extension HTTPAPI {
    /// `GET /metrics`: Prometheus's text format (`GatewayMetrics`). Counts each collection in the
    /// store on this (libmicrohttpd's) thread; never cached, so each scrape is the gateway now.
    func metrics() throws -> HTTPResponse {
        HTTPResponse(status: 200, contentType: MetricsExposition.contentType, text: gateway.metrics(store: opened.store).text,
                     headers: [("Cache-Control", "no-cache")])
    }
}
