// The `shoal` binary: one executable, subcommands. See `shoal --help` and README.md.
import Glibc
import ShoalRuntime

let arguments = Array(CommandLine.arguments.dropFirst())
let status = await CLI.main(arguments)
exit(status)
