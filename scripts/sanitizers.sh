#!/usr/bin/env bash
# The test suite under ThreadSanitizer and AddressSanitizer (`make sanitizers`; `make test` runs
# it too). Each sanitizer gets a build directory of its own (.build-tsan, .build-asan). Every
# process — the test runner and every `shoal` it starts — writes its reports to a file of its own
# (log_path), so reports from child gateways are counted as well. Prints, per sanitizer, the tests
# run, the tests failed, and the reports; exits 1 if any report or failure.
#
# Tests run one at a time (--no-parallel): under TSan's slowdown, CPU-heavy suites running beside
# the library's tests starved them past their 30 s waits on the 2-core CI machine.
#
# Usage: scripts/sanitizers.sh [thread|address]...   (default: both)
# SHOAL_SANITIZE_FILTER: a --filter regex of the tests run (`all`: the whole suite). Default: the
# in-process suites (codecs, store, replication, mesh and simulator, TLS, config, the library) and
# process tests (a running gateway, two gateways replicating, the HTTP API, the MQTT bridge against
# a real mosquitto); under ASan also the fuzz corpus and hostile peers. Left out, as README.md
# ("Proof") says: the supervision tests and hostile peers under TSan (their assertions are about
# timing, and TSan slows everything 5–15×), and the long process tests (crash campaign, network
# lab, soak, console, the MQTT bridge under faults and in the lab).
set -uo pipefail
cd "$(dirname "$0")/.."
kinds=${*:-thread address}
inprocess="ShoalCoreTests|ShoalStoreTests|ShoalReplicationTests|ShoalMeshTests|ShoalGatewayTests|ShoalTLSTests|ShoalLinuxTests|ShoalConfigTests|ShoalLibraryTests"
status=0
for kind in $kinds; do
  case $kind in
    thread) dir=.build-tsan; opts=TSAN_OPTIONS; pattern="WARNING: ThreadSanitizer"
            filter=${SHOAL_SANITIZE_FILTER:-"$inprocess|GatewayTests|ReplicationProcessTests|HTTPProcessTests|MQTTProcessTests"} ;;
    address) dir=.build-asan; opts=ASAN_OPTIONS; pattern="ERROR: AddressSanitizer|ERROR: LeakSanitizer"
            filter=${SHOAL_SANITIZE_FILTER:-"$inprocess|GatewayTests|ReplicationProcessTests|HTTPProcessTests|MQTTProcessTests|FuzzCorpusTests|HostilePeerTests"} ;;
    *) echo "sanitizers: unknown sanitizer $kind (thread, address)" >&2; exit 2 ;;
  esac
  logs=$(mktemp -d /tmp/shoal-sanitize-$kind.XXXXXX)
  started=$(date +%s)
  swift build --build-tests --sanitize=$kind --scratch-path "$dir" 2>&1 | grep -E "error|warning: unre|Compiling|Build" | tail -2
  filterargs=()
  [ "$filter" != all ] && filterargs=(--filter "$filter")
  # The dial race tests drive pure state machines on one thread: a few seeds show the same code.
  env SHOAL_SANITIZER=$kind SHOAL_DIALRACE_SEEDS=${SHOAL_DIALRACE_SEEDS:-10} $opts="log_path=$logs/report" LSAN_OPTIONS="suppressions=$PWD/Tests/Sanitizers/lsan.supp:print_suppressions=0" \
    timeout -s KILL 1200 swift test --skip-build --no-parallel --sanitize=$kind --scratch-path "$dir" "${filterargs[@]}" > "$logs/out.txt" 2>&1
  rc=$?
  failed=0
  reports=$(cat "$logs"/report* 2>/dev/null | grep -cE "$pattern")
  summary=$(grep -E "Test run with" "$logs/out.txt" | tail -1 | sed 's/^[^T]*//')
  echo "sanitizer $kind: ${summary:-no summary (exit $rc)}; $reports report(s) in $(( $(date +%s) - started )) s (tests: $filter)"
  if [ "$reports" -gt 0 ]; then
    failed=1
    cat "$logs"/report* | grep -E "$pattern|^    #[0-9]+ .*(Shoal|/work|Sources)" | head -40
  fi
  if [ $rc != 0 ]; then
    failed=1
    grep -E "✘" "$logs/out.txt" | head -20
  fi
  if [ $failed = 0 ]; then rm -rf "$logs"; else status=1; echo "sanitizer $kind: reports and output kept in $logs"; fi
done
exit $status
