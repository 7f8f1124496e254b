"""schemathesis against a running gateway, from the document it serves at /v1/openapi.json.

Checks: no server error (5xx), every response's status documented, its content type documented,
its body valid against the documented schema. Usage: schemathesis_run.py BASE_URL [MAX_EXAMPLES].

The streams are left to the SSE test (sse_resume.py) and the long poll to the curl test: a
generated `feed=sse` would never end and a generated `timeout=300000` would hold a worker five
minutes, so the run uses a copy of the served document without the parameters that ask for them
(`feed`, `timeout` and `Last-Event-ID` on /v1/changes, `feed` and `Last-Event-ID` on /v1/events,
`follow` on /v1/collections/{collection}/query), and with blob uploads declared
application/octet-stream (see below).
Every route, status and schema is otherwise tested as served. The run is bounded twice: a fixed
number of examples per operation, and a deadline on the whole process. Exits 1 saying what failed.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import requests

BASE = sys.argv[1].rstrip("/")
MAX_EXAMPLES = sys.argv[2] if len(sys.argv) > 2 else "40"
DEADLINE_SECONDS = 240
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
STREAMING = {"/v1/changes": {"feed", "timeout", "Last-Event-ID"}, "/v1/events": {"feed", "Last-Event-ID"},
             "/v1/collections/{collection}/query": {"follow"}}


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


served = requests.get(f"{BASE}/v1/openapi.json", timeout=10)
if served.status_code != 200:
    fail(f"GET /v1/openapi.json: status {served.status_code}")
try:
    document = served.json()
except ValueError as error:
    fail(f"/v1/openapi.json is not JSON: {error}")
if not str(document.get("openapi", "")).startswith("3.1"):
    fail(f"/v1/openapi.json says openapi {document.get('openapi')!r}, not 3.1")

for path, names in STREAMING.items():
    operation = document["paths"][path]["get"]
    before = len(operation["parameters"])
    operation["parameters"] = [p for p in operation["parameters"] if p.get("name") not in names]
    if before - len(operation["parameters"]) != len(names):
        fail(f"{path} no longer has the parameters {sorted(names)} this script leaves out: update STREAMING")

# POST /v1/blobs keeps the Content-Type its uploader declares and GET /v1/blobs/{digest} serves the
# blob with it, as a blob store does. Random bytes the fuzzer declared as text or JSON come back
# declared so, and schemathesis's deserialization check (ST110, always on) counts the mislabelled
# bytes against the server (seen once: 'utf-8' codec can't decode). The run's copy uploads as
# application/octet-stream, so what comes back is labelled as what it is.
uploads = document["paths"]["/v1/blobs"]["post"]["requestBody"]["content"]
if set(uploads) != {"*/*"}:
    fail(f"POST /v1/blobs takes {sorted(uploads)}, not */*: update the upload type this script sets")
uploads["application/octet-stream"] = uploads.pop("*/*")

with tempfile.TemporaryDirectory(prefix="shoal-schemathesis") as work:
    schema = os.path.join(work, "openapi.json")
    with open(schema, "w") as f:
        json.dump(document, f)
    command = ["schemathesis", "run", schema, "--url", BASE, "--checks", CHECKS,
               "--max-examples", MAX_EXAMPLES, "--seed", "20", "--workers", "1",
               "--request-timeout", "10", "--phases", "examples,coverage,fuzzing",
               "--suppress-health-check", "all", "--no-color"]
    print("running:", " ".join(command))
    started = time.monotonic()
    try:
        hooks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemathesis_hooks.py")
        # In the temporary directory: schemathesis keeps its replay data (.schemathesis/) in its cwd.
        run = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE_SECONDS, cwd=work,
                             env=dict(os.environ, SCHEMATHESIS_HOOKS=hooks))
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout.decode(errors="replace") if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        print(output[-4000:])
        fail(f"schemathesis did not finish within {DEADLINE_SECONDS} s")
    elapsed = time.monotonic() - started
    print(run.stdout[-12000:])
    if run.stderr.strip():
        print(run.stderr[-3000:])
    print(f"schemathesis: exit {run.returncode} after {elapsed:.0f} s")
    if run.returncode != 0:
        fail("schemathesis found failures (above)")
print("schemathesis passed")
