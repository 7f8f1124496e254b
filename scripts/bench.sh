#!/usr/bin/env bash
# `make bench`: the whole `shoal bench` table on the release binary (dist/shoal), with the binary
# size set against a trivial static-stdlib program that imports FoundationEssentials, built and
# stripped here in the same run. Prints figures; fails only if a benchmark cannot run.
# Usage: scripts/bench.sh [SHOAL]
set -euo pipefail
cd "$(dirname "$0")/.."
shoal=${1:-dist/shoal}
work=$(mktemp -d /tmp/shoal-bench-baseline.XXXXXX)
trap 'rm -rf "$work"' EXIT
printf 'import FoundationEssentials\nprint(Date.now)\n' > "$work/main.swift"
${SWIFTC:-swiftc} -O -static-stdlib "$work/main.swift" -o "$work/trivial"
strip "$work/trivial"
"$shoal" bench all --baseline-binary "$work/trivial"
