import Glibc
import ShoalCore
import ShoalRuntime

/// `shoal blob put | get | ls | gc`: blobs on the running gateway, moved in pieces over the
/// control socket (each at most 256 KiB before base64).
extension CLI {
    static let blobPieceBytes = 256 << 10

    static func blob(_ rest: [String]) throws -> Int32 {
        guard let sub = rest.first, !sub.hasPrefix("-") else {
            let a = try Arguments.parse(rest, command: "blob")
            if helpIfAsked(a, "blob") { return ExitCode.ok }
            throw UsageError(command: "blob", message: "missing subcommand: put, get, ls or gc")
        }
        let args = Array(rest.dropFirst())
        let command = "blob \(sub)"
        switch sub {
        case "put": return try blobPut(args, command: command)
        case "get": return try blobGet(args, command: command)
        case "ls": return try blobList(args, command: command)
        case "gc": return try blobGC(args, command: command)
        default: throw UsageError(command: "blob", message: "unknown subcommand \"\(sub.prefix(40))\": put, get, ls or gc")
        }
    }

    /// Sends FILE in pieces; with --doc, writes the reference into that document's field.
    static func blobPut(_ args: [String], command: String) throws -> Int32 {
        let a = try Arguments.parse(args, command: command, valueOptions: ["--socket", "--content-type", "--doc", "--field"], flagOptions: [])
        if helpIfAsked(a, "blob") { return ExitCode.ok }
        try a.expectPositionals(1...1, command: command, usage: "blob put FILE [--content-type TYPE] [--doc COLLECTION/ID [--field FIELD]]")
        let target = try a.values["--doc"].map { text throws -> (String, String) in
            guard let slash = text.firstIndex(of: "/"), slash != text.startIndex, text.index(after: slash) != text.endIndex else {
                throw UsageError(command: command, message: "--doc takes COLLECTION/ID, not \"\(text.prefix(80))\"")
            }
            return (String(text[..<slash]), String(text[text.index(after: slash)...]))
        }
        if a.values["--field"] != nil && target == nil { throw UsageError(command: command, message: "--field goes with --doc") }
        let field = a.values["--field"] ?? "blob"
        guard !field.isEmpty, field.utf8.count <= 255 else { throw UsageError(command: command, message: "--field is a field name of 1 to 255 bytes") }
        let path = a.positionals[0]
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let why = String(cString: strerror(errno))
            if errno == ENOENT { throw NotFound(message: "no file \(path)") }
            throw Rejected(message: "cannot open \(path): \(why)")
        }
        defer { close(fd) }
        let client = try client(a)
        var begin: [String: JSONValue] = ["op": "blob.begin"]
        if let t = a.values["--content-type"] { begin["contentType"] = .string(t) }
        let upload = try client.call(.object(begin))
        guard let token = upload["upload"]?.stringValue else { throw Rejected(message: "the gateway answered no upload token") }
        var buffer = [UInt8](repeating: 0, count: blobPieceBytes)
        do {
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw Rejected(message: "cannot read \(path): \(String(cString: strerror(errno)))")
                }
                if n == 0 { break }
                _ = try client.call(["op": "blob.append", "upload": .string(token), "data": .string(Base64.encode(buffer[0..<n]))])
            }
        } catch {
            _ = try? client.call(["op": "blob.cancel", "upload": .string(token)])
            throw error
        }
        let reference = try client.call(["op": "blob.finish", "upload": .string(token)])
        if let (collection, id) = target {
            var body: [String: JSONValue] = [:]
            do {
                let doc = try client.call(["op": "doc.get", "collection": .string(collection), "id": .string(id)])
                body = doc["body"]?.objectValue ?? [:]
            } catch {
                guard isNotFound(error) else { throw error }  // a new document
            }
            body[field] = reference
            _ = try client.call(["op": "doc.put", "collection": .string(collection), "id": .string(id), "body": .object(body)])
        }
        out(reference.compactText)
        return ExitCode.ok
    }

    /// Fetches a blob in pieces, checking its SHA-256 as it comes; to FILE (written aside, renamed
    /// once the digest matched) or to standard output.
    static func blobGet(_ args: [String], command: String) throws -> Int32 {
        let a = try Arguments.parse(args, command: command, valueOptions: ["--socket", "--out", "--wait"], flagOptions: [])
        if helpIfAsked(a, "blob") { return ExitCode.ok }
        try a.expectPositionals(1...1, command: command, usage: "blob get DIGEST [--out FILE] [--wait SECONDS]")
        let waitSeconds = try a.int("--wait", command: command, default: 0, range: 0...3600)
        guard let digest = BlobDigest(a.positionals[0]) else {
            throw UsageError(command: command, message: "\"\(a.positionals[0].prefix(80))\" is not a blob digest: sha256- and 64 hex digits")
        }
        let client = try client(a)
        try waitForBlob(client, digest, seconds: waitSeconds)
        var fd = STDOUT_FILENO
        var temporary: String?
        if let path = a.values["--out"] {
            let tmp = path + ".tmp"
            fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw Rejected(message: "cannot write \(tmp): \(String(cString: strerror(errno)))") }
            temporary = tmp
        }
        defer {
            if let temporary {
                close(fd)
                unlink(temporary)  // gone already when renamed
            }
        }
        var hasher = SHA256.Hasher()
        var offset: Int64 = 0
        while true {
            let piece = try client.call(["op": "blob.get", "digest": .string(digest.description), "offset": .int(offset), "length": .int(Int64(blobPieceBytes))])
            guard let text = piece["data"]?.stringValue, let bytes = Base64.decode(text) else { throw Rejected(message: "the gateway sent a piece that is not base64") }
            hasher.update(bytes)
            try writeAll(fd, bytes, to: a.values["--out"] ?? "standard output")
            offset += Int64(bytes.count)
            if piece["end"]?.boolValue == true || bytes.isEmpty { break }
        }
        guard hasher.finalize() == digest.bytes else {
            throw Rejected(message: "the bytes received do not match \(digest)\(a.values["--out"] == nil ? " (standard output already has them)" : "; nothing written")")
        }
        if let path = a.values["--out"], let temporary {
            guard fsync(fd) == 0, rename(temporary, path) == 0 else {
                throw Rejected(message: "cannot write \(path): \(String(cString: strerror(errno)))")
            }
            printError("\(digest): \(offset) bytes written to \(path), digest verified")
        }
        return ExitCode.ok
    }

    /// With --wait: while the gateway answers that the blob is on its way (a document refers to
    /// it, so it asked the mesh), asks again every half second until it is here or time is up.
    static func waitForBlob(_ client: ControlClient, _ digest: BlobDigest, seconds: Int) throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while true {
            do {
                _ = try client.call(["op": "blob.get", "digest": .string(digest.description), "offset": 0, "length": 0])
                return
            } catch ControlClient.Failure.remote(let e) {
                guard e.code == .unavailable, ContinuousClock.now < deadline else { throw ControlClient.Failure.remote(e) }
            }
            usleep(500_000)
        }
    }

    static func isNotFound(_ error: any Error) -> Bool {
        guard let failure = error as? ControlClient.Failure, case .remote(let e) = failure else { return false }
        return e.code == .notFound
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8], to name: String) throws {
        var at = 0
        while at < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + at, bytes.count - at) }
            if n < 0 {
                if errno == EINTR { continue }
                throw Rejected(message: "cannot write \(name): \(String(cString: strerror(errno)))")
            }
            at += n
        }
    }

    static func blobList(_ args: [String], command: String) throws -> Int32 {
        let a = try Arguments.parse(args, command: command, valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "blob") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: command, usage: "blob ls [--json]")
        let result = try client(a).call(["op": "blob.ls"])
        if a.flags.contains("--json") { output(result); return ExitCode.ok }
        for b in result["blobs"]?.arrayValue ?? [] {
            let state = b["state"]?.stringValue ?? "?"
            let held = state == "complete" ? "" : " (\(b["heldBytes"]?.int64Value ?? 0) held)"
            out("\(b["digest"]?.stringValue ?? "?")  \(b["length"]?.int64Value ?? 0) bytes\(held)  \(state)  \(b["contentType"]?.stringValue ?? "-")  referenced by \(b["referencedBy"]?.int64Value ?? 0)")
        }
        let s = result["stats"]
        out("\(s?["count"]?.int64Value ?? 0) blobs, \(s?["bytes"]?.int64Value ?? 0) bytes (\(s?["partialBytes"]?.int64Value ?? 0) in partial blobs)")
        return ExitCode.ok
    }

    static func blobGC(_ args: [String], command: String) throws -> Int32 {
        let a = try Arguments.parse(args, command: command, valueOptions: ["--socket"], flagOptions: ["--json"])
        if helpIfAsked(a, "blob") { return ExitCode.ok }
        try a.expectPositionals(0...0, command: command, usage: "blob gc [--json]")
        let r = try client(a).call(["op": "blob.gc"])
        if a.flags.contains("--json") { output(r); return ExitCode.ok }
        let budget = r["budget"]?.int64Value.map { "budget \($0) bytes" } ?? "no budget"
        out("dropped \(r["dropped"]?.int64Value ?? 0) blobs (\(r["droppedBytes"]?.int64Value ?? 0) bytes); \(r["stats"]?["bytes"]?.int64Value ?? 0) bytes held, \(budget)")
        if r["overBudget"]?.boolValue == true {
            out("over budget: what is left is referenced by eager collections, wanted, or in its grace period; raise storage.blobBudget or make collections `blobs: onDemand`")
        }
        return ExitCode.ok
    }
}
