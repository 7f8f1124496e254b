/// Text from bytes that must be valid UTF-8 (document ids and JSON strings off the wire).
///
/// `String(validating:as:)` is generic over the encoding and is not specialized for callers
/// outside the standard library: each call looks up type metadata at run time, ~900
/// instructions for a 20-byte id (callgrind, `shoal bench instructions`). Ids and JSON keys are
/// nearly always ASCII, and ASCII is valid UTF-8, so those take `String(decoding:as:)`, which is
/// specialized; anything else is validated as before.
public enum UTF8Text {
    /// The bytes as a String, or nil if they are not valid UTF-8.
    @inlinable
    public static func string(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        if isASCII(bytes) { return String(decoding: bytes, as: UTF8.self) }
        return String(validating: bytes, as: UTF8.self)
    }

    /// The bytes as a String, or nil if they are not valid UTF-8.
    @inlinable
    public static func string(_ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBufferPointer { string($0) }
    }

    /// True when no byte has its high bit set. Eight bytes at a time.
    @inlinable
    public static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        var i = 0
        var seen: UInt64 = 0
        while i + 8 <= bytes.count {
            seen |= raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < bytes.count {
            seen |= UInt64(bytes[i])
            i += 1
        }
        return seen & 0x8080_8080_8080_8080 == 0
    }
}
