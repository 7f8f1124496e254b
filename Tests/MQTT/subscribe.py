#!/usr/bin/env python3
"""Subscribes to an MQTT broker with paho-mqtt and counts (and with --collect, keeps) the messages
that arrive until --count have, or --timeout seconds pass, or --idle seconds pass without one
(after the first); then prints one line of JSON: how many arrived, per topic, the rate from the
first message to the last, and with --collect the messages themselves.

For the MQTT bridge's process tests and `shoal bench mqtt`'s reference subscriber.
--ready-file is created once the broker has acknowledged the subscriptions, so a caller can start
publishing then. --no-clean with --client-id keeps a persistent session (QoS 1 messages queued by
the broker while the script is away arrive when it is back).
Exits 0 when --count messages arrived (or, without --count, at the timeout or idle end), 1 when
fewer than --count did, 2 on bad arguments or when no subscription was made.
"""
import argparse
import base64
import json
import sys
import threading
import time

import paho.mqtt.client as mqtt


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--topic", action="append", required=True, help="topic filter (repeatable)")
    p.add_argument("--qos", type=int, default=1, choices=[0, 1])
    p.add_argument("--count", type=int, default=0, help="stop after this many messages (0: no limit)")
    p.add_argument("--distinct", action="store_true",
                   help="--count counts distinct topics (at-least-once delivery sends some twice)")
    p.add_argument("--timeout", type=float, default=60, help="seconds in all")
    p.add_argument("--idle", type=float, default=0, help="stop this many seconds after the last message (0: never)")
    p.add_argument("--collect", action="store_true", help="include the messages in the output")
    p.add_argument("--client-id")
    p.add_argument("--no-clean", action="store_true", help="persistent session (needs --client-id)")
    p.add_argument("--protocol", default="3.1.1", choices=["3.1.1", "5"])
    p.add_argument("--cafile")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--insecure", action="store_true")
    p.add_argument("--ready-file", help="created when the subscriptions are acknowledged")
    args = p.parse_args()
    if args.no_clean and not args.client_id:
        p.error("--no-clean needs --client-id")

    protocol = mqtt.MQTTv5 if args.protocol == "5" else mqtt.MQTTv311
    kwargs = dict(callback_api_version=mqtt.CallbackAPIVersion.VERSION2, client_id=args.client_id or "", protocol=protocol)
    if protocol == mqtt.MQTTv311:
        kwargs["clean_session"] = not args.no_clean
    client = mqtt.Client(**kwargs)
    if args.cafile or args.cert:
        client.tls_set(ca_certs=args.cafile, certfile=args.cert, keyfile=args.key)
        if args.insecure:
            client.tls_insecure_set(True)
    client.reconnect_delay_set(min_delay=1, max_delay=2)

    lock = threading.Lock()
    done = threading.Event()
    subscribed = threading.Event()
    state = {"received": 0, "first": None, "last": None, "topics": {}, "messages": [], "duplicates": 0}

    def on_connect(c, userdata, flags, reason, properties):
        if not reason.is_failure:
            c.subscribe([(t, args.qos) for t in args.topic])

    def on_subscribe(c, userdata, mid, reasons, properties):
        if all(not r.is_failure for r in reasons):
            if args.ready_file and not subscribed.is_set():
                open(args.ready_file, "w").close()
            subscribed.set()

    def on_message(c, userdata, msg):
        now = time.monotonic()
        with lock:
            state["received"] += 1
            state["first"] = state["first"] or now
            state["last"] = now
            state["topics"][msg.topic] = state["topics"].get(msg.topic, 0) + 1
            if msg.dup:
                state["duplicates"] += 1
            if args.collect:
                m = {"topic": msg.topic, "retain": bool(msg.retain), "qos": msg.qos}
                try:
                    m["payload"] = msg.payload.decode("utf-8")
                except UnicodeDecodeError:
                    m["payloadBase64"] = base64.b64encode(msg.payload).decode("ascii")
                state["messages"].append(m)
            reached = len(state["topics"]) if args.distinct else state["received"]
            if args.count and reached >= args.count:
                done.set()

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    started = time.monotonic()
    try:
        client.connect(args.host, args.port, keepalive=30)
    except OSError as e:
        print(json.dumps({"error": f"cannot connect to {args.host}:{args.port}: {e}"}))
        return 2
    client.loop_start()
    if not subscribed.wait(timeout=min(20, args.timeout)):
        client.loop_stop()
        print(json.dumps({"error": f"no SUBACK from {args.host}:{args.port} within 20 s"}))
        return 2
    deadline = started + args.timeout
    while not done.is_set() and time.monotonic() < deadline:
        with lock:
            last = state["last"]
        if args.idle and last is not None and time.monotonic() - last > args.idle:
            break
        done.wait(0.05)
    client.disconnect()
    client.loop_stop()
    with lock:
        span = (state["last"] - state["first"]) if state["first"] is not None else 0
        result = {
            "received": state["received"],
            "duplicates": state["duplicates"],
            "seconds": round(span, 3),
            "messagesPerSecond": round(state["received"] / span, 1) if span > 0 else 0,
            "topics": state["topics"],
        }
        if args.collect:
            result["messages"] = state["messages"]
    print(json.dumps(result))
    reached = len(result["topics"]) if args.distinct else result["received"]
    return 1 if args.count and reached < args.count else 0


if __name__ == "__main__":
    sys.exit(main())
