import Testing
@testable import ShoalRuntime

/// The console page (`GET /`) as served: one self-contained page that asks only this gateway's v1
/// API, small enough for a slow link to a gateway in the field.
@Suite("Web console page")
struct ConsolePageTests {
    let page = ConsolePage.html

    @Test("the page is one HTML document that fetches nothing from elsewhere: no external script, style, font or image")
    func selfContained() {
        #expect(page.hasPrefix("<!doctype html>"))
        #expect(page.hasSuffix("</html>"))
        for outside in ["http://", "https://", "//cdn", "<script src", "<link", "@import", "url("] {
            #expect(!page.contains(outside), "the page refers to \(outside)")
        }
    }

    @Test("it is small (under 48 KB) and every API path it calls is a v1 route of the contract")
    func smallAndOnTheContract() {
        #expect(page.utf8.count < 48 * 1024, "\(page.utf8.count) bytes")
        let known = ["/v1/status", "/v1/peers", "/v1/mesh", "/v1/collections", "/v1/conflicts", "/v1/events", "/v1/changes"]
        var paths: [Substring] = []
        var rest = page[...]
        while let r = rest.range(of: "\"/v1/") {
            let tail = rest[r.lowerBound...].dropFirst()
            paths.append(tail.prefix { $0 != "\"" && $0 != "?" })
            rest = rest[r.upperBound...]
        }
        #expect(!paths.isEmpty)
        for p in paths {
            #expect(known.contains { p.hasPrefix($0) }, "the page calls \(p), not in docs/http-api.md")
        }
    }

    @Test("the hooks the browser test reads are in the page")
    func hooks() {
        for id in ["id=\"state\"", "id=\"led\"", "id=\"mesh\"", "id=\"peers\"", "id=\"docs\"", "id=\"doc-list\"", "id=\"doc-view\"",
                   "id=\"conflicts\"", "id=\"events\"", "id=\"sync\"", "id=\"live\""] {
            #expect(page.contains(id), "no \(id)")
        }
    }
}
