#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_mgr under tests/fuzz/corpus/fuzz_mgr/ (idempotent).

Each seed is a script for the target (see the comment at the top of fuzz_mgr.c): byte 0 picks
the options, then ops. The frames are the shapes of doc/protocol-mq.md "Management port":
svrconfig, sync_serverinfo with and without ext, command answers, bad frames, and console API
requests. The generated files are committed; rerun this after editing it.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "fuzz_mgr")

DEV, SRVTOK, STORED, SMALL = 1, 2, 4, 8


def frame(mtype, body, msg_id=1):
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


def save(how=0):
    return bytes([0x20, how])


RELOAD = bytes([0x30])


def tick(steps):
    return bytes([0x40, steps])


def close(conn):
    return bytes([0x50 | conn])


def change(k):
    return bytes([0x60, k])


def codec(body):
    b = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    return bytes([0x70, len(b) - 1]) + b


def svrconfig(askid=1, module=7, token="t"):
    return frame(1, {"askid": askid, "module_id": module, "token": token})


def sync(appid, token="srv", shard=0, master=True, ext=True, **more):
    body = {"askid": appid, "group_id": 1, "appid": appid, "token": token,
            "serverinfo": {"threads": 2, "packages": 3, "cpu": 50, "mem": 100, "sockets": 4}}
    if ext:
        e = {"addr": "127.0.0.1:%d" % (5000 + appid % 100), "shard": shard, "master": master,
             "offline": False, "draining": False, "config_version": 1,
             "produced_total": 10 * appid, "consumed_total": 5 * appid,
             "repl": {"replica": not master, "io_running": True, "sql_running": True,
                      "lag_seconds": 0, "lag_transactions": 0, "behind_ms": 40000},
             "topics": [{"name": "orders", "online": True, "last_offset": 9,
                         "produced_total": 10, "consumers": [{"id": "c1", "offset": 3, "lag": 6}]}],
             "relay": {"connections": {"tcp": 1, "ws": 2, "wss": 0, "kcp": 0},
                       "channels": {"GLOBAL": 1, "PRIVATE": 0, "SUBWORLD": 0, "SPATIAL": 0,
                                    "ENTITY": 0},
                       "subscribers": 3, "fanouts_total": 7, "slow_consumer_closes_total": 0}}
        e.update(more)
        body["ext"] = e
    return frame(1, body)


def cmd_resp(askid, cmdid, err=0):
    return frame(4, {"askid": askid, "cmdid": cmdid, "err_code": err})


def http(method, path, body=None, auth="Bearer admin"):
    b = json.dumps(body).encode() if body is not None else b""
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n" % (method, path, auth)
    if body is not None:
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(b)
    return (head + "\r\n").encode() + b


MOD7 = {"token": "t", "produce": ["orders"], "consume": ["*"], "admin": False}
VIP = {"bindings": [{"topic": "vip", "route": "user_id", "msg_type": 201},
                    {"topic": "release", "broadcast": "global", "msg_type": 200}]}

SEEDS = {
    "svrconfig": bytes([SRVTOK | STORED]) + feed(0, svrconfig()) + feed(1, svrconfig(2, 7, "x")),
    "sync_then_svrconfig": bytes([SRVTOK | STORED]) + feed(0, sync(101)) + feed(1, sync(102, shard=1))
    + feed(0, cmd_resp(1, 1)) + feed(2, svrconfig()) + tick(5) + feed(2, svrconfig(3)),
    "sync_dev_noext": bytes([DEV]) + feed(0, sync(5, token="", ext=False)) + save(0) + tick(20)
    + feed(1, svrconfig(1, 9, "")),
    "standby_lag_alert": bytes([SRVTOK]) + feed(0, sync(1, shard=0, master=True))
    + feed(1, sync(2, shard=0, master=False)) + tick(3) + feed(1, sync(2, shard=0, master=False))
    + change(0x70) + save(0),
    "changes_conflict": bytes([SRVTOK | STORED]) + feed(0, sync(101)) + change(0x70) + save(1)
    + RELOAD + save(0) + change(0x77) + save(2) + tick(1) + save(0) + change(0x13) + save(0),
    "offline_server": bytes([SRVTOK | STORED]) + feed(0, sync(101)) + change(0x07) + save(0)
    + feed(0, cmd_resp(2, 1) + cmd_resp(3, 2, 14)) + change(0x03) + close(0) + feed(0, sync(101)),
    "bad_frames": bytes([SRVTOK]) + feed(0, b"\x00\x00\x00\x05\x00\x0c\x01\x01\x01\x00\x01\x00")
    + feed(1, frame(1, b"{\"askid\":1,")) + feed(1, frame(9, {"askid": 2}))
    + feed(1, frame(1, {"askid": 3, "token": "x"})) + feed(2, sync(7, token="wrong")),
    "small_limits": bytes([SRVTOK | SMALL]) + feed(0, frame(1, {"askid": 1, "module_id": 7,
                                                                "token": "t" * 300}))
    + feed(1, sync(9)),
    "console": bytes([SRVTOK | STORED]) + feed(3, http("GET", "/api/state"))
    + feed(3, http("PUT", "/api/modules/8", MOD7)) + save(0)
    + feed(3, http("POST", "/api/topics/orders/offline", {}))
    + feed(3, http("POST", "/api/servers/101/offline", {})) + feed(3, http("GET", "/api/audit?limit=3"))
    + feed(3, http("POST", "/api/login", {"token": "admin"}, auth="x")),
    # bindings: refused (the parser's messages), saved, then pushed in publish_config to a server
    # that syncs; read back; an empty list; and the codec on a publish_config that carries them
    "bindings": bytes([SRVTOK | STORED]) + feed(0, sync(101))
    + feed(3, http("PUT", "/api/bindings", {"bindings": [{"topic": "vip", "msg_type": 99}]}))
    + feed(3, http("PUT", "/api/bindings", VIP))
    + save(0) + feed(0, cmd_resp(2, 1, 5)) + feed(1, sync(102)) + feed(3, http("GET", "/api/bindings"))
    + feed(3, http("PUT", "/api/bindings", {"bindings": []})) + save(1) + RELOAD + save(0)
    + feed(3, http("GET", "/api/state"))
    + codec({"askid": 1, "cmdid": 1, "content": {"version": 3, "topics": {}, "bindings": VIP}}),
    "codec": bytes([0]) + codec({"askid": 1, "module_id": 7, "token": "t"})
    + codec({"askid": 1, "cmdid": 1, "content": {"version": 3, "modules": {"7": MOD7},
                                                 "topics": {"orders": {"online": True,
                                                                       "retention": 0}}}})
    + codec({"askid": 1, "cmdid": 2, "content": {"offline": True}})
    + codec({"askid": 1, "module_id": 7, "err_code": 0, "servers": [{"ip": "h", "port": 1,
                                                                      "shard": 0}]})
    + codec({"askid": 1, "err_code": 0, "config_version": 4})
    + codec({"askid": 1, "cmdid": 2, "err_code": 19, "err_msg": "x"}),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(SEEDS), OUT))


if __name__ == "__main__":
    main()
