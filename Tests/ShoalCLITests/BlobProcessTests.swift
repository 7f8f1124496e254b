import Foundation
import ShoalCore
import ShoalRuntime
import ShoalTesting
import Testing

extension ProcessSuites {
    /// `shoal blob put | get | ls | gc` against a running gateway, and what it refuses.
    @Suite("Blobs through the CLI", .serialized)
    struct BlobProcessTests {
        @Test("put a file (into a document too), get it back verified, list and collect; bad inputs are refused and the gateway stays up")
        func putGetListCollect() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let site = base.path + "/site.yaml"
            try "group: test.blob\ncollections:\n  - name: site.photos\nstorage:\n  maxBlobSize: 300KB\n".write(toFile: site, atomically: true, encoding: .utf8)
            let g = try RunningGateway(extraArgs: ["--config", site])
            defer { _ = g.stop() }
            let file = base.path + "/photo.bin"
            let content = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) })
            try content.write(to: URL(fileURLWithPath: file))

            let put = try g.cli(["blob", "put", file, "--content-type", "image/jpeg", "--doc", "site.photos/p1", "--field", "image"])
            #expect(put.status == 0, "\(put.stderr)")
            let reference = try #require(try JSONSerialization.jsonObject(with: Data(put.stdout.utf8)) as? [String: Any])
            let digest = try #require(reference["@blob"] as? String)
            #expect(reference["length"] as? Int == 200_000 && reference["contentType"] as? String == "image/jpeg")
            let doc = try g.cli(["doc", "get", "site.photos", "p1", "--json"])
            #expect(doc.status == 0 && doc.stdout.contains(digest), "\(doc.stdout)\(doc.stderr)")

            let out = base.path + "/back.bin"
            let get = try g.cli(["blob", "get", digest, "--out", out])
            #expect(get.status == 0, "\(get.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: out)) == content)
            #expect(!FileManager.default.fileExists(atPath: out + ".tmp"))

            let text = base.path + "/note.txt"
            try "hello blobs\n".write(toFile: text, atomically: true, encoding: .utf8)
            let small = try g.cli(["blob", "put", text])
            let smallDigest = try #require((try JSONSerialization.jsonObject(with: Data(small.stdout.utf8)) as? [String: Any])?["@blob"] as? String)
            #expect(try g.cli(["blob", "get", smallDigest]).stdout == "hello blobs\n")

            let ls = try g.cli(["blob", "ls"])
            #expect(ls.status == 0 && ls.stdout.contains(digest) && ls.stdout.contains("referenced by 1") && ls.stdout.contains("2 blobs"), "\(ls.stdout)")
            let lsJSON = try g.cli(["blob", "ls", "--json"])
            #expect(lsJSON.status == 0 && lsJSON.stdout.contains("\"referencedBy\""))
            let gc = try g.cli(["blob", "gc"])
            #expect(gc.status == 0 && gc.stdout.contains("dropped 0 blobs"), "\(gc.stdout)\(gc.stderr)")  // within the grace period

            // Bad inputs: each a clear error with its exit code, nothing kept, the gateway up.
            let missing = try g.cli(["blob", "put", base.path + "/nope.bin"])
            #expect(missing.status == 4 && missing.stderr.contains("no file"), "\(missing.stderr)")
            let badDigest = try g.cli(["blob", "get", "sha256-1234"])
            #expect(badDigest.status == 2 && badDigest.stderr.contains("not a blob digest"), "\(badDigest.stderr)")
            let absent = try g.cli(["blob", "get", "sha256-" + String(repeating: "ab", count: 32), "--out", base.path + "/absent.bin"])
            #expect(absent.status == 4 && !FileManager.default.fileExists(atPath: base.path + "/absent.bin"), "\(absent.stderr)")
            let big = base.path + "/big.bin"
            try Data(count: 400_000).write(to: URL(fileURLWithPath: big))
            let tooBig = try g.cli(["blob", "put", big])
            #expect(tooBig.status == 6 && tooBig.stderr.contains("limit"), "\(tooBig.stderr)")
            let badDoc = try g.cli(["blob", "put", text, "--doc", "nocollectionslash"])
            #expect(badDoc.status == 2)
            let after = try g.cli(["blob", "ls", "--json"])
            #expect(after.status == 0 && after.stdout.contains("\"count\" : 2") || after.stdout.contains("\"count\": 2"), "\(after.stdout)")
            #expect(try g.cli(["status"]).stdout.contains("blobs"))
        }

        @Test("HTTP: POST a blob, GET it whole, by range and with If-None-Match, list it; bad digests and absent blobs are refused")
        func overHTTP() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let site = base.path + "/site.yaml"
            try "group: test.blobhttp\ncollections:\n  - name: site.photos\nhttp:\n  listen: []\n".write(toFile: site, atomically: true, encoding: .utf8)
            let g = try RunningGateway(extraArgs: ["--config", site])
            defer { _ = g.stop() }
            let sock = g.dir.path + "/http.sock"
            #expect(eventuallyBlocking(within: 20) { FileManager.default.fileExists(atPath: sock) })
            func curl(_ args: [String]) throws -> Shoal.Result {
                try Shoal.run(["-s", "--unix-socket", sock] + args, executable: HTTPProcessTests.curl)
            }
            let file = base.path + "/data.bin"
            let content = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) })
            try content.write(to: URL(fileURLWithPath: file))
            let post = try curl(["-w", "\n%{http_code}", "-H", "Content-Type: application/x-test", "--data-binary", "@" + file, "http://localhost/v1/blobs"])
            #expect(post.stdout.hasSuffix("\n201"), "\(post)")
            let reference = try #require(try JSONSerialization.jsonObject(with: Data(post.stdout.split(separator: "\n").first.map(String.init)?.utf8 ?? "".utf8)) as? [String: Any])
            let digest = try #require(reference["@blob"] as? String)
            #expect(reference["length"] as? Int == 300_000 && reference["contentType"] as? String == "application/x-test")

            let out = base.path + "/whole.bin"
            let whole = try curl(["-o", out, "-D", "-", "http://localhost/v1/blobs/\(digest)"])
            #expect(whole.stdout.contains("200") && whole.stdout.lowercased().contains("etag: \"\(digest)\""), "\(whole.stdout)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: out)) == content)
            let part = base.path + "/part.bin"
            let range = try curl(["-o", part, "-w", "%{http_code}", "-H", "Range: bytes=1000-1999", "http://localhost/v1/blobs/\(digest)"])
            #expect(range.stdout == "206", "\(range)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: part)) == content.subdata(in: 1000..<2000))
            let cached = try curl(["-o", "/dev/null", "-w", "%{http_code}", "-H", "If-None-Match: \"\(digest)\"", "http://localhost/v1/blobs/\(digest)"])
            #expect(cached.stdout == "304")
            let list = try curl(["http://localhost/v1/blobs"])
            #expect(list.stdout.contains(digest) && list.stdout.contains("\"state\":\"complete\""), "\(list.stdout)")

            let bad = try curl(["-o", "/dev/null", "-w", "%{http_code}", "http://localhost/v1/blobs/sha256-zz"])
            #expect(bad.stdout == "400")
            let absent = try curl(["-o", "/dev/null", "-w", "%{http_code}", "http://localhost/v1/blobs/sha256-" + String(repeating: "0", count: 64)])
            #expect(absent.stdout == "404")
            let outside = try curl(["-o", "/dev/null", "-w", "%{http_code}", "-H", "Range: bytes=400000-", "http://localhost/v1/blobs/\(digest)"])
            #expect(outside.stdout == "416")
            // Referred to by a document but not here: asked for from the mesh, 503 with Retry-After; the CLI says so too.
            let elsewhere = "sha256-" + String(repeating: "cd", count: 32)
            #expect(try g.cli(["doc", "put", "site.photos", "far", #"{"img":{"@blob":"\#(elsewhere)","length":5}}"#]).status == 0)
            let wanted = try curl(["-o", "/dev/null", "-D", "-", "http://localhost/v1/blobs/\(elsewhere)"])
            #expect(wanted.stdout.contains("503") && wanted.stdout.lowercased().contains("retry-after"), "\(wanted.stdout)")
            let viaCLI = try g.cli(["blob", "get", elsewhere])
            #expect(viaCLI.status == 1 && viaCLI.stderr.contains("asked for from the mesh"), "\(viaCLI.stderr)")
            // --wait: the blob arrives (here: put locally) while the reader waits.
            let later = Array("arrives later\n".utf8)
            let laterDigest = BlobDigest.of(later).description
            #expect(try g.cli(["doc", "put", "site.photos", "later", #"{"img":{"@blob":"\#(laterDigest)","length":14}}"#]).status == 0)
            let waiter = Process()
            waiter.executableURL = URL(fileURLWithPath: Shoal.binary)
            waiter.arguments = ["blob", "get", laterDigest, "--wait", "30", "--socket", g.socket]
            let waited = Pipe()
            waiter.standardOutput = waited
            try waiter.run()
            Thread.sleep(forTimeInterval: 1)
            #expect(waiter.isRunning)
            try Data(later).write(to: URL(fileURLWithPath: base.path + "/later.txt"))
            #expect(try g.cli(["blob", "put", base.path + "/later.txt"]).status == 0)
            waiter.waitUntilExit()
            #expect(waiter.terminationStatus == 0)
            #expect(waited.fileHandleForReading.readDataToEndOfFile() == Data(later))
            #expect(try g.cli(["status"]).status == 0)
        }

        @Test("control ops refuse bad pieces, unknown uploads, too many uploads and bad reads, keeping nothing")
        func controlOpsRefuseBadInput() throws {
            let g = try RunningGateway()
            defer { _ = g.stop() }
            let client = try ControlClient(path: g.socket)
            func code(_ request: JSONValue) -> String? {
                do { _ = try client.call(request); return nil } catch {
                    if case .remote(let e) = error { return e.code.rawValue }
                    return "\(error)"
                }
            }
            let token = try #require(try client.call(["op": "blob.begin", "contentType": "text/plain"])["upload"]?.stringValue)
            #expect(code(["op": "blob.append", "upload": .string(token), "data": "not base64!"]) == "bad_request")
            #expect(code(["op": "blob.append", "upload": .string(token), "data": "QUJD="]) == "bad_request")
            #expect(code(["op": "blob.append", "upload": .string(token), "data": .string(Base64.encode([UInt8](repeating: 1, count: (256 << 10) + 1)))]) == "bad_request")
            #expect(code(["op": "blob.append", "upload": "u-nope", "data": "QUJD"]) == "not_found")
            #expect(code(["op": "blob.append", "data": "QUJD"]) == "bad_request")
            // The bad pieces added nothing: the upload goes on.
            _ = try client.call(["op": "blob.append", "upload": .string(token), "data": .string(Base64.encode(Array("ABC".utf8)))])
            let reference = try client.call(["op": "blob.finish", "upload": .string(token)])
            #expect(reference["length"]?.int64Value == 3 && reference["@blob"]?.stringValue == BlobDigest.of(Array("ABC".utf8)).description)
            #expect(code(["op": "blob.finish", "upload": .string(token)]) == "not_found")
            // At most 8 uploads open at once.
            var open: [String] = []
            for _ in 0..<8 { if let t = try client.call(["op": "blob.begin"])["upload"]?.stringValue { open.append(t) } }
            #expect(open.count == 8)
            #expect(code(["op": "blob.begin"]) == "unavailable")
            for t in open { _ = try client.call(["op": "blob.cancel", "upload": .string(t)]) }
            #expect(code(["op": "blob.begin"]) == nil)
            // Reads: a bad digest, a bad offset or length, an absent blob.
            let digest = BlobDigest.of(Array("ABC".utf8)).description
            #expect(code(["op": "blob.get", "digest": "sha256-xyz"]) == "bad_request")
            #expect(code(["op": "blob.get", "digest": .string(digest), "offset": -1]) == "bad_request")
            #expect(code(["op": "blob.get", "digest": .string(digest), "offset": 4]) == "bad_request")
            #expect(code(["op": "blob.get", "digest": .string(digest), "length": 999_999_999]) == "bad_request")
            #expect(code(["op": "blob.stat", "digest": .string("sha256-" + String(repeating: "0", count: 64))]) == "not_found")
            #expect(code(["op": "blob.begin", "contentType": .string(String(repeating: "t", count: 300))]) == "bad_request")
            let piece = try client.call(["op": "blob.get", "digest": .string(digest), "offset": 1, "length": 5])
            #expect(piece["data"]?.stringValue == Base64.encode(Array("BC".utf8)) && piece["end"]?.boolValue == true)
            #expect(try client.call(["op": "blob.stat", "digest": .string(digest)])["state"]?.stringValue == "complete")
        }
    }
}
