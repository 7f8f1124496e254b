#!/usr/bin/env python3
"""Bad input against a running `shoal run` (issue 20, "Bad input").

Usage: bad_input.py --port P --token-port Q --token T --pid PID [--case NAME ...]

P is a loopback listen address (no token), Q a 0.0.0.0 one (token required), PID the gateway's
process id (its RSS is read from /proc). Each case sends its bad input, then checks: a clear 4xx
(JSON {error, reason} where Shoal answers itself), the store untouched (the change feed's
lastSequence and every collection's counts), the gateway's RSS bounded, and a fresh client on
127.0.0.1 still served. Prints one line per case with its figures; exits 1 if any check failed.
"""
import argparse
import json
import os
import resource
import select
import socket
import sys
import threading
import time

FAILURES = []
DOCS = "/v1/collections/_default._default/docs"


def fail(case, why):
    FAILURES.append(f"{case}: {why}")
    print(f"FAIL {case}: {why}", flush=True)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


TCP_STATES = {1: "established", 2: "syn-sent", 7: "closed", 8: "closed-by-server"}


def tcp_state(s):
    """The client socket's TCP state (tcp_info's first byte); a server close shows as close-wait."""
    try:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    except OSError:
        return "error"
    state = TCP_STATES.get(info[0], f"state-{info[0]}")
    if state == "established":
        try:
            p = select.poll()
            p.register(s, select.POLLIN)
            if p.poll(0) and s.recv(1, socket.MSG_PEEK) == b"":
                return "closed-by-server"
        except OSError:
            return "closed-by-server"
    return state


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def __repr__(self):
        return f"{self.status} {self.body[:200]!r}"


def parse_response(data):
    """One HTTP/1.1 response from the bytes read (headers, then a Content-Length body), or None."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    status = int(parts[1])
    if status == 100:  # 100 Continue: the real answer follows
        return parse_response(rest)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
    n = int(headers.get("content-length", "0") or 0)
    return Response(status, headers, rest[:n])


def raw(port, payload, host="127.0.0.1", source=None, timeout=10.0, send_all=True, half_close=False):
    """Sends raw bytes, reads until the answer is complete or the server closes. Returns the
    Response (None if the server closed without one) and whether the server closed the connection."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if source:
        s.bind((source, 0))
    s.settimeout(timeout)
    s.connect((host, port))
    try:
        if send_all:
            s.sendall(payload)
        else:
            try:
                s.sendall(payload)
            except OSError:
                pass  # the server answered and closed before taking everything: read its answer
        if half_close:
            s.shutdown(socket.SHUT_WR)
        data = b""
        deadline = time.monotonic() + timeout
        closed = False
        while time.monotonic() < deadline:
            r = parse_response(data)
            if r is not None and len(r.body) >= int(r.headers.get("content-length", "0") or 0):
                return r, closed
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                closed = True
                break
            except socket.timeout:
                break
            if not chunk:
                closed = True
                break
            data += chunk
        return parse_response(data), closed
    finally:
        s.close()


def request(port, method, path, body=b"", headers=None, host="127.0.0.1", timeout=10.0):
    h = {"Host": "localhost", "Connection": "close"}
    if body or method in ("PUT", "POST"):
        h["Content-Length"] = str(len(body))
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    r, _ = raw(port, head.encode("latin-1") + body, host=host, timeout=timeout, send_all=False)
    return r


def store_state(port):
    """What must not change: the last sequence and each collection's live and deleted counts."""
    changes = request(port, "GET", "/v1/changes?limit=1").json()
    cols = request(port, "GET", "/v1/collections").json()
    return (changes["lastSequence"], json.dumps(cols["collections"], sort_keys=True))


def served(port, case):
    """A fresh client on 127.0.0.1 gets /v1/status. The wait is long (30 s): this checks that the
    client is served at all, not how fast; on a loaded 2-core machine a flood's accept loop and the
    test's own connects can hold the answer back for seconds (a 5 s wait failed in CI once while
    compilers ran beside it). The time is printed."""
    t0 = time.monotonic()
    try:
        r = request(port, "GET", "/v1/status", timeout=30)
    except OSError as e:
        fail(case, f"a fresh client was not served: {e}")
        return None
    ms = (time.monotonic() - t0) * 1000
    if r is None or r.status != 200:
        fail(case, f"a fresh client got {r!r}")
        return None
    return ms


def expect_error(case, r, statuses, code=None, shoal=True):
    if r is None:
        fail(case, f"no answer (wanted {statuses})")
        return
    if r.status not in statuses:
        fail(case, f"status {r.status} (wanted {statuses}): {r.body[:300]!r}")
        return
    if shoal:
        j = r.json()
        if not isinstance(j, dict) or not isinstance(j.get("error"), str) or not isinstance(j.get("reason"), str):
            fail(case, f"the answer is not JSON {{error, reason}}: {r.body[:300]!r}")
        elif code and j["error"] != code:
            fail(case, f"error {j['error']!r}, wanted {code!r}")


class Case:
    """Runs one case: the store and RSS before and after, and a fresh client served after."""

    def __init__(self, args, name, rss_growth_kb_max=20_000):
        self.args, self.name, self.rss_max = args, name, rss_growth_kb_max

    def __enter__(self):
        self.state = store_state(self.args.port)
        self.rss0 = rss_kb(self.args.pid)
        self.t0 = time.monotonic()
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None:
            fail(self.name, f"{kind.__name__}: {value}")
        ms = served(self.args.port, self.name)
        rss1 = rss_kb(self.args.pid)
        after = store_state(self.args.port)
        if after != self.state:
            fail(self.name, f"the store changed: {self.state} -> {after}")
        if rss1 - self.rss0 > self.rss_max:
            fail(self.name, f"RSS grew {rss1 - self.rss0} kB (at most {self.rss_max})")
        took = time.monotonic() - self.t0
        print(f"case {self.name}: {took:.2f} s, RSS {self.rss0} -> {rss1} kB, fresh GET {ms or -1:.1f} ms, store {'untouched' if after == self.state else 'CHANGED'}",
              flush=True)
        return True


def malformed_json(args):
    port = args.port
    with Case(args, "malformed-json"):
        for body in [b'{"a":', b"not json", b"[1,2]", b'"text"', b"\xff\xfe{}", b"", b'{"a":1}}', b"{" * 100_000 + b"}" * 100_000]:
            r = request(port, "PUT", DOCS + "/mj", body)
            expect_error(f"malformed-json {body[:12]!r}", r, {400}, "bad_request")
        r = request(port, "POST", DOCS, b'{"id":\n{{{\nnope\n', {"Content-Type": "application/x-ndjson"})
        expect_error("malformed-json bulk", r, {400})


def too_large(args):
    port = args.port
    big = b'{"a":"' + b"x" * (1 << 20) + b'"}'
    with Case(args, "over-1MiB-content-length", rss_growth_kb_max=30_000):
        r = request(port, "PUT", DOCS + "/big", big)
        expect_error("over-1MiB-content-length", r, {413}, "payload_too_large")
        # A Content-Length of 1 TB: refused from the header, nothing read.
        head = f"PUT {DOCS}/big HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000000000\r\nContent-Type: application/json\r\n\r\n".encode()
        r, _ = raw(port, head + b'{"a":')
        expect_error("content-length-1TB", r, {413}, "payload_too_large")
        bulk = (b'{"id":"b","body":{"a":"' + b"y" * 1000 + b'"}}\n') * 4_200
        r = request(port, "POST", DOCS, bulk, {"Content-Type": "application/x-ndjson"})
        expect_error("bulk-over-4MiB", r, {413}, "payload_too_large")
    with Case(args, "over-1MiB-chunked", rss_growth_kb_max=30_000):
        head = f"PUT {DOCS}/big HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n".encode()
        chunks = b"".join(b"%x\r\n" % len(big[i:i + 65536]) + big[i:i + 65536] + b"\r\n" for i in range(0, len(big), 65536)) + b"0\r\n\r\n"
        r, _ = raw(port, head + chunks, send_all=False)
        expect_error("over-1MiB-chunked", r, {413}, "payload_too_large")
    with Case(args, "endless-chunked", rss_growth_kb_max=30_000):
        # A chunked body that never ends: refused once over the limit, without reading it all.
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(head)
        sent, answer = 0, b""
        chunk = b"10000\r\n" + b"z" * 0x10000 + b"\r\n"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sent < 200 << 20:
            _, w, _ = select.select([s], [s], [], 1)
            if s in select.select([s], [], [], 0)[0]:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                answer += data
                if not data or parse_response(answer):
                    break
            if w:
                try:
                    s.sendall(chunk)
                    sent += len(chunk)
                except OSError:
                    break
        while time.monotonic() < deadline and parse_response(answer) is None:
            try:
                data = s.recv(65536)
            except OSError:
                break
            if not data:
                break
            answer += data
        s.close()
        r = parse_response(answer)
        expect_error("endless-chunked", r, {413}, "payload_too_large")
        if sent > 80 << 20:
            fail("endless-chunked", f"the server took {sent >> 20} MiB before it answered or closed")
        print(f"  endless chunked body: answered {r.status if r else 'nothing'} and closed after {sent >> 20} MiB sent", flush=True)


def long_id(args):
    port = args.port
    with Case(args, "id-over-250-bytes"):
        for idt in ["b" * 251, "é" * 126, "b" * 10_000]:
            enc = "".join(c if c.isascii() else "".join(f"%{b:02X}" for b in c.encode()) for c in idt)
            for m in ["PUT", "GET", "DELETE"]:
                r = request(port, m, f"{DOCS}/{enc}", b'{"a":1}' if m == "PUT" else b"")
                expect_error(f"id-over-250-bytes {m} {len(idt.encode())}", r, {400}, "bad_request")
        r = request(port, "POST", DOCS, json.dumps({"id": "c" * 251, "body": {}}).encode() + b"\n", {"Content-Type": "application/x-ndjson"})
        expect_error("id-over-250-bytes bulk", r, {400})
        # 250 bytes is fine: read (404), never written here.
        r = request(port, "GET", f"{DOCS}/{'b' * 250}")
        expect_error("id-of-250-bytes", r, {404}, "not_found")


def unknown_collection(args):
    port = args.port
    with Case(args, "unknown-collection"):
        for c in ["nosuch", "nosuch.readings", "_default.nosuch"]:
            base = f"/v1/collections/{c}/docs"
            for m, p, b in [("PUT", base + "/x", b'{"a":1}'), ("GET", base + "/x", b""), ("DELETE", base + "/x", b""), ("GET", base, b""),
                            ("POST", base, b'{"id":"x","body":{}}\n'), ("GET", f"/v1/changes?collection={c}", b"")]:
                r = request(port, m, p, b, {"Content-Type": "application/x-ndjson"} if m == "POST" else None)
                expect_error(f"unknown-collection {m} {p}", r, {404}, "not_found")
        for c in ["a..b", "%2E%2E", "a%2Fb", "x" * 300, "a b"]:
            r = request(port, "PUT", f"/v1/collections/{c}/docs/x", b'{"a":1}')
            expect_error(f"bad-collection-name {c[:20]}", r, {400, 404})


def broken_chunked(args):
    port = args.port
    head = f"PUT {DOCS}/chunky HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n".encode()
    with Case(args, "broken-chunked"):
        for name, body in [("bad-size", b"zz\r\n{}\r\n0\r\n\r\n"), ("size-overflow", b"ffffffffffffffffff\r\n{}\r\n0\r\n\r\n"),
                           ("no-crlf", b'7{"a":1}0\r\n\r\n'), ("short-chunk", b"100\r\n{\"a\":1}"),
                           ("negative", b"-5\r\n{}\r\n0\r\n\r\n"), ("huge-chunk", b"7fffffffffffffff\r\n" + b"x" * ((1 << 20) + 100))]:
            t0 = time.monotonic()
            try:
                # A body cut short is waited for (the client may only be slow): 1 s is enough to see.
                r, closed = raw(port, head + body, timeout=1.0 if "short" in name else 5)
            except OSError:
                r, closed = None, True
            # libmicrohttpd answers a malformed chunk itself (400, 413) or closes; never a write.
            if r is not None and r.status < 400:
                fail(f"broken-chunked {name}", f"answered {r!r}")
            print(f"  broken chunked {name}: {r.status if r else 'no answer'}, {'closed by the server' if closed else 'still open'} "
                  f"after {time.monotonic() - t0:.2f} s", flush=True)
        # An ambiguous length (how request smuggling starts): refused, nothing written.
        for name, framing, body in [("content-length-and-chunked", "Content-Length: 9\r\nTransfer-Encoding: chunked\r\n", b'4\r\n{"a"\r\n0\r\n\r\n'),
                                    ("two-content-lengths", "Content-Length: 7\r\nContent-Length: 100\r\n", b'{"a":1}')]:
            r, _ = raw(port, f"PUT {DOCS}/smuggle HTTP/1.1\r\nHost: localhost\r\n{framing}\r\n".encode() + body, timeout=3)
            expect_error(f"broken-chunked {name}", r, {400}, "bad_request")
            print(f"  {name}: {r.status if r else 'no answer'}", flush=True)
        for cl in ["-1", "abc", "99999999999999999999999", "0x10"]:
            r, _ = raw(port, f"PUT {DOCS}/cl HTTP/1.1\r\nHost: localhost\r\nContent-Length: {cl}\r\n\r\n".encode() + b'{"a":1}', timeout=3)
            expect_error(f"content-length {cl}", r, {400, 413}, shoal=False)


def traversal(args):
    port = args.port
    with Case(args, "path-traversal"):
        for p in [f"{DOCS}/..%2F..%2Fetc%2Fpasswd", f"{DOCS}/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", f"{DOCS}/..%5C..%5Cetc%5Cpasswd",
                  "/v1/collections/..%2F..%2Fetc/docs/passwd", f"{DOCS}/../../../../etc/passwd", "/../../../../etc/passwd",
                  "/v1/../../etc/passwd", f"{DOCS}/%2e%2e"]:
            r = request(port, "GET", p)
            if r is None or r.status >= 500 or b"root:" in r.body:
                fail(f"path-traversal GET {p}", f"{r!r}")
        for p in [f"{DOCS}/a%00b", f"{DOCS}/%00", f"{DOCS}/a%zz", f"{DOCS}/a%2", f"{DOCS}/a%", f"{DOCS}/%C0%AE%C0%AE",
                  f"{DOCS}/%FF", f"{DOCS}/a%0Ab", "/v1/collections/a%00b/docs/x"]:
            for m in ["PUT", "GET", "DELETE"]:
                r = request(port, m, p, b'{"a":1}' if m == "PUT" else b"")
                expect_error(f"bad-escape {m} {p}", r, {400}, "bad_request")
    # An id made of dots and slashes is only an id: stored and read back under its own name, no file.
    with open("/etc/passwd", "rb") as f:
        passwd = f.read()
    r = request(port, "PUT", f"{DOCS}/..%2F..%2Fetc%2Fpasswd", b'{"probe":1}')
    if r is None or r.status not in (200, 201):
        fail("traversal-id-is-an-id", f"PUT answered {r!r}")
    r = request(port, "GET", f"{DOCS}/..%2F..%2Fetc%2Fpasswd")
    if r is None or r.status != 200 or r.json() != {"probe": 1}:
        fail("traversal-id-is-an-id", f"GET answered {r!r}")
    with open("/etc/passwd", "rb") as f:
        if f.read() != passwd:
            fail("traversal-id-is-an-id", "/etc/passwd changed")
    r = request(port, "DELETE", f"{DOCS}/..%2F..%2Fetc%2Fpasswd")
    if r is None or r.status != 200:
        fail("traversal-id-is-an-id", f"DELETE answered {r!r}")
    print("case traversal-id-is-an-id: stored, read back and deleted as the id ../../etc/passwd", flush=True)


def header_floods(args):
    port = args.port
    with Case(args, "header-flood"):
        many = "".join(f"X-Flood-{i}: {i}\r\n" for i in range(5000))
        r, _ = raw(port, f"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n{many}\r\n".encode(), send_all=False)
        expect_error("header-flood 5000 headers", r, {431, 400}, shoal=False)
        print(f"  5000 headers: {r.status if r else 'no answer'}", flush=True)
        r, _ = raw(port, f"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nX-Big: {'a' * 100_000}\r\n\r\n".encode(), send_all=False)
        expect_error("header-flood one 100 KB header", r, {431, 400}, shoal=False)
        print(f"  one 100 KB header: {r.status if r else 'no answer'}", flush=True)
        r, _ = raw(port, f"GET /v1/status?{'q=1&' * 20_000} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode(), send_all=False)
        expect_error("header-flood 100 KB request line", r, {414, 431, 400}, shoal=False)
        print(f"  100 KB request line: {r.status if r else 'no answer'}", flush=True)
        r, _ = raw(port, b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n" + b"X-Fold: a\r\n  b\r\n" * 10 + b"\r\n", send_all=False)
        print(f"  folded headers: {r.status if r else 'no answer'}", flush=True)
        r, _ = raw(port, b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nBad Header Name: 1\r\n\r\n", send_all=False)
        print(f"  header name with spaces: {r.status if r else 'no answer'}", flush=True)
        # Several connections flooding at once: each refused, the others still served.
        threads = [threading.Thread(target=lambda: raw(port, f"GET / HTTP/1.1\r\nHost: localhost\r\n{many}\r\n".encode(), send_all=False)) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def bearer(args):
    port, tport, token = args.port, args.token_port, args.token
    with Case(args, "bearer-token"):
        for name, hdrs in [("missing", {}), ("wrong", {"Authorization": "Bearer " + "0" * 64}), ("short", {"Authorization": "Bearer x"}),
                           ("basic", {"Authorization": "Basic YWRtaW46YWRtaW4="}), ("scheme-only", {"Authorization": "Bearer"}),
                           ("token-plus", {"Authorization": "Bearer " + token + "0"})]:
            for m, p, b in [("GET", "/v1/status", b""), ("PUT", DOCS + "/secret", b'{"echo":"SECRET-BODY-123"}'), ("GET", "/v1/openapi.json", b""),
                            ("GET", "/metrics", b""), ("POST", DOCS, b'{"id":"s","body":{}}\n'), ("DELETE", DOCS + "/x", b""),
                            ("GET", "/v1/nosuch", b""), ("GET", "/v1/changes?feed=sse", b"")]:
                r = request(tport, m, p, b, hdrs, timeout=5)
                expect_error(f"bearer {name} {m} {p}", r, {401}, "unauthorized")
                if r is not None and (b"SECRET-BODY" in r.body or b"status" in r.body and r.status == 200):
                    fail(f"bearer {name}", f"the 401 carried more: {r.body[:200]!r}")
                if r is not None and set(r.json() or {}) - {"error", "reason"}:
                    fail(f"bearer {name}", f"the 401 body has more than error, reason: {r.body!r}")
    for scheme in ("Bearer ", "bearer "):  # the scheme's name is case-insensitive (RFC 9110 11.1)
        r = request(tport, "GET", "/v1/status", headers={"Authorization": scheme + token})
        if r is None or r.status != 200 or not isinstance(r.json(), dict) or "state" not in r.json():
            fail(f"bearer right token ({scheme.strip()})", f"{r!r}")
    before = store_state(port)
    r = request(tport, "PUT", DOCS + "/with-token", b'{"ok":true}', {"Authorization": "Bearer " + token})
    if r is None or r.status != 201:
        fail("bearer right token PUT", f"{r!r}")
    if store_state(port)[0] != before[0] + 1:
        fail("bearer right token PUT", "the write did not land")
    r = request(tport, "DELETE", DOCS + "/with-token", b"", {"Authorization": "Bearer " + token})
    print("case bearer-right-token: GET 200, PUT 201", flush=True)


def idle_connections(args):
    """From one address (the per-address limit closes the excess at once), then from several
    (past maxConnections the longest idle connection makes room)."""
    for sources in sorted({1, args.idle_sources}):
        idle_connections_from(args, sources)


def idle_connections_from(args, n_sources, total=10_000):
    port = args.port
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, total + 1000)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < total + 100:
        fail("idle-connections", f"RLIMIT_NOFILE hard limit {hard} is too low for {total} connections")
        return
    with Case(args, f"10000-idle-connections-from-{n_sources}-address{'es' if n_sources > 1 else ''}", rss_growth_kb_max=40_000):
        sockets = []
        refused = 0
        sources = [f"127.0.0.{i}" for i in range(2, 2 + n_sources)]
        peak_rss = rss_kb(args.pid)
        slowest = 0.0
        t0 = time.monotonic()
        for i in range(total):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.bind((sources[i % len(sources)], 0))
            err = s.connect_ex(("127.0.0.1", port))
            if err not in (0, 115):  # EINPROGRESS
                refused += 1
                s.close()
                continue
            sockets.append(s)
            if i % 1000 == 999:
                peak_rss = max(peak_rss, rss_kb(args.pid))
                ms = served(port, "10000-idle-connections")
                if ms is not None:
                    slowest = max(slowest, ms)
        opened = time.monotonic() - t0
        # Give the server a moment to accept and sort them, then see which it closed.
        time.sleep(1.0)
        ms_during = served(port, "10000-idle-connections")
        peak_rss = max(peak_rss, rss_kb(args.pid))
        states = {}
        for s in sockets:
            st = tcp_state(s)
            states[st] = states.get(st, 0) + 1
        held = states.get("established", 0)
        conns, idle_closed = metric(port, "shoal_http_connections"), metric(port, "shoal_http_idle_connections_closed_total")
        if conns is None or conns > 257:
            fail("10000-idle-connections", f"the gateway holds {conns} connections (maxConnections 256)")
        if n_sources * 64 > 256 and not idle_closed:
            fail("10000-idle-connections", "no idle connection was closed to make room")
        print(f"  {len(sockets)} connects started in {opened:.1f} s from {len(sources)} address(es) ({refused} refused at connect); "
              f"client-side states {states}; gateway: {conns:.0f} connections, {idle_closed:.0f} idle ones closed to make room; fresh GET during {ms_during or -1:.1f} ms (slowest while connecting {slowest:.0f} ms); peak RSS {peak_rss} kB",
              flush=True)
        for s in sockets:
            s.close()


def slowloris(args):
    """Connections that send half a header and stop, from several addresses, past maxConnections."""
    port = args.port
    with Case(args, "slowloris"):
        held = []
        for i in range(400):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((f"127.0.0.{20 + i % 8}", 0))
            s.settimeout(5)
            try:
                s.connect(("127.0.0.1", port))
                s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
            except OSError:
                s.close()
                continue
            held.append(s)
        time.sleep(0.5)
        ms = served(port, "slowloris")
        states = {}
        for s in held:
            st = tcp_state(s)
            states[st] = states.get(st, 0) + 1
        print(f"  {len(held)} half-header connections from 8 addresses: client-side states {states}; fresh GET {ms or -1:.1f} ms", flush=True)
        for s in held:
            s.close()


def slow_sse(args):
    """A client that reads one byte a second from an SSE stream while writes flood in."""
    port = args.port
    with Case(args, "slow-sse-reader", rss_growth_kb_max=30_000) as case:
        slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", port))
        slow.sendall(b"GET /v1/changes?feed=sse&include_docs=true HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n")
        fast = socket.create_connection(("127.0.0.1", port), timeout=10)
        seq0 = store_state(port)[0]
        fast.sendall(f"GET /v1/changes?feed=sse&since={seq0} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        stop = threading.Event()
        slow_bytes = [0]

        def trickle():
            while not stop.is_set():
                try:
                    slow_bytes[0] += len(slow.recv(1))
                except OSError:
                    return
                stop.wait(1.0)

        seen = {"last": seq0, "buf": b""}

        def reader():
            fast.settimeout(1)
            while not stop.is_set():
                try:
                    data = fast.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not data:
                    return
                seen["buf"] += data
                *events, seen["buf"] = seen["buf"].split(b"\n\n")
                for e in events:
                    for line in e.split(b"\n"):
                        if line.startswith(b"id: "):
                            seen["last"] = int(line[4:])

        threads = [threading.Thread(target=trickle), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        rss0 = rss_kb(args.pid)
        peak = rss0
        pad = "p" * args.pad_bytes
        batches, lags = 0, []
        t_end = time.monotonic() + args.flood_seconds
        while time.monotonic() < t_end:
            lines = "".join(json.dumps({"id": f"flood-{batches}-{i}", "body": {"i": i, "pad": pad}}) + "\n" for i in range(200)).encode()
            r = request(port, "POST", DOCS, lines, {"Content-Type": "application/x-ndjson"}, timeout=20)
            if r is None or r.status != 200:
                fail("slow-sse-reader", f"a bulk write answered {r!r}")
                break
            last = r.json()["lastSequence"]
            batches += 1
            t0 = time.monotonic()
            while seen["last"] < last and time.monotonic() - t0 < 5:
                time.sleep(0.005)
            lags.append((time.monotonic() - t0) * 1000)
            peak = max(peak, rss_kb(args.pid))
        # The flood is over; the slow reader still trickles. The gateway must sit idle, not spin
        # on a stream that cannot take what the feed has for it.
        cpu0, t0 = cpu_seconds(args.pid), time.monotonic()
        time.sleep(2.0)
        cpu_share = (cpu_seconds(args.pid) - cpu0) / (time.monotonic() - t0)
        if cpu_share > 0.25:
            fail("slow-sse-reader", f"the gateway used {cpu_share:.0%} of a core with only the slow reader left")
        stop.set()
        for t in threads:
            t.join(timeout=3)
        lags.sort()
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else -1
        if not lags or lags[-1] >= 5000:
            fail("slow-sse-reader", f"the other SSE client fell behind: last seen {seen['last']}, lag max {lags[-1] if lags else -1:.0f} ms")
        elif p99 > 2000:
            fail("slow-sse-reader", f"the other SSE client's write-to-event p99 was {p99:.0f} ms")
        docs_mb = batches * 200 * (args.pad_bytes + 60) / 1e6
        print(f"  {batches * 200} writes of {args.pad_bytes} B ({docs_mb:.0f} MB of events with include_docs) in {args.flood_seconds} s; slow reader took {slow_bytes[0]} bytes; "
              f"fast SSE client lag median {lags[len(lags) // 2] if lags else -1:.1f} ms, p99 {p99:.1f} ms, max {lags[-1] if lags else -1:.1f} ms; "
              f"RSS {rss0} -> peak {peak} kB; CPU afterwards with the slow reader alone {cpu_share:.0%} of a core", flush=True)
        if peak - rss0 > 30_000:
            fail("slow-sse-reader", f"RSS grew {peak - rss0} kB during the flood")
        slow.close()
        fast.close()
        # The flood's writes are the case's own: the store is measured again from here.
        case.state = store_state(port)


def metric(port, name):
    """One sample's value from /metrics (the first line that starts with the name), or None."""
    r = request(port, "GET", "/metrics")
    if r is None or r.status != 200:
        return None
    for line in r.body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def slow_sse_big_docs(args):
    """The same slow reader while documents near the 1 MiB limit flood in (include_docs): the
    stream's buffer stays within its bound plus one event, not a batch of them."""
    port = args.port
    with Case(args, "slow-sse-big-docs", rss_growth_kb_max=40_000) as case:
        seq0 = store_state(port)[0]
        slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", port))
        slow.sendall(f"GET /v1/changes?feed=sse&include_docs=true&since={seq0} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        time.sleep(0.3)
        rss0, peak, largest = rss_kb(args.pid), rss_kb(args.pid), 0.0
        body = json.dumps({"pad": "b" * 600_000}).encode()
        for i in range(40):
            # One PUT each (a bulk write's own parsing costs more memory than the stream here).
            r = request(port, "PUT", f"{DOCS}/big-{i}", body, timeout=30)
            if r is None or r.status not in (200, 201):
                fail("slow-sse-big-docs", f"a write answered {r!r}")
            if i % 4 == 3:
                peak = max(peak, rss_kb(args.pid))
                largest = max(largest, metric(port, "shoal_http_stream_largest_buffer_bytes") or 0)
        cpu0, t0 = cpu_seconds(args.pid), time.monotonic()
        time.sleep(1.5)
        cpu_share = (cpu_seconds(args.pid) - cpu0) / (time.monotonic() - t0)
        print(f"  40 writes of 600 KB with a stuck SSE reader (include_docs): largest stream buffer {largest / 1024:.0f} KiB, "
              f"RSS {rss0} -> peak {peak} kB, CPU afterwards {cpu_share:.0%} of a core", flush=True)
        if largest > 256 * 1024 + 700_000:
            fail("slow-sse-big-docs", f"a stream buffered {largest:.0f} bytes (bound 256 KiB plus one event)")
        if peak - rss0 > 40_000:
            fail("slow-sse-big-docs", f"RSS grew {peak - rss0} kB")
        if cpu_share > 0.25:
            fail("slow-sse-big-docs", f"the gateway used {cpu_share:.0%} of a core with only the stuck reader left")
        slow.close()
        case.state = store_state(port)


CASES = {
    "malformed-json": malformed_json, "too-large": too_large, "long-id": long_id, "unknown-collection": unknown_collection,
    "broken-chunked": broken_chunked, "traversal": traversal, "header-floods": header_floods, "bearer": bearer,
    "idle-connections": idle_connections, "slowloris": slowloris, "slow-sse": slow_sse, "slow-sse-big-docs": slow_sse_big_docs,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--token-port", type=int, required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--idle-sources", type=int, default=8)
    p.add_argument("--flood-seconds", type=float, default=4)
    p.add_argument("--pad-bytes", type=int, default=4000)
    p.add_argument("--case", action="append")
    args = p.parse_args()
    print(f"gateway RSS at start: {rss_kb(args.pid)} kB", flush=True)
    for name in args.case or list(CASES):
        CASES[name](args)
    print(f"gateway RSS at end: {rss_kb(args.pid)} kB", flush=True)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", flush=True)
        sys.exit(1)
    print("all bad input refused", flush=True)


if __name__ == "__main__":
    main()
