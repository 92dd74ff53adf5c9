#!/usr/bin/env python3
"""Writes the fuzz_core seed corpus under tests/fuzz/corpus/fuzz_core/ (idempotent).

Each seed is a realistic session in fuzz_core's input format (see tests/fuzz/fuzz_core.c): an
option byte, then operations on six connection slots (ids 1..6 in slot order: 0, 1 and 5 are
SERVERs, 2, 3 and 4 CLIENTs; 0-3 start authenticated). The protobuf bodies are written by hand
from the field numbers in proto/channeld.proto, proto/options.proto and tests/data/*.proto, so
no protobuf module is needed. The generated files are committed; rerun this after editing it.
"""
import os
import struct

from corpus_pb import ld, record, varint, vi  # noqa: F401 (shared helpers)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "fuzz_core")

# Options (first byte)
RECOVERABLE, SMALL_SENDQ, PERMISSIVE, TIMEOUTS, FEW_SUBS, NO_SCHEMA, SPATIAL_CTL = 1, 2, 4, 8, 16, 32, 64
# Message types
AUTH, CREATE, REMOVE, LIST, SUB, UNSUB, DATA, DISCONNECT, CREATE_SPATIAL = 1, 3, 4, 5, 6, 7, 8, 9, 10
QUERY, INTEREST, CREATE_ENTITY, GROUP_ADD, GROUP_REMOVE, DEBUG_REGIONS = 11, 14, 15, 16, 17, 99
GLOBAL, PRIVATE, SUBWORLD, SPATIAL, ENTITY = 1, 2, 3, 4, 5
ENTITY_DATA = b"type.googleapis.com/chanqworld.EntityChannelData"
CELL_DATA = b"type.googleapis.com/chanqworld.SpatialChannelData"
TESTPB = b"type.googleapis.com/testpb.TestChannelDataMessage"
CHATROOM = b"type.googleapis.com/chanqtest.ChatRoom"


def any_(url, value):
    return ld(1, url) + ld(2, value)


def subopts(access=None, interval=None, delay=None, skip_self=None, skip_first=None, masks=()):
    out = b""
    if access is not None:
        out += vi(1, access)
    for m in masks:
        out += ld(2, m)
    if interval is not None:
        out += vi(3, interval)
    if delay is not None:
        out += vi(4, delay)
    if skip_self is not None:
        out += vi(5, skip_self)
    if skip_first is not None:
        out += vi(6, skip_first)
    return out


def create(ctype, metadata=b"", opts=None, data=None, merge=None):
    out = vi(1, ctype)
    if metadata:
        out += ld(2, metadata)
    if opts is not None:
        out += ld(3, opts)
    if data is not None:
        out += ld(4, data)
    if merge is not None:
        out += ld(5, merge)
    return out


def sfm(client=0, payload=b""):
    return (vi(1, client) if client else b"") + (ld(2, payload) if payload else b"")


def testpb(text=b"", num=0):
    return (ld(1, text) if text else b"") + (vi(2, num) if num else b"")


def chat(sender, text, time):
    return ld(1, sender) + ld(2, text) + vi(3, time)


def f32(field, v):
    return varint(field << 3 | 5) + struct.pack("<f", v)


def f64(field, v):
    return varint(field << 3 | 1) + struct.pack("<d", v)


def point(x, y, z):
    """SpatialInfo {1 x, 2 y, 3 z} (doubles)."""
    return f64(1, x) + f64(2, y) + f64(3, z)


def entity_data(x, z, seq):
    """chanqworld.EntityChannelData {transform {position {x, y, z}}, seq, trail += seq}."""
    pos = f32(1, x) + f32(2, 0.0) + f32(3, z)
    return ld(1, ld(2, pos)) + vi(3, seq) + ld(4, varint(seq))


def interest(conn, query):
    return vi(1, conn) + ld(2, query)


def sphere(x, z, r):
    return ld(3, ld(1, point(x, 0, z)) + f64(2, r))


# Operations
def packet(slot, *records, split=False, snappy=False):
    body = b"".join(records)
    op = slot | 0 << 3 | (0x40 if split else 0) | (0x80 if snappy else 0)
    return bytes([op, len(body) & 0xFF, len(body) >> 8]) + body


def raw(slot, data):
    return bytes([slot | 4 << 3, len(data)]) + data


def clock(ms):
    return bytes([0 | 5 << 3, ms // 20])


def gone(slot, lost=False):
    return bytes([slot | 6 << 3 | (0x40 if lost else 0)])


def connect(slot, server=False, authed=True):
    return bytes([slot | 7 << 3 | (0x40 if server else 0) | (0x80 if authed else 0)])


def seed(opt, *ops):
    return bytes([opt]) + b"".join(ops)


def sub_rec(ch, conn, opts=None, stub=0):
    body = vi(1, conn) + (ld(2, opts) if opts is not None else b"")
    return record(ch=ch, stub=stub, mtype=SUB, body=body)


SEEDS = {
    # GLOBAL possessed by server 1; clients 3 and 4 subscribed; user-space both ways.
    "global_user": seed(
        0,
        packet(0, record(stub=1, mtype=CREATE, body=create(GLOBAL, b"world"))),
        packet(0, sub_rec(0, 3), sub_rec(0, 4, stub=2)),
        packet(2, record(mtype=100, body=b"hello owner")),
        packet(0, record(bc=2, mtype=101, body=sfm(payload=b"to all"))),
        packet(0, record(bc=1, mtype=102, body=sfm(3, b"to client 3"))),
        packet(0, record(bc=0x20 | 4, mtype=103, body=sfm(payload=b"all but servers, sender"))),
        packet(1, record(bc=64, mtype=104, body=sfm(payload=b"adjacent"))),
    ),
    # A SUBWORLD channel with typed data: options, updates from owner and a writer, fan-outs.
    "subworld_data": seed(
        PERMISSIVE,
        packet(1, record(stub=5, mtype=CREATE, body=create(
            SUBWORLD, b"room-1", subopts(interval=50), any_(TESTPB, testpb(b"s", 1))))),
        packet(1, sub_rec(1, 3, subopts(access=1, interval=20, skip_first=1)),
               sub_rec(1, 4, subopts(access=2, interval=100, delay=(1 << 64) - 50))),
        clock(60),
        packet(1, record(ch=1, mtype=DATA, body=ld(1, any_(TESTPB, testpb(b"a", 2))))),
        clock(40),
        packet(3, record(ch=1, mtype=DATA, body=ld(1, any_(TESTPB, testpb(b"b"))))),
        clock(200),
        packet(1, record(ch=1, mtype=UNSUB, body=vi(1, 3))),
        packet(1, record(mtype=REMOVE, body=vi(1, 1))),
    ),
    # ChatRoom data (a repeated message field) with field masks and merge options.
    "chatroom_masks": seed(
        PERMISSIVE,
        packet(0, record(stub=1, mtype=CREATE, body=create(
            PRIVATE, b"chat", None, any_(CHATROOM, ld(1, b"lobby")), vi(1, 1) + vi(2, 3)))),
        packet(0, sub_rec(1, 3, subopts(interval=20, masks=(b"title",))),
               sub_rec(1, 4, subopts(interval=20, masks=(b"messages.text", b"title")))),
        packet(0, record(ch=1, mtype=DATA, body=ld(1, any_(CHATROOM, ld(2, chat(b"a", b"hi", 1)))))),
        clock(20),
        packet(0, record(ch=1, mtype=DATA, body=ld(1, any_(CHATROOM, ld(2, chat(b"b", b"yo", 2)))))),
        clock(20),
        packet(2, record(ch=1, mtype=SUB, body=vi(1, 3))),
        packet(2, record(ch=1, mtype=DATA, body=ld(1, any_(CHATROOM, ld(1, b"x"))))),
        clock(100),
    ),
    # LIST with filters, DISCONNECT of another worker's connection, REMOVE denied and allowed.
    "list_disconnect": seed(
        0,
        packet(0, record(stub=1, mtype=CREATE, body=create(SUBWORLD, b"alpha"))),
        packet(1, record(stub=2, mtype=CREATE, body=create(PRIVATE, b"beta"))),
        packet(0, record(stub=3, mtype=LIST, body=vi(1, SUBWORLD) + ld(2, b"al") + ld(2, b"z"))),
        packet(0, record(stub=4, mtype=LIST)),
        packet(1, record(mtype=DISCONNECT, body=vi(1, 4))),
        packet(0, record(mtype=REMOVE, body=vi(1, 2))),
        packet(1, record(mtype=REMOVE, body=vi(1, 2))),
        packet(0, record(stub=5, mtype=CREATE_SPATIAL, body=create(SPATIAL))),
    ),
    # A recoverable server drops and its successor with the same PIT takes over.
    "recovery": seed(
        RECOVERABLE,
        packet(0, record(stub=1, mtype=CREATE, body=create(GLOBAL))),
        packet(0, record(stub=2, mtype=CREATE, body=create(SUBWORLD, b"r",
                                                           data=any_(TESTPB, testpb(b"s"))))),
        packet(0, sub_rec(1, 3), sub_rec(1, 2)),
        gone(0, lost=True),
        clock(200),
        connect(0, server=True, authed=True),
        clock(1000),
        packet(0, record(ch=1, bc=2, mtype=100, body=sfm(payload=b"back"))),
        gone(1, lost=True),
        clock(4000),
    ),
    # Snappy and legacy framing, split reads, several records in one packet.
    "snappy_legacy": seed(
        0,
        packet(0, record(stub=1, mtype=CREATE, body=create(GLOBAL)), snappy=True),
        packet(0, sub_rec(0, 4), sub_rec(0, 3), split=True),
        packet(3, record(mtype=100, body=b"legacy client"), split=True),
        packet(2, record(mtype=100, body=b"snappy client " * 8), snappy=True, split=True),
        packet(0, *[record(bc=2, mtype=100 + i, body=sfm(payload=b"x" * 40)) for i in range(4)],
               snappy=True),
    ),
    # Big broadcasts against a 4 KiB hard limit: a subscriber is cut as a slow consumer.
    "slow_consumer": seed(
        SMALL_SENDQ,
        packet(0, record(stub=1, mtype=CREATE, body=create(GLOBAL))),
        packet(0, sub_rec(0, 3), sub_rec(0, 4)),
        packet(0, *[record(bc=2, mtype=150, body=sfm(payload=bytes(900))) for _ in range(6)]),
        clock(1200),
    ),
    # Authentication: AUTH on a channel other than 0 closes; timeouts close the idle.
    "auth_timeouts": seed(
        TIMEOUTS | FEW_SUBS,
        packet(4, record(ch=5, stub=1, mtype=AUTH, body=ld(1, b"pit"))),
        packet(5, record(stub=1, mtype=AUTH, body=ld(1, b"srv") + ld(2, b"lt"))),
        packet(5, record(stub=2, mtype=CREATE, body=create(SUBWORLD))),
        packet(5, sub_rec(1, 3), sub_rec(1, 2), sub_rec(1, 1)),
        clock(2500),
        clock(5100),
        connect(4, authed=False),
    ),
    # Drops: unknown types, bodies that do not decode, a server body that is not a
    # ServerForwardMessage, a channel-0 type elsewhere, unknown channels.
    "drops": seed(
        NO_SCHEMA,
        packet(0, record(mtype=2), record(mtype=11, body=b"\x08\x01"), record(mtype=99)),
        packet(0, record(mtype=CREATE, body=b"\x0a\x05ab")),
        packet(0, record(mtype=100, body=b"\x0a\x01\x07")),
        packet(0, record(ch=7, mtype=LIST), record(ch=7, mtype=SUB, body=vi(1, 3))),
        packet(0, record(ch=7, mtype=DATA, body=ld(1, any_(TESTPB, b"")))),
        packet(2, record(mtype=SUB, body=vi(1, 3))),
        packet(0, record(mtype=DATA, body=ld(1, any_(b"t/x", b"raw")))),
    ),
    # Framing errors and partial headers, then a connection in the freed slot.
    "raw_frames": seed(
        0,
        raw(2, b"CH\x00"),
        raw(2, b"\x05\x00\x0a\x03\x20\x64\x2a"),
        raw(3, b"CHN\x02\x00\x0a\x00"),
        raw(4, b"XH\x00\x01\x00\x00"),
        raw(5, b"CH\x00\x03\x01\x02\x00\x00"),
        connect(4, authed=True),
        packet(4, b""),
    ),
    # The spatial controller (option 64: 4x1 with a Handover section, --dev): two servers
    # fill the slots, a client's interest, an entity walking across every cell and both
    # servers (handovers), groups and a lock, ADJACENT broadcasts, queries, bad queries.
    "spatial_world": seed(
        SPATIAL_CTL | PERMISSIVE,
        packet(0, record(stub=1, mtype=CREATE, body=create(GLOBAL))),
        packet(0, record(stub=2, mtype=CREATE_SPATIAL, body=create(
            SPATIAL, b"cells", subopts(interval=20), any_(CELL_DATA, b"")))),
        packet(1, record(stub=3, mtype=CREATE, body=create(SPATIAL, b"cells"))),
        packet(2, record(stub=4, mtype=QUERY, body=ld(1, point(-1500, 0, 0)) +
                         ld(1, point(1999, 0, 499)) + ld(1, point(5000, 0, 0)))),
        packet(2, record(stub=5, mtype=DEBUG_REGIONS)),
        packet(0, record(ch=0x10000, stub=6, mtype=INTEREST,
                         body=interest(3, sphere(-1500, 0, 2500)))),
        packet(0, record(ch=0x10000, stub=7, mtype=CREATE_ENTITY, body=vi(1, 0x80000) +
                         ld(2, b"walker") + ld(4, any_(ENTITY_DATA, entity_data(-1900, 0, 1))))),
        packet(0, record(stub=8, mtype=CREATE_ENTITY, body=vi(1, 0x80001) +
                         ld(4, any_(ENTITY_DATA, entity_data(-1800, 100, 1))) + vi(6, 1))),
        packet(2, record(ch=0x80000, mtype=SUB, body=vi(1, 3))),
        clock(40),
        packet(0, record(ch=0x80000, mtype=DATA, body=ld(1, any_(ENTITY_DATA, entity_data(-900, 0, 2))))),
        clock(40),
        packet(0, record(ch=0x80000, mtype=DATA, body=ld(1, any_(ENTITY_DATA, entity_data(100, 0, 3))))),
        clock(40),
        packet(1, record(ch=0x80000, mtype=DATA, body=ld(1, any_(ENTITY_DATA, entity_data(1100, 0, 4))))),
        clock(40),
        packet(1, record(ch=0x80000, mtype=GROUP_ADD, body=vi(1, 0) + ld(2, varint(0x80001)))),
        packet(1, record(ch=0x80000, mtype=GROUP_ADD, body=vi(1, 1) + ld(2, varint(0x80000)))),
        packet(1, record(ch=0x80000, mtype=DATA, body=ld(1, any_(ENTITY_DATA, entity_data(-1100, 0, 5))))),
        packet(1, record(ch=0x80000, mtype=GROUP_REMOVE, body=vi(1, 1) + ld(2, varint(0x80000)))),
        packet(1, record(ch=0x80000, mtype=DATA, body=ld(1, any_(ENTITY_DATA, entity_data(-1200, 0, 6))))),
        clock(60),
        packet(0, record(ch=0x10001, bc=64, mtype=100, body=sfm(3, b"adjacent"))),
        packet(1, record(ch=0x10002, bc=64 | 8 | 4, mtype=101, body=sfm(payload=b"ring"))),
        packet(0, record(ch=1, bc=64, mtype=102, body=sfm(payload=b"not spatial"))),
        packet(0, record(ch=0x10000, stub=9, mtype=INTEREST,
                         body=interest(3, ld(2, ld(1, point(0, 0, 0)) + ld(2, point(600, 0, 300)))))),
        packet(0, record(ch=0x10000, stub=10, mtype=INTEREST,
                         body=interest(3, ld(4, ld(1, point(-1500, 0, 0)) + ld(2, point(1, 0, 0)) +
                                                f64(3, 0.5) + f64(4, 3000))))),
        packet(0, record(ch=0x10000, stub=11, mtype=INTEREST,
                         body=interest(3, ld(1, ld(1, point(-1500, 0, 0)) + ld(1, point(500, 0, 0)) +
                                                ld(2, varint(0) + varint(3)))))),
        packet(0, record(ch=0, stub=12, mtype=INTEREST, body=interest(3, ld(3, f64(2, 1e9))))),
        packet(0, record(ch=0, stub=13, mtype=INTEREST, body=interest(3, sphere(-1500, 0, 1e300)))),
        clock(100),
        gone(1),
        connect(1, server=True, authed=True),
        packet(1, record(stub=14, mtype=CREATE_SPATIAL, body=create(SPATIAL))),
        clock(100),
    ),
    # The same under server-conn-recoverable: a spatial server drops and comes back.
    "spatial_recovery": seed(
        SPATIAL_CTL | RECOVERABLE,
        packet(0, record(stub=1, mtype=CREATE_SPATIAL, body=create(SPATIAL))),
        packet(1, record(stub=2, mtype=CREATE_SPATIAL, body=create(SPATIAL))),
        packet(0, sub_rec(0x10000, 3)),
        gone(0, lost=True),
        clock(200),
        connect(0, server=True, authed=True),
        clock(1200),
        packet(0, record(ch=0x10000, bc=2, mtype=100, body=sfm(payload=b"back"))),
        gone(1, lost=True),
        clock(4000),
        connect(1, server=True, authed=True),
        packet(1, record(stub=3, mtype=CREATE_SPATIAL, body=create(SPATIAL))),
    ),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
