import Foundation
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
    }
}
