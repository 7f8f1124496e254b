"""The change feed over Server-Sent Events with real clients (requests + sseclient-py).

A write shows up on /v1/changes?feed=sse as an event whose id is its sequence; a client that
reconnects with Last-Event-ID gets exactly the events after that id (none missed, none twice).
Usage: sse_resume.py BASE_URL COLLECTION. Prints each check and the write→event latencies;
exits 1 with what failed.
"""
import json
import queue
import socket
import sys
import threading
import time

import requests
import sseclient

BASE, COLLECTION = sys.argv[1], sys.argv[2]
DOCS = f"{BASE}/v1/collections/{COLLECTION}/docs"


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def ok(message):
    print(f"ok   {message}")


class Feed:
    """One SSE connection read on its own thread; events arrive in `events` (a queue)."""

    def __init__(self, params, headers=None):
        self.events = queue.Queue()
        self.response = requests.get(f"{BASE}/v1/changes", params=params, headers=headers or {},
                                     stream=True, timeout=(5, 30))
        if self.response.status_code != 200:
            fail(f"GET /v1/changes {params}: status {self.response.status_code}: {self.response.text[:300]}")
        kind = self.response.headers.get("Content-Type", "")
        if not kind.startswith("text/event-stream"):
            fail(f"the SSE feed's Content-Type is {kind!r}, not text/event-stream")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for event in sseclient.SSEClient(self.response).events():
                self.events.put((time.monotonic(), event))
        except Exception as error:  # the connection broke (or close() shut it)
            self.events.put((time.monotonic(), error))

    def next(self, within=5.0):
        try:
            at, event = self.events.get(timeout=within)
        except queue.Empty:
            fail(f"no event within {within} s")
        if isinstance(event, Exception):
            fail(f"the stream broke: {event!r}")
        return at, event

    def close(self):
        # response.close() would wait for the reader thread's blocked read (a buffered reader's
        # lock) until the next event; shutting the socket down ends that read at once.
        connection = getattr(self.response.raw, "connection", None)
        if connection is not None and connection.sock is not None:
            connection.sock.shutdown(socket.SHUT_RDWR)
        self.response.close()


def put(doc_id, body):
    started = time.monotonic()
    r = requests.put(f"{DOCS}/{doc_id}", json=body, timeout=10)
    if r.status_code not in (200, 201):
        fail(f"PUT {doc_id}: status {r.status_code}: {r.text[:300]}")
    return started, r.json()


def check_event(event, written, what):
    if event.event != "change":
        fail(f"{what}: event type {event.event!r}, expected 'change'")
    if event.id != str(written["sequence"]):
        fail(f"{what}: event id {event.id!r}, expected the write's sequence {written['sequence']}")
    data = json.loads(event.data)
    expected = {"sequence": written["sequence"], "collection": written["collection"], "id": written["id"],
                "revision": written["revision"], "deleted": False}
    if {k: data.get(k) for k in expected} != expected:
        fail(f"{what}: data {data}, expected {expected}")


start = requests.get(f"{BASE}/v1/changes", params={"limit": 1}, timeout=10).json()["lastSequence"]
feed = Feed({"feed": "sse", "since": start})
latencies = []
written = []
for i in range(6):
    began, w = put(f"sse-{i}", {"i": i})
    at, event = feed.next()
    check_event(event, w, f"write {i}")
    latencies.append((at - began) * 1000)
    written.append(w)
ok(f"6 writes appeared on the SSE feed in order, id = sequence "
   f"(PUT → event: median {sorted(latencies)[3]:.1f} ms, max {max(latencies):.1f} ms)")
feed.close()

# Resume after the third event: exactly writes 3, 4, 5 come, then the next new write and nothing in between.
resumed = Feed({"feed": "sse"}, headers={"Last-Event-ID": str(written[2]["sequence"])})
for i in (3, 4, 5):
    _, event = resumed.next()
    check_event(event, written[i], f"resumed event for write {i}")
_, marker = put("sse-after", {"after": True})
_, event = resumed.next()
check_event(event, marker, "the first event after the backlog")
ok("Last-Event-ID resumed with exactly the 3 events after it, then the new write")
resumed.close()

# Resuming at the newest event gives nothing old: the next event is the next write.
latest = Feed({"feed": "sse"}, headers={"Last-Event-ID": str(marker["sequence"])})
_, again = put("sse-after", {"after": 2})
_, event = latest.next()
check_event(event, again, "after resuming at the newest event")
ok("Last-Event-ID of the newest event: no backlog, the next write comes next")
latest.close()
print("all SSE checks passed")
