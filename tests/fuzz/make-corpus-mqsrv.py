#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_mqsrv under tests/fuzz/corpus/fuzz_mqsrv/ (idempotent).

Each seed is a script for the target (see the comment at the top of fuzz_mqsrv.c): byte 0
picks the engine, then ops. The frames are the shapes tests/unit/mqsrv sends: connect,
keepalive, add_topic, produce (one message and batches, keyed), consume, commit, offset, topics,
watch and unwatch, bad frames, and HTTP API requests. The generated files are committed; rerun
this after editing it.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "fuzz_mqsrv")


def frame(mtype, msg_id, body):
    b = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    return struct.pack(">IHBBBHB", 12 + len(b), 12, 1, mtype, 0, msg_id, 0) + b


def feed(conn, data):
    out = b""
    while data:
        chunk, data = data[:4000], data[4000:]
        if len(chunk) <= 256:
            out += bytes([0x00 | conn, len(chunk) - 1]) + chunk
        else:
            out += bytes([0x10 | conn]) + struct.pack(">H", len(chunk)) + chunk
    return out


def complete(outcome=0):
    return bytes([0x20, outcome])


def complete_all(outcome=0):
    return bytes([0x30, outcome])


DRAIN = bytes([0x40])


def tick(steps):
    return bytes([0x50, steps])


def retention(days):
    return bytes([0x60, days])


def online(topic, on):
    return bytes([0x70, topic | (4 if on else 0)])


def close(conn):
    return bytes([0x80 | conn])


def stall(conn):
    return bytes([0x90 | conn])


def refuse(mode):
    return bytes([0xA0, mode])


def cluster(fence, master, shard=0):
    return bytes([0xB0, (1 if fence else 0) | (2 if master else 0) | shard << 2])


def connect(conn, module, token="", ctype=1, askid=1):
    return feed(conn, frame(1, 1, {"askid": askid, "module_id": module, "token": token,
                                   "client_type": ctype}))


def req(conn, mtype, msg_id, **fields):
    return feed(conn, frame(mtype, msg_id, dict({"askid": msg_id}, **fields)))


def http(method, path, auth=None, body=None, close_after=False):
    head = "%s %s HTTP/1.1\r\n" % (method, path)
    if auth:
        head += "Authorization: Bearer %s\r\n" % auth
    b = json.dumps(body, separators=(",", ":")).encode() if body is not None else b""
    if body is not None:
        head += "Content-Length: %d\r\n" % len(b)
    if close_after:
        head += "Connection: close\r\n"
    return feed(2, (head + "\r\n").encode() + b)


def seeds():
    s = {}
    s["session"] = (bytes([0]) + connect(0, 1) + req(0, 3, 2) + req(0, 5, 3, topic="fresh")
                    + complete(0) + DRAIN
                    + req(0, 11, 4, topic="orders", content="hello")
                    + req(0, 11, 5, topic="orders", producer_id=7, seq=1,
                          messages=[{"content": "a"}, {"content": {"k": [1, 2]}}, {"content": "c"}])
                    + complete(0x10) + complete(0x28) + DRAIN
                    + req(0, 13, 6, topic="orders", offset=0, max_count=5) + complete(0x30) + DRAIN
                    + req(0, 15, 7, topic="orders", offset=3) + complete(0) + DRAIN
                    + req(0, 21, 8, topic="orders") + complete(2) + DRAIN
                    + req(0, 21, 9, topic="orders") + complete(0x40) + DRAIN
                    + req(0, 23, 10))
    s["watch_push"] = (bytes([0]) + connect(0, 1) + connect(1, 2, ctype=2)
                       + req(1, 7, 2, topic="orders") + req(1, 7, 3, topic="Paused")
                       + req(0, 11, 4, topic="orders", messages=[{"content": "x%d" % i}
                                                                 for i in range(4)])
                       + req(0, 11, 5, topic="ORDERS", content="y")
                       + complete(0) + complete(0) + DRAIN
                       + req(0, 11, 6, topic="orders", content="again") + complete(8) + DRAIN
                       + req(1, 9, 7, topic="orders") + req(0, 11, 8, topic="orders", content="z")
                       + complete(0) + DRAIN + close(1)
                       + req(0, 11, 9, topic="orders", content="w") + complete(0) + DRAIN)
    s["perms"] = (bytes([1]) + req(0, 23, 1) + connect(0, 3, "wrong") + connect(0, 2, "b")
                  + req(0, 11, 2, topic="orders", content="x") + req(0, 13, 3, topic="Paused", offset=0)
                  + req(0, 5, 4, topic="keep") + req(0, 5, 5, topic="newone")
                  + req(0, 15, 6, topic="orders", offset=1, client_id=99)
                  + req(0, 23, 7) + connect(1, 1, "a") + req(1, 5, 2, topic="newone")
                  + complete(3) + DRAIN + req(1, 23, 3) + connect(1, 3, "c")
                  + req(1, 11, 4, topic="orders", content="ok") + complete(1) + DRAIN)
    s["bad_frames"] = (bytes([0]) + feed(0, frame(11, 1, b"{bad"))
                       + feed(0, frame(17, 2, {"askid": 5}))
                       + feed(0, frame(12, 3, {"askid": 5, "err_code": 0}))
                       + feed(0, frame(11, 4, {"askid": 6, "topic": "a-b", "content": "x"}))
                       + feed(0, frame(11, 5, {"askid": 7, "topic": "orders"}))
                       + connect(1, 1) + feed(1, frame(3, 6, {"askid": 1})[:7])
                       + feed(1, frame(3, 6, {"askid": 1})[7:])
                       + feed(0, b"\x00\x00\x00\x0e\x00\x0c\x02\x03\x00\x00\x01\x00{}"))
    s["http"] = (bytes([0]) + http("GET", "/v1/health")
                 + http("POST", "/v1/topics/orders/messages", "1:a",
                        {"messages": [{"content": "a", "producer_id": 5, "seq": 1},
                                      {"content": {"k": 1}}]})
                 + complete(0) + DRAIN
                 + http("GET", "/v1/topics/orders/messages?offset=3&max=2", "1:a")
                 + complete(0x20) + DRAIN
                 + http("POST", "/v1/topics/orders/consumers/c1/offset", "1:a", {"offset": 4})
                 + complete(0) + DRAIN
                 + http("GET", "/v1/topics/orders/consumers/c1/offset", "1:a") + complete(2) + DRAIN
                 + http("POST", "/v1/topics", "1:a", {"topic": "made", "retention_days": 3})
                 + complete(0) + DRAIN
                 + http("POST", "/v1/topics/made/offline", "1:a") + complete(0) + DRAIN
                 + http("GET", "/v1/topics", "1:a")
                 + http("GET", "/v1/topics/or'ders/messages")
                 + http("GET", "/v1/nothing", close_after=True))
    s["http_perms"] = (bytes([1]) + http("GET", "/v1/topics")
                       + http("POST", "/v1/topics", "3:c", {"topic": "x"})
                       + http("POST", "/v1/topics/orders/messages", "2:b", {"content": "x"})
                       + http("GET", "/v1/topics/Paused/messages", "2:b")
                       + http("POST", "/v1/topics/orders/messages", "3:c", {"content": "ok"})
                       + complete(1) + DRAIN
                       + feed(2, b"POST /v1/topics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"))
    big = "x" * 240
    s["slow"] = (bytes([2]) + connect(0, 1) + connect(1, 2, ctype=2) + req(1, 7, 2, topic="orders")
                 + stall(1)
                 + b"".join(req(0, 11, 10 + k, topic="orders", messages=[{"content": big}] * 12)
                            + complete(0) for k in range(2))
                 + DRAIN + stall(0) + b"".join(req(0, 3, 20 + k) for k in range(30))
                 + tick(5) + tick(5) + tick(10) + connect(0, 1)
                 + b"".join(req(0, 13, 30 + k, topic="orders", offset=0) + complete(0xf0)
                            for k in range(3))
                 + DRAIN + tick(20))
    s["store_side"] = (bytes([0]) + connect(0, 1) + retention(1) + complete(0x08) + DRAIN
                       + complete_all(0) + DRAIN + online(0, False) + complete(0) + DRAIN
                       + req(0, 11, 2, topic="orders", content="offline?") + online(0, True)
                       + complete(1) + DRAIN + refuse(1) + req(0, 11, 3, topic="orders", content="b")
                       + refuse(2) + req(0, 13, 4, topic="orders", offset=0)
                       + refuse(3) + req(0, 5, 5, topic="another") + refuse(0)
                       + req(0, 13, 6, topic="orders", offset=0) + complete(0x18) + DRAIN
                       + req(0, 13, 7, topic="orders", offset=0) + close(0) + complete(0x30) + DRAIN)
    # completions for connections the edge closed: nothing may reach them
    s["close_in_flight"] = (bytes([0]) + connect(0, 1)
                            + req(0, 11, 2, topic="orders", content="gone")
                            + req(0, 13, 3, topic="orders", offset=0) + req(0, 5, 4, topic="later")
                            + http("POST", "/v1/topics/orders/messages", "1:a", {"content": "h"})
                            + close(0) + close(2) + complete_all(0x10) + DRAIN
                            + req(0, 3, 5) + req(0, 23, 6))
    # bit 2: the connections go away with requests in flight, the engine frees with its inbox
    s["inbox_at_free"] = (bytes([4]) + connect(0, 1) + req(0, 11, 2, topic="orders", content="a")
                          + req(0, 13, 3, topic="orders", offset=0) + complete(0)
                          + http("GET", "/v1/topics/orders/messages", "1:a"))
    # the cluster: a fence that closes between a produce's submission and its commit, a slave
    # whose watcher is fed by polls and topic refreshes, and the handover back to master
    s["cluster"] = (bytes([0]) + connect(0, 1) + connect(1, 2, ctype=2)
                    + req(1, 7, 2, topic="orders")
                    + req(0, 11, 3, topic="orders", producer_id=3, seq=1, content="a")
                    + cluster(False, True, 1) + complete(0) + DRAIN
                    + req(0, 11, 4, topic="orders", content="b") + req(0, 15, 5, topic="orders",
                                                                       offset=1)
                    + req(0, 5, 6, topic="brand_new") + req(0, 3, 7)
                    + cluster(False, False, 1) + DRAIN + tick(2) + complete(0x20)
                    + complete(0x18) + complete(0x10) + DRAIN + tick(10) + complete_all(0x38)
                    + DRAIN + http("POST", "/v1/topics/orders/messages", "1:a", {"content": "h"})
                    + cluster(True, True, 2) + DRAIN
                    + req(0, 11, 8, topic="orders", content="c") + complete_all(0x10) + DRAIN
                    + req(0, 11, 9, topic="orders", content="d") + complete(0) + DRAIN
                    + req(0, 3, 10))
    return s


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
