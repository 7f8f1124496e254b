import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalStore
import ShoalTrust
import ShoalUpdate
import ShoalWire

/// Releases of Shoal on the control socket: release.publish (a signed manifest, checked against
/// the site's release keys and against its binary, written to `_releases`, which replicates it;
/// the binary kept where the update service finds it), release.status (every gateway's `_status`
/// document and the manifests held).
extension ControlHandler {
    func dispatchRelease(_ op: String, _ r: [String: JSONValue]) throws -> JSONValue? {
        switch op {
        case "release.publish":
            guard let text = r["manifest"]?.stringValue else { throw bad("\"manifest\" is the signed manifest's JSON text (`shoal release sign` wrote it)") }
            guard let binaryPath = r["binary"]?.stringValue else { throw bad("\"binary\" is the path of the binary the manifest was signed for") }
            let manifest: ReleaseManifest
            do { manifest = try ReleaseManifest.decode(text) } catch { throw bad("the manifest: \(error)") }
            let keys = try ConfigurationLoading.releaseKeys(gateway.site)
            if let why = manifest.verify(keys: keys) {
                throw ControlError(code: .badRequest, message: "\(why) (updates.releaseKeys in \(gateway.site.source) lists the keys gateways trust)")
            }
            guard let binary = try Files.readBytes(binaryPath, max: Int(min(manifest.size, 1 << 30)) + 1) else {
                throw ControlError(code: .notFound, message: "\(binaryPath): no such file (or the gateway's user cannot read it)")
            }
            if let why = manifest.check(binary: binary) { throw ControlError(code: .badRequest, message: "\(binaryPath): \(why)") }
            // Into the store's blob storage when it is one (peers fetch it from there); and into the
            // install directory's blobs, where this gateway's update service reads it without.
            if let blobs = (opened.store as AnyObject) as? any BlobStorage { try ControlHandler.putBlob(binary, into: blobs) }
            let dir = gateway.site.updates.installDir + "/blobs"
            try Files.makeDirectories(dir)
            let path = UpdateService.localBlobPath(installDir: gateway.site.updates.installDir, manifest.digest)
            try UpdateInstaller.writeDurably(path, binary, mode: 0o640)
            _ = try writer().put(.releases, id: try DocumentID(manifest.documentID), body: manifest.body)
            return ["id": .string(manifest.documentID), "summary": .string("published \(manifest.summary)")]
        case "release.status":
            var gateways: [JSONValue] = []
            for d in try opened.store.list(.status, after: nil, limit: 1000) {
                guard let body = d.body, let s = try? UpdateStatus.decode(body) else { continue }
                gateways.append(["peer": .string(s.peer.description), "running": .string(s.running), "architecture": .string(s.architecture),
                                 "attempted": .string(s.attempted), "outcome": .string(s.outcome.rawValue), "reason": .string(s.reason),
                                 "outcomeAt": .int(s.outcomeAt), "startedAt": .int(s.startedAt)])
            }
            let releases = try UpdateService.manifests(opened.store).map { m -> JSONValue in
                ["id": .string(m.documentID), "version": .string(m.version.text), "summary": .string(m.summary)]
            }
            return ["gateways": .array(gateways), "releases": .array(releases)]
        default:
            return nil
        }
    }

    /// Keeps `bytes` as a blob: its manifest, then its chunks, 16 (1 MiB) per transaction.
    static func putBlob(_ bytes: [UInt8], into blobs: any BlobStorage) throws {
        let manifest = BlobManifest.of(bytes)
        if try blobs.blobIsComplete(manifest.digest) { return }
        try blobs.beginBlob(manifest)
        var index = 0
        while index < manifest.chunkCount {
            var batch: [(index: Int, bytes: [UInt8])] = []
            while batch.count < 16 && index < manifest.chunkCount {
                let start = index * BlobManifest.chunkSize
                batch.append((index, Array(bytes[start..<start + manifest.chunkLength(index)])))
                index += 1
            }
            if try blobs.storeBlobChunks(manifest.digest, batch) == .wholeMismatch {
                throw ControlError(code: .internalError, message: "blob \(manifest.digest.short)… did not match its digest once stored")
            }
        }
    }
}
