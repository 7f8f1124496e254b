import ShoalCore

/// What a gateway knows about its last update, kept in `<installDir>/update-state.json` (written
/// tmp + fsync + rename, so a power cut leaves the old record or the new one, never half of one).
/// The boot check and the new binary read it; nothing else decides what runs.
public struct UpdateRecord: Sendable, Equatable {
    public static let formatVersion = 1
    public static let maxBytes = 8192
    /// Versions rolled back are remembered (and never tried again) up to this many.
    public static let maxFailed = 16

    public enum Phase: String, Sendable, CaseIterable {
        /// Installed and switched to; the candidate has not confirmed yet.
        case pending
        /// The candidate reached READY and its health check in time: it is the known-good binary.
        case confirmed
        /// The candidate crashed, hung or missed its deadline: the previous binary runs again.
        case rolledBack = "rolled-back"
        /// The install was cut (power, SIGKILL) before the switch: the previous binary never
        /// stopped being current. The release may be tried again.
        case interrupted
    }

    public var phase: Phase
    /// The release installed (`releases/<candidate>/shoal`).
    public var candidate: String
    /// What `current` pointed at before the switch: where a rollback goes back to.
    public var previous: String
    /// How many times the boot check let the candidate start (it gets one).
    public var starts: Int
    /// When the candidate must have confirmed by (seconds since 1970; 0 before its start).
    public var deadline: Int64
    public var installedAt: Int64
    /// When the phase was reached, and why (a rollback's cause).
    public var at: Int64
    public var reason: String
    /// Versions rolled back here, newest last.
    public var failed: [String]

    public init(phase: Phase, candidate: String, previous: String, starts: Int = 0, deadline: Int64 = 0, installedAt: Int64, at: Int64,
                reason: String = "", failed: [String] = []) {
        self.phase = phase
        self.candidate = candidate
        self.previous = previous
        self.starts = starts
        self.deadline = deadline
        self.installedAt = installedAt
        self.at = at
        self.reason = reason
        self.failed = failed
    }

    /// The `current` link's target for the candidate.
    public var candidateTarget: String { UpdateRecord.target(of: candidate) }
    public static func target(of version: String) -> String { "releases/\(version)" }

    public var text: String {
        JSONValue.object([
            "v": .int(Int64(UpdateRecord.formatVersion)), "phase": .string(phase.rawValue), "candidate": .string(candidate), "previous": .string(previous),
            "starts": .int(Int64(starts)), "deadline": .int(deadline), "installedAt": .int(installedAt), "at": .int(at), "reason": .string(reason),
            "failed": .array(failed.map { .string($0) }),
        ]).compactText
    }

    public static func decode(_ text: String) throws(UpdateError) -> UpdateRecord {
        guard text.utf8.count <= maxBytes else { throw UpdateError("the update state file is over \(maxBytes) bytes") }
        guard let o = (try? JSONValue.parse(text))?.objectValue else { throw UpdateError("the update state file is not a JSON object") }
        func int(_ k: String) throws(UpdateError) -> Int64 {
            guard let v = o[k], case .number(let s) = v, let n = Int64(s) else { throw UpdateError("the update state file's \(k) is not a whole number") }
            return n
        }
        func str(_ k: String) throws(UpdateError) -> String {
            guard let s = o[k]?.stringValue, s.utf8.count <= 1024 else { throw UpdateError("the update state file's \(k) is not a string") }
            return s
        }
        guard try int("v") == Int64(formatVersion) else { throw UpdateError("the update state file has another format (v must be \(formatVersion))") }
        guard let phase = Phase(rawValue: try str("phase")) else { throw UpdateError("the update state file's phase is unknown") }
        let candidate = try str("candidate"), previous = try str("previous")
        guard UpdateRecord.isVersionName(candidate), !previous.isEmpty, !previous.utf8.contains(0) else {
            throw UpdateError("the update state file names no valid candidate or previous binary")
        }
        guard case .array(let items)? = o["failed"], items.count <= maxFailed else { throw UpdateError("the update state file's failed list is not a short list") }
        let failed = items.compactMap(\.stringValue)
        return UpdateRecord(phase: phase, candidate: candidate, previous: previous, starts: Int(clamping: try int("starts")), deadline: try int("deadline"),
                            installedAt: try int("installedAt"), at: try int("at"), reason: try str("reason"), failed: failed)
    }

    /// A version as a directory name: digits and dots only (no `/`, no `..` path).
    public static func isVersionName(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.count <= 40 && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E } && !s.contains("..") && !s.hasPrefix(".")
    }
}

/// Why an update step could not be done: what happened, where, and what to do.
public struct UpdateError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
