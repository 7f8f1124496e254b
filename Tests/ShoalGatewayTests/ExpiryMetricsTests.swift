@testable import ShoalRuntime
import ShoalStatus
import ShoalStore
import Testing

@Suite("Expiration in /metrics and status")
struct ExpiryMetricsTests {
    @Test("purges by reason and refusals are counters; a closed store leaves them out; status has a line")
    func countersAndStatus() {
        var m = GatewayMetricsTests().metrics()
        var e = ExpiryCounts()
        e.expired = 2; e.ttl = 40; e.budget = 5; e.refused = 7
        m.expiry = e
        let text = m.text
        #expect(text.contains("# TYPE shoal_documents_expired_total counter\n"))
        #expect(text.contains("shoal_documents_expired_total{reason=\"expired\"} 2\n"))
        #expect(text.contains("shoal_documents_expired_total{reason=\"ttl\"} 40\n"))
        #expect(text.contains("shoal_documents_expired_total{reason=\"budget\"} 5\n"))
        #expect(text.contains("shoal_documents_expiry_refused_total 7\n"))
        #expect(!GatewayMetricsTests().metrics(storeOpen: false).text.contains("shoal_documents_expired_total"))

        var status = GatewayStatus(json: ["state": "running", "store": [:]])!
        status.expiration = ["expired": 2, "ttl": 40, "budget": 5, "refused": 7]
        let back = GatewayStatus(json: status.json)!
        #expect(back.expiration == status.expiration)
        #expect(back.text.contains("expiration  2 expired, 40 past ttl, 5 over budget (purged, no tombstones); 7 refused on receive"))
    }
}
