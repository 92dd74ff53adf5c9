#!/usr/bin/env python3
"""Writes the fuzz_kcp_listener seed corpus into tests/fuzz/corpus/fuzz_kcp_listener/.

Each seed is a script for fuzz_kcp_listener.c (see that file for the opcodes), one per rule of
the listener policy: create then deliver, another conv dropped, a new conversation replacing a
live or closing session, tombstones (kept alive by their datagrams, forgotten when silent),
idle sessions, the per-IP limit across two listeners, set-ups that fail or run out of memory,
short datagrams and IPv6 sources. The generated files are committed; rerun this after
editing it (idempotent).
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "corpus", "fuzz_kcp_listener")
ATTACH, BURY, FORGET = 0, 2, 3


def dg(addr, conv, push=True, sn=0, listener=0, short=False, setup=ATTACH):
    bits = conv | (push << 2) | (sn << 3) | (short << 4) | (setup << 5)
    return bytes([0, (listener << 7) | addr, bits])


def close(addr, listener=0):
    return bytes([3, (listener << 7) | addr])


def release(listener=0):
    return bytes([4, listener])


def step(ms):
    return bytes([5, min(255, ms // 8)])


SEEDS = {
    "create_deliver": dg(0, 1) + dg(0, 1, push=False) + dg(0, 1, sn=1),
    "other_conv": dg(0, 1) + dg(0, 2, push=False) + dg(0, 2, sn=1) + dg(0, 1, push=False),
    "replace_live": dg(0, 1) + dg(0, 2) + dg(0, 1, sn=1) + dg(0, 2, push=False),
    "replace_closing": dg(0, 1) + close(0) + dg(0, 1) + dg(0, 3) + release(),
    "tombstone": dg(0, 1) + close(0) + release() + dg(0, 1) + step(800) + dg(0, 1, sn=1)
    + step(1000) + dg(0, 1),
    "tombstone_replaced": dg(1, 1) + close(1) + release() + dg(1, 2),
    "idle": dg(0, 1) + dg(4, 2) + step(600) + dg(4, 2, push=False) + step(400) + release()
    + step(1000) + dg(0, 1),
    "limit": dg(0, 1) + dg(1, 1, listener=1) + dg(2, 1) + dg(2, 1, listener=1) + dg(3, 1)
    + close(0) + release() + dg(2, 1) + step(1000) + dg(2, 1),
    "setup_failed": dg(5, 1, setup=BURY) + dg(5, 1) + dg(5, 2) + dg(4, 3, setup=FORGET)
    + dg(4, 3),
    "short_ipv6": dg(6, 1, short=True) + dg(6, 1) + dg(7, 2) + dg(8, 3) + dg(6, 1, push=False)
    + step(2040),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
