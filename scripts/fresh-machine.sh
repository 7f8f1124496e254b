#!/usr/bin/env bash
# The fresh-machine check (README "The two commands"; `make fresh-check`, run by `make test`):
# README's promise that on a minimal Debian 12 with a Swift toolchain and the prerequisites README
# lists, `make demo` works. Each run:
#  1. a minimal Debian 12 (`debootstrap --variant=minbase bookworm`), cached in
#     $SHOAL_FRESH_CACHE/bookworm-minbase (default /var/cache/shoal-fresh); made again when it is
#     missing, incomplete or broken (dpkg --audit). The cache is never written to: each run works
#     on an overlay of it (a copy where overlayfs is missing) that is thrown away afterwards;
#  2. the Swift toolchain that runs this script, bind-mounted read-only at its own path;
#  3. README's prerequisites: the `apt-get install` line of its "The two commands" section, run
#     as it is inside the chroot (apt reaches Debian's mirror; downloaded .debs are kept in
#     $SHOAL_FRESH_CACHE/apt-archives so a second run fetches less);
#  4. a clean clone of this repository's HEAD (made by the chroot's own git from a bare copy);
#  5. `make demo` in it, as README says: it must pass; its time and the packages it installed
#     are printed.
# Everything runs in a mount and PID namespace of its own (unshare), so the mounts and every
# process of the run end with it, also when it fails or is interrupted.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

say() { echo "fresh-check: $*"; }
fail() { echo "fresh-check: FAILED: $*" >&2; exit 1; }

if [ "$(id -u)" != 0 ]; then say "skipped (needs root: debootstrap, chroot and mounts)"; exit 0; fi
for tool in debootstrap unshare chroot git; do
  command -v "$tool" >/dev/null || fail "$tool not found: run \`make deps\` (it installs debootstrap)"
done

cache=${SHOAL_FRESH_CACHE:-/var/cache/shoal-fresh}
base=$cache/bookworm-minbase
archives=$cache/apt-archives
mkdir -p "$cache" "$archives/partial"

# The toolchain: the directory above usr/bin of the swift that builds here (e.g. /opt/swift).
swift_bin=$(command -v swift || echo /opt/swift/usr/bin/swift)
[ -x "$swift_bin" ] || fail "no Swift toolchain on PATH (README: install Swift 6 first)"
toolchain_usr=$(dirname "$(dirname "$(readlink -f "$swift_bin")")")
toolchain=$toolchain_usr
[ "$(basename "$toolchain_usr")" = usr ] && toolchain=$(dirname "$toolchain_usr")
case "$toolchain" in /|/usr|/usr/*|/bin|/lib*) fail "the toolchain lives in $toolchain, which is part of the system: install it in a directory of its own (README)";; esac

# README's prerequisites: the one `apt-get install` line in "The two commands".
prereq=$(awk '/^## The two commands/{s=1; next} /^## /{s=0} s && /^apt-get /' README.md | sed 's/[[:space:]]*#.*$//')
[ "$(printf '%s\n' "$prereq" | grep -c .)" = 1 ] \
  || fail "README.md: the section \"The two commands\" must hold exactly one line starting \`apt-get \` (the prerequisites); found: ${prereq:-none}"

# The Debian mirror: the one this machine's apt uses for Debian itself (debootstrap's default if none).
mirror=${SHOAL_FRESH_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
  | grep -Eo '(https?|file)://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)}

base_ok() {
  [ -f "$base/.shoal-fresh-complete" ] && chroot "$base" /bin/true 2>/dev/null \
    && [ -z "$(chroot "$base" dpkg --audit 2>&1)" ]
}
start=$(date +%s)
if base_ok; then
  say "minimal Debian 12: cached in $base (made $(cat "$base/.shoal-fresh-complete"))"
else
  say "minimal Debian 12: making $base (debootstrap --variant=minbase bookworm ${mirror:-(its default mirror)})"
  rm -rf "$base.new"
  t=$(date +%s)
  debootstrap --variant=minbase bookworm "$base.new" ${mirror:+"$mirror"} > "$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log" >&2; rm -rf "$base.new"; fail "debootstrap failed (log: $cache/debootstrap.log)"; }
  date -u +%FT%TZ > "$base.new/.shoal-fresh-complete"
  rm -rf "$base"; mv "$base.new" "$base"
  base_ok || fail "the fresh debootstrap in $base does not run (chroot $base /bin/true, dpkg --audit)"
  say "minimal Debian 12: made in $(( $(date +%s) - t )) s"
fi

work=$(mktemp -d /var/tmp/shoal-fresh.XXXXXX)
cleanup() {
  # The run's mounts live only in its own mount namespace, which ended with its processes; never
  # delete through a mount that is somehow left here all the same.
  if grep -q " $work/" /proc/self/mounts; then echo "fresh-check: mounts left under $work, not deleting it" >&2; return; fi
  rm -rf "$work"
}
trap cleanup EXIT
commit=$(git rev-parse HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] || say "note: uncommitted changes are not part of the check (it clones HEAD, ${commit:0:7})"
git init -q --bare "$work/src.git"
git push -q "$work/src.git" "HEAD:refs/heads/main"
git -C "$work/src.git" symbolic-ref HEAD refs/heads/main
mkdir -p "$work/upper" "$work/ovl" "$work/root"

export work base archives toolchain toolchain_usr prereq commit
# The run's namespaces: unshare waits for their first process, which (as init of its PID
# namespace) ignores INT and TERM from here; on either, it gets SIGKILL, which ends every process
# of the run and with the last of them its mounts.
unshare --mount --pid --fork --kill-child bash -s <<'RUN' &
set -euo pipefail
say() { echo "fresh-check: $*"; }
fail() { echo "fresh-check: FAILED: $*" >&2; exit 1; }
mount --make-rprivate /
root=$work/root
if mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/ovl" "$root" 2>/dev/null; then
  say "the run's root: an overlay on the cache"
else
  cp -a "$base/." "$root/"; say "the run's root: a copy of the cache (no overlayfs)"
fi
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
# /sys read-only: package scripts run in the chroot, and nothing here needs to write the host's.
mount --bind /sys "$root/sys"
mount -o remount,bind,ro "$root/sys"
mkdir -p "$root$toolchain" "$root/src/shoal.git" "$root/var/cache/apt/archives"
mount --bind "$toolchain" "$root$toolchain"
mount -o remount,bind,ro "$root$toolchain"
mount --bind "$work/src.git" "$root/src/shoal.git"
mount -o remount,bind,ro "$root/src/shoal.git"
mount --bind "$archives" "$root/var/cache/apt/archives"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"

in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
    PATH="$toolchain_usr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" /bin/bash -c "$1"
}
packages() { in_root "dpkg-query -W -f='\${db:Status-Abbrev} \${Package}\n' | awk '/^ii/{print \$2}' | sort"; }
secs() { local s=$1; printf '%d min %02d s' $((s / 60)) $((s % 60)); }

packages > "$work/p0"
say "base: $(wc -l < "$work/p0") packages installed; make: $(in_root 'command -v make || echo absent'); swift --version before the prerequisites: $(in_root 'swift --version 2>&1 | head -1')"

t=$(date +%s)
in_root "$prereq" > "$work/prereq.log" 2>&1 || { tail -30 "$work/prereq.log" >&2; fail "README's prerequisites did not install: $prereq"; }
packages > "$work/p1"
say "README's prerequisites ($prereq): $(comm -13 "$work/p0" "$work/p1" | wc -l) packages installed in $(secs $(( $(date +%s) - t )))"

in_root "git clone -q /src/shoal.git /root/shoal && git -C /root/shoal log -1 --format='clone at %h %s' | cut -c1-100" \
  || fail "git clone in the chroot failed"

t=$(date +%s)
set +e
in_root "cd /root/shoal && make demo" > "$work/demo.log" 2>&1
rc=$?
set -e
elapsed=$(( $(date +%s) - t ))
packages > "$work/p2"
added=$(comm -13 "$work/p1" "$work/p2")
if [ "$rc" != 0 ]; then
  tail -40 "$work/demo.log" >&2
  fail "make demo exited $rc after $(secs "$elapsed") on a fresh minimal Debian 12"
fi
grep -q . "$work/demo.log" || fail "make demo printed nothing"
say "make demo: passed in $(secs "$elapsed"); it installed $(printf '%s\n' "$added" | grep -c .) packages: $(echo $added)"
say "the demo's last lines:"; tail -4 "$work/demo.log" | sed 's/^/    /'
say "in all: $(wc -l < "$work/p2") packages on the machine ($(wc -l < "$work/p0") of the minimal base)"
RUN
ns=$!
interrupted() {
  local init
  init=$(cat "/proc/$ns/task/$ns/children" 2>/dev/null || true)
  [ -z "$init" ] || kill -KILL $init 2>/dev/null || true
  wait "$ns" 2>/dev/null || true
  fail "interrupted"
}
trap interrupted INT TERM
rc=0
wait "$ns" || rc=$?
trap - INT TERM
[ "$rc" = 0 ] || exit "$rc"
say "passed in $(( $(date +%s) - start )) s (commit ${commit:0:7})"
