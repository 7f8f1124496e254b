/// A Shoal version as releases name it: one to four dot-separated whole numbers (`0.1.0`, `1.2`),
/// compared number by number (`0.10.0` is after `0.9.3`; `1.2` equals `1.2.0`).
public struct ReleaseVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let parts: [UInt32]
    public let text: String

    public init?(_ text: String) {
        let pieces = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...4).contains(pieces.count) else { return nil }
        var parts: [UInt32] = []
        for p in pieces {
            guard (1...9).contains(p.utf8.count), p.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = UInt32(p) else { return nil }
            parts.append(n)
        }
        self.parts = parts
        self.text = text
    }

    var padded: [UInt32] { parts + Array(repeating: 0, count: 4 - parts.count) }
    public var description: String { text }
    public static func == (a: ReleaseVersion, b: ReleaseVersion) -> Bool { a.padded == b.padded }
    public func hash(into h: inout Hasher) { h.combine(padded) }
    public static func < (a: ReleaseVersion, b: ReleaseVersion) -> Bool { a.padded.lexicographicallyPrecedes(b.padded) }
}

/// The machine a binary is built for, as a release names it and as an ELF header's `e_machine`
/// field says it.
public enum ReleaseArchitecture: String, Sendable, CaseIterable {
    case x86_64, aarch64, armv7, riscv64

    /// The ELF `e_machine` value of a binary for this architecture.
    public var elfMachine: UInt16 {
        switch self {
        case .x86_64: 62
        case .aarch64: 183
        case .armv7: 40
        case .riscv64: 243
        }
    }

    /// The architecture this gateway runs on.
    public static var running: ReleaseArchitecture {
        #if arch(x86_64)
        .x86_64
        #elseif arch(arm64)
        .aarch64
        #elseif arch(arm)
        .armv7
        #else
        .riscv64
        #endif
    }

    /// Reads an executable's ELF header (its first 20 bytes at least): the architecture it is for,
    /// or why it is no Linux executable Shoal could run.
    public static func ofELF(_ header: [UInt8]) throws(TrustError) -> ReleaseArchitecture {
        guard header.count >= 20, header[0] == 0x7F, header[1] == 0x45, header[2] == 0x4C, header[3] == 0x46 else {
            throw TrustError("not an ELF executable (no \\x7fELF magic)")
        }
        guard header[5] == 1 else { throw TrustError("not a little-endian ELF binary") }
        let type = UInt16(header[16]) | UInt16(header[17]) << 8
        guard type == 2 || type == 3 else { throw TrustError("an ELF file but not an executable (e_type \(type))") }
        let machine = UInt16(header[18]) | UInt16(header[19]) << 8
        guard let arch = allCases.first(where: { $0.elfMachine == machine }) else { throw TrustError("an ELF executable for machine \(machine), not one Shoal releases") }
        return arch
    }
}
