import Glibc
import ShoalCore
import ShoalStore
import ShoalTLS

/// `shoal bench blob-store`: blobs written through `DocumentStore` (64 KiB chunk rows in SQLite,
/// one transaction per 1 MiB piece, the manifest and digest computed on the way) against the same
/// bytes written as plain files the crash-safe way (FILE.tmp, fsync, rename, fsync of the
/// directory), in the same run, alternating which goes first. Two shapes: one 10 MB blob, and 100
/// blobs of 64 KB (one commit each, one file each). Also the SHA-256 throughput of ShoalCore's
/// `SHA256.Hasher` against mbedTLS's, on the same buffer.
public enum BlobStoreBenchmark {
    public struct Figures: Sendable {
        public var name: String
        public var bytes: Int
        public var storeMBps: [Double] = []
        public var filesMBps: [Double] = []
        public var storeMedian: Double { StoreBenchmark.median(storeMBps) }
        public var filesMedian: Double { StoreBenchmark.median(filesMBps) }
        public var ratio: Double { storeMedian / filesMedian }
    }

    public struct Result: Sendable {
        public var durability: Durability
        public var shapes: [Figures]
        public var hasherMBps: Double
        public var mbedTLSMBps: Double
    }

    public static func run(directory: String, rounds: Int, durability: Durability, logger: Logger) throws -> Result {
        precondition(rounds > 0)
        var random = SeededRandom(seed: 25)
        let big = (0..<(10 * 1_000_000)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        let small = (0..<100).map { i in (0..<64_000).map { _ in UInt8(truncatingIfNeeded: random.next() &+ UInt64(i)) } }
        var shapes = [Figures(name: "1 x 10 MB", bytes: big.count), Figures(name: "100 x 64 KB", bytes: small.count * 64_000)]
        for round in 0..<rounds {
            let storePath = "\(directory)/blobs-\(round).db", filesDir = "\(directory)/files-\(round)"
            mkdir(filesDir, 0o755)
            let store = try DocumentStore.open(StoreOptions(path: storePath, durability: durability), logger: logger)
            for (k, blobs) in [[big], small].enumerated() {
                let viaStore = { () throws -> Double in try timed(shapes[k].bytes) { for b in blobs { try put(store, b) } } }
                let viaFiles = { () throws -> Double in try timed(shapes[k].bytes) { for (i, b) in blobs.enumerated() { try writeFile("\(filesDir)/\(k)-\(i)", b) } } }
                if round % 2 == 0 {
                    shapes[k].storeMBps.append(try viaStore())
                    shapes[k].filesMBps.append(try viaFiles())
                } else {
                    shapes[k].filesMBps.append(try viaFiles())
                    shapes[k].storeMBps.append(try viaStore())
                }
            }
            store.close()
            for s in ["", "-wal", "-shm"] { unlink(storePath + s) }
            _ = system("rm -rf '\(filesDir)'")
        }
        let hashInput = Array(big.prefix(8_000_000))
        let hasher = try timed(hashInput.count * 4) { for _ in 0..<4 { _ = SHA256.hash(hashInput) } }
        let mbed = try timed(hashInput.count * 4) { for _ in 0..<4 { _ = Digest.sha256(hashInput) } }
        return Result(durability: durability, shapes: shapes, hasherMBps: hasher, mbedTLSMBps: mbed)
    }

    /// A blob through the store's streaming writer, 1 MiB at a time (as `shoal blob put` sends it).
    static func put(_ store: DocumentStore, _ bytes: [UInt8]) throws {
        let w = try store.blobWriter(contentType: "application/octet-stream")
        var at = 0
        while at < bytes.count {
            let end = min(bytes.count, at + (1 << 20))
            try w.append(Array(bytes[at..<end]))
            at = end
        }
        _ = try w.finish()
    }

    struct IOFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// FILE.tmp, written, fsynced, renamed over FILE, and the directory fsynced.
    static func writeFile(_ path: String, _ bytes: [UInt8]) throws {
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw IOFailure(description: "open \(tmp): \(String(cString: strerror(errno)))") }
        var at = 0
        while at < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + at, bytes.count - at) }
            if n < 0 { if errno == EINTR { continue }; close(fd); throw IOFailure(description: "write \(tmp): \(String(cString: strerror(errno)))") }
            at += n
        }
        guard fsync(fd) == 0, close(fd) == 0, rename(tmp, path) == 0 else { throw IOFailure(description: "fsync/rename \(tmp): \(String(cString: strerror(errno)))") }
        let dirPath = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
        let dir = open(dirPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dir >= 0 { _ = fsync(dir); close(dir) }
    }

    /// MB/s (10^6 bytes) of `body` moving `bytes`.
    static func timed(_ bytes: Int, _ body: () throws -> Void) throws -> Double {
        let start = ContinuousClock.now
        try body()
        let d = ContinuousClock.now - start
        let seconds = Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
        return Double(bytes) / 1e6 / max(seconds, 1e-9)
    }
}
