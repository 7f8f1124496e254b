import Glibc
import ShoalCore
import ShoalStore
import ShoalTesting
import Testing

/// A read left open by the store (a statement stepped to a row and never reset) pins a snapshot:
/// the WAL can never be checkpointed (it grows without bound) and another connection's write
/// fails with SQLITE_BUSY_SNAPSHOT. Found by running a
/// gateway for a while: after 60,000 writes its shoal.db was still 4,096 bytes and its WAL 26 MB.
@Suite("Store reads end with the call that made them")
struct StoreReadReleaseTests {
    static func fileSize(_ path: String) -> Int {
        var st = stat()
        return stat(path, &st) == 0 ? Int(st.st_size) : -1
    }

    @Test("the WAL is checkpointed into the main file and stays bounded while documents are written and read")
    func walStaysBounded() throws {
        try withStore { (store, dir) throws in
            try store.createCollection(readings)
            let body = "{\"pad\":\"" + String(repeating: "x", count: 4000) + "\"}"
            // 12,000 documents of 4 KB: about 48 MB through the WAL, twelve times SQLite's
            // automatic checkpoint threshold (1,000 pages of 4 KB).
            for batch in 0..<120 {
                let writes = (0..<100).map { DocumentWrite(collection: readings, id: id("d\(batch)-\($0)"), body: body) }
                _ = try store.write(writes)
                _ = try store.get(readings, id: id("d\(batch)-0"))
                _ = try store.list(readings, limit: 3)
                _ = try store.metadata("hlc")
                _ = try store.stats()
            }
            let wal = Self.fileSize(dir.file("shoal.db-wal"))
            let main = Self.fileSize(dir.file("shoal.db"))
            #expect(main > 40_000_000, "the main file holds the documents (\(main) bytes)")
            #expect(wal < 16_000_000, "the WAL is reused after checkpoints (\(wal) bytes)")
        }
    }
}
