import Testing

/// The notation README's examples use, as the README test reads it.
@Suite("README example notation")
struct ReadmeNotationTests {
    @Test("optional parts, alternatives, placeholders, quotes and commands named in comments")
    func notation() {
        let examples = Readme.examples([
            "shoal changes [--since N] [--follow]      # see `shoal help changes`",
            "shoal mesh [--dot | --svg mesh.svg]",
            "shoal peers | shoal peer 4eb7dd08",
            "shoal doc put c d '{\"a\": 1}'   # a # in a comment",
            "shoal --help, shoal <command> --help",
        ])
        #expect(examples.map(\.commands) == [
            [["shoal", "changes"], ["shoal", "changes", "--since", "1"], ["shoal", "changes", "--follow"],
             ["shoal", "changes", "--since", "1", "--follow"], ["shoal", "help", "changes"]],
            [["shoal", "mesh"], ["shoal", "mesh", "--dot"], ["shoal", "mesh", "--svg", "mesh.svg"]],
            [["shoal", "peers"], ["shoal", "peer", "4eb7dd08"]],
            [["shoal", "doc", "put", "c", "d", "{\"a\": 1}"]],
            [["shoal", "--help"], ["shoal", "doc", "--help"]],
        ])
    }
}
