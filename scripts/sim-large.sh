#!/usr/bin/env bash
# Issue 26's large meshes, on the release build (`make sim-large`, ~7 min on 2 cores; not part of
# `make test`): 1,000 gateways (random topology, maxConnectionCount 3, 200 writes of 1 KB) must
# hold every invariant, with its figures printed against the issue's goals; and 250 gateways with 5 %
# loss, partitions and crashes must converge with no lost write and no resurrected delete on SEEDS
# seeds (default 50), in two halves at once.
# Usage: scripts/sim-large.sh [SEEDS]   (SHOAL_BIN overrides the binary)
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${SHOAL_BIN:-.build/release/shoal}
seeds=${1:-50}
logs=$(mktemp -d /tmp/shoal-sim-large.XXXXXX)
trap 'rm -rf "$logs"' EXIT
started=$(date +%s)
half=$(( (seeds + 1) / 2 ))
faults="--nodes 250 --topology random --max-connections 3 --loss 0.05 --partitions --crashes --seconds 200 --quiet"
# shellcheck disable=SC2086
{ "$bin" sim $faults --seed 1 --seeds "$half" >"$logs/faults-a.txt" 2>&1; echo $? >"$logs/faults-a.rc"; } &
a=$!
{ "$bin" sim --nodes 1000 --topology random --max-connections 3 --writes 200 --seconds 30 --seed 9001 >"$logs/large.txt" 2>&1
  echo $? >"$logs/large.rc"
  if [ "$seeds" -gt "$half" ]; then
    # shellcheck disable=SC2086
    "$bin" sim $faults --seed $(( half + 1 )) --seeds $(( seeds - half )) >"$logs/faults-b.txt" 2>&1
  else
    echo "seeds                     0 run, 0 failed" >"$logs/faults-b.txt"
  fi
  echo $? >"$logs/faults-b.rc"; } &
b=$!
wait "$a" "$b"

status=0
echo "1,000 gateways (shoal sim --nodes 1000 --topology random --max-connections 3 --writes 200 --seconds 30 --seed 9001):"
grep -E "one write|bytes sent|control bytes|in flight|speed|invariants" "$logs/large.txt" | sed 's/^ */  /'
[ "$(cat "$logs/large.rc")" = 0 ] || { status=1; echo "sim-large: 1,000 gateways FAILED"; grep -E "FAILED" "$logs/large.txt" | head -5; }
for part in a b; do
  rc=$(cat "$logs/faults-$part.rc")
  summary=$(grep -E 'seeds  ' "$logs/faults-$part.txt" | sed 's/  */ /g')
  # One seed prints no summary: its exit status is the result.
  [ -n "$summary" ] || summary="1 seed run, $([ "$rc" = 0 ] && echo 0 || echo 1) failed"
  echo "250 gateways, loss, partitions, crashes (half $part): $summary"
  [ "$rc" = 0 ] || { status=1; grep -E "FAILED|error" "$logs/faults-$part.txt" | head -5; }
done
echo "sim-large: $seeds seeds of 250 gateways with faults and one 1,000-gateway run in $(( $(date +%s) - started )) s"
exit $status
