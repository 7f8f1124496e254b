"""The change feed over Server-Sent Events with real clients (requests + sseclient-py).

A write shows up on /v1/changes?feed=sse as an event whose id is its sequence; a client that
reconnects with Last-Event-ID gets exactly the events after that id (none missed, none twice).
The mesh's events stream the same way (/v1/events with Accept: text/event-stream or feed=sse).
Every event's data must match the served OpenAPI document's schema (Change, MeshEvent).
Usage: sse_resume.py BASE_URL COLLECTION. Prints each check and the write→event latencies;
exits 1 with what failed.
"""
import json
import queue
import socket
import sys
import threading
import time

import jsonschema
import referencing
import referencing.jsonschema
import requests
import sseclient

BASE, COLLECTION = sys.argv[1], sys.argv[2]
DOCS = f"{BASE}/v1/collections/{COLLECTION}/docs"


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def ok(message):
    print(f"ok   {message}")


# An event's data is checked against the served OpenAPI document's schema (Change, MeshEvent):
# schemathesis checks the JSON answers, but leaves the streams to this script.
DOCUMENT = requests.get(f"{BASE}/v1/openapi.json", timeout=10).json()
REGISTRY = referencing.Registry().with_resource(
    "urn:shoal-openapi", referencing.Resource.from_contents(DOCUMENT, default_specification=referencing.jsonschema.DRAFT202012))


def conforms(data, schema_name, what):
    validator = jsonschema.Draft202012Validator({"$ref": f"urn:shoal-openapi#/components/schemas/{schema_name}"}, registry=REGISTRY)
    errors = [e.message for e in validator.iter_errors(data)]
    if errors:
        fail(f"{what}: data {data} breaks the document's {schema_name} schema: {errors[:3]}")


class Feed:
    """One SSE connection read on its own thread; events arrive in `events` (a queue)."""

    def __init__(self, params, headers=None, path="/v1/changes"):
        self.events = queue.Queue()
        self.response = requests.get(f"{BASE}{path}", params=params, headers=headers or {},
                                     stream=True, timeout=(5, 30))
        if self.response.status_code != 200:
            fail(f"GET {path} {params}: status {self.response.status_code}: {self.response.text[:300]}")
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
    conforms(data, "Change", what)
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

# The mesh's events: a sim gateway has logged its state and transports since it started.
mesh = Feed({}, headers={"Accept": "text/event-stream"}, path="/v1/events")
_, first = mesh.next()
data = json.loads(first.data)
conforms(data, "MeshEvent", "the first mesh event")
if first.event != data["type"] or first.id != str(data["sequence"]):
    fail(f"mesh event: id {first.id!r} event {first.event!r}, but data says sequence {data['sequence']} type {data['type']!r}")
mesh.close()
ok(f"/v1/events streams the mesh events with Accept: text/event-stream (first: {first.id} {first.event})")
deadline = time.monotonic() + 10  # a sim gateway logs its transports ~2 s after its state
while len(listed := requests.get(f"{BASE}/v1/events", timeout=10).json()["events"]) < 2:
    if time.monotonic() > deadline:
        fail(f"/v1/events lists {len(listed)} events after 10 s; a sim gateway has a state and a transport event")
    time.sleep(0.1)
after = Feed({"feed": "sse"}, headers={"Last-Event-ID": first.id}, path="/v1/events")
_, second = after.next()
if second.id != str(listed[1]["sequence"]) or json.loads(second.data) != listed[1]:
    fail(f"mesh events resumed after {first.id} with {second.id} {second.data}, expected {listed[1]}")
ok(f"/v1/events?feed=sse resumed after Last-Event-ID {first.id} with {second.id}, as /v1/events lists it")
after.close()
print("all SSE checks passed")
