#!/usr/bin/env bash
# The deploy files, checked for real (run by `make test` after `make release`):
#  1. the .deb builds and lintian finds no error in it;
#  2. installed on this machine (root only; the issue allows the host instead of a chroot), every
#     file is in place, the `shoal` user exists with its groups, `systemd-analyze verify` accepts
#     the installed unit, and `shoal doctor` runs from the installed binary as that user;
#  3. purged again: the files are gone.
# Nothing is started: without systemd as PID 1 the maintainer scripts only enable the unit.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-deb.sh
deb=$(ls -t dist/shoal_*.deb | head -1)
lintian --fail-on error --suppress-tags no-manual-page "$deb" 2>&1 | grep -v "running with root privileges" || true
lintian --fail-on error "$deb" >/dev/null 2>&1 || { echo "deploy-check: lintian reports errors" >&2; exit 1; }
echo "deploy-check: lintian: no errors"

if [ "$(id -u)" != 0 ]; then echo "deploy-check: install test skipped (needs root)"; exit 0; fi
if dpkg-query -W -f='${Status}' shoal 2>/dev/null | grep -q "install ok installed"; then
  echo "deploy-check: install test skipped (a shoal package is installed on this machine; not touching it)"; exit 0
fi
guard=""
if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; guard=1; fi
cleanup() {
  dpkg --purge shoal >/dev/null 2>&1 || true
  [ -n "$guard" ] && rm -f /usr/sbin/policy-rc.d
  return 0
}
trap cleanup EXIT
DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" >/dev/null
for f in /usr/bin/shoal /lib/systemd/system/shoal.service /lib/udev/rules.d/60-shoal.rules /etc/shoal/shoal.yaml \
         /usr/share/shoal/boards/pi4b.yaml /usr/share/doc/shoal/copyright /usr/share/man/man1/shoal.1.gz; do
  [ -e "$f" ] || { echo "deploy-check: $f missing after install" >&2; exit 1; }
done
id shoal | grep -q gpio || { echo "deploy-check: user shoal or its groups missing: $(id shoal 2>&1)" >&2; exit 1; }
out=$(systemd-analyze verify /lib/systemd/system/shoal.service 2>&1 || true)
if echo "$out" | grep -q "shoal.service"; then echo "deploy-check: systemd-analyze verify: $out" >&2; exit 1; fi
echo "deploy-check: installed; files in place; user $(id shoal); systemd-analyze verify: clean"
data=$(mktemp -d); chown shoal:shoal "$data"
set +e
report=$(runuser -u shoal -- /usr/bin/shoal doctor --board generic-linux --data-dir "$data" 2>&1)
rc=$?
set -e
rm -rf "$data"
echo "$report" | sed 's/^/  doctor| /'
echo "$report" | grep -q "^PASS   config" || { echo "deploy-check: shoal doctor did not run from the package (exit $rc)" >&2; exit 1; }
echo "deploy-check: shoal doctor ran from the package (exit $rc: on this machine wlan0 and avahi-daemon are absent, as expected)"
dpkg --purge shoal >/dev/null
for f in /usr/bin/shoal /lib/systemd/system/shoal.service /etc/shoal/shoal.yaml /etc/systemd/system/shoal.service \
         /etc/systemd/system/multi-user.target.wants/shoal.service; do
  [ ! -e "$f" ] && [ ! -L "$f" ] || { echo "deploy-check: $f left after purge" >&2; exit 1; }
done
echo "deploy-check: purged; nothing left"
