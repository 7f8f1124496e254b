@testable import ShoalRuntime
import ShoalStatus
import Testing

@Suite("Blobs in /metrics and status")
struct BlobMetricsTests {
    @Test("blob gauges and GC counters are exposed; a closed store leaves them out; status has a blobs line")
    func gaugesCountersAndStatus() {
        var m = GatewayMetricsTests().metrics()
        let figures: [String: Int64] = ["count": 3, "bytes": 5000, "partialBytes": 1000, "budget": 8000, "gcDropped": 2, "gcDroppedBytes": 700, "gcOverBudget": 1]
        m.blobs = figures
        let text = m.text
        #expect(text.contains("# TYPE shoal_blobs gauge\nshoal_blobs 3\n"))
        #expect(text.contains("shoal_blob_bytes{state=\"all\"} 5000\n") && text.contains("shoal_blob_bytes{state=\"partial\"} 1000\n"))
        #expect(text.contains("shoal_blob_budget_bytes 8000\n"))
        #expect(text.contains("# TYPE shoal_blobs_collected_total counter\nshoal_blobs_collected_total 2\n"))
        #expect(text.contains("shoal_blob_collected_bytes_total 700\n") && text.contains("shoal_blob_over_budget_total 1\n"))
        #expect(!GatewayMetricsTests().metrics(storeOpen: false).text.contains("shoal_blobs"))

        var status = GatewayStatus(json: ["state": "running", "store": [:]])!
        status.blobs = figures
        let back = GatewayStatus(json: status.json)!
        #expect(back.blobs == figures)
        #expect(back.text.contains("blobs       3 held, 5000 bytes of a 8000-byte budget (1000 partial); GC dropped 2 (700 bytes), over budget 1 times"), "\(back.text)")
    }
}
