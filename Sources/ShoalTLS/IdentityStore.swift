import ShoalCore
import Glibc

/// Identities on disk, by label: `<dir>/<label>.key.pem` (mode 0600: only the service user reads
/// it) and `<dir>/<label>.crt.pem` (the chain, leaf first). Files are written to a temporary name,
/// fsynced and renamed, so a power cut leaves the old identity or the new one, never half of one.
public struct IdentityStore: Sendable {
    public let directory: String

    public init(directory: String) { self.directory = directory }

    public static func checkLabel(_ label: String) throws(TLSError) {
        guard !label.isEmpty, label.utf8.count <= 64, !label.hasPrefix("."),
              label.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." })
        else { throw .invalidRequest("label \"\(label)\" must be 1–64 letters, digits, '-', '_' or '.' and not start with '.'") }
    }

    func keyPath(_ label: String) -> String { "\(directory)/\(label).key.pem" }
    func certificatePath(_ label: String) -> String { "\(directory)/\(label).crt.pem" }

    /// The identity stored under `label`, or nil if there is none.
    public func find(_ label: String) throws(TLSError) -> Identity? {
        try IdentityStore.checkLabel(label)
        guard let keyBytes = try readFile(keyPath(label)) else { return nil }
        guard let certBytes = try readFile(certificatePath(label)) else {
            throw .invalidRequest("\(certificatePath(label)) is missing while its key exists; delete the identity and create it again")
        }
        return try Identity(key: PrivateKey(parsing: keyBytes), certificate: Certificate(parsing: certBytes))
    }

    public func save(_ identity: Identity, label: String) throws(TLSError) {
        try IdentityStore.checkLabel(label)
        try makeDirectory()
        try writeFile(certificatePath(label), Array(identity.certificate.pem.utf8), mode: 0o644)
        try writeFile(keyPath(label), Array(identity.key.pem.utf8), mode: 0o600)
    }

    @discardableResult
    public func delete(_ label: String) throws(TLSError) -> Bool {
        try IdentityStore.checkLabel(label)
        let a = unlink(keyPath(label)) == 0
        let b = unlink(certificatePath(label)) == 0
        return a || b
    }

    /// The seed's flow: find the identity by label; if there is none, or it has expired (or
    /// expires within `renewBeforeSeconds`), make a new one with `make` and store it.
    /// Returns the identity and whether it was (re)created.
    public func loadOrCreate(_ label: String, renewBeforeSeconds: Int64 = 0, now: Int64 = Identity.now(),
                             make: () throws(TLSError) -> Identity) throws(TLSError) -> (identity: Identity, created: Bool) {
        if let existing = try find(label), now + renewBeforeSeconds < existing.certificate.notAfter {
            return (existing, false)
        }
        let fresh = try make()
        try save(fresh, label: label)
        return (fresh, true)
    }

    func makeDirectory() throws(TLSError) {
        var current = directory.hasPrefix("/") ? "" : "."
        for part in directory.split(separator: "/") {
            current += "/" + part
            if mkdir(current, 0o700) != 0 && errno != EEXIST {
                throw .io("mkdir \(current): \(String(cString: strerror(errno)))")
            }
        }
    }

    func readFile(_ path: String) throws(TLSError) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw .io("open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 8192)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, 8192) }
            if n < 0 { if errno == EINTR { continue }; throw .io("read \(path): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            out += chunk.prefix(n)
            if out.count > 1 << 20 { throw .io("\(path) is over 1 MiB") }
        }
        return out
    }

    func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t) throws(TLSError) {
        let tmp = path + ".tmp"
        unlink(tmp)
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw .io("create \(tmp): \(String(cString: strerror(errno)))") }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            if n < 0 { if errno == EINTR { continue }; close(fd); unlink(tmp); throw .io("write \(tmp): \(String(cString: strerror(errno)))") }
            offset += n
        }
        fchmod(fd, mode)
        fsync(fd)
        close(fd)
        guard rename(tmp, path) == 0 else { unlink(tmp); throw .io("rename \(tmp): \(String(cString: strerror(errno)))") }
    }
}
