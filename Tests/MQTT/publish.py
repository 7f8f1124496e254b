#!/usr/bin/env python3
"""Publishes N messages to an MQTT broker with paho-mqtt, at full speed or at a given rate, and
prints one line of JSON when done: how many were published and acknowledged, and the rate.

For the MQTT bridge's process tests and `shoal bench mqtt`'s publisher. Topics and payloads are
templates; in both, these placeholders are replaced per message:

    {i}       the message's sequence number (--start, --start+1, ...)
    {i%K}     the sequence number modulo K (spreads messages over K topics or devices)
    {ts}      the wall clock in milliseconds when the message is made
    {pad:N}   N bytes of 'x' (an oversized payload)

Example: publish.py --port 20001 --count 10000 --topic 'sensors/s1/dev{i%10}/state'
         --payload '{"seq":{i},"t":21.5}'

--payload-hex gives raw bytes instead (invalid UTF-8, say); --payload-file reads them from a file.
QoS 1 messages the broker has not acknowledged when the connection drops are sent again when paho
reconnects (a persistent session: --client-id with --no-clean), so the script rides out a broker
restart; --acked-file gets the sequence numbers the broker acknowledged, one per line.
Exits 0 when every message was acknowledged (QoS 1) or sent (QoS 0) before --timeout, 1 if not
(the JSON line says how many), 2 on bad arguments or when no connection was made.
"""
import argparse
import json
import re
import sys
import threading
import time

import paho.mqtt.client as mqtt

PLACEHOLDER = re.compile(r"\{(i(?:%(\d+))?|ts|pad:(\d+))\}")


def expand(template, i):
    def one(m):
        if m.group(1) == "i":
            return str(i)
        if m.group(2) is not None:
            return str(i % int(m.group(2)))
        if m.group(1) == "ts":
            return str(int(time.time() * 1000))
        return "x" * int(m.group(3))
    return PLACEHOLDER.sub(one, template)


def acknowledged_info(info):
    """True once the broker acknowledged the message (QoS 1) or it was sent (QoS 0). Not
    info.is_published(): that raises for a message published while the connection was down
    (rc MQTT_ERR_NO_CONN) even after paho sent it on the reconnect and it was acknowledged. The
    attribute is paho's own (2.1.0, pinned in requirements.txt)."""
    with info._condition:
        return info._published


def make_client(args):
    protocol = mqtt.MQTTv5 if args.protocol == "5" else mqtt.MQTTv311
    kwargs = dict(callback_api_version=mqtt.CallbackAPIVersion.VERSION2, client_id=args.client_id or "", protocol=protocol)
    if protocol == mqtt.MQTTv311:
        kwargs["clean_session"] = not args.no_clean
    client = mqtt.Client(**kwargs)
    if args.cafile or args.cert:
        client.tls_set(ca_certs=args.cafile, certfile=args.cert, keyfile=args.key)
        if args.insecure:
            client.tls_insecure_set(True)
    client.max_inflight_messages_set(args.inflight)
    client.max_queued_messages_set(0)  # unlimited: the script's own queue, not the broker's
    client.reconnect_delay_set(min_delay=1, max_delay=2)
    return client


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--topic", required=True, help="topic template")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--start", type=int, default=0, help="first sequence number")
    p.add_argument("--payload", default='{"seq":{i}}', help="payload template (UTF-8)")
    p.add_argument("--payload-hex", help="the same raw bytes for every message, in hex")
    p.add_argument("--payload-file", help="the same raw bytes for every message, from a file")
    p.add_argument("--qos", type=int, default=1, choices=[0, 1])
    p.add_argument("--retain", action="store_true")
    p.add_argument("--rate", type=float, default=0, help="messages per second (0: full speed)")
    p.add_argument("--inflight", type=int, default=100, help="QoS 1 messages unacknowledged at once")
    p.add_argument("--outstanding", type=int, default=20000,
                   help="messages handed to paho and not yet acknowledged, at most (paho keys them by "
                        "message id, which wraps at 65,535: more would overwrite each other)")
    p.add_argument("--client-id")
    p.add_argument("--no-clean", action="store_true", help="persistent session (needs --client-id)")
    p.add_argument("--protocol", default="3.1.1", choices=["3.1.1", "5"])
    p.add_argument("--cafile")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--insecure", action="store_true", help="do not check the broker's host name")
    p.add_argument("--timeout", type=float, default=120, help="seconds for the whole run")
    p.add_argument("--acked-file", help="write the acknowledged sequence numbers here, one a line")
    args = p.parse_args()
    if args.no_clean and not args.client_id:
        p.error("--no-clean needs --client-id")

    client = make_client(args)
    sent = []  # (sequence number, paho's MQTTMessageInfo): is_published() once acknowledged
    acknowledged = [0]  # on_publish calls (paho's thread only adds)
    connected = threading.Event()
    connects = [0]

    def on_connect(c, userdata, flags, reason, properties):
        if not reason.is_failure:
            connects[0] += 1
            connected.set()

    # paho calls on_publish holding its own lock; taking another lock here that publish() is
    # called under would deadlock, so this only counts (message ids wrap at 65,535: the infos,
    # not the ids, say which message was acknowledged).
    def on_publish(c, userdata, mid, reason, properties):
        acknowledged[0] += 1

    client.on_connect = on_connect
    client.on_publish = on_publish
    deadline = time.monotonic() + args.timeout
    try:
        client.connect(args.host, args.port, keepalive=30)
    except OSError as e:
        print(json.dumps({"error": f"cannot connect to {args.host}:{args.port}: {e}"}))
        return 2
    client.loop_start()
    if not connected.wait(timeout=min(20, args.timeout)):
        print(json.dumps({"error": f"no CONNACK from {args.host}:{args.port} within 20 s"}))
        client.loop_stop()
        return 2

    fixed = None
    if args.payload_hex is not None:
        fixed = bytes.fromhex(args.payload_hex)
    elif args.payload_file:
        with open(args.payload_file, "rb") as f:
            fixed = f.read()
    started = time.monotonic()
    for n in range(args.count):
        i = args.start + n
        if args.rate > 0:
            due = started + n / args.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
        payload = fixed if fixed is not None else expand(args.payload, i).encode("utf-8")
        while len(sent) - acknowledged[0] >= args.outstanding and time.monotonic() < deadline:
            time.sleep(0.001)
        sent.append((i, client.publish(expand(args.topic, i), payload, qos=args.qos, retain=args.retain)))
        if time.monotonic() > deadline:
            break
    published = len(sent)
    while time.monotonic() < deadline and acknowledged[0] < published:
        time.sleep(0.005)
    seconds = time.monotonic() - started
    client.disconnect()
    client.loop_stop()
    done = [seq for seq, info in sent if acknowledged_info(info)]
    if args.acked_file:
        with open(args.acked_file, "w") as f:
            f.write("".join(f"{s}\n" for s in done))
    result = {
        "published": published,
        "acknowledged": len(done),
        "seconds": round(seconds, 3),
        "messagesPerSecond": round(len(done) / seconds, 1) if seconds > 0 else 0,
        "connects": connects[0],
    }
    print(json.dumps(result))
    return 0 if len(done) == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
