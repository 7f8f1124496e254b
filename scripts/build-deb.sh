#!/usr/bin/env bash
# Builds dist/shoal_<version>_<arch>.deb from dist/shoal (make release): the binary, the unit, the
# udev rules, a default site file, the board files (for reference; the binary carries them), and
# maintainer scripts that create the `shoal` system user and its groups. Run by `make deb`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x dist/shoal ] || { echo "build-deb: dist/shoal is missing: run make release first" >&2; exit 1; }
version=$(dist/shoal version --json | sed -n 's/.*"shoal" *: *"\([^"]*\)".*/\1/p')
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/lib/udev/rules.d" \
  "$root/etc/shoal/boards" "$root/usr/share/shoal/boards" "$root/usr/share/doc/shoal"
install -m 0755 dist/shoal "$root/usr/bin/shoal"
install -m 0644 deploy/shoal.service "$root/lib/systemd/system/shoal.service"
install -m 0644 deploy/60-shoal.rules "$root/lib/udev/rules.d/60-shoal.rules"
install -m 0644 deploy/shoal.yaml "$root/etc/shoal/shoal.yaml"
install -m 0644 board-configs/*.yaml "$root/usr/share/shoal/boards/"
install -m 0644 README.md "$root/usr/share/doc/shoal/README.md"
# A manual page made from `shoal --help`.
install -d "$root/usr/share/man/man1"
{ printf '.TH SHOAL 1 "%s" "shoal %s" "User Commands"\n.SH NAME\nshoal \\- peer-to-peer data runtime for Linux IoT gateways\n.SH DESCRIPTION\n.nf\n' "$(date +%Y-%m-%d)" "$version"
  dist/shoal --help | sed 's/\\/\\e/g; s/^\./\\\&./'
  printf '.fi\n.SH SEE ALSO\n/usr/share/doc/shoal/README.md\n'; } | gzip -9n > "$root/usr/share/man/man1/shoal.1.gz"
cat > "$root/usr/share/doc/shoal/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: shoal
Source: https://example.invalid/shoal

Files: *
Copyright: 2026 The Shoal developers
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPY
printf 'shoal (%s) unstable; urgency=medium\n\n  * Built by scripts/build-deb.sh from %s.\n\n -- Shoal developers <shoal@example.invalid>  %s\n' \
  "$version" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(date -R)" | gzip -9n > "$root/usr/share/doc/shoal/changelog.gz"

# Shared-library dependencies of the binary, as Debian computes them.
mkdir -p "$stage/debian"
printf 'Source: shoal\n\nPackage: shoal\nArchitecture: any\n' > "$stage/debian/control"
depends=$(cd "$stage" && dpkg-shlibdeps -O -e"$root/usr/bin/shoal" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
cat > "$root/DEBIAN/control" <<CTRL
Package: shoal
Version: $version
Architecture: $arch
Maintainer: Shoal developers <shoal@example.invalid>
Depends: $depends, adduser
Recommends: avahi-daemon
Section: net
Priority: optional
Installed-Size: $(du -ks "$root" | cut -f1)
Homepage: https://example.invalid/shoal
Description: peer-to-peer data runtime for Linux IoT gateways
 Shoal keeps JSON documents in a crash-safe SQLite store and replicates them
 between gateways through a self-healing mesh over mutual TLS, with discovery
 over Wi-Fi (DNS-SD through avahi-daemon). One binary, supervised, with a
 status LED and a serial console; one board file per hardware variant.
CTRL
echo /etc/shoal/shoal.yaml > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'POST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    for g in gpio dialout bluetooth netdev; do
        getent group "$g" >/dev/null || addgroup --system --quiet "$g"
    done
    if ! getent passwd shoal >/dev/null; then
        adduser --system --group --home /var/lib/shoal --no-create-home --quiet shoal
    fi
    for g in gpio dialout bluetooth netdev; do adduser --quiet shoal "$g" >/dev/null || true; done
    # Updates over the mesh: the unit starts /var/lib/shoal/updates/current/shoal; the boot check
    # makes that link (to /usr/bin/shoal) when there is none.
    install -d -o shoal -g shoal -m 0750 /var/lib/shoal /var/lib/shoal/updates
    /usr/bin/shoal update boot-check --dir /var/lib/shoal/updates --packaged /usr/bin/shoal --confirm-seconds 120 >/dev/null || true
    chown -R -h shoal:shoal /var/lib/shoal/updates
    if command -v udevadm >/dev/null && [ -d /run/udev ]; then udevadm control --reload-rules || true; udevadm trigger --subsystem-match=gpio --subsystem-match=leds || true; fi
    deb-systemd-helper unmask shoal.service >/dev/null || true
    deb-systemd-helper enable shoal.service >/dev/null 2>&1 || true
    if [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
        deb-systemd-invoke restart shoal.service >/dev/null || true
    fi
fi
exit 0
POST
cat > "$root/DEBIAN/prerm" <<'PRE'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then deb-systemd-invoke stop shoal.service >/dev/null || true; fi
exit 0
PRE
cat > "$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ "$1" = purge ]; then
    rm -rf /var/lib/shoal
    deb-systemd-helper purge shoal.service >/dev/null || true
    deb-systemd-helper unmask shoal.service >/dev/null || true
fi
if [ "$1" = remove ]; then deb-systemd-helper mask shoal.service >/dev/null || true; fi
if [ -d /run/systemd/system ]; then systemctl --system daemon-reload >/dev/null || true; fi
exit 0
POSTRM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
mkdir -p dist
out="dist/shoal_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
echo "$out: $(stat -c %s "$out") bytes; Depends: $depends, adduser"
