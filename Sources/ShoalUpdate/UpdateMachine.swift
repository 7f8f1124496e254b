/// The update's decisions, pure: what to install, what the boot check does with what it finds,
/// when the new binary may confirm. `UpdateInstaller` carries them out on files; tests drive
/// these functions with values.
///
/// The rules, in one place:
/// - A candidate gets exactly one start. The boot check (ExecStartPre, run by the packaged,
///   known-good binary) counts it; finding a pending candidate that already had its start — it
///   crashed, was killed, or exited asking for a rollback — or whose deadline passed, it rolls back.
/// - Only the candidate itself confirms, when it runs the candidate's version, is READY and
///   healthy, and its deadline has not passed.
/// - A version rolled back is never installed again (a newer release is).
/// - The order on disk makes every cut safe: the record says `pending` before `current` moves, and
///   says `rolled-back` before `current` moves back; the boot check finishes whichever half ran.
public enum UpdateMachine {
    /// What the boot check does.
    public enum BootDecision: Sendable, Equatable {
        /// No update in flight: start what `current` names.
        case start
        /// A pending candidate's one start: record it (with its deadline), then start it.
        case startCandidate(UpdateRecord)
        /// Roll back: write the record, then point `current` at `previous`.
        case rollBack(UpdateRecord)
        /// The install was cut before the switch: record it; `current` is still the previous binary.
        case abandon(UpdateRecord)
        /// A rollback was cut after its record: point `current` at `previous` again.
        case finishRollBack(String)
    }

    /// `current` is the link the unit starts; `currentTarget` is where it points now.
    public static func bootCheck(_ record: UpdateRecord?, currentTarget: String, now: Int64, confirmSeconds: Int64) -> BootDecision {
        guard var r = record else { return .start }
        switch r.phase {
        case .confirmed, .interrupted:
            return .start
        case .rolledBack:
            return currentTarget == r.previous ? .start : .finishRollBack(r.previous)
        case .pending:
            guard currentTarget == r.candidateTarget else {
                r.phase = .interrupted
                r.at = now
                r.reason = "the install was cut before the switch to \(r.candidate); \(currentTarget) stayed current"
                return .abandon(r)
            }
            if r.starts >= 1 || (r.deadline > 0 && now > r.deadline) {
                let why = r.deadline > 0 && now > r.deadline
                    ? "\(r.candidate) did not confirm before its deadline (\(confirmSeconds) s): it never became ready or healthy"
                    : "\(r.candidate) stopped before it confirmed (it crashed, was killed, or gave up waiting to be ready)"
                return .rollBack(rolledBack(r, reason: why, now: now))
            }
            r.starts += 1
            r.deadline = now + confirmSeconds
            r.at = now
            return .startCandidate(r)
        }
    }

    static func rolledBack(_ r: UpdateRecord, reason: String, now: Int64) -> UpdateRecord {
        var r = r
        r.phase = .rolledBack
        r.at = now
        r.reason = reason
        if !r.failed.contains(r.candidate) { r.failed.append(r.candidate) }
        if r.failed.count > UpdateRecord.maxFailed { r.failed.removeFirst(r.failed.count - UpdateRecord.maxFailed) }
        return r
    }

    /// What the running binary does about its own confirmation.
    public enum ConfirmDecision: Sendable, Equatable {
        /// Nothing pending for this binary.
        case nothing
        /// Write this record: the candidate is confirmed.
        case confirm(UpdateRecord)
        /// The deadline passed before it was ready: exit with the restart code so the boot check
        /// rolls back.
        case giveUp(String)
        /// Not ready or healthy yet, and there is time: ask again later.
        case wait
    }

    public static func confirm(_ record: UpdateRecord?, running: String, ready: Bool, healthy: Bool, now: Int64) -> ConfirmDecision {
        guard var r = record, r.phase == .pending, r.candidate == running, r.starts >= 1 else { return .nothing }
        if now > r.deadline { return .giveUp("\(running) was not ready and healthy by its deadline") }
        guard ready && healthy else { return .wait }
        r.phase = .confirmed
        r.at = now
        r.reason = ""
        return .confirm(r)
    }

    /// Why `version` may not be installed now, or nil when it may. After an install or a rollback
    /// the next install waits `holdOffSeconds`: each costs systemd starts, and systemd stops
    /// starting a unit that starts too often (StartLimitBurst in StartLimitIntervalSec) — a
    /// gateway left stopped is worse than one that updates later.
    public static func installRefusal(_ record: UpdateRecord?, version: String, now: Int64 = .max, holdOffSeconds: Int64 = 0) -> String? {
        guard UpdateRecord.isVersionName(version) else { return "\(version) is no version a directory may be named after" }
        guard let r = record else { return nil }
        if r.failed.contains(version) { return "\(version) was rolled back here before; publish a newer release" }
        if r.phase == .pending { return "\(r.candidate) is still waiting to confirm" }
        if r.phase != .interrupted, now < r.at + holdOffSeconds {
            return "the last update (\(r.candidate), \(r.phase.rawValue)) was \(now - r.at) s ago; the next waits \(holdOffSeconds) s after it"
        }
        return nil
    }

    /// The record an install writes before it moves `current`.
    public static func pending(_ old: UpdateRecord?, version: String, previous: String, now: Int64) -> UpdateRecord {
        UpdateRecord(phase: .pending, candidate: version, previous: previous, installedAt: now, at: now, failed: old?.failed ?? [])
    }

    /// The steps of an install, in the order they touch the disk (each survives a cut after it).
    public enum InstallStep: String, Sendable, CaseIterable {
        /// `releases/<v>/shoal.tmp` written, fsynced, renamed to `shoal`, directory fsynced.
        case stage
        /// The record says pending (tmp + fsync + rename).
        case record
        /// `previous` points at what `current` did.
        case linkPrevious = "link-previous"
        /// `current` points at the candidate (a new link renamed over it).
        case switchCurrent = "switch"
    }
}
