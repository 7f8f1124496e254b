#!/bin/sh
# Runs inside the QEMU guest (scripts/qemu-lab.sh), chrooted into this machine's /, as root. SHOAL
# is set by the line the test prepends. Transport switching for real: gateways a (hci0) and b
# (hci1) run both transports — "Wi-Fi" is TCP + TLS on the guest's loopback (static peers; the
# guest has no other network) and Bluetooth LE is btvirt's controllers. They link over TCP first;
# the loopback goes down: the TCP link dies and they move to BLE; it comes back: a TCP link opens
# beside the BLE one and the BLE link closes after. Writes flow throughout; nothing is lost.
set -u
ip link set lo up
controllers 2

for g in a b; do identity $g; done
setup() {  # name adapter port peer-port
  cat > $lab/board-$1.yaml <<B
extends: generic-linux
board:
  name: QEMU lab switching gateway $1
  support: community
wifi:
  interface: none
bluetooth:
  adapter: $2
B
  cat > $lab/site-$1.yaml <<S
group: lab.switch
transports: [wifi, bluetooth]
collections:
  - name: sensors.readings
authenticator:
  allowedPeers: [$id_a, $id_b]
replication:
  listen: 127.0.0.1:$3
  peers: [127.0.0.1:$4]
mesh:
  advertisingDelayMillis: 100
  connectDelayMillis: 200
  backoffMillis: 1000
  initialDiscoveryDurationSeconds: 0
S
}
setup a hci0 7701 7702
setup b hci1 7702 7701
# The transport b replicates with a over now (wifi, bluetooth or -).
link() { $SHOAL peer $id_a --socket $lab/b/control.sock 2>/dev/null | sed -n 's/^link *\([a-z]*\).*/\1/p'; }
wait_link() {  # transport, seconds
  t0=$(now)
  while [ "$(link)" != "$1" ]; do awk -v a=$t0 -v b=$(now) -v l=$2 'BEGIN { exit !(b - a > l) }' && return 1; sleep 0.3; done
  since $t0
}
wait_docs() {
  t0=$(now)
  while [ "$(docs $1)" != "$3" ]; do awk -v a=$t0 -v b=$(now) -v l=$2 'BEGIN { exit !(b - a > l) }' && return 1; sleep 0.5; done
  since $t0
}
n=0
write() {  # count: documents written on a, one CLI call each
  k=0; while [ $k -lt $1 ]; do
    $SHOAL doc put sensors.readings s$n "{\"seq\":$n}" --socket $lab/a/control.sock > /dev/null || fail "write s$n"
    n=$((n + 1)); k=$((k + 1))
  done
}

run a; pa=$(pgrep -f "board-a.yaml" | head -1)
run b; pb=$(pgrep -f "board-b.yaml" | head -1)
if s=$(wait_link wifi 60); then ok "a and b replicate over wifi (TCP on loopback) first (${s} s)"; else fail "no wifi link: $(link)"; story b; fi
write 10
if wait_docs b 30 $n > /dev/null; then ok "b has a's $n documents over wifi"; else fail "b has $(docs b) of $n"; fi

# "Wi-Fi" goes: the TCP link dies (TCP_USER_TIMEOUT / the probe fails); BLE takes over.
ip link set lo down
t_down=$(now)
if s=$(wait_link bluetooth 90); then
  ok "loopback down: b replicates with a over bluetooth ${s} s later"
  figure "fallback to Bluetooth LE: $(since $t_down) s after the TCP path went down (TCP gives up on the dead link after its user timeout, 20 s)"
else
  fail "no fallback to bluetooth: link '$(link)'"; story a; story b
fi
write 10
if wait_docs b 60 $n > /dev/null; then ok "b has all $n documents, the last 10 over bluetooth"; else fail "b has $(docs b) of $n over bluetooth"; story b; fi

# "Wi-Fi" comes back: a TCP link opens beside the BLE one; BLE closes once TCP replicates.
moved_before=$(cat $lab/a.log $lab/b.log | grep -c "replication moved to wifi")
ip link set lo up
t_up=$(now)
( n=$n; write 10 ) > /dev/null 2>&1 &  # writes keep coming during the handover
writer=$!
if s=$(wait_link wifi 90); then
  ok "loopback up: back on wifi ${s} s later"
  figure "handover back to Wi-Fi: ${s} s after the path came back, with writes going on (probe every 2 s, TCP connect, TLS handshake, HELLO, then the BLE link closes)"
else
  fail "did not return to wifi: link '$(link)'"; story a; story b
fi
wait $writer
n=$((n + 10))
if wait_docs b 60 $n > /dev/null; then ok "b has all $n documents after the handover"; else fail "b has $(docs b) of $n after the handover"; fi
moved_after=$(cat $lab/a.log $lab/b.log | grep -c "replication moved to wifi")
[ "$moved_after" -gt "$moved_before" ] && ok "the BLE link closed after the wifi link replicated: $(grep -h 'replication moved to wifi' $lab/a.log $lab/b.log | tail -1 | cut -c1-160)" || { fail "no new 'replication moved to wifi' in the logs"; story a; story b; }
[ "$(docs a)" = "$n" ] && [ "$(docs b)" = "$n" ] && ok "a and b hold $n each: nothing lost or doubled" || fail "a has $(docs a), b has $(docs b), written $n"
recv=$($SHOAL status --socket $lab/b/control.sock --json | sed -n 's/^ *"documentsReceived" *: *\([0-9]*\).*/\1/p')
[ "${recv:-0}" -le $((n + 10)) ] && ok "b received $recv documents for $n written (no resend loop)" || fail "b received $recv documents for $n written"

kill $pa $pb 2>/dev/null; wait $pa $pb 2>/dev/null
kill $btvirt 2>/dev/null
[ -n "$(kernel_bugs)" ] && { echo "WARN the guest kernel reported Bluetooth trouble:"; kernel_bugs; }
echo "guest checks failed: $fails"
exit $fails
