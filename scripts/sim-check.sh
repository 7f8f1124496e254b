#!/usr/bin/env bash
# The mesh's simulation properties, each over many seeds (default 200), on the release build:
# connected link graph within the budget, one link per pair, every write on every node, in full,
# line, grid and random topologies, and convergence with no lost write and no resurrected delete
# after loss, partitions every 5–30 s, crashes, clock skew, duplicated and reordered frames stop,
# with frames in flight and bytes sent bounded; and fleet trust: an operator revokes one node under
# partitions and crashes, nobody links to it again, every other node ends with the same entries; and
# blobs of 64 KB–4 MB on Wi-Fi and BLE meshes, with and without faults: every node ends with every
# blob, no chunk is sent to a node that verified it, and without faults at most 1.2× one copy per
# node is sent; and a 250-gateway random mesh (gossip paced: frames in flight and bytes bounded);
# and concurrent edits of single fields under partitions and crashes: every field of every
# document never deleted ends with its newest write on every node (the field-level merge); and 100
# gateways on BLE-like links, where control may take at most a tenth of any link's capacity in any
# second; and a replay: the same seeds with every fault (some with TLS and trust) in two processes
# give the same report.
# Part of `make test`; `make soak` runs more seeds.
# Usage: scripts/sim-check.sh [SEEDS]   (SHOAL_BIN overrides the binary)
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${SHOAL_BIN:-.build/release/shoal}
seeds=${1:-200}
logs=$(mktemp -d /tmp/shoal-sim-check.XXXXXX)
trap 'rm -rf "$logs"' EXIT

scenarios=(
  "full-20      --nodes 20 --seconds 60"
  "full-50      --nodes 50 --seconds 60 --writes 10"
  "line-20      --nodes 20 --topology line --seconds 60"
  "grid-25      --nodes 25 --topology grid --seconds 60"
  "random-20    --nodes 20 --topology random --seconds 60"
  "random-250   --nodes 250 --topology random --max-connections 3 --writes 50 --seconds 10"
  "ble-100      --nodes 100 --kind ble --topology random --max-connections 3 --seconds 300 --max-control-share 0.1"
  "faults-10    --nodes 10 --partitions --crashes --loss 0.05 --skew 90000 --duplicate 0.002 --reorder 0.005 --seconds 200"
  "ble-8        --nodes 8 --kind ble --partitions --crashes --seconds 240"
  "fields-10    --nodes 10 --field-edits --writes 60 --partitions --crashes --loss 0.05 --seconds 200"
  "trust-10     --nodes 10 --trust --partitions --crashes --loss 0.05 --seconds 200"
  "blobs-10     --nodes 10 --blobs 3 --blob-bytes 64000-4000000 --seconds 60"
  "blobs-20     --nodes 20 --blobs 3 --blob-bytes 64000-4000000 --seconds 90"
  "blobfault-20 --nodes 20 --blobs 3 --blob-bytes 64000-2000000 --partitions --crashes --loss 0.05 --seconds 200"
  "blobble-10   --nodes 10 --kind ble --blobs 2 --blob-bytes 64000-512000 --seconds 300"
  "blobble-20   --nodes 20 --kind ble --blobs 2 --blob-bytes 64000-256000 --partitions --crashes --seconds 400"
)

started=$(date +%s)
status=0
# Two at a time: the machines this runs on have two cores.
# The blob scenarios move megabytes per seed (~12 min of one core at 200 seeds): they run a
# quarter of the seeds (50 in `make test`; `make soak`'s 2,000 gives them 500).
run() {
  local name=$1; shift
  local n=$seeds
  case $name in blob*) n=$(( (seeds + 3) / 4 ));; esac
  # A large mesh takes ~10 s of one core per seed: one seed per hundred (2 in `make test`).
  case $name in random-250) n=$(( (seeds + 99) / 100 ));; esac
  # 100 BLE gateways: ~1.5 s of one core per seed, one seed in twenty (10 in `make test`).
  case $name in ble-100) n=$(( (seeds + 19) / 20 ));; esac
  "$bin" sim "$@" --seeds "$n" --quiet >"$logs/$name.txt" 2>&1
  echo $? >"$logs/$name.rc"
}
pids=()
for s in "${scenarios[@]}"; do
  read -r name args <<<"$s"
  # shellcheck disable=SC2086
  run "$name" $args &
  pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait

# Replays: the same seeds in a second process give the same report. Each process hashes with a
# seed of its own, so a fault whose effects follow a Dictionary's order (a crash closing its links
# in hash order did) shows here as two different reports.
# One seed a run, so that each seed's whole report is compared (and its invariants checked: no
# other scenario has this mix of faults).
replay=(--nodes 10 --field-edits --partitions --crashes --loss 0.05 --skew 90000 --duplicate 0.002 --reorder 0.005 --seconds 200)
replayed=ok
# Seeds 11-15 add real TLS and fleet trust: their keys come from the seed, so they repeat too.
for seed in $(seq 1 15); do
  extra=()
  [ "$seed" -le 10 ] || extra=(--tls --trust)
  for r in 1 2; do
    "$bin" sim "${replay[@]}" "${extra[@]}" --seed "$seed" >"$logs/replay.$r.full" 2>&1 || replayed="seed $seed failed an invariant or did not run"
    grep -v "speed" "$logs/replay.$r.full" >"$logs/replay.$r"
  done
  [ "$replayed" != ok ] || grep -q "invariants .*all held" "$logs/replay.1" || replayed="seed $seed printed no report"
  [ "$replayed" != ok ] || diff "$logs/replay.1" "$logs/replay.2" >"$logs/replay.diff" || { replayed="seed $seed gave two reports"; cat "$logs/replay.diff"; }
  [ "$replayed" = ok ] || break
done
if [ "$replayed" = ok ]; then
  echo "sim replay     ok    15 seeds with every fault (5 with --tls --trust), each in two processes: the same report"
else
  status=1
  echo "sim replay     FAILED: $replayed (${replay[*]} ${extra[*]})"
  head -20 "$logs/replay.1.full"
fi

for s in "${scenarios[@]}"; do
  read -r name args <<<"$s"
  rc=$(cat "$logs/$name.rc")
  summary=$(grep -E "seeds  " "$logs/$name.txt" | sed 's/  */ /g')
  if [ "$rc" = 0 ]; then
    printf 'sim %-10s ok    %s | %s\n' "$name" "$summary" "$(grep -E 'converged \(' "$logs/$name.txt" | sed 's/  */ /g')"
  else
    status=1
    printf 'sim %-10s FAILED (%s)\n' "$name" "$args"
    grep -E "FAILED|error" "$logs/$name.txt" | head -5
  fi
done
blobs=$(printf '%s\n' "${scenarios[@]}" | grep -c '^blob')
echo "simulation check: $(( ${#scenarios[@]} - blobs - 2 )) scenarios × $seeds seeds, random-250 × $(( (seeds + 99) / 100 )), ble-100 × $(( (seeds + 19) / 20 )) and $blobs blob scenarios × $(( (seeds + 3) / 4 )) seeds, and a replay, run in $(( $(date +%s) - started )) s"
grep -h "faults (all seeds)" "$logs"/*.txt | sed 's/^ */sim faults: /'
grep -h "trust (all seeds)" "$logs"/*.txt | sed 's/^ */sim trust: /'
grep -h "control per link" "$logs/ble-100.txt" | sed 's/^ */sim ble-100: /'
for f in "$logs"/blob*.txt; do echo "sim $(basename "$f" .txt): $(grep -h "blob ratio" "$f" | sed 's/  */ /g')"; done

exit $status
