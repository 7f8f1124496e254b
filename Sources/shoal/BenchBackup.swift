import Glibc
import ShoalCore
import ShoalStore
import ShoalThreads

/// `shoal bench backup`: the online backup's MB/s on a store of N documents of ~1 KB (default
/// 100,000), idle and while a writer thread commits batches through the same store.
extension CLI {
    static func benchBackup(_ a: Arguments) throws -> Int32 {
        let docs = try a.int("--docs", command: "bench backup", default: 100_000, range: 1...10_000_000)
        let rounds = try a.int("--rounds", command: "bench backup", default: 3, range: 1...50)
        var template = Array("\(a.values["--dir"] ?? "/tmp")/shoal-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw UsageError(command: "bench", message: "cannot create a directory under \(a.values["--dir"] ?? "/tmp")") }
        let dir = String(cString: made)
        defer {
            for name in ["shoal.db", "shoal.db-wal", "shoal.db-shm", "backup.db"] { unlink(dir + "/" + name) }
            rmdir(dir)
        }
        let quiet = Logger(sink: MemoryLogSink(), level: .none)
        let store = try DocumentStore.open(StoreOptions(path: dir + "/shoal.db", durability: .normal), logger: quiet)
        defer { store.close() }
        let collection = try CollectionName(parsing: "bench.readings")
        _ = try store.createCollection(collection)
        let pad = String(repeating: "x", count: 960)
        out("backup benchmark: \(docs) documents of ~1 KB, \(rounds) rounds, in \(dir)")
        var i = 0
        while i < docs {
            let end = min(i + 1000, docs)
            _ = try store.write((i..<end).map { n in
                DocumentWrite(collection: collection, id: try! DocumentID("doc-\(n)"), body: #"{"n":\#(n),"site":"east","pad":"\#(pad)"}"#)
            })
            i = end
        }
        var idle: [Double] = []
        var last: BackupReport?
        for _ in 0..<rounds {
            let r = try store.backup(to: dir + "/backup.db")
            idle.append(r.megabytesPerSecond)
            last = r
        }
        if let r = last {
            out("  store                     \(fmt2(Double(r.bytes) / 1_000_000)) MB, \(r.pages) pages")
            out("  backup, idle              \(fmt2(idle.sorted()[idle.count / 2])) MB/s median (\(fmt2(r.seconds)) s)   rounds: \(idle.map(fmt2).joined(separator: ", "))")
        }
        // The same while another thread writes batches of 10 through the store.
        let stop = Locked(false), written = Locked(0)
        var writer = pthread_t()
        final class Context: @unchecked Sendable { let body: () -> Void; init(_ b: @escaping () -> Void) { body = b } }
        let context = Context {
            var n = 0
            while !stop.withLock({ $0 }) {
                _ = try? store.write((0..<10).map { k in
                    DocumentWrite(collection: collection, id: try! DocumentID("live-\(n)-\(k)"), body: #"{"n":\#(n),"pad":"\#(pad)"}"#)
                })
                n += 1
                written.withLock { $0 = n * 10 }
            }
        }
        pthread_create(&writer, nil, { p in
            Unmanaged<Context>.fromOpaque(p!).takeRetainedValue().body()
            return nil
        }, Unmanaged.passRetained(context).toOpaque())
        usleep(100_000)
        let before = written.withLock { $0 }
        let r = try store.backup(to: dir + "/backup.db")
        let during = written.withLock { $0 } - before
        stop.withLock { $0 = true }
        pthread_join(writer, nil)
        out("  backup, while writing     \(fmt2(r.megabytesPerSecond)) MB/s (\(fmt2(r.seconds)) s, \(r.steps) steps of 256 pages); \(during) documents written during it (\(fmt(Double(during) / max(r.seconds, 0.001))) docs/s)")
        return ExitCode.ok
    }
}
