import ShoalLinux

/// The local API's bearer token: 32 random bytes as 64 hex digits in `<data dir>/http.token`
/// (mode 0600), made on the gateway's first start and kept across restarts. Addresses other than
/// loopback and the Unix socket require it; `shoal http token` prints it.
public enum HTTPToken {
    public static func path(dataDirectory: String) -> String { dataDirectory + "/http.token" }

    /// The token, made now if the file does not exist yet.
    public static func loadOrCreate(dataDirectory: String) throws(SystemError) -> String {
        if let existing = try read(dataDirectory: dataDirectory) { return existing }
        let hex = try Files.randomBytes(32).map { b in
            let h = String(b, radix: 16)
            return b < 16 ? "0" + h : h
        }.joined()
        try Files.write(path(dataDirectory: dataDirectory), hex + "\n", mode: 0o600)
        return hex
    }

    /// The token, or nil when the gateway has not made one yet. A file that holds something else
    /// than 64 hex digits is an error naming it.
    public static func read(dataDirectory: String) throws(SystemError) -> String? {
        let file = path(dataDirectory: dataDirectory)
        guard Files.exists(file) else { return nil }
        guard let text = try Files.read(file, max: 4096) else { return nil }
        let token = text.filter { !$0.isWhitespace }
        guard token.count == 64, token.allSatisfy(\.isHexDigit) else {
            throw SystemError(call: "\(file) does not hold a token (64 hex digits); delete it and restart the gateway to make a new one", code: 22)
        }
        return token
    }
}
