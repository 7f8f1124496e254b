import Shoal
import ShoalTesting
import Testing

@Suite("import Shoal: blobs")
struct BlobLibraryTests {
    @Test("a blob put, written in pieces and read back chunk by chunk; its reference goes in a document")
    func putAndRead() async throws {
        let dir = temporaryDirectory("blob-lib")
        let db = try Database(directory: dir, identity: try TLSIdentity.createIdentity(commonName: "blob-lib"), fullDurability: false)
        defer { db.close() }
        let bytes = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let blob = try db.putBlob(bytes, contentType: "image/png")
        #expect(blob.digest.hasPrefix("sha256-") && blob.length == 150_000 && blob.contentType == "image/png")
        let upload = try db.blobUpload(contentType: "image/png")
        try upload.append(Array(bytes[0..<1000]))
        try upload.append(Array(bytes[1000...]))
        #expect(try upload.finish() == blob)
        var back: [UInt8] = []
        var chunks = 0
        for try await chunk in db.blobChunks(blob.digest) {
            back += chunk
            chunks += 1
        }
        #expect(back == bytes && chunks == 3)
        #expect(try db.readBlob(blob.digest) == bytes)
        #expect(try db.blob(blob.digest) == blob)
        let photos = try db.collection("site.photos")
        try photos.put("p1", json: "{\"image\":\(blob.json)}")
        #expect(try photos.get("p1")?.json?.contains(blob.digest) == true)
    }

    @Test("a bad or unknown digest is a clear error")
    func badDigest() async throws {
        let dir = temporaryDirectory("blob-lib-bad")
        let db = try Database(directory: dir, identity: try TLSIdentity.createIdentity(commonName: "blob-lib-bad"), fullDurability: false)
        defer { db.close() }
        #expect(throws: ShoalError.self) { try db.readBlob("sha256-nothex") }
        #expect(try db.blob("sha256-" + String(repeating: "0", count: 64)) == nil)
        await #expect(throws: ShoalError.self) {
            for try await _ in db.blobChunks("sha256-" + String(repeating: "0", count: 64)) {}
        }
    }
}
