"""schemathesis hooks for Shoal's API (loaded through SCHEMATHESIS_HOOKS by schemathesis_run.py).

A bulk write's body is NDJSON: the OpenAPI document describes it as an array whose items are the
lines, and this serializer writes each item as one line of JSON. Anything else generated (a
negative case that is not an array) goes out as its JSON text, or as is when it is a string.
"""
import json

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, list):
        return "".join(json.dumps(item) + "\n" for item in value).encode()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value).encode()
