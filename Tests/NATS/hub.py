#!/usr/bin/env python3
"""Reads and writes a NATS JetStream hub the way the Shoal uplink's tests need (nats-py).

The uplink's contract (issue 22): one stream per collection, `SHOAL_<G>_<tok(collection)>`, with
subjects `shoal.<G>.<tok(collection)>.*`, one message per document version, headers
`Shoal-Version`, `Shoal-Origin`, `Shoal-HLC`, `Shoal-Deleted`. This script is the tests' view of the
hub: what the gateways wrote (`dump`), messages no gateway wrote (`put`: foreign or bad ones), the
streams there are (`streams`), a stream made ahead of a gateway (`create`), one stream's state and
cluster (`info`), and `gateway-check`: every JetStream call a gateway makes, as a gateway's user,
to prove a permission list.

Commands (each prints JSON lines on standard output; errors as {"error": ..., "code": ...}):

    dump STREAM                 one line per message, in stream order (STREAM.MSG.GET, no consumer):
                                {"subject", "seq", "headers": {..}, "payload": text}
                                (a payload that is not UTF-8: "payloadBase64" instead)
    put SUBJECT [--header K=V ...] [--payload TEXT | --payload-hex HEX] [--expect-seq N]
                                a JetStream publish (with Nats-Expected-Last-Subject-Sequence N);
                                prints {"stream", "seq"}; exit 1 when refused (a wrong sequence:
                                "code": 10071)
    streams                     one line per stream: {"name", "lastSeq", "messages", "subjects",
                                "replicas"}
    create STREAM --subjects S [--subjects S2] [--replicas N] [--max-msgs-per-subject N]
                                file storage; prints the stream's info line
    info STREAM                 {"name", "lastSeq", "messages", "replicas", "leader", "cluster"}
    gateway-check --group G --collection TOK [--replicas N]
                                as a gateway would: stream info (404 is fine), create, publish with
                                compare-and-set, last message by subject (STREAM.MSG.GET and
                                DIRECT.GET), an ordered consumer with flow control and heartbeats
                                from sequence 1; then what must be refused (another group's
                                subject and stream). One line: {"ok": bool, "steps": {name: "ok" |
                                error text}}

Connection options (before the command): --server URL (repeatable; default nats://127.0.0.1:4222),
--user/--password, --ca/--cert/--key (TLS: the server's CA; a client certificate), --timeout S,
--domain D (JetStream domain D's API, $JS.D.API: a hub's JetStream through a leaf node).
Exit status: 0 done, 1 refused or failed (the JSON line says why), 2 bad arguments / no connection.
"""
import argparse
import asyncio
import base64
import json
import ssl
import sys

import nats
from nats.errors import Error as NATSError
from nats.js import api
from nats.js.errors import APIError, NotFoundError


def out(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


def text_or_b64(data):
    data = data or b""
    try:
        return {"payload": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"payloadBase64": base64.b64encode(data).decode()}


def describe(e):
    if isinstance(e, APIError):
        return {"error": e.description or str(e), "code": e.err_code, "status": e.code}
    return {"error": f"{type(e).__name__}: {e}" if str(e) else type(e).__name__}


async def connect(a, errors):
    opts = {"servers": a.server or ["nats://127.0.0.1:4222"], "connect_timeout": a.timeout,
            "allow_reconnect": False, "max_reconnect_attempts": 0}

    async def on_error(e):
        errors.append(str(e))
    opts["error_cb"] = on_error
    if a.user:
        opts["user"], opts["password"] = a.user, a.password or ""
    if a.ca or a.cert:
        ctx = ssl.create_default_context(cafile=a.ca) if a.ca else ssl.create_default_context()
        if a.cert:
            ctx.load_cert_chain(a.cert, a.key)
        opts["tls"] = ctx
        opts["tls_hostname"] = a.tls_hostname
    return await nats.connect(**opts)


async def dump(js, jsm, a):
    # Message by message with STREAM.MSG.GET {seq, next_by_subj} rather than a consumer: it works
    # for any stream name (nats-server 2.9.10 garbles a push consumer's reply subjects when the
    # stream's name holds a '%', see gateway-check), and it takes no consumer state on the hub.
    info = await jsm.stream_info(a.stream)
    seq = info.state.first_seq
    while info.state.messages and seq <= info.state.last_seq:
        try:
            msg = await jsm.get_msg(a.stream, seq=seq, subject=">", next=True)
        except NotFoundError:
            break
        line = {"subject": msg.subject, "seq": msg.seq, "headers": dict(msg.headers or {})}
        line.update(text_or_b64(msg.data))
        out(line)
        seq = msg.seq + 1
    return 0


async def put(js, jsm, a):
    headers = {}
    for h in a.header or []:
        k, sep, v = h.partition("=")
        if not sep:
            raise SystemExit(f"--header {h!r}: give K=V")
        headers[k] = v
    if a.expect_seq is not None:
        headers["Nats-Expected-Last-Subject-Sequence"] = str(a.expect_seq)
    payload = bytes.fromhex(a.payload_hex) if a.payload_hex is not None else (a.payload or "").encode()
    ack = await js.publish(a.subject, payload, headers=headers or None, timeout=a.timeout)
    out({"stream": ack.stream, "seq": ack.seq})
    return 0


def stream_line(info):
    c = info.cluster
    return {"name": info.config.name, "lastSeq": info.state.last_seq, "firstSeq": info.state.first_seq,
            "messages": info.state.messages, "subjects": info.config.subjects, "replicas": info.config.num_replicas,
            "maxMsgsPerSubject": info.config.max_msgs_per_subject,
            "leader": c.leader if c else None, "cluster": c.name if c else None,
            "followers": [{"name": r.name, "current": r.current} for r in (c.replicas or [])] if c else []}


async def streams(js, jsm, a):
    for info in await jsm.streams_info():
        out(stream_line(info))
    return 0


async def create(js, jsm, a):
    # A cluster that has just elected its meta leader can take longer than the request timeout to
    # place a replicated stream's first raft group (seen once: an R3 create timed out 0.5 s after
    # the cluster was healthy). Creating the same stream again is idempotent (the server answers
    # with the stream as it is), so a timed-out create is asked again, three times at most.
    for attempt in range(3):
        try:
            info = await jsm.add_stream(name=a.stream, subjects=a.subjects, num_replicas=a.replicas,
                                        max_msgs_per_subject=a.max_msgs_per_subject, storage=api.StorageType.FILE)
            break
        except (asyncio.TimeoutError, TimeoutError, nats.errors.TimeoutError):
            if attempt == 2:
                raise
            print(f"create {a.stream}: no answer in time, asking again", file=sys.stderr)
    out(stream_line(info))
    return 0


async def info(js, jsm, a):
    out(stream_line(await jsm.stream_info(a.stream)))
    return 0


async def gateway_check(js, jsm, a, nc, errors):
    g, c = a.group, a.collection
    stream, subject = f"SHOAL_{g}_{c}", f"shoal.{g}.{c}.doc-1"
    steps, ok = {}, True

    async def step(name, coro, must_fail=False):
        nonlocal ok
        try:
            r = await coro
            steps[name] = "ok" if not must_fail else "NOT REFUSED"
            ok = ok and not must_fail
            return r
        except Exception as e:  # every failure is the step's result
            d = describe(e)
            steps[name] = ("refused: " if must_fail else "") + d["error"]
            ok = ok and must_fail
            return None

    async def stream_info_or_404():
        try:
            return await jsm.stream_info(stream)
        except NotFoundError:
            return None
    await step("STREAM.INFO", stream_info_or_404())
    await step("STREAM.CREATE", jsm.add_stream(name=stream, subjects=[f"shoal.{g}.{c}.*"], num_replicas=a.replicas,
                                                 max_msgs_per_subject=1, storage=api.StorageType.FILE))
    await step("STREAM.INFO (exists)", jsm.stream_info(stream))
    body = b'{"t":21.5}'
    hdr = {"Shoal-Version": "00", "Shoal-Origin": "gateway-check", "Shoal-HLC": "0"}
    first = await step("publish (expected last subject seq 0)",
                       js.publish(subject, body, headers={**hdr, "Nats-Expected-Last-Subject-Sequence": "0"}, timeout=a.timeout))
    seq = first.seq if first else 0
    await step("publish (compare-and-set on seq)",
               js.publish(subject, body, headers={**hdr, "Nats-Expected-Last-Subject-Sequence": str(seq)}, timeout=a.timeout))

    async def stale_refused():
        try:
            await js.publish(subject, body, headers={**hdr, "Nats-Expected-Last-Subject-Sequence": str(seq)}, timeout=a.timeout)
        except APIError as e:
            if e.err_code == 10071:
                return
            raise
        raise RuntimeError("a stale compare-and-set was accepted")
    await step("publish (stale compare-and-set refused with 10071)", stale_refused())
    for n in range(2, 40):  # enough for the ordered consumer to see several messages
        await step("publish (more documents)", js.publish(f"shoal.{g}.{c}.doc-{n}", b"x" * a.doc_bytes, headers=hdr, timeout=a.timeout))
    await step("STREAM.MSG.GET (last by subject)", jsm.get_last_msg(stream, subject))
    created = await step("STREAM.INFO (allow_direct?)", jsm.stream_info(stream))
    if created and created.config.allow_direct:
        await step("DIRECT.GET (last by subject)", jsm.get_last_msg(stream, subject, direct=True))
    else:
        steps["DIRECT.GET (last by subject)"] = "skipped: the stream has no allow_direct"

    async def ordered():
        config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=1)
        sub = await js.subscribe(f"shoal.{g}.{c}.*", stream=stream, ordered_consumer=True, idle_heartbeat=1.0, flow_control=True,
                                 config=config)
        got, consumer = 0, None
        try:
            while True:
                msg = await sub.next_msg(timeout=a.timeout)
                got += 1
                consumer = msg.metadata.consumer
                if msg.metadata.num_pending == 0:
                    break
                await asyncio.sleep(0.02)  # a slow reader: the server asks for flow control
        finally:
            await sub.unsubscribe()
        if got < 39:
            raise RuntimeError(f"the ordered consumer gave {got} messages, not 39")
        return consumer
    before = len(errors)
    consumer = await step("ordered consumer (CONSUMER.CREATE, heartbeats, flow control)", ordered())
    if consumer:  # libnats deletes the ordered consumer it made when the subscription ends
        await step("CONSUMER.DELETE (its own ordered consumer)", jsm.delete_consumer(stream, consumer))
    await asyncio.sleep(0.3)
    if len(errors) > before:  # a refused flow-control reply arrives as the server's -ERR
        steps["ordered consumer (CONSUMER.CREATE, heartbeats, flow control)"] = "server error: " + "; ".join(errors[before:])
        ok = False

    # What a gateway of group G must not do. A publish with no reply is refused asynchronously
    # (the server's -ERR): a JetStream publish times out or reports the violation.
    other = "FFFFFFFFFFFF" if g != "FFFFFFFFFFFF" else "EEEEEEEEEEEE"
    await step("publish to another group (refused)", js.publish(f"shoal.{other}.{c}.x", body, timeout=2), must_fail=True)
    await step("STREAM.INFO of another group's stream (refused)", jsm.stream_info(f"SHOAL_{other}_{c}"), must_fail=True)
    await step("STREAM.DELETE of its own stream (refused)", jsm.delete_stream(stream), must_fail=True)
    out({"ok": ok, "stream": stream, "steps": steps, "serverErrors": errors})
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", action="append")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--tls-hostname")
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("--domain", help="a JetStream domain ($JS.<domain>.API: the hub's, through a leaf node)")
    p.add_argument("--debug", action="store_true", help="a traceback on standard error for a failure")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("dump")
    s.add_argument("stream")
    s = sub.add_parser("put")
    s.add_argument("subject")
    s.add_argument("--header", action="append")
    s.add_argument("--payload")
    s.add_argument("--payload-hex")
    s.add_argument("--expect-seq", type=int)
    sub.add_parser("streams")
    s = sub.add_parser("create")
    s.add_argument("stream")
    s.add_argument("--subjects", action="append", required=True)
    s.add_argument("--replicas", type=int, default=1)
    s.add_argument("--max-msgs-per-subject", type=int, default=1)
    s = sub.add_parser("info")
    s.add_argument("stream")
    s = sub.add_parser("gateway-check")
    s.add_argument("--group", required=True)
    s.add_argument("--collection", required=True)
    s.add_argument("--replicas", type=int, default=1)
    s.add_argument("--doc-bytes", type=int, default=300000, help="the size of 38 more documents (flow control needs a backlog)")
    a = p.parse_args()

    async def run():
        errors = []
        try:
            # nats-py keeps trying an unreachable address (ENETUNREACH) past connect_timeout: a
            # deadline of our own.
            nc = await asyncio.wait_for(connect(a, errors), a.timeout + 1)
        except (Exception, asyncio.TimeoutError) as e:
            out({**describe(e), "connected": False, "serverErrors": errors})
            return 2
        js, jsm = nc.jetstream(timeout=a.timeout, domain=a.domain), (nc.jsm(prefix=f"$JS.{a.domain}.API") if a.domain else nc.jsm())
        try:
            if a.command == "gateway-check":
                return await gateway_check(js, jsm, a, nc, errors)
            return await {"dump": dump, "put": put, "streams": streams, "create": create, "info": info}[a.command](js, jsm, a)
        except Exception as e:
            if a.debug:
                import traceback
                traceback.print_exc()
            out({**describe(e), "serverErrors": errors})
            return 1
        finally:
            try:
                await nc.close()
            except NATSError:
                pass
    sys.exit(asyncio.run(run()))


if __name__ == "__main__":
    main()
