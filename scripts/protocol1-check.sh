#!/usr/bin/env bash
# Protocol compatibility, against a real older gateway: builds `shoal` from the tag protocol-1 (the
# last commit that speaks replication protocol 1 only, before field-level versions) once per
# machine, into /var/cache/shoal-compat/<commit> (SHOAL_COMPAT_CACHE overrides), then runs
# ProtocolOneTests (Tests/ShoalCLITests): that gateway and this tree's replicate both ways over TLS,
# and a conflict between them (field stamps on one side only) converges to one body and version.
# Part of `make test`. Usage: scripts/protocol1-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"
# The tag; a clone without tags still has the commit it names.
commit=$(git rev-parse -q --verify "protocol-1^{commit}" 2>/dev/null || git rev-parse -q --verify "f6a91ed^{commit}" 2>/dev/null || true)
if [ -z "$commit" ]; then
  echo "protocol1-check: neither the tag protocol-1 nor commit f6a91ed is in this clone (shallow? git fetch --unshallow --tags)" >&2
  exit 1
fi
cache=${SHOAL_COMPAT_CACHE:-/var/cache/shoal-compat}/$commit
if [ ! -x "$cache/shoal" ]; then
  started=$SECONDS
  src=$(mktemp -d /tmp/shoal-protocol1.XXXXXX)
  trap 'rm -rf "$src"' EXIT
  git archive "$commit" | tar -x -C "$src"
  echo "protocol1-check: building shoal at ${commit:0:10} (once per machine, a few minutes)"
  (cd "$src" && ./scripts/embed-boards.sh && ./scripts/embed-openapi.sh && swift build -c release --product shoal >"$src/build.log" 2>&1) || {
    tail -30 "$src/build.log" >&2
    echo "protocol1-check: the protocol-1 build failed" >&2
    exit 1
  }
  mkdir -p "$cache"
  cp "$src/.build/release/shoal" "$cache/shoal.partial" && mv "$cache/shoal.partial" "$cache/shoal"
  echo "protocol1-check: built in $((SECONDS - started)) s"
fi
echo "protocol1-check: the protocol-1 gateway is $cache/shoal"
SHOAL_PROTOCOL1_BIN="$cache/shoal" swift test --skip-build --filter ProtocolOneTests
