import Foundation
import ShoalRuntime
import Testing

/// The OpenAPI document the binary serves is docs/openapi.json, and it describes every route of
/// docs/http-api.md (the contract): a route added to one and not the other fails here.
@Suite("OpenAPI document")
struct OpenAPIDocumentTests {
    static let docs: String = {
        var parts = #filePath.split(separator: "/").map(String.init)
        parts.removeLast(3)
        return "/" + parts.joined(separator: "/") + "/docs"
    }()

    @Test("the embedded document is docs/openapi.json byte for byte (run `make boards` after editing it)")
    func embeddedMatchesFile() throws {
        let file = try #require(readFile("\(Self.docs)/openapi.json"), "cannot read \(Self.docs)/openapi.json")
        #expect(OpenAPIDocument.text == file, "Sources/ShoalRuntime/OpenAPIDocument.swift is stale: run scripts/embed-openapi.sh")
    }

    @Test("the document parses as JSON and is OpenAPI 3.1 with paths and an error schema")
    func parsesAsOpenAPI31() throws {
        let root = try #require(try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.text.utf8)) as? [String: Any])
        #expect((root["openapi"] as? String)?.hasPrefix("3.1") == true)
        let schemas = (root["components"] as? [String: Any])?["schemas"] as? [String: Any]
        let error = schemas?["Error"] as? [String: Any]
        #expect((error?["required"] as? [String]).map(Set.init) == ["error", "reason"])
        #expect((root["paths"] as? [String: Any])?.isEmpty == false)
    }

    @Test("every route in docs/http-api.md's table is in the document, with its method, and nothing else is")
    func routesMatchContract() throws {
        let contract = try #require(readFile("\(Self.docs)/http-api.md"), "cannot read \(Self.docs)/http-api.md")
        let documented = Set(Self.contractRoutes(contract))
        try #require(documented.count >= 15, "found only \(documented.count) routes in docs/http-api.md's table")
        let root = try #require(try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.text.utf8)) as? [String: Any])
        let paths = try #require(root["paths"] as? [String: [String: Any]])
        var described = Set<String>()
        for (path, item) in paths {
            for method in ["get", "put", "post", "delete", "patch", "head"] where item[method] != nil {
                described.insert("\(method.uppercased()) \(path)")
            }
        }
        #expect(documented.subtracting(described).sorted() == [], "routes in docs/http-api.md missing from docs/openapi.json")
        #expect(described.subtracting(documented).sorted() == [], "routes in docs/openapi.json that docs/http-api.md does not list")
    }

    /// "| `GET /v1/collections/{c}/docs?limit=…` | …" → "GET /v1/collections/{collection}/docs".
    static func contractRoutes(_ text: String) -> [String] {
        text.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("| `") else { return nil }
            let cell = line.dropFirst(3).prefix { $0 != "`" }
            let words = cell.split(separator: " ", maxSplits: 1)
            guard words.count == 2, ["GET", "PUT", "POST", "DELETE"].contains(String(words[0])) else { return nil }
            let path = words[1].prefix { $0 != "?" }
                .replacingOccurrences(of: "{c}", with: "{collection}")
            return "\(words[0]) \(path)"
        }
    }
}
