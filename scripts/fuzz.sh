#!/usr/bin/env bash
# libFuzzer over every input Shoal takes from outside (Sources/ShoalFuzz): builds shoal-fuzz with
# -sanitize=fuzzer,address into .build/fuzz, then runs each target for SECONDS (default 60) from
# the corpus in Tests/Fuzz/corpus/<target> (new inputs go to .build/fuzz/corpus/<target>, not into
# the repository). A crash stops with its input in .build/fuzz/artifacts/: copy it into the
# target's corpus directory as crash-<what>, fix the bug, and `swift test` replays it for ever.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=${*:-frame message json site board certificate control hub trust query release}
swift build -c release --product shoal-fuzz -Xswiftc -sanitize=fuzzer,address -Xswiftc -DSHOAL_FUZZ --build-path .build/fuzz 2>&1 | grep -E "error|warning: unre|Compiling shoal" || true
bin=.build/fuzz/release/shoal-fuzz
[ -x "$bin" ] || { echo "fuzz: the libFuzzer build failed" >&2; exit 1; }
mkdir -p .build/fuzz/artifacts
failed=0
for t in $targets; do
  mkdir -p ".build/fuzz/corpus/$t"
  log=".build/fuzz/$t.log"
  set +e
  SHOAL_FUZZ_TARGET=$t "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix=".build/fuzz/artifacts/$t-" ".build/fuzz/corpus/$t" "Tests/Fuzz/corpus/$t" > "$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus=$(find ".build/fuzz/corpus/$t" "Tests/Fuzz/corpus/$t" -type f | wc -l)
  if [ $rc = 0 ]; then
    echo "fuzz $t: ${runs:-?} executions in ${seconds} s, no crash (corpus $corpus inputs)"
  else
    echo "fuzz $t: FAILED (exit $rc) after ${runs:-?} executions; input in .build/fuzz/artifacts/; log $log" >&2
    grep -E "ERROR|Fatal|SUMMARY" "$log" | head -5 >&2
    failed=$((failed + 1))
  fi
done
[ $failed = 0 ]
