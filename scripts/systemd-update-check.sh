#!/usr/bin/env bash
# Updates over the mesh under a real systemd (PID 1 in a systemd-nspawn container of Debian 12):
# the packaged unit (deploy/shoal.service) with its ExecStartPre boot check, a gateway that takes a
# good release (0.2.0, a copy of this build) and confirms it, then a broken one (0.3.0: an
# executable that exits 1 at start) that it installs and exits 75 for; systemd restarts it, the
# candidate crashes, systemd restarts it again, and the boot check rolls it back.
# Needs root, systemd-nspawn (apt-get install systemd-container) and debootstrap's cached Debian
# (scripts/fresh-machine.sh makes it); the rootfs with systemd is cached in $SHOAL_NSPAWN_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "systemd-update-check: $*"; }
fail() { say "FAIL: $*" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then say "skipped (needs root)"; exit 0; fi
command -v systemd-nspawn >/dev/null || { say "skipped (no systemd-nspawn: apt-get install systemd-container)"; exit 0; }
bin=${SHOAL_BINARY:-.build/debug/shoal}
[ -x "$bin" ] || fail "$bin: build it first (swift build --product shoal)"
cache=${SHOAL_NSPAWN_CACHE:-/var/cache/shoal-nspawn}
base=$cache/bookworm-systemd
minbase=${SHOAL_FRESH_CACHE:-/var/cache/shoal-fresh}/bookworm-minbase
if [ ! -e "$base/.complete" ]; then
  [ -d "$minbase" ] || fail "no $minbase: run scripts/fresh-machine.sh once (it debootstraps Debian 12)"
  say "making $base (minbase + systemd, dbus)"
  rm -rf "$base.new"; mkdir -p "$cache"; cp -a "$minbase" "$base.new"
  cp /etc/resolv.conf "$base.new/etc/resolv.conf"
  mount --bind /dev "$base.new/dev"; mount -t proc proc "$base.new/proc"
  chroot "$base.new" sh -c 'DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q systemd systemd-sysv dbus' > "$cache/apt.log" 2>&1 \
    || { umount "$base.new/proc" "$base.new/dev"; fail "apt-get in the rootfs failed (log: $cache/apt.log)"; }
  umount "$base.new/proc" "$base.new/dev"
  date -u > "$base.new/.complete"; mv "$base.new" "$base"
fi
work=$(mktemp -d /tmp/shoal-nspawn-XXXXXX)
root=$work/root
machine=shoal-upd-$$
nspawn_pid=""
cleanup() {
  [ -n "$nspawn_pid" ] && kill "$nspawn_pid" 2>/dev/null && wait "$nspawn_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
cp -a "$base" "$root"
# The binary and every library it loads (the toolchain's Swift runtime too), at the same paths.
install -m 0755 "$bin" "$root/usr/bin/shoal"
ldd "$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do cp --parents -L "$lib" "$root"; done
chroot "$root" sh -c 'getent passwd shoal >/dev/null || (addgroup --system --quiet shoal; adduser --system --ingroup shoal --home /var/lib/shoal --no-create-home --quiet shoal); for g in gpio dialout bluetooth; do getent group $g >/dev/null || addgroup --system --quiet $g; done'
keyjson=$("$bin" release keygen --out "$work/release.key" --json)
keyhex=$(echo "$keyjson" | sed -n 's/.*"hex" *: *"\([0-9a-f]*\)".*/\1/p')
[ -n "$keyhex" ] || fail "no release key: $keyjson"
mkdir -p "$root/etc/shoal"
cat > "$root/etc/shoal/shoal.yaml" <<SITE
group: nspawn.update
updates:
  releaseKeys: [$keyhex]
  installDir: /var/lib/shoal/updates
  confirmSeconds: 30
  holdOffSeconds: 0
SITE
# The packaged unit as it is; its postinst step (the boot check makes current); enabled.
install -m 0644 deploy/shoal.service "$root/lib/systemd/system/shoal.service"
mkdir -p "$root/var/lib/shoal/updates"
mount -t proc proc "$root/proc"  # Swift reads its arguments from /proc/self/cmdline
chroot "$root" /usr/bin/shoal update boot-check --dir /var/lib/shoal/updates --packaged /usr/bin/shoal --confirm-seconds 30 >/dev/null \
  || { umount "$root/proc"; fail "the boot check in the rootfs failed"; }
umount "$root/proc"
chroot "$root" chown -R -h shoal:shoal /var/lib/shoal
# The unit runs as packaged, but for one drop-in: the time a start may take to reach READY (120 s)
# shortened so the hanging release (0.4.0) is killed sooner, and more starts allowed in StartLimitIntervalSec, as three
# releases in a minute (holdOffSeconds: 0 here, 300 by default) cost seven starts.
mkdir -p "$root/etc/systemd/system/shoal.service.d"
printf '[Unit]\nStartLimitBurst=20\n[Service]\nTimeoutStartSec=20\n' > "$root/etc/systemd/system/shoal.service.d/check.conf"
ln -sf /lib/systemd/system/shoal.service "$root/etc/systemd/system/multi-user.target.wants/shoal.service"
"$bin" release sign --key "$work/release.key" --binary "$bin" --version 0.2.0 --out "$root/var/lib/shoal/0.2.0.json" >/dev/null
"$bin" release sign --key "$work/release.key" --binary /bin/false --version 0.3.0 --out "$root/var/lib/shoal/0.3.0.json" >/dev/null
# 0.4.0 never becomes ready: an executable that ignores its arguments and waits to be killed.
command -v cc >/dev/null || fail "cc not found (it builds the hanging stand-in)"
printf '#include <unistd.h>\nint main(void) { for (;;) pause(); }\n' | cc -x c -O2 -o "$work/hang" -
"$bin" release sign --key "$work/release.key" --binary "$work/hang" --version 0.4.0 --out "$root/var/lib/shoal/0.4.0.json" >/dev/null
cp "$bin" "$root/var/lib/shoal/shoal-0.2.0"; cp /bin/false "$root/var/lib/shoal/shoal-0.3.0"; cp "$work/hang" "$root/var/lib/shoal/shoal-0.4.0"
chroot "$root" sh -c 'chown shoal:shoal /var/lib/shoal/0.?.0.json /var/lib/shoal/shoal-0.?.0'

start=$(date +%s)
systemd-nspawn -b -D "$root" --register=no --keep-unit --console=pipe -M "$machine" --capability=CAP_NET_ADMIN,CAP_NET_RAW > "$work/boot.log" 2>&1 &
nspawn_pid=$!
inside() { nsenter -t "$init_pid" -a -- "$@"; }
init_pid=""
for _ in $(seq 1 120); do
  init_pid=$(ps -o pid= --ppid "$nspawn_pid" | head -1 | tr -d ' ' || true)
  if [ -n "$init_pid" ] && timeout 5 nsenter -t "$init_pid" -a -- systemctl is-system-running --wait >/dev/null 2>&1; then break; fi
  if [ -n "$init_pid" ] && [ "$(inside systemctl is-system-running 2>/dev/null)" = degraded ]; then break; fi
  sleep 1
done
[ -n "$init_pid" ] || fail "the container did not start: $(cat "$work/boot.log")"
say "systemd $(inside systemctl --version | head -1 | cut -d' ' -f2) is PID 1 in the container ($(inside cat /proc/1/comm)), booted in $(( $(date +%s) - start )) s: $(inside systemctl is-system-running 2>&1)"
wait_for() {  # seconds, description, command...
  local secs=$1 what=$2; shift 2
  for _ in $(seq 1 "$secs"); do if "$@" >/dev/null 2>&1; then return 0; fi; sleep 1; done
  inside journalctl -u shoal --no-pager | tail -40 >&2
  fail "$what (waited $secs s)"
}
wait_for 90 "shoal.service did not become active" sh -c "[ \"\$(nsenter -t $init_pid -a -- systemctl is-active shoal)\" = active ]"
say "shoal.service active (Type=notify: READY=1 received), current -> $(inside readlink /var/lib/shoal/updates/current)"
# The control socket where the board puts it.
sock=$(inside sh -c 'ls /var/lib/shoal/*.sock /run/shoal/*.sock 2>/dev/null | grep control | head -1')
[ -n "$sock" ] || fail "no control socket in the container"
shoalctl() { inside runuser -u shoal -- /usr/bin/shoal "$@" --socket "$sock"; }

shoalctl release publish /var/lib/shoal/0.2.0.json --binary /var/lib/shoal/shoal-0.2.0 >/dev/null
wait_for 180 "0.2.0 was not confirmed" sh -c "nsenter -t $init_pid -a -- runuser -u shoal -- /usr/bin/shoal release status --json --socket $sock | grep -q '\"outcome\": \"confirmed\"'"
say "0.2.0: installed, exit 75, restarted by systemd, confirmed; current -> $(inside readlink /var/lib/shoal/updates/current); NRestarts=$(inside systemctl show shoal -p NRestarts --value)"

shoalctl release publish /var/lib/shoal/0.3.0.json --binary /var/lib/shoal/shoal-0.3.0 >/dev/null
wait_for 240 "0.3.0 was not rolled back" sh -c "nsenter -t $init_pid -a -- runuser -u shoal -- /usr/bin/shoal release status --json --socket $sock 2>/dev/null | grep -q '\"outcome\": \"rolled-back\"'"
say "0.3.0: installed, exit 75; systemd restarted it; the candidate crashed (exit 1); systemd restarted it; the boot check rolled back; current -> $(inside readlink /var/lib/shoal/updates/current); NRestarts=$(inside systemctl show shoal -p NRestarts --value)"
inside journalctl -u shoal --no-pager -o cat | grep -E "boot check|update:|exiting with status|Main process exited|Scheduled restart" | sed 's/^/  journal| /' | tail -30
shoalctl release status | sed 's/^/  status| /'
[ "$(inside readlink /var/lib/shoal/updates/current)" = releases/0.2.0 ] || fail "current is not releases/0.2.0 after the rollback"

shoalctl release publish /var/lib/shoal/0.4.0.json --binary /var/lib/shoal/shoal-0.4.0 >/dev/null
wait_for 120 "0.4.0 was not rolled back" sh -c "nsenter -t $init_pid -a -- runuser -u shoal -- /usr/bin/shoal release status --json --socket $sock 2>/dev/null | grep -q '\"attempted\": \"0.4.0\"' && nsenter -t $init_pid -a -- runuser -u shoal -- /usr/bin/shoal release status --json --socket $sock | grep -q '\"outcome\": \"rolled-back\"'"
say "0.4.0 (never READY): installed, exit 75; systemd restarted it; no READY within TimeoutStartSec (20 s here), systemd killed it and restarted the unit; the boot check rolled back; current -> $(inside readlink /var/lib/shoal/updates/current); NRestarts=$(inside systemctl show shoal -p NRestarts --value)"
inside journalctl -u shoal --no-pager -o cat | grep -E "0.4.0|[Tt]imed out|timeout|Main process" | sed 's/^/  journal| /' | tail -10
[ "$(inside readlink /var/lib/shoal/updates/current)" = releases/0.2.0 ] || fail "current is not releases/0.2.0 after the second rollback"
say "PASS in $(( $(date +%s) - start )) s"
