import ShoalTLS
import ShoalTrust

/// The `trust` target's fixed world: one site admin key (K1, public half only: its private half
/// signed the seeds in Tests/Fuzz/corpus/trust and the entries below, and was then thrown away),
/// and a ledger already holding K1's entry adding admin key K2, K1's allow of peer a1…, and K2's
/// revoke of peer b2… — so a fuzzed entry meets a held one, a second signer, a replayed serial.
/// New signed seeds need a new key: replace all of this with its public key and entries.
enum TrustFuzz {
    /// "Now" for every input (2027-01-15); the seeds are signed about 10 days before it.
    static let now: Int64 = 1_800_000_000

    static let siteKey = try! AdminPublicKey(hex: "3059301306072a8648ce3d020106082a8648ce3d03010703420004f36991c68989a162574e0257d1169bfd2c1473244da9036a2c4072d12da1655a11f6280c75eae7b21fc3179caaa99fdb09ebb8cda732289a440c5f1e052a6613")

    static let held = [
        #"{"issuedAt":1799000000,"kind":"add-admin-key","note":"second operator","serial":1,"signature":"3045022046db0b8ad950bad3069146887efd5e129c9a5daf846872759d2f6c331c144cbe022100e3e23dd169897fe6ec464cb76b2049105cae01457a36b21da1441e4dcf605aa0","signer":"a8a782d508af088b9c401f9170defad0","subject":"3059301306072a8648ce3d020106082a8648ce3d030107034200048e5a179667d442d3f5b8b130fcba6efd9d9b50195268587594cc3ec9588c120b2ddd5dc620ea176d25b781e767bf5c09e941868cc959f0b9bf6995e95f9b139c","v":1}"#,
        #"{"issuedAt":1799000010,"kind":"allow","serial":2,"signature":"3045022100cd49c17abb602f5b0fc50ebbfc1e8bd3622a2529fc2857984250e0ca08dd7bba0220625a6961ca5ef9034b38b40dc1ca4f1edd928c3b2c9d896fc58cf3e94d1a2d36","signer":"a8a782d508af088b9c401f9170defad0","subject":"a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1","v":1}"#,
        #"{"issuedAt":1799000020,"kind":"revoke","note":"stolen","serial":1,"signature":"3045022100d21100778f60dac0c69b31fe3964e975d2318928390eb2ae4052b69d965b104a02200689e3dd6ecf941d60fc2ce0dea8dcf74aff526f93908423d46f8f51ba1d5aac","signer":"e66b5fb91d8fc91a9ad60922a033fd05","subject":"b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2","v":1}"#,
    ]

    static let ledger: TrustLedger = {
        var l = TrustLedger(siteKeys: [siteKey])
        for body in held {
            guard let e = try? TrustEntry.decode(body), l.consider(e, documentID: e.documentID, now: now) == .accepted else {
                fatalError("the trust target's held entries no longer verify")
            }
        }
        return l
    }()
}
