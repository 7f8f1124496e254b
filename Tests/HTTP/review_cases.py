#!/usr/bin/env python3
"""Cases a review of the local API found (issue 20), against a running gateway whose feed sends
keepalives every 300 ms (SHOAL_HTTP_KEEPALIVE_MILLIS=300):
- a long poll that waits past several keepalives still answers one JSON document;
- a long poll on one collection while another collection is written does not spin the feed thread
  (the gateway's CPU time over the wait stays low);
- a bulk write sent as text/plain (what a web page can post across origins) is refused with 415;
- a request whose Host is not a loopback name is refused with 403 on a token-free loopback address;
- If-Match compares strongly (a W/ tag does not match);
- SSE Last-Event-ID past the log (ids from before a restart) and a change-feed since past the store
  start from the beginning.
Usage: review_cases.py --port PORT --pid PID. Exits 1 on the first failure, saying what."""
import argparse, http.client, json, socket, sys, threading, time

def fail(what):
    print(f"FAILED: {what}")
    sys.exit(1)

def req(port, method, path, body=None, headers=None, host=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = dict(headers or {})
    if host is not None:
        c.putrequest(method, path, skip_host=True)
        c.putheader("Host", host)
        for k, v in h.items(): c.putheader(k, v)
        data = body.encode() if isinstance(body, str) else body
        if data is not None: c.putheader("Content-Length", str(len(data)))
        c.endheaders(data)
    else:
        c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data

def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    a = ap.parse_args()
    p = a.port
    docs = "/v1/collections/sensors.readings/docs"  # the site declares it
    st, _, body = req(p, "GET", "/v1/status")
    head = json.loads(body)["store"]["lastSequence"]

    # 1. A long poll of 1.5 s (5 keepalive periods) answers pure JSON.
    st, hdrs, body = req(p, "GET", f"/v1/changes?feed=longpoll&since={head}&timeout=1500")
    try:
        page = json.loads(body)
    except ValueError:
        fail(f"a long poll past keepalives is not JSON: {body[:120]!r}")
    if st != 200 or page["changes"] != []:
        fail(f"long poll: {st} {page}")
    print(f"long poll past 5 keepalive periods: pure JSON {body[:60]!r}")

    # 2. A long poll filtered to one collection while another is written: no spin.
    results = {}
    def poll():
        results["poll"] = req(p, "GET", f"/v1/changes?feed=longpoll&collection=sensors.readings&since={head}&timeout=3000")
    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.2)
    st, _, body = req(p, "PUT", "/v1/collections/_default._default/docs/elsewhere", '{"v":1}', {"Content-Type": "application/json"})
    if st not in (200, 201): fail(f"PUT elsewhere: {st} {body}")
    before = cpu_seconds(a.pid)
    time.sleep(2.0)
    used = cpu_seconds(a.pid) - before
    t.join()
    st, _, body = results["poll"]
    if st != 200 or json.loads(body)["changes"] != []:
        fail(f"filtered long poll answered {st} {body[:200]!r}")
    print(f"filtered long poll while another collection changed: gateway CPU {used:.2f} s over 2 s")
    if used > 0.6:
        fail(f"the gateway used {used:.2f} s of CPU in 2 s while a filtered long poll waited (the feed spins)")

    # 3. Bulk as text/plain: 415, nothing written.
    st, _, body = req(p, "GET", "/v1/status")
    before_seq = json.loads(body)["store"]["lastSequence"]
    st, _, body = req(p, "POST", docs, '{"id":"csrf","body":{"x":1}}\n', {"Content-Type": "text/plain"})
    if st != 415 or json.loads(body)["error"] != "unsupported_media_type": fail(f"text/plain bulk: {st} {body}")
    st, _, body = req(p, "GET", "/v1/status")
    if json.loads(body)["store"]["lastSequence"] != before_seq: fail("a refused bulk write changed the store")
    st, _, body = req(p, "POST", docs, '{"id":"ok","body":{"x":1}}\n', {"Content-Type": "application/x-ndjson"})
    if st != 200: fail(f"NDJSON bulk: {st} {body}")
    print("bulk as text/plain: 415, store untouched; as application/x-ndjson: 200")

    # 4. Host of another name: 403; loopback names pass.
    st, _, body = req(p, "GET", "/v1/status", host="evil.example:8470")
    if st != 403 or json.loads(body)["error"] != "forbidden": fail(f"Host evil.example: {st} {body[:200]!r}")
    for h in ("localhost", f"127.0.0.1:{p}", f"[::1]:{p}", "LOCALHOST:1"):
        st, _, _ = req(p, "GET", "/v1/health", host=h)
        if st != 200: fail(f"Host {h}: {st}")
    print("Host evil.example: 403; localhost, 127.0.0.1, [::1]: 200")

    # 5. If-Match with a weak tag never matches.
    st, hdrs, body = req(p, "PUT", docs + "/strong", '{"v":1}', {"Content-Type": "application/json"})
    etag = hdrs.get("ETag")
    st, _, body = req(p, "PUT", docs + "/strong", '{"v":2}', {"Content-Type": "application/json", "If-Match": "W/" + etag})
    if st != 412: fail(f"If-Match W/{etag}: {st} {body}")
    st, _, body = req(p, "PUT", docs + "/strong", '{"v":2}', {"Content-Type": "application/json", "If-Match": etag})
    if st != 200: fail(f"If-Match {etag}: {st} {body}")
    print(f"If-Match W/{etag}: 412; If-Match {etag}: 200")

    # 6. Cursors from before a restart or a replaced store start from the beginning.
    st, _, body = req(p, "GET", "/v1/changes?since=999999999&limit=2")
    page = json.loads(body)
    if not page["changes"] or page["changes"][0]["sequence"] != 1: fail(f"since past the store: {page}")
    s = socket.create_connection(("127.0.0.1", p), timeout=10)
    s.sendall(b"GET /v1/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\nLast-Event-ID: 999999\r\n\r\n")
    got = b""
    deadline = time.time() + 5
    while b"\nid: 1\n" not in got and time.time() < deadline:
        got += s.recv(65536)
    s.close()
    if b"\nid: 1\n" not in got: fail(f"Last-Event-ID past the log did not start from the first event: {got[:300]!r}")
    print("since / Last-Event-ID past the end: from the beginning")
    print("review cases: all passed")

main()
