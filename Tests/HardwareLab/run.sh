#!/usr/bin/env bash
# The hardware lab's checks (run by `make test` after `make release`): boots Debian's kernel under
# QEMU with gpio-sim and hci_vhci (scripts/qemu-lab.sh) and runs each guest script here against
# SHOAL (default dist/shoal): the LED on gpio-sim, the Bluetooth LE transport on btvirt's
# controllers (documents, and a 256 KiB blob in ble-link.sh), and transport switching (TCP on the
# guest's loopback + BLE). SHOAL_LAB_CHECKS picks scripts. Skipped, saying why, where the lab
# cannot run (not root: it installs packages and needs /dev/port in the guest only, but apt needs
# root here).
set -euo pipefail
cd "$(dirname "$0")/../.."
shoal=$(realpath "${1:-dist/shoal}")
[ -x "$shoal" ] || { echo "hardware lab: no shoal binary at $shoal" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then echo "hardware lab: skipped (needs root to install QEMU and build gpio-sim)"; exit 0; fi
./scripts/qemu-lab.sh prepare
# The Bluetooth checks run BlueZ's tools from this machine in the guest (make deps installs them).
if ! command -v btvirt >/dev/null || ! command -v hciconfig >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bluez bluez-test-tools >/dev/null
fi
cache=${SHOAL_QEMU_CACHE:-/var/cache/shoal-qemu}
failed=0
# The guest's /tmp and /run are its own (tmpfs): the binary (which may live in a clone under /tmp)
# and the script go where the guest sees them, in the cache.
guest_shoal="$cache/shoal-$$"
cp "$shoal" "$guest_shoal"
trap 'rm -f "$guest_shoal"' EXIT
checks=${SHOAL_LAB_CHECKS:-Tests/HardwareLab/gpio-led.sh Tests/HardwareLab/ble-link.sh Tests/HardwareLab/ble-switch.sh}
# A check that fails runs once more (both runs are printed): the guest is emulated on a shared
# 2-core machine and timing-dependent BLE checks have failed once in several runs (see README,
# "The hardware lab"); a second failure fails the lab.
# One run of a guest script: sets rc (its exit status) and took (seconds); prints its lines
# matching $1 (the ok lines are left out of repeated runs).
run_check() {
  guest="$cache/run-$$-$(basename "$2")"
  { echo "SHOAL=$guest_shoal"; cat Tests/HardwareLab/lib.sh "$2"; } > "$guest"
  local start
  start=$(date +%s)
  set +e
  ./scripts/qemu-lab.sh run "$guest" 2>&1 | tr -d '\r' | grep -E "$1"
  rc=${PIPESTATUS[0]}
  set -e
  rm -f "$guest"
  took=$(( $(date +%s) - start ))
}
# SHOAL_LAB_RUNS=N (N > 1): each check runs N times with no second chance, and the passes are
# counted — how the BLE checks' reliability is measured (README, "The hardware lab").
runs=${SHOAL_LAB_RUNS:-1}
if [ "$runs" -gt 1 ]; then
  for check in $checks; do
    passed=0
    for i in $(seq 1 "$runs"); do
      run_check '^(FAIL|WARN|figure|guest checks|      )' "$check"
      [ "$rc" = 0 ] && passed=$((passed + 1))
      echo "hardware lab: $(basename "$check") run $i of $runs: exit $rc in $took s"
    done
    echo "hardware lab: $(basename "$check"): $passed of $runs runs passed"
    [ $passed = "$runs" ] || failed=$((failed + 1))
  done
  [ $failed = 0 ] || { echo "hardware lab: $failed check script(s) failed at least once" >&2; exit 1; }
  exit 0
fi
for check in $checks; do
  for attempt in 1 2; do
    run_check '^(ok|FAIL|WARN|figure|guest checks|qemu-lab|      )' "$check"
    echo "hardware lab: $(basename "$check"): exit $rc in $took s (attempt $attempt)"
    [ "$rc" = 0 ] && break
    [ $attempt = 1 ] && echo "hardware lab: $(basename "$check") failed; running it once more"
  done
  [ "$rc" = 0 ] || failed=$((failed + 1))
done
[ $failed = 0 ] || { echo "hardware lab: $failed check script(s) failed" >&2; exit 1; }
