import ShoalCore
import ShoalTLS

/// A document of a signed system collection (`_trust` entries, `_releases` manifests): who signed
/// it, the signature, and the canonical bytes the signature covers.
public protocol SignedDocument {
    /// The signing key's fingerprint (32 lower-case hex digits).
    var signer: String { get }
    var signature: [UInt8] { get }
    /// The canonical form (`SignedForm.bytes`), never the JSON body: JSON has many spellings of one
    /// value, the canonical form has one.
    var signedBytes: [UInt8] { get }
}

extension SignedDocument {
    /// Whether `key` is the signer this document names and its signature verifies under it.
    public func isSigned(by key: AdminPublicKey) -> Bool {
        key.fingerprint == signer && key.verifies(signature, of: signedBytes)
    }
}

/// The one signing and verification path of Shoal's signed system collections. What a reader gets
/// wrong: the signature covers a canonical text (a `<format> <version>` header line, then one line
/// per field in a fixed order), so a field holding a line break could move text between fields
/// without changing the bytes signed; `checkLine` refuses it before anything is signed or taken.
public enum SignedForm {
    /// The bytes a signature covers.
    public static func bytes(header: String, fields: [String]) -> [UInt8] {
        Array(([header] + fields).joined(separator: "\n").utf8)
    }

    /// A DER ECDSA signature (P-256, SHA-256) over `document`'s canonical bytes.
    public static func sign(_ document: some SignedDocument, with key: AdminSigningKey) throws(TrustError) -> [UInt8] {
        guard key.publicKey.fingerprint == document.signer else { throw TrustError("the document names signer \(document.signer), not this key") }
        do { return try key.sign(document.signedBytes) } catch { throw TrustError("cannot sign: \(error)") }
    }

    /// Refuses a field that would break the canonical form (a line break, by bytes: "\r\n" is one
    /// Character, equal to neither "\n" nor "\r", so a Character test misses it) or is too long.
    public static func checkLine(_ text: String, _ what: String, maxBytes: Int) throws(TrustError) {
        guard text.utf8.count <= maxBytes else { throw TrustError("\(what) longer than \(maxBytes) bytes") }
        guard !text.utf8.contains(0x0A), !text.utf8.contains(0x0D) else { throw TrustError("\(what) holds a line break") }
    }

    /// Whether `text` is non-empty lower-case hex.
    public static func isHex(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }

    /// Refuses a signer that is not a key fingerprint.
    public static func checkSigner(_ signer: String) throws(TrustError) {
        guard signer.utf8.count == 32, isHex(signer) else { throw TrustError("signer must be a key fingerprint (32 lower-case hex digits)") }
    }

    // MARK: strict body reading, shared by every signed document

    /// A JSON object of at most `maxBytes` with no field outside `known`; `what` names it in errors
    /// ("entry", "manifest").
    static func object(_ body: String, maxBytes: Int, known: Set<String>, what: String) throws(TrustError) -> [String: JSONValue] {
        guard body.utf8.count <= maxBytes else { throw TrustError("\(what) too large: \(body.utf8.count) bytes, at most \(maxBytes)") }
        let value: JSONValue
        do { value = try JSONValue.parse(body) } catch { throw TrustError("not JSON: \(error)") }
        guard let o = value.objectValue else { throw TrustError("\("aeiou".contains(what.prefix(1)) ? "an" : "a") \(what) is a JSON object") }
        if let stray = o.keys.sorted().first(where: { !known.contains($0) }) { throw TrustError("unknown field \"\(stray)\"") }
        return o
    }

    static func integer(_ v: JSONValue?) -> Int64? {
        guard let v, case .number(let s) = v else { return nil }
        return Int64(s)
    }

    static func serial(_ v: JSONValue?) throws(TrustError) -> UInt64 {
        guard let v, case .number(let s) = v, let serial = UInt64(s) else { throw TrustError("serial must be a whole number") }
        return serial
    }

    static func signature(_ v: JSONValue?) throws(TrustError) -> [UInt8] {
        guard let hex = v?.stringValue, let signature = Hex.decode(hex), (8...80).contains(signature.count) else {
            throw TrustError("signature must be a DER ECDSA signature in hex")
        }
        return signature
    }

    static func formatVersion(_ o: [String: JSONValue], _ expected: Int) throws(TrustError) {
        guard let v = integer(o["v"]), v == Int64(expected) else { throw TrustError("unsupported format (v must be \(expected))") }
    }
}
