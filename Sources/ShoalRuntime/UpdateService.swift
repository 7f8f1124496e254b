import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalReplication
import ShoalStore
import ShoalSupervision
import ShoalTLS
import ShoalTrust
import ShoalUpdate

/// Updates of Shoal itself, on one gateway: writes this gateway's `_status` document (when the
/// site names release keys: a site without them does not take part), confirms a
/// candidate binary once the gateway is READY and healthy (or gives up at its deadline, exiting
/// with the restart code so the boot check rolls back), and — with `updates.enabled` — looks at
/// `_releases` every few seconds for a release meant for it, fetches the binary, checks it,
/// installs it beside the running one and exits with the restart code: systemd's Restart= starts
/// the unit again and ExecStartPre's boot check gives the candidate its one start.
///
/// What a reader gets wrong: the binary comes through `BlobStorage` when the store provides one
/// (the store's blobs, fetched from peers on demand); without it, only from
/// `<installDir>/blobs/<digest>` (what `shoal release publish --binary` leaves there).
struct UpdateService: Service {
    let gateway: Gateway
    let config: LoadedConfig
    let opened: OpenedStore

    /// The exit status that asks systemd (or the test's supervisor) to start the unit again.
    static let restartExitCode: Int32 = 75
    static let lookSeconds: Int64 = 3

    var settings: SiteConfig.UpdateSettings { config.site.updates }
    var installer: UpdateInstaller { UpdateInstaller(directory: settings.installDir, packagedBinary: UpdateService.packagedBinary(installDir: settings.installDir)) }

    /// The binary `current` starts as when the boot check never ran: this one, unless it is itself
    /// an installed release (then the package's).
    static func packagedBinary(installDir: String) -> String {
        let exe = Files.absolute("/proc/self/exe")
        return exe.hasPrefix(Files.absolute(installDir) + "/") ? "/usr/bin/shoal" : exe
    }

    func run(context: ServiceContext) async throws {
        context.markReady()
        let startedAt = Identity.now()
        let running = UpdateService.runningVersion(installDir: settings.installDir)
        var attempted: Set<String> = []
        // The newest outcome this run reached that the record does not hold (refused, fetching).
        var lastAttempt: Outcome?
        var confirmed = false
        var tick = 0
        while await context.pause(for: .seconds(1)) {
            context.heartbeat()
            tick += 1
            guard let me = gateway.identity?.peerID else { continue }
            let record = installer.readRecord().0
            if !confirmed, let record, record.phase == .pending, record.candidate == running {
                switch confirm(running) {
                case .confirm: confirmed = true
                case .giveUp: return
                default: break
                }
            }
            if settings.enabled, tick % Int(UpdateService.lookSeconds) == 0, installer.readRecord().0?.phase != .pending,
               let outcome = await lookForRelease(me: me, running: running, attempted: &attempted) {
                lastAttempt = outcome
                if outcome.outcome == .installed {
                    try await write(UpdateService.status(me, running: running, record: installer.readRecord().0, startedAt: startedAt), me: me)
                    gateway.logger.info(.runtime, "update: \(outcome.version) installed in \(settings.installDir); restarting into it")
                    requestRestart()
                    return
                }
            }
            // A site that names no release key does not take part: no status document either
            // (its stores hold only what its users and its trust entries wrote).
            guard !config.releaseKeys.isEmpty else { continue }
            var status = UpdateService.status(me, running: running, record: installer.readRecord().0, startedAt: startedAt)
            if let a = lastAttempt, a.at >= status.outcomeAt {
                (status.attempted, status.outcome, status.reason, status.outcomeAt) = (a.version, a.outcome, a.reason, a.at)
            }
            try await write(status, me: me)
        }
    }

    /// This binary's own confirmation, once the whole tree is up and healthy; at its deadline it
    /// gives up and exits with the restart code, for the boot check to roll back.
    func confirm(_ running: String) -> UpdateMachine.ConfirmDecision {
        let ready = gateway.state == .running, healthy = gateway.report.isHealthy
        let decision: UpdateMachine.ConfirmDecision
        do { decision = try installer.confirm(running: running, ready: ready, healthy: healthy, now: Identity.now()) } catch {
            gateway.logger.error(.runtime, "update: \(error)")
            return .wait
        }
        switch decision {
        case .confirm: gateway.logger.info(.runtime, "update: \(running) confirmed (READY and healthy)")
        case .giveUp(let why):
            gateway.logger.error(.runtime, "update: \(why); exiting for the boot check to roll back")
            requestRestart()
        default: break
        }
        return decision
    }

    /// The status this gateway reports from its update record.
    static func status(_ me: PeerID, running: String, record: UpdateRecord?, startedAt: Int64) -> UpdateStatus {
        var s = UpdateStatus(peer: me, running: running, architecture: ReleaseArchitecture.running.rawValue, startedAt: startedAt)
        guard let r = record else { return s }
        s.attempted = r.candidate
        s.outcomeAt = r.at
        s.reason = r.reason
        switch r.phase {
        case .pending: s.outcome = .installed
        case .confirmed: s.outcome = .confirmed
        case .rolledBack: s.outcome = .rolledBack
        case .interrupted: s.outcome = .none
        }
        return s
    }

    func write(_ status: UpdateStatus, me: PeerID) async throws {
        let store = opened.store, clock = opened.clock
        try await gateway.storeThread.run {
            let current = try store.get(.status, id: try DocumentID(status.documentID))
            if current?.body == status.body { return }
            _ = try LocalWriter(peer: me, store: store, clock: clock).put(.status, id: try DocumentID(status.documentID), body: status.body)
        }
    }

    struct Outcome {
        var version: String
        var outcome: UpdateStatus.Outcome
        var reason: String
        var at = Identity.now()
    }

    /// The newest release meant for this gateway, fetched, checked and installed; nil when there
    /// is none (or its binary is not here yet).
    func lookForRelease(me: PeerID, running: String, attempted: inout Set<String>) async -> Outcome? {
        let store = opened.store
        guard let docs = try? await gateway.storeThread.run({ try UpdateService.manifests(store) }) else { return nil }
        guard let runningVersion = ReleaseVersion(running) else { return nil }
        let record = installer.readRecord().0
        let failed = Set(record?.failed ?? [])
        var best: ReleaseManifest?
        for m in docs {
            if let refusal = m.refusal(keys: config.releaseKeys, peer: me, running: runningVersion, architecture: .running) {
                if !refusal.isQuiet && attempted.insert(m.documentID).inserted {
                    gateway.logger.warning(.runtime, "update: \(m.summary) refused: \(refusal)")
                    return Outcome(version: m.version.text, outcome: .refused, reason: refusal.description)
                }
                continue
            }
            if failed.contains(m.version.text) { continue }
            if best.map({ m.version > $0.version }) ?? true { best = m }
        }
        guard let m = best else { return nil }
        // Held off after the last install or rollback: quietly, it is tried again later.
        if let r = record, r.phase != .interrupted, Identity.now() < r.at + settings.holdOffSeconds { return nil }
        // Off the cooperative pool: the binary is read from SQLite (megabytes) on the store's
        // thread and written to disk with fsyncs on the work thread.
        let reference = m.blob
        let fetched = try? await gateway.storeThread.run { [self] in fetch(reference) }
        guard let binary = fetched ?? nil else {
            guard attempted.insert("fetch " + m.documentID).inserted else { return nil }
            return Outcome(version: m.version.text, outcome: .fetching, reason: "waiting for blob \(m.digest.short)… (\(m.size) bytes)")
        }
        if let refusal = m.check(binary: binary) {
            guard attempted.insert(m.documentID).inserted else { return nil }
            return Outcome(version: m.version.text, outcome: .refused, reason: refusal.description)
        }
        let installer = self.installer, version = m.version.text, holdOff = settings.holdOffSeconds
        do {
            try await gateway.workThread.run { try installer.install(version: version, binary: binary, now: Identity.now(), holdOffSeconds: holdOff) }
            return Outcome(version: version, outcome: .installed, reason: "")
        } catch {
            guard attempted.insert(m.documentID).inserted else { return nil }
            return Outcome(version: version, outcome: .refused, reason: "\(error)")
        }
    }

    static func manifests(_ store: DocumentStore) throws -> [ReleaseManifest] {
        var out: [ReleaseManifest] = []
        var after: String?
        for _ in 0..<20 {
            let page = try store.list(.releases, after: after, limit: 200)
            out += page.compactMap { $0.body.flatMap { try? ReleaseManifest.decode($0) } }
            guard page.count == 200, let last = page.last else { break }
            after = last.id
        }
        return out
    }

    /// The binary's bytes when the whole blob is here: from the store's blob storage (demanding it
    /// from peers first), else from `<installDir>/blobs/<digest>`.
    func fetch(_ blob: BlobReference) -> [UInt8]? {
        if let blobs = (opened.store as AnyObject) as? any BlobStorage {
            do {
                guard try blobs.blobIsComplete(blob.digest) else {
                    try blobs.demandBlob(blob)
                    return nil
                }
                guard let manifest = try blobs.blobManifest(blob.digest) else { return nil }
                var bytes: [UInt8] = []
                bytes.reserveCapacity(Int(blob.length))
                for i in 0..<manifest.chunkCount {
                    guard let chunk = try blobs.readBlobChunk(blob.digest, index: i) else { return nil }
                    bytes += chunk
                }
                return bytes
            } catch {
                gateway.logger.warning(.runtime, "update: blob \(blob.digest.short)…: \(error)")
                return nil
            }
        }
        return try? Files.readBytes(UpdateService.localBlobPath(installDir: settings.installDir, blob.digest), max: Int(min(blob.length, 1 << 30)) + 1)
    }

    static func localBlobPath(installDir: String, _ digest: BlobDigest) -> String { "\(installDir)/blobs/\(digest)" }

    /// Graceful stop with the restart exit status (SIGTERM's handler stops the tree in order).
    func requestRestart() {
        gateway.requestExit(UpdateService.restartExitCode)
        _ = kill(getpid(), SIGTERM)
    }

    /// The version this binary runs as: the release directory it was installed in
    /// (`<installDir>/releases/<version>/shoal`, named by the signed manifest it came with), else
    /// the version it was built as.
    static func runningVersion(installDir: String) -> String {
        let exe = Files.absolute("/proc/self/exe")
        let prefix = Files.absolute(installDir) + "/releases/"
        if exe.hasPrefix(prefix), exe.hasSuffix("/shoal") {
            let v = String(exe.dropFirst(prefix.count).dropLast("/shoal".count))
            if ReleaseVersion(v) != nil { return v }
        }
        return ShoalVersion.current
    }
}
