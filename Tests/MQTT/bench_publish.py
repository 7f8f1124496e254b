#!/usr/bin/env python3
"""`shoal bench mqtt`'s publisher: COUNT messages at QoS 1 (paho-mqtt 2.x), as fast as the broker
takes them with at most 100 in flight, each on its own topic (TOPIC with {i} replaced by the
message's number), a small JSON sensor reading as payload. Prints one JSON line:

  {"count": N, "acknowledged": N, "firstPublishNs": T0, "lastAckNs": T1, "seconds": S, "rate": R,
   "cpuSeconds": C}

Times are CLOCK_MONOTONIC nanoseconds, the clock the bench reads on its side, so it can time
from the first publish to the moment the last message arrived elsewhere. The connection is made
(CONNACK received) before T0. Exit status 2 when paho is missing, 1 when the broker is unreachable
or does not acknowledge everything within --timeout seconds. C is the CPU time (user + system)
the publisher spent from T0 to T1.
"""
import argparse
import json
import sys
import threading  # Event only: one thread does everything
import time

try:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion
except ImportError as error:  # the bench says so and skips the figure
    print(json.dumps({"error": f"paho-mqtt 2.x is not installed ({error}): pip install paho-mqtt"}))
    sys.exit(2)


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, default=50_000)
    p.add_argument("--first", type=int, default=0, help="number of the first message")
    p.add_argument("--topic", default="bench/{i}/state")
    p.add_argument("--qos", type=int, default=1, choices=[0, 1])
    p.add_argument("--client-id", default="shoal-bench-publisher")
    p.add_argument("--timeout", type=float, default=300)
    a = p.parse_args()

    connected = threading.Event()
    done = threading.Event()
    state = {"acked": 0, "last": 0, "refused": None}

    def on_connect(client, userdata, flags, reason, properties):
        if reason.is_failure:
            state["refused"] = str(reason)
        connected.set()

    def on_publish(client, userdata, mid, reason, properties):
        state["acked"] += 1
        if state["acked"] >= a.count:
            state["last"] = now_ns()
            done.set()

    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=a.client_id, clean_session=True)
    c.max_inflight_messages_set(100)
    c.on_connect = on_connect
    c.on_publish = on_publish
    try:
        c.connect(a.host, a.port, keepalive=60)
    except OSError as error:
        print(json.dumps({"error": f"cannot connect to {a.host}:{a.port}: {error}"}))
        return 1
    # One thread: publish() writes at once when there is room in the window (paho's background
    # thread would be woken through a socket pair for every message, and contend for the GIL).
    deadline = time.monotonic() + 10
    while not connected.is_set() and time.monotonic() < deadline:
        c.loop(timeout=0.1)
    if not connected.is_set() or state["refused"]:
        print(json.dumps({"error": f"no CONNACK from {a.host}:{a.port} ({state['refused'] or 'timeout'})"}))
        return 1

    # Payloads made before the clock starts: the figure is the broker's and the receiver's.
    messages = [(a.topic.replace("{i}", str(n)), f'{{"seq":{n},"celsius":{20 + n % 50 / 10},"sensor":"t{n % 97}"}}')
                for n in range(a.first, a.first + a.count)]
    first = now_ns()
    cpu = time.process_time()
    deadline = time.monotonic() + a.timeout
    sent = 0
    while not done.is_set() and time.monotonic() < deadline:
        # Keep the window full (100 unacknowledged, as max_inflight_messages_set says): nothing
        # waits in paho's queue, every publish() goes out at once.
        while sent < len(messages) and sent - state["acked"] < 100:
            topic, payload = messages[sent]
            c.publish(topic, payload, qos=a.qos)
            sent += 1
        if c.loop(timeout=1.0) != mqtt.MQTT_ERR_SUCCESS:
            break
    finished = done.is_set()
    cpu = time.process_time() - cpu
    c.disconnect()
    last = state["last"] or now_ns()
    seconds = (last - first) / 1e9
    print(json.dumps({"count": a.count, "acknowledged": state["acked"], "firstPublishNs": first, "lastAckNs": last,
                      "seconds": seconds, "rate": state["acked"] / seconds if seconds > 0 else 0, "cpuSeconds": cpu}))
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(main())
