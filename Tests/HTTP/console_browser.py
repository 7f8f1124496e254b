#!/usr/bin/env python3
"""The web console in real headless Chromium, driven over the DevTools protocol.

Loads a gateway's console (GET /), waits for both live streams, checks the gateway state, the
LED drawn live, the mesh picture and the peers table (the peers given must be there, linked to
this gateway), then writes documents through the CLI and measures how long each takes to appear
in the browser's DOM (printed: the figure is the point), opens one in the JSON viewer, edits it
through the page (PUT with If-Match) and reads it back over the API. Saves screenshots.

Standard library only: the WebSocket client below is the few frames CDP needs.
Exit status 0 when every check held; the last line is `RESULT {json}` either way.
"""
import argparse
import base64
import hashlib
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request


class WebSocket:
    """A client WebSocket (RFC 6455) for text messages: masked frames out, fragments and pings in."""

    def __init__(self, url, timeout=30):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port or 80), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        path = u.path + ("?" + u.query if u.query else "")
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the DevTools socket closed during the handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in lines[0]:
            raise ConnectionError(f"WebSocket handshake refused: {lines[0]}")
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        if headers.get("sec-websocket-accept") != accept:
            raise ConnectionError("WebSocket handshake: wrong Sec-WebSocket-Accept")

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionError("the DevTools socket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _frame(self, opcode, payload):
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send(self, text):
        self._frame(0x1, text.encode())

    def recv(self):
        message, kind = b"", None
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
            if opcode == 0x9:
                self._frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("the DevTools socket was closed by Chromium")
            if opcode in (0x1, 0x2):
                kind, message = opcode, payload
            elif opcode == 0x0:
                message += payload
            if b0 & 0x80 and kind is not None:
                return message.decode()


class DevTools:
    """Calls and events of one page target."""

    def __init__(self, ws):
        self.ws, self.next, self.results, self.events = ws, 0, {}, []

    def send(self, method, params=None):
        self.next += 1
        self.ws.send(json.dumps({"id": self.next, "method": method, "params": params or {}}))
        return self.next

    def wait(self, call, timeout=30):
        deadline = time.time() + timeout
        while call not in self.results:
            if time.time() > deadline:
                raise TimeoutError(f"no answer to DevTools call {call} in {timeout} s")
            self.ws.sock.settimeout(max(0.05, deadline - time.time()))
            m = json.loads(self.ws.recv())
            if "id" in m:
                self.results[m["id"]] = m
            else:
                self.events.append(m)
        m = self.results.pop(call)
        if "error" in m:
            raise RuntimeError(f"DevTools: {m['error']}")
        return m.get("result", {})

    def call(self, method, params=None, timeout=30):
        return self.wait(self.send(method, params), timeout)

    def eval(self, expression, timeout=30):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, timeout + 5)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails'].get('exception', {}).get('description') or r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def until(self, expression, timeout, what):
        """Polls a page expression until it is truthy; its value, or raises naming `what`."""
        deadline = time.time() + timeout
        while True:
            v = self.eval(expression)
            if v:
                return v
            if time.time() > deadline:
                raise TimeoutError(f"{what}: not within {timeout} s")
            time.sleep(0.05)

    def drain(self):
        """Reads the events already sent (page errors)."""
        self.ws.sock.settimeout(0.05)
        try:
            while True:
                m = json.loads(self.ws.recv())
                if "id" in m:
                    self.results[m["id"]] = m
                else:
                    self.events.append(m)
        except (socket.timeout, TimeoutError):
            pass


def start_chromium(profile, log):
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
    args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-proxy-server", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-background-networking", "--disable-sync",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--user-data-dir={profile}",
            "--window-size=1280,900", "about:blank"]
    proc = subprocess.Popen(args, stdout=log, stderr=log)
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.time() + 30
    while not os.path.exists(port_file) or not open(port_file).read().strip():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("chromium did not open its DevTools port")
        time.sleep(0.05)
    port = int(open(port_file).read().split()[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
        pages = [t for t in json.load(r) if t.get("type") == "page"]
    if not pages:
        raise RuntimeError("chromium has no page target")
    return proc, pages[0]["webSocketDebuggerUrl"]


def screenshot(dt, path, clip=None, full=False):
    params = {"format": "png", "captureBeyondViewport": full}
    if clip:
        params["clip"] = dict(clip, scale=1)
    data = dt.call("Page.captureScreenshot", params, timeout=60)["data"]
    with open(path, "wb") as f:
        f.write(base64.b64decode(data))
    return path


def q(s):
    return json.dumps(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the gateway's HTTP base URL, e.g. http://127.0.0.1:8470")
    ap.add_argument("--collection", default="sensors.readings")
    ap.add_argument("--shoal", help="the shoal binary: documents are written with `shoal doc put`")
    ap.add_argument("--socket", help="the gateway's control socket, for `shoal doc put`")
    ap.add_argument("--put-url", help="instead of the CLI: POST here + id (a stand-in server)")
    ap.add_argument("--me", help="this gateway's peer id")
    ap.add_argument("--peers", default="", help="comma-separated peer ids the mesh picture and peers table must show linked")
    ap.add_argument("--writes", type=int, default=5)
    ap.add_argument("--bound-ms", type=float, default=5000, help="fail when a document takes longer to reach the DOM")
    ap.add_argument("--artifacts", default=".build/artifacts")
    ap.add_argument("--timeout", type=float, default=45)
    a = ap.parse_args()
    os.makedirs(a.artifacts, exist_ok=True)
    result = {"checks": {}, "latencyMs": [], "screenshots": []}
    failures = []

    def check(name, ok, detail=""):
        result["checks"][name] = bool(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + str(detail) if detail else ''}", flush=True)
        if not ok:
            failures.append(name)

    # The two resources this part serves, as plain HTTP first.
    base = a.url.rstrip("/")
    try:
        with urllib.request.urlopen(base + "/", timeout=10) as r:
            check("GET / is the console page", r.headers.get("Content-Type", "").startswith("text/html") and b"<!doctype html>" in r.read(),
                  r.headers.get("Content-Type"))
        with urllib.request.urlopen(base + "/v1/mesh?format=svg", timeout=10) as r:
            body = r.read()
            check("GET /v1/mesh?format=svg is an SVG picture", r.headers.get("Content-Type", "").startswith("image/svg+xml") and body.startswith(b"<svg"),
                  f"{r.headers.get('Content-Type')}, {len(body)} bytes")
    except OSError as e:
        check("the API answers", False, e)

    def put(doc_id, body):
        """Writes a document the way a user beside the gateway would: `shoal doc put`."""
        if a.put_url:
            urllib.request.urlopen(urllib.request.Request(a.put_url + doc_id, method="POST"), timeout=10).read()
            return True
        r = subprocess.run([a.shoal, "doc", "put", a.collection, doc_id, json.dumps(body), "--socket", a.socket],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            check(f"shoal doc put {doc_id}", False, r.stderr.strip())
        return r.returncode == 0

    def api_get(doc_id):
        """The document's body over the API, or the HTTP status when there is none."""
        url = base + f"/v1/collections/{urllib.parse.quote(a.collection, safe='')}/docs/{urllib.parse.quote(doc_id, safe='')}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return e.code

    profile = tempfile.mkdtemp(prefix="shoal-chromium-")
    log = open(os.path.join(a.artifacts, "console-chromium.log"), "wb")
    proc = None
    try:
        proc, ws_url = start_chromium(profile, log)
        dt = DevTools(WebSocket(ws_url))
        dt.call("Page.enable")
        dt.call("Runtime.enable")
        dt.call("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        dt.call("Emulation.setScrollbarsHidden", {"hidden": True})
        dt.call("Page.navigate", {"url": a.url.rstrip("/") + "/#collection=" + urllib.parse.quote(a.collection)})
        dt.until("document.readyState === 'complete' && !!document.querySelector('#live')", 20, "the console page loads")
        dt.until("document.querySelector('#live').dataset.state === 'live'", a.timeout, "both live streams open")
        check("live streams open", True)
        state = dt.until("(s => s && s !== '…' && s)(document.querySelector('#state').textContent)", 20, "the gateway state shows")
        check("gateway state shown", state in ("running", "degraded", "booting"), state)
        pattern = dt.until("document.querySelector('#led').dataset.pattern", 20, "the LED pattern shows")
        # Drawn live: the LED must both light and go dark within two periods (the longest is 4.5 s).
        toggled = dt.eval("""new Promise(res => { const l = document.querySelector('#led'), seen = new Set([l.dataset.lit]);
            const mo = new MutationObserver(() => { seen.add(l.dataset.lit); if (seen.size === 2) { mo.disconnect(); res(true); } });
            mo.observe(l, {attributes: true}); setTimeout(() => { mo.disconnect(); res(false); }, 9000); })""", 15)
        check("LED drawn live", toggled or pattern.startswith("dead"), pattern)

        peers = [p for p in a.peers.split(",") if p]
        if peers:
            expr = "(() => { const ids = %s, me = %s;" % (q(peers), q(a.me or "")) + """
                const svg = document.querySelector('#mesh svg'); if (!svg) return false;
                const node = id => svg.querySelector('g[data-peer="' + id + '"]');
                const linked = id => [...svg.querySelectorAll('g.link.ours')].some(g => g.dataset.link.split(' ').includes(id));
                const row = id => document.querySelector('#peers tbody tr[data-peer="' + id + '"][data-online="1"]');
                return (!me || node(me)) && ids.every(id => node(id) && linked(id) && row(id)) &&
                       {nodes: svg.querySelectorAll('g[data-peer]').length, links: svg.querySelectorAll('g[data-link]').length}; })()"""
            try:
                shown = dt.until(expr, a.timeout, "the mesh picture shows the linked peers")
                check("mesh picture shows the linked peers", True, shown)
            except TimeoutError as e:
                check("mesh picture shows the linked peers", False, e)

        # Documents written through the CLI reach the DOM: the page records the moment each row
        # appears (its clock is this machine's), measured from the write's start and its return.
        for n in range(a.writes):
            doc_id = f"console-live-{int(time.time() * 1000)}-{n}"
            dt.eval("window.__seen = new Promise(res => { const sel = '#doc-list [data-id=\"%s\"]';" % doc_id + """
                if (document.querySelector(sel)) return res(Date.now());
                const mo = new MutationObserver(() => { if (document.querySelector(sel)) { mo.disconnect(); res(Date.now()); } });
                mo.observe(document.getElementById('docs'), {childList: true, subtree: true});
                setTimeout(() => { mo.disconnect(); res(-1); }, 15000); }); true""")
            started = time.time()
            if not put(doc_id, {"v": 42, "n": n}):
                continue
            returned = time.time()
            seen = dt.eval("window.__seen", 20)
            if seen is None or seen < 0:
                check(f"document {doc_id} in the DOM", False, "never appeared")
                continue
            from_start, from_return = seen - started * 1000, seen - returned * 1000
            result["latencyMs"].append({"id": doc_id, "fromWriteStart": round(from_start, 1), "fromWriteReturn": round(from_return, 1),
                                        "cliMs": round((returned - started) * 1000, 1)})
            print(f"figure: {doc_id} in the DOM {from_start:.0f} ms after `shoal doc put` started "
                  f"({from_return:.0f} ms after it returned; the CLI took {(returned - started) * 1000:.0f} ms)", flush=True)
            time.sleep(0.2)
        if result["latencyMs"]:
            starts = [x["fromWriteStart"] for x in result["latencyMs"]]
            returns = [x["fromWriteReturn"] for x in result["latencyMs"]]
            result["latencySummary"] = {"medianFromStart": statistics.median(starts), "maxFromStart": max(starts),
                                        "medianFromReturn": statistics.median(returns), "maxFromReturn": max(returns)}
            print(f"figure: CLI write -> browser DOM over {len(starts)} writes: median {statistics.median(starts):.0f} ms, "
                  f"max {max(starts):.0f} ms from the write's start; median {statistics.median(returns):.0f} ms, "
                  f"max {max(returns):.0f} ms from its return", flush=True)
            check("every CLI write reached the DOM", len(starts) == a.writes, f"{len(starts)}/{a.writes}")
            check(f"each within {a.bound_ms:.0f} ms", max(starts) <= a.bound_ms, f"max {max(starts):.0f} ms")
            check("median within 1 s of the write (informative bound of the issue)", statistics.median(starts) <= 1000,
                  f"{statistics.median(starts):.0f} ms")

            # The last one in the JSON viewer, edited through the page: PUT with If-Match.
            last = result["latencyMs"][-1]["id"]
            dt.eval("document.querySelector('#doc-list [data-id=\"%s\"]').click(); true" % last)
            dt.until("document.querySelector('#doc-view').dataset.open === %s && document.querySelector('#doc-json').textContent.includes('42')" % q(last),
                     10, "the JSON viewer shows the document")
            check("JSON viewer shows the document", True)
            dt.eval("""document.querySelector('#doc-edit').click();
                document.querySelector('#doc-editor').value = JSON.stringify({v: 43, edited: "in the console"});
                document.querySelector('#doc-save').click(); true""")
            saved = dt.until("(t => t.includes('saved') && t)(document.querySelector('#msg').textContent)", 10, "the edit is saved")
            body = api_get(last)
            check("edit saved through PUT + If-Match", body == {"v": 43, "edited": "in the console"}, f"{saved}; {body}")

            # An edit over a document the CLI changed meanwhile is refused (412), not saved over it.
            dt.eval("document.querySelector('#doc-edit').click(); document.querySelector('#doc-editor').value = '{\"v\": 44}'; true")
            put(last, {"v": 50, "from": "cli"})
            dt.until("document.querySelector('#doc-list [data-id=\"%s\"]').dataset.revision === '3'" % last, 10, "the CLI's change reaches the list")
            dt.eval("document.querySelector('#doc-save').click(); true")
            refused = dt.until("(t => t.includes('meanwhile') && t)(document.querySelector('#msg').textContent)", 10, "the stale edit is refused")
            check("a stale edit is refused (If-Match, 412)", api_get(last) == {"v": 50, "from": "cli"}, f"{refused}; {api_get(last)}")
            dt.eval("document.querySelector('#doc-cancel').click(); true")
            dt.until("document.querySelector('#doc-json').textContent.includes('cli')", 10, "cancel shows the gateway's version")

            # Delete takes two taps; the row goes, the API has it no more.
            dt.eval("document.querySelector('#doc-delete').click(); document.querySelector('#doc-delete').click(); true")
            dt.until("!document.querySelector('#doc-list [data-id=\"%s\"]')" % last, 10, "the deleted document leaves the list")
            check("delete through the page", api_get(last) == 404, api_get(last))

            # A new document made in the page.
            dt.eval("""document.querySelector('#doc-new').click(); document.querySelector('#doc-id').value = 'made in the console';
                document.querySelector('#doc-editor').value = '{"made": "console"}'; document.querySelector('#doc-save').click(); true""")
            dt.until("!!document.querySelector('#doc-list [data-id=\"made in the console\"]')", 10, "the new document shows in the list")
            check("create through the page (If-None-Match: *)", api_get("made in the console") == {"made": "console"}, api_get("made in the console"))

        dt.drain()
        errors = [e["params"]["exceptionDetails"].get("exception", {}).get("description", "?") for e in dt.events
                  if e.get("method") == "Runtime.exceptionThrown"]
        check("no uncaught script error in the page", not errors, "; ".join(errors)[:500])

        # Screenshots: the desktop page whole, the mesh card, a phone's first screen.
        dt.eval("window.scrollTo(0, 0); true")
        result["screenshots"].append(screenshot(dt, os.path.join(a.artifacts, "console-desktop.png"), full=True))
        box = dt.eval("(r => ({x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}))(document.querySelector('#mesh-card').getBoundingClientRect())")
        result["screenshots"].append(screenshot(dt, os.path.join(a.artifacts, "console-mesh.png"), clip=box, full=True))
        dt.call("Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
        time.sleep(0.3)
        fits = dt.eval("document.documentElement.scrollWidth <= window.innerWidth + 1")
        check("fits a phone's width (no sideways scrolling)", fits, dt.eval("document.documentElement.scrollWidth + ' px wide in ' + window.innerWidth"))
        result["screenshots"].append(screenshot(dt, os.path.join(a.artifacts, "console-phone.png")))
        print("screenshots: " + ", ".join(result["screenshots"]), flush=True)
    except Exception as e:  # noqa: BLE001 — any failure is reported in RESULT
        failures.append(f"{type(e).__name__}: {e}")
        print(f"FAIL {type(e).__name__}: {e}", flush=True)
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
        shutil.rmtree(profile, ignore_errors=True)
    result["failures"] = failures
    print("RESULT " + json.dumps(result), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
