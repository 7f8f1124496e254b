#!/usr/bin/env bash
# `make demo`: boots a gateway on the sim board (no hardware), then drives it through the CLI the
# way a field engineer would: status, write documents, read them back, delete one, follow the
# change feed, change a log level, and stop it with SIGTERM. Everything it starts, it stops.
set -euo pipefail
SHOAL=$(readlink -f "${1:-.build/debug/shoal}")
DATA=$(mktemp -d /tmp/shoal-demo-XXXXXX)
SOCK="$DATA/control.sock"
GW_PID=""
cleanup() {
  [ -n "$GW_PID" ] && kill -TERM "$GW_PID" 2>/dev/null && wait "$GW_PID" 2>/dev/null || true
  rm -rf "$DATA"
}
trap cleanup EXIT

step() { printf '\n\033[1m$'; printf ' %q' "$@"; printf '\033[0m\n'; "$@"; }
shoal() { "$SHOAL" "$@" --socket "$SOCK"; }

echo "Starting a gateway on the sim board (data in $DATA)."
echo "Lines marked [console] are what its serial console shows; [log] is its log."
exec 3>&1
"$SHOAL" run --board sim --data-dir "$DATA" \
  > >(sed -u 's/^/  [console] /' >&3) 2> >(grep --line-buffered -E 'INFO|WARN|ERROR' | sed -u 's/^/  [log] /' >&3) &
GW_PID=$!
for _ in $(seq 1 100); do [ -S "$SOCK" ] && "$SHOAL" status --socket "$SOCK" >/dev/null 2>&1 && break; sleep 0.1; done

step shoal status
step "$SHOAL" identity show --board sim --data-dir "$DATA"
step shoal doc put sensors.readings boiler-1 '{"temperature": 71.5, "unit": "C", "site": "north"}'
step shoal doc put sensors.readings boiler-2 '{"temperature": 64.0, "unit": "C", "site": "south"}'
step shoal doc get sensors.readings boiler-1
step shoal doc put sensors.readings boiler-1 '{"temperature": 72.1, "unit": "C", "site": "north"}'
step shoal doc delete sensors.readings boiler-2
step shoal doc list sensors.readings --deleted
step shoal changes
if command -v curl >/dev/null; then
  echo; echo "The same data over the local HTTP API (here on its Unix socket; http://127.0.0.1:8470/ serves it too, with the web console at /):"
  step curl -s --unix-socket "$DATA/http.sock" http://localhost/v1/collections/sensors.readings/docs/boiler-1
fi
echo; echo "A bad document is refused with a clear error and nothing is written:"
step shoal doc put sensors.readings boiler-3 '{"temperature": }' || echo "(exit $?)"
step shoal log level store verbose
step shoal status --json
sleep 1.2   # let the console show the new counts
printf '\n\033[1m$ kill -TERM %s\033[0m\n' "$GW_PID"
kill -TERM "$GW_PID"
wait "$GW_PID" && echo "gateway stopped cleanly (exit 0)"
GW_PID=""

echo
echo "Two gateways replicating over mutual TLS on loopback (static peers, each allowing the other's peer id):"
PORT=$((30000 + $$ % 20000))
for g in east west; do mkdir -p "$DATA/$g"; done
EAST_ID=$("$SHOAL" identity create --board sim --data-dir "$DATA/east" --json | sed -n 's/.*"peerID": "\([0-9a-f]*\)".*/\1/p')
WEST_ID=$("$SHOAL" identity create --board sim --data-dir "$DATA/west" --json | sed -n 's/.*"peerID": "\([0-9a-f]*\)".*/\1/p')
printf 'group: shoal.demo\ncollections:\n  - name: sensors.readings\nauthenticator:\n  allowedPeers: [%s]\nreplication:\n  listen: 127.0.0.1:%s\n' "$WEST_ID" "$PORT" > "$DATA/east.yaml"
printf 'group: shoal.demo\ncollections:\n  - name: sensors.readings\nauthenticator:\n  allowedPeers: [%s]\nreplication:\n  peers: [127.0.0.1:%s]\n' "$EAST_ID" "$PORT" > "$DATA/west.yaml"
"$SHOAL" run --board sim --data-dir "$DATA/east" --config "$DATA/east.yaml" >/dev/null 2> >(grep --line-buffered -E 'replicating with' | sed -u 's/^/  [east log] /' >&3) &
EAST_PID=$!
"$SHOAL" run --board sim --data-dir "$DATA/west" --config "$DATA/west.yaml" >/dev/null 2> >(grep --line-buffered -E 'replicating with' | sed -u 's/^/  [west log] /' >&3) &
WEST_PID=$!
trap 'kill -TERM $EAST_PID $WEST_PID 2>/dev/null || true; wait $EAST_PID $WEST_PID 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 1 100); do [ -S "$DATA/west/control.sock" ] && [ -S "$DATA/east/control.sock" ] && break; sleep 0.1; done
step "$SHOAL" doc put sensors.readings pump-7 '{"pressure": 2.4, "site": "east"}' --socket "$DATA/east/control.sock"
for _ in $(seq 1 50); do "$SHOAL" doc get sensors.readings pump-7 --socket "$DATA/west/control.sock" >/dev/null 2>&1 && break; sleep 0.1; done
step "$SHOAL" doc get sensors.readings pump-7 --socket "$DATA/west/control.sock"
step "$SHOAL" doc put sensors.readings pump-7 '{"pressure": 2.9, "site": "east", "checked": true}' --socket "$DATA/west/control.sock"
sleep 0.5
step "$SHOAL" doc get sensors.readings pump-7 --socket "$DATA/east/control.sock"
step "$SHOAL" peers --socket "$DATA/west/control.sock"
step "$SHOAL" mesh --socket "$DATA/west/control.sock"
kill -TERM $EAST_PID $WEST_PID
wait $EAST_PID $WEST_PID && echo "both gateways stopped cleanly"
trap 'rm -rf "$DATA"' EXIT
