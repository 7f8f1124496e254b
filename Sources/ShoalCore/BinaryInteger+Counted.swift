/// "1 peer", "2 peers", "0 peers": a count with its noun in the right number, for every line a
/// person reads (status, logs, CLI summaries). Nouns whose plural is not noun + "s" pass it.
extension BinaryInteger {
    public func counted(_ noun: String, plural: String? = nil) -> String {
        "\(self) \(self == 1 ? noun : plural ?? noun + "s")"
    }
}
