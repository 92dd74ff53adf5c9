#!/usr/bin/env python3
"""Writes the fuzz_kcp seed corpus into tests/fuzz/corpus/fuzz_kcp/ (idempotent).

Each seed is a script for fuzz_kcp.c: a profile byte, then operations (see that file). The
datagrams are KCP segments for conv 0x01020304: in-order and out-of-order data, ACKs, window
probes, the transports.md section 1 example (a 2000-byte write as 1376 + 624), and malformed
ones (unknown cmd, truncated length, foreign conv). The generated files are committed; rerun
this after editing it. The corpus also holds hash-named inputs found by libFuzzer and kept by
`fuzz_kcp -merge=1 tests/fuzz/corpus/fuzz_kcp NEW_DIR` (see tests/fuzz/run-fuzzers.sh).
"""
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "corpus", "fuzz_kcp")
CONV = 0x01020304
PUSH, ACK, WASK, WINS = 81, 82, 83, 84


def seg(cmd, sn=0, una=0, ts=0, wnd=32, data=b"", conv=CONV, frg=0, length=None):
    n = len(data) if length is None else length
    return struct.pack("<IBBHIIII", conv, cmd, frg, wnd, ts, sn, una, n) + data


def dgram(*segs):
    d = b"".join(segs)
    return bytes([0]) + struct.pack("<H", len(d)) + d


def update(ms):  # advance arg * 7 ms
    return bytes([3, max(1, min(255, ms // 7))])


def recv(n=4096):
    return bytes([4, min(255, n // 16)])


def send(n):
    return bytes([5, min(255, n // 32)])


FLUSH = bytes([6, 0])


def peek(n):
    return bytes([7, n])


def pattern(n):
    return bytes(i % 251 for i in range(n))


seeds = {
    "plain": bytes([0]) + dgram(seg(PUSH, 0, data=b"hello")) + update(100) + recv(),
    "reorder_fast": bytes([1])
    + dgram(seg(PUSH, 2, data=b"cc"), seg(PUSH, 1, data=b"bb"))
    + dgram(seg(PUSH, 0, data=b"aa"))
    + peek(3)
    + recv(16)
    + update(10),
    "example_2000": bytes([0])
    + dgram(seg(PUSH, 0, data=pattern(1376)))
    + dgram(seg(PUSH, 1, data=pattern(2000)[1376:]))
    + update(100)
    + recv(),
    "send_ack": bytes([1])
    + send(4000)
    + FLUSH
    + dgram(seg(ACK, 0, una=1, wnd=128), seg(ACK, 2, una=1, wnd=128))
    + dgram(seg(ACK, 2, una=1, wnd=128))
    + update(10)
    + update(300)
    + dgram(seg(ACK, 1, una=3, wnd=128))
    + update(10),
    "zero_window": bytes([2])
    + b"".join(dgram(seg(PUSH, i, data=bytes([i]) * 8)) for i in range(10))
    + update(100)
    + dgram(seg(WASK, wnd=0))
    + send(200)
    + update(100)
    + recv(32)
    + update(100),
    "probe": bytes([3]) + send(100) + dgram(seg(ACK, 0, una=0, wnd=0)) + update(255 * 7) * 6,
    "bad_cmd": bytes([0]) + dgram(seg(PUSH, 0, data=b"x"), seg(99)) + recv(),
    "truncated": bytes([0]) + dgram(seg(PUSH, 0, length=500, data=b"short")) + recv(),
    "foreign_conv": bytes([0]) + dgram(seg(PUSH, 0, data=b"y", conv=0xDEADBEEF)) + recv(),
    "short_tail": bytes([0]) + dgram(seg(PUSH, 0, data=b"z") + b"\x01" * 23) + recv(),
    "small_mtu": bytes([4 | 1]) + send(2000) + FLUSH + update(50) * 4,
    "sn_far": bytes([8])
    + dgram(seg(PUSH, 0xFFFFFFFF, data=b"w"), seg(PUSH, 31, data=b"v"), seg(PUSH, 32))
    + dgram(seg(ACK, 0x7FFFFFFF, una=0xFFFFFFF0))
    + update(100),
}

os.makedirs(OUT, exist_ok=True)
for name, data in sorted(seeds.items()):
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(data)
    print(f"{name}: {len(data)} bytes, sha1 {hashlib.sha1(data).hexdigest()[:12]}")
