#!/bin/sh
# Runs inside the QEMU guest (scripts/qemu-lab.sh), chrooted into this machine's /, as root. SHOAL
# is set by the line the test prepends. The Bluetooth LE transport against the real kernel
# Bluetooth stack: hci_vhci + btvirt make two LE controllers that hear each other (no
# bluetoothd). Gateways a (hci0) and b (hci1) sync over BLE only, documents and then a 256 KiB
# blob (its own step: cheaper in CI time than a script that boots and links again); at the end,
# with b stopped, x (on hci1) is a stranger a does not trust. Two controllers, not three: with a
# third one idle, btvirt was seen reporting connections on it that nobody made, and a second
# Connection Complete for a live one, after which the guest kernel hit a BUG closing an L2CAP
# socket.
# Prints `ok …` / `FAIL …` lines and `figure …` lines.
set -u

controllers 2
ok "two LE controllers: $(for h in hci0 hci1; do printf '%s=%s ' $h "$(addr $h)"; done)"

for g in a b x; do identity $g; done
board() {
  cat > $lab/board-$1.yaml <<B
extends: generic-linux
board:
  name: QEMU lab BLE gateway $1
  support: community
wifi:
  interface: none
bluetooth:
  adapter: $2
B
}
site() {
  cat > $lab/site-$1.yaml <<S
group: lab.ble
transports: [bluetooth]
collections:
  - name: sensors.readings
authenticator:
  allowedPeers: [$2]
mesh:
  advertisingDelayMillis: 100
  connectDelayMillis: 200
  backoffMillis: 2000
  initialDiscoveryDurationSeconds: 0
S
}
board a hci0; board b hci1; board x hci1
site a "$id_a, $id_b"; site b "$id_a, $id_b"; site x "$id_a, $id_b, $id_x"
# Waits up to $2 s until gateway $1 holds $3 documents; prints the seconds it took (or nothing).
wait_docs() {
  t0=$(now); n=0
  while :; do
    n=$(docs $1); [ "${n:-0}" -ge $3 ] && { awk -v a=$t0 -v b=$(now) 'BEGIN { printf "%.1f", b - a }'; return 0; }
    awk -v a=$t0 -v b=$(now) -v l=$2 'BEGIN { exit !(b - a > l) }' && return 1
    sleep 0.5
  done
}
makefile() {  # prefix, count: ~230-byte documents
  i=0; while [ $i -lt $2 ]; do
    printf '%s-%05d\t{"sensor":"%s","seq":%d,"celsius":21.5,"note":"%s"}\n' $1 $i $1 $i "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
    i=$((i + 1))
  done > $lab/import-$1.tsv
}
import() {  # gateway, prefix, count
  makefile $2 $3
  $SHOAL doc import sensors.readings $lab/import-$2.tsv --socket $lab/$1/control.sock > /dev/null || fail "import on $1"
}

# a advertises; BlueZ's own tools on hci1 see it before b starts.
t_start=$(now)
run a; pa=$(pgrep -f "board-a.yaml" | head -1)
sleep 3
# (each tool leaves the controller's scan state to the other's surprise: reset it between them)
scan=$(timeout 8 btmgmt --index 1 find -l 2>&1)
seen=0
case "$scan" in *"$(addr hci0)"*) seen=1; ok "btmgmt find on hci1 sees a's advertisement at $(addr hci0): $(echo "$scan" | grep -A3 "$(addr hci0)" | tr -s ' \n' ' ' | cut -c1-300)" ;; *) echo "WARN btmgmt find did not see $(addr hci0): $(echo "$scan" | tail -5 | tr '\n' ' ')" ;; esac
timeout 5 btmgmt --index 1 stop-find > /dev/null 2>&1
hciconfig hci1 down; hciconfig hci1 up
lescan=$(timeout -s INT 4 stdbuf -oL hcitool -i hci1 lescan --duplicates 2>&1)
case "$lescan" in *"$(addr hci0)"*) seen=1; ok "hcitool lescan on hci1 sees $(addr hci0): $(echo "$lescan" | grep -m1 "$(addr hci0)")" ;; *) echo "WARN hcitool lescan: $(echo "$lescan" | tail -3 | tr '\n' ' ')" ;; esac
# Each tool alone has missed it once under emulation (they fight over the controller's scan
# state); one of BlueZ's tools must see it.
[ $seen = 1 ] || fail "neither btmgmt find nor hcitool lescan saw a's advertisement"
hciconfig hci1 down; hciconfig hci1 up

import a a 1000
run b; pb=$(pgrep -f "board-b.yaml" | head -1)
if s=$(wait_docs b 60 1); then
  figure "b holds its first document from a ${s} s after its control socket answered"
  # Usually 2–4 s; a slow first link is not a failure, but say why it was slow.
  slow=$(awk -v s=$s 'BEGIN { print (s > 10) }')
  [ "$slow" = 1 ] && { echo "WARN the first link took ${s} s:"; story a 25; story b 25; }
else
  fail "b got nothing from a in 60 s"; story a; story b
fi
if s=$(wait_docs b 90 1000); then ok "b pulled a's 1000 documents over BLE only (${s} s more)"; else fail "b has $(docs b) of a's 1000"; story a; story b; fi
import b b 1000
if s=$(wait_docs b 90 2000); then
  ok "b holds all 2000 documents"
else
  fail "b has $(docs b) of 2000"; story a; story b
fi
if s2=$(wait_docs a 60 2000); then ok "a holds all 2000 documents (b's 1000 came back over the same link)"; else fail "a has $(docs a) of 2000"; fi

# Goodput, then a link dropped mid-transfer: 12000 documents a → b, hci1 down for 3 s once b has
# some of them and not all. (3000, imported before the polling began, were too few: b had all of
# them by the first poll in two runs of 2026-12-02, and the drop came after the transfer.)
t_adv=$(sed -n 's/^\[\([0-9.]*\)\].*bluetooth: advertising on.*/\1/p' $lab/b.log | head -1)
t_first=$(sed -n 's/^\[\([0-9.]*\)\].*link [0-9]*: pull [0-9]* documents.*/\1/p' $lab/b.log | head -1)
t_link=$(sed -n 's/^\[\([0-9.]*\)\].*replicating with peer.*/\1/p' $lab/b.log | head -1)
figure "b's log: advertising at ${t_adv} s, replicating with a at ${t_link} s, first pulled batch logged at ${t_first} s after start"
makefile c 12000
bytes_c=$(wc -c < $lab/import-c.tsv)
# The import runs beside the polling: b receives while a still imports (an import of 12000 in a
# TCG guest takes seconds, and polling only after it left b at 10900-11700 of 14000).
$SHOAL doc import sensors.readings $lab/import-c.tsv --socket $lab/a/control.sock > /dev/null & import_c=$!
t0=$(now)
before=$(docs b)
while [ "${before:-0}" -le 2000 ] && awk -v a=$t0 -v b=$(now) 'BEGIN { exit !(b - a < 30) }'; do sleep 0.2; before=$(docs b); done
stalls_before=$(cat $lab/a.log $lab/b.log | grep -c "nothing heard")
drop_controller hci1 3
wait $import_c || fail "import c on a"
[ $dropped_left -gt 0 ] && echo "      btvirt left $dropped_left connection(s) on hci0 to the dropped hci1; ended them as a supervision timeout would"
if [ "${before:-0}" -gt 2000 ] && [ "${before:-0}" -lt 14000 ]; then ok "hci1 went down mid-transfer: b had $before of 14000"; else fail "not mid-transfer: b had ${before:-?} of 14000 when hci1 went down"; fi
if s=$(wait_docs b 120 14000); then
  ok "b holds all 14000 ${s} s after hci1 came back (the link resumed; nothing lost)"
  stalls=$(( $(cat $lab/a.log $lab/b.log | grep -c "nothing heard") - stalls_before ))
  [ $stalls -gt 0 ] && { fail "after the drop $stalls BLE link(s) went silent and were closed by the 30 s keepalive"; story a 6; story b 6; }
  total=$(awk -v a=$t0 -v b=$(now) 'BEGIN { printf "%.1f", b - a - 3 }')
else
  fail "after the drop b has $(docs b) of 14000"; story a; story b
fi
[ "$(docs a)" = 14000 ] && [ "$(docs b)" = 14000 ] && ok "a and b hold 14000 each: nothing lost or doubled" || fail "a has $(docs a), b has $(docs b)"
# Goodput without the drop: 1000 more documents a → b on the settled link.
makefile d 1000
bytes_d=$(wc -c < $lab/import-d.tsv)
$SHOAL doc import sensors.readings $lab/import-d.tsv --socket $lab/a/control.sock > /dev/null || fail "import d on a"
if s=$(wait_docs b 120 15000); then
  doc_bps=$(awk -v s=$s -v b=$bytes_d 'BEGIN { printf "%.0f", b / s }')
  figure "goodput over BLE (btvirt, TCG guest): 1000 documents ($bytes_d bytes of JSON) in $s s = $(awk -v s=$s -v b=$bytes_d 'BEGIN { printf "%.0f documents/s, %.0f bytes/s", 1000 / s, b / s }') (measured by polling status every 0.5 s)"
else
  fail "b has $(docs b) of 15000"
fi
grep -h "bluetooth: channel to" $lab/a.log $lab/b.log | tail -2 | sed 's/^/figure /'
# Both gateways ask for a 4096-byte receive MTU; the kernel's default is 672 (a request it refuses
# is logged as a warning).
if grep -h "bluetooth: channel to" $lab/a.log $lab/b.log | tail -1 | grep -q "MTU send 4096, receive 4096"; then
  ok "the channel runs with the 4096-byte MTU both gateways asked for"
else
  fail "the channel's MTU is not the 4096 asked for: $(grep -h "bluetooth: channel to\|receive MTU" $lab/a.log $lab/b.log | tail -2)"
fi
# Both ways at once: 2000 new documents on each side, imported together, so both gateways write
# bursts on the one channel at the same moment. A link whose writes wait for credits must keep
# reading (otherwise each side's full receive buffer withholds the other's credits and the link
# sits silent until a timeout): no link may go silent, and both must hold everything.
makefile e 2000; makefile f 2000
stalls_before=$(cat $lab/a.log $lab/b.log | grep -c "nothing heard")
t0=$(now)
$SHOAL doc import sensors.readings $lab/import-e.tsv --socket $lab/a/control.sock > /dev/null & ia=$!
$SHOAL doc import sensors.readings $lab/import-f.tsv --socket $lab/b/control.sock > /dev/null & ib=$!
wait $ia $ib
if wait_docs a 150 19000 > /dev/null && wait_docs b 60 19000 > /dev/null; then
  figure "both ways at once: 2000 documents each way, all on both gateways in $(since $t0) s (polling status every 0.5 s)"
  ok "a and b hold 19000 each after writing 2000 each at once"
else
  fail "after writing 2000 each at once: a has $(docs a), b has $(docs b) of 19000"; story a; story b
fi
stalls=$(( $(cat $lab/a.log $lab/b.log | grep -c "nothing heard") - stalls_before ))
[ $stalls = 0 ] && ok "no BLE link went silent while both sides wrote at once" || { fail "$stalls BLE link(s) went silent while both sides wrote at once"; story a 6; story b 6; }

# A 256 KiB blob a → b over the same BLE link (issue 25): a puts it with a document that refers to
# it (sensors.readings is eager, the default), b takes the document and then the blob in the slow
# link's pieces; b's copy must have the same SHA-256. Goodput: blob bytes over the seconds from
# the start of the put on a to the blob complete on b (`blob ls` polled every 0.2 s).
t_step=$(now)
head -c 262144 /dev/urandom > $lab/blob.bin
want=sha256-$(sha256sum $lab/blob.bin | cut -d' ' -f1)
blob_line() { $SHOAL blob ls --json --socket $lab/$1/control.sock 2>/dev/null | tr -d ' \n' | grep -o "{[^{}]*\"digest\":\"$want\"[^{}]*}"; }
t0=$(now)
ref=$($SHOAL blob put $lab/blob.bin --content-type application/octet-stream --doc sensors.readings/blob-1 --socket $lab/a/control.sock 2>&1) || fail "blob put on a: $ref"
t_put=$(since $t0)
case "$ref" in *"\"$want\""*) ok "a took the 262144-byte blob in ${t_put} s and wrote sensors.readings/blob-1 referring to it" ;; *) fail "a's blob put answered $ref, not $want" ;; esac
t_doc=""; state=""
while awk -v a=$t0 -v b=$(now) 'BEGIN { exit !(b - a < 120) }'; do
  if [ -z "$t_doc" ]; then n=$(docs b); [ "${n:-0}" -ge 19001 ] && t_doc=$(since $t0); fi
  state=$(blob_line b | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p')
  [ "$state" = complete ] && break
  sleep 0.2
done
s=$(since $t0)
if [ "$state" = complete ]; then
  ok "b holds the blob complete ${s} s after the put began (its document came at ${t_doc:-?} s)"
  if $SHOAL blob get $want --out $lab/blob-b.bin --socket $lab/b/control.sock 2> /dev/null && [ "sha256-$(sha256sum $lab/blob-b.bin | cut -d' ' -f1)" = "$want" ] && cmp -s $lab/blob.bin $lab/blob-b.bin; then
    ok "b's copy of the blob has a's bytes ($want)"
  else
    fail "b's copy of the blob differs from a's"
  fi
  figure "blob goodput over BLE (btvirt, TCG guest): 262144 bytes a → b in $s s = $(awk -v s=$s 'BEGIN { printf "%.0f bytes/s", 262144 / s }') from the start of the put on a to complete on b (the put took ${t_put} s; the document reached b at ${t_doc:-?} s$([ -n "$t_doc" ] && awk -v s=$s -v d=$t_doc 'BEGIN { if (s > d) printf ", the blob %.0f bytes/s after it", 262144 / (s - d) }')); documents on the same link: ${doc_bps:-?} bytes/s"
  grep -h "blob .* complete\|blob .* not fetched" $lab/b.log | tail -1 | sed 's/^/      b: /'
else
  fail "b does not hold the blob 120 s after the put: $(blob_line b || echo 'no entry'); document there: ${t_doc:-no}"
  grep -h "blob" $lab/a.log | tail -8 | sed 's/^/      a: /'
  grep -h "blob" $lab/b.log | tail -8 | sed 's/^/      b: /'
  story a 6; story b 6
fi

figure "the blob step took $(since $t_step) s"

# A stranger the authenticator rejects: its links are refused for the authenticator's reason. b
# stops first and x takes its controller (three gateways' handshakes on two emulated CPUs can time
# out instead).
kill $pb; wait $pb 2>/dev/null
run x; px=$(pgrep -f "board-x.yaml" | head -1)
t0=$(now)
while ! grep -q "not in allowedPeers" $lab/a.log && awk -v a=$t0 -v b=$(now) 'BEGIN { exit !(b - a < 90) }'; do sleep 1; done
# Under emulation a handshake sometimes times out before the authenticator's verdict: the reason
# is a warning; what x got (nothing) is the check.
grep -q "not in allowedPeers" $lab/a.log && ok "a refuses the stranger: $(grep -h 'not in allowedPeers' $lab/a.log | head -1 | cut -c1-200)" || { echo "WARN no refusal for the authenticator's reason in 90 s (handshakes timed out?)"; story a; story x; }
n=$(docs x)
[ "${n:-0}" = 0 ] && ok "the stranger x got 0 documents" || fail "the stranger x got $n documents"

kill $pa $pb $px 2>/dev/null; wait $pa $pb $px 2>/dev/null
kill $btvirt 2>/dev/null
[ -n "$(kernel_bugs)" ] && { echo "WARN the guest kernel reported Bluetooth trouble:"; kernel_bugs; }
echo "guest checks failed: $fails"
exit $fails
