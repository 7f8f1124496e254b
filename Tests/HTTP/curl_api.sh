#!/usr/bin/env bash
# The local HTTP API driven by curl, as README shows it: one document's life with ETag and
# If-Match (412 on a stale revision), a bulk NDJSON write, list paging, the change feed normal and
# long-polled, and the Unix socket. Usage: curl_api.sh BASE_URL UNIX_SOCKET COLLECTION
# (BASE_URL like http://127.0.0.1:8470; COLLECTION must exist and be empty). Prints each check;
# exits 1 at the first one that fails, saying what was expected and what came.
set -uo pipefail
base=${1:?base URL}; sock=${2:?unix socket path}; coll=${3:?collection}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
docs="$base/v1/collections/$coll/docs"

fail() { echo "FAIL: $*"; [ -s "$work/body" ] && echo "  last body: $(head -c 600 "$work/body")"; exit 1; }
pass() { echo "ok   $*"; }
# req METHOD URL [curl args…]: the status code in $status, the body in $work/body, headers in $work/headers.
req() {
  local method=$1 url=$2; shift 2
  status=$(curl -sS -o "$work/body" -D "$work/headers" -w '%{http_code}' -X "$method" --max-time 20 "$@" "$url") || fail "curl $method $url failed (exit $?)"
}
expect() { [ "$status" = "$1" ] || fail "$2: status $status, expected $1"; pass "$2 ($status)"; }
header() { grep -i "^$1:" "$work/headers" | head -1 | cut -d' ' -f2- | tr -d '\r'; }
# json EXPR: evaluates a Python expression over the body, bound to `j`.
json() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$work/body" "$1" || fail "body is not the JSON expected ($1)"; }
is() { [ "$1" = "$2" ] || fail "$3: got '$1', expected '$2'"; pass "$3"; }

req GET "$base/v1/status"; expect 200 "GET /v1/status"
is "$(json 'j["state"] in ("running", "degraded", "booting")')" True "status has a state"
is "$(header Content-Type)" "application/json; charset=utf-8" "JSON content type"

# One document's life: create, conditional replace, stale replace, conditional get, delete.
req PUT "$docs/meter-1" -H 'Content-Type: application/json' -d '{"kwh": 1.5}'; expect 201 "PUT creates"
etag1=$(header ETag); [ -n "$etag1" ] || fail "PUT answered no ETag"
is "$etag1" "\"$(json 'j["revision"]')\"" "ETag is the quoted revision"
req PUT "$docs/meter-1" -H 'Content-Type: application/json' -H 'If-None-Match: *' -d '{"kwh": 9}'; expect 412 "PUT If-None-Match: * on an existing document"
is "$(json 'j["error"]')" precondition_failed "412's error code"
req GET "$docs/meter-1"; expect 200 "GET"
is "$(json 'j')" "{'kwh': 1.5}" "GET answers the body itself"
is "$(header ETag)" "$etag1" "GET's ETag is PUT's"
req GET "$docs/meter-1" -H "If-None-Match: $etag1"; expect 304 "GET If-None-Match current ETag"
req PUT "$docs/meter-1" -H 'Content-Type: application/json' -H "If-Match: $etag1" -d '{"kwh": 2.5}'; expect 200 "PUT If-Match current replaces"
etag2=$(header ETag); [ "$etag2" != "$etag1" ] || fail "the ETag did not change on replace ($etag2)"
req PUT "$docs/meter-1" -H 'Content-Type: application/json' -H "If-Match: $etag1" -d '{"kwh": 99}'; expect 412 "PUT If-Match stale"
is "$(json 'j["error"]')" precondition_failed "412's error code"
req GET "$docs/meter-1?meta=true"; expect 200 "GET ?meta=true"
is "$(json 'j["body"]["kwh"], "\"%d\"" % j["revision"]')" "(2.5, '$etag2')" "the stale write changed nothing; meta has the revision"
req PUT "$docs/meter-1" -H 'Content-Type: application/json' -d '{"kwh": '; expect 400 "PUT malformed JSON"
is "$(json 'j["error"]')" bad_request "400's error code"
req GET "$docs/meter-1"; is "$(json 'j["kwh"]')" 2.5 "malformed JSON changed nothing"
req PUT "$base/v1/collections/nosuch.collection/docs/x" -H 'Content-Type: application/json' -d '{}'; expect 404 "PUT into an unknown collection"
req DELETE "$docs/meter-1" -H "If-Match: $etag1"; expect 412 "DELETE If-Match stale"
req DELETE "$docs/meter-1" -H "If-Match: $etag2"; expect 200 "DELETE If-Match current"
is "$(json 'j["deleted"]')" True "DELETE answers deleted: true"
req GET "$docs/meter-1"; expect 404 "GET a deleted document"
is "$(json 'sorted(j)')" "['error', 'reason']" "errors are {error, reason}"
req DELETE "$docs/meter-1"; expect 404 "DELETE again"

# Bulk NDJSON: the valid lines in one transaction, per-line results.
printf '%s\n' '{"id":"b1","body":{"n":1}}' '{"id":"b2","body":{"n":2}}' 'not json' '{"id":"b3","body":{"n":3}}' '{"id":"b2","deleted":true}' > "$work/bulk.ndjson"
req POST "$docs" -H 'Content-Type: application/x-ndjson' --data-binary "@$work/bulk.ndjson"; expect 200 "bulk POST with one bad line"
is "$(json 'j["written"], j["failed"]')" "(4, 1)" "bulk: 4 written, 1 failed"
is "$(json '[r["line"] for r in j["results"] if "error" in r]')" "[3]" "bulk: line 3 is the failure"
req GET "$docs/b3"; expect 200 "a bulk-written document reads back"
req GET "$docs/b2"; expect 404 "a bulk-deleted document is gone"
printf 'nope\n{"id":""}\n' > "$work/bad.ndjson"
req POST "$docs" -H 'Content-Type: application/x-ndjson' --data-binary "@$work/bad.ndjson"; expect 400 "bulk POST with no valid line"

# List paging: 7 documents (p1…p5, b1, b3) two at a time, continuing after the last id.
for i in 1 2 3 4 5; do printf '{"id":"p%d","body":{"i":%d}}\n' "$i" "$i"; done > "$work/p.ndjson"
req POST "$docs" -H 'Content-Type: application/x-ndjson' --data-binary "@$work/p.ndjson"; expect 200 "bulk POST of 5"
after=""; seen=""; pages=0
while :; do
  req GET "$docs?limit=2${after:+&after=$after}"; [ "$status" = 200 ] || fail "list page: status $status"
  seen="$seen$(json '" ".join(d["id"] for d in j["documents"])') "
  pages=$((pages + 1)); [ $pages -le 10 ] || fail "list paging does not end"
  [ "$(json 'j["more"]')" = True ] || break
  after=$(json 'j["documents"][-1]["id"]')
done
is "$seen" "b1 b3 p1 p2 p3 p4 p5 " "list pages in id order, 2 a page"
is "$pages" 4 "4 pages of at most 2"
req GET "$docs?limit=0"; expect 400 "list limit=0"
req GET "$docs?deleted=true&limit=100"; is "$(json '[d["id"] for d in j["documents"] if d["deleted"]]')" "['b2', 'meter-1']" "deleted=true lists tombstones"

# The change feed: normal, then long-polled (returns when a write lands, or empty at its timeout).
req GET "$base/v1/changes?since=0&collection=$coll&include_docs=true"; expect 200 "changes normal"
last=$(json 'j["lastSequence"]')
is "$(json 'j["changes"][-1]["sequence"] == j["lastSequence"] and j["more"] is False')" True "the last change is lastSequence"
is "$(json '[c for c in j["changes"] if c["id"] == "p5"][0]["doc"]')" "{'i': 5}" "include_docs carries the body"
req GET "$base/v1/changes?since=$last"; is "$(json 'j["changes"]')" "[]" "no changes after lastSequence"
start=$(date +%s%N)
req GET "$base/v1/changes?feed=longpoll&since=$last&timeout=300"; expect 200 "longpoll with nothing new"
waited=$((($(date +%s%N) - start) / 1000000))
is "$(json 'j["changes"]')" "[]" "longpoll timed out empty"
[ $waited -ge 250 ] && [ $waited -lt 5000 ] || fail "longpoll timeout=300 took $waited ms"; pass "longpoll waited $waited ms for timeout=300"
( sleep 0.5; curl -sS -o /dev/null -X PUT -H 'Content-Type: application/json' -d '{"late":true}' "$docs/late" ) &
start=$(date +%s%N)
req GET "$base/v1/changes?feed=longpoll&since=$last&timeout=20000"; expect 200 "longpoll across a write"
waited=$((($(date +%s%N) - start) / 1000000))
wait
is "$(json '[c["id"] for c in j["changes"]]')" "['late']" "longpoll returned the write"
[ $waited -lt 10000 ] || fail "longpoll returned after $waited ms, not at the write"; pass "longpoll returned $waited ms after it started (write at ~500 ms)"

# The Unix socket needs no token and answers the same API.
status=$(curl -sS -o "$work/body" -w '%{http_code}' --max-time 10 --unix-socket "$sock" http://localhost/v1/status) || fail "curl --unix-socket $sock failed"
expect 200 "GET /v1/status over the Unix socket"
status=$(curl -sS -o "$work/body" -w '%{http_code}' --max-time 10 --unix-socket "$sock" "http://localhost/v1/collections/$coll/docs/p1") || fail "curl --unix-socket failed"
expect 200 "GET a document over the Unix socket"
echo "all curl checks passed"
