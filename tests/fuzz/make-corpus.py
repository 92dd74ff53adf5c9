#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/ (run from anywhere; idempotent).

The seeds are the channeld-protocol.md §1.2 vectors, legacy-tag packets, a Snappy packet and a
few malformed inputs. Snappy blocks are written by hand (literal and copy elements), so no
snappy module is needed. The generated files are committed; rerun this after editing it.
"""
import os

from corpus_pb import ld, record, varint, vi  # noqa: F401 (shared helpers)

HERE = os.path.dirname(os.path.abspath(__file__))
TYPE_URL = b"type.googleapis.com/testpb.TestChannelDataMessage"


def frame(body, ct=0, legacy=False):
    n = len(body)
    if legacy and n < 256:
        return b"CHN" + bytes([n, ct]) + body
    return b"CH" + bytes([n >> 8, n & 0xFF, ct]) + body


def snappy_literal(data):
    """A Snappy block made of one literal element (valid for any data up to 2^32)."""
    n = len(data)
    out = varint(n)
    if n == 0:
        return out
    if n <= 60:
        out += bytes([(n - 1) << 2])
    elif n <= 256:
        out += bytes([60 << 2, n - 1])
    else:
        out += bytes([61 << 2, (n - 1) & 0xFF, (n - 1) >> 8])
    return out + data


# The §1.2 Packet bodies, built from their fields (the unit tests check the same bytes
# against the document).
opts = vi(1, 1) + vi(3, 20) + vi(4, 0) + vi(5, 1) + vi(6, 0)
any_data = ld(1, TYPE_URL) + ld(2, b"\x0a\x01\x61\x10\x01")
BODIES = {
    "auth_req": record(stub=1, mtype=1, body=ld(1, b"test") + ld(2, b"test")),
    "auth_result": record(stub=1, mtype=1, body=vi(2, 1)),
    "sub_result": record(mtype=6, body=vi(1, 1) + ld(2, opts) + vi(3, 2) + vi(4, 1)),
    "data_update": record(ch=5, mtype=8, body=ld(1, any_data)),
    "user_fwd": record(mtype=100, body=vi(1, 7) + ld(2, b"hi")),
    "recovery_end": record(mtype=21),
}
EXPECT = {  # the document's bytes, as a cross-check of this script
    "auth_req": "0a12180120012a0c0a0474657374120474657374",
    "sub_result": "0a1620062a120801120a0801181420002801300018022001",
    "recovery_end": "0a022015",
}
for k, v in EXPECT.items():
    assert BODIES[k].hex() == v, k

# More message types for the wire target: one of each type it unpacks.
MORE = {
    "create_channel": record(mtype=3, stub=2, body=vi(1, 100) + ld(2, b"room") + ld(3, opts)
                             + ld(4, any_data) + ld(5, vi(1, 1) + vi(2, 10))),
    "remove_channel": record(mtype=4, ch=7, body=vi(1, 7)),
    "list_channel": record(mtype=5, body=vi(1, 2) + ld(2, b"a") + ld(2, b"bb")),
    "sub": record(mtype=6, ch=3, stub=4, body=vi(1, 9) + ld(2, vi(3, 50) + ld(2, b"hp"))),
    "unsub": record(mtype=7, ch=3, body=vi(1, 9)),
    "disconnect": record(mtype=9, body=vi(1, 12)),
    "broadcast_fwd": record(ch=65536, bc=6, mtype=101, body=vi(1, 3) + ld(2, b"\x00" * 40)),
    "fanout_delay_neg": record(mtype=6, body=ld(2, bytes.fromhex("20ffffffffffffffffff01"))),
}


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    allbodies = b"".join(BODIES.values())
    # fuzz_framing: byte streams as read from a connection.
    stream = b""
    for k, body in BODIES.items():
        write("fuzz_framing", "vec_" + k, frame(body))
        stream += frame(body)
    write("fuzz_framing", "stream_all", stream)
    write("fuzz_framing", "legacy_auth_req", frame(BODIES["auth_req"], legacy=True))
    write("fuzz_framing", "legacy_mixed_stream",
          frame(BODIES["user_fwd"], legacy=True) + frame(b"\x0a\x00" * 150, legacy=True)
          + frame(BODIES["recovery_end"]))
    write("fuzz_framing", "legacy_64k_tag", b"C\x01\x00\x00\x00")
    write("fuzz_framing", "ambiguous_4e", b"CHN\x05\x00" + BODIES["user_fwd"][:5])
    write("fuzz_framing", "snappy_packet", frame(snappy_literal(BODIES["auth_req"]), ct=1))
    write("fuzz_framing", "bad_magic0", b"XH\x00\x04\x00\x0a\x02\x20\x15")
    write("fuzz_framing", "bad_magic1", b"CX\x00\x04\x00\x0a\x02\x20\x15")
    write("fuzz_framing", "zero_len", frame(BODIES["recovery_end"]) + b"CH\x00\x00\x00")
    write("fuzz_framing", "too_big_hdr", b"CH\xff\xff\x00" + b"\x0a\x00" * 8)
    write("fuzz_framing", "body_300", frame(ld(2, b"\x00" * 300)))
    # fuzz_wire_packet: Packet bodies.
    for k, body in list(BODIES.items()) + list(MORE.items()):
        write("fuzz_wire_packet", "body_" + k, body)
    write("fuzz_wire_packet", "body_all", allbodies + b"".join(MORE.values()))
    write("fuzz_wire_packet", "unknown_fields",
          vi(2, 1) + b"\x19" + b"\x00" * 8 + ld(1, vi(6, 150) + b"\x3d" + b"\x01" * 4
                                             + vi(4, 100) + ld(8, b"x") + ld(5, b"hi"))
          + b"\x25\x01\x02\x03\x04")
    write("fuzz_wire_packet", "pad_2047", BODIES["recovery_end"] + b"\xfa\x7f\x04\x00\x00\x00\x00")
    write("fuzz_wire_packet", "empty_record", b"\x0a\x00")
    write("fuzz_wire_packet", "bad_truncated", BODIES["auth_req"][:-3])
    write("fuzz_wire_packet", "bad_group", b"\x0a\x04\x33\x08\x01\x34")
    write("fuzz_wire_packet", "bad_wiretype", b"\x0a\x02\x28\x01")
    write("fuzz_wire_packet", "bad_varint11", b"\x0a\x0c\x08" + b"\x80" * 10 + b"\x01")
    # fuzz_snappy: Snappy blocks.
    write("fuzz_snappy", "literal_auth", snappy_literal(BODIES["auth_req"]))
    write("fuzz_snappy", "literal_all", snappy_literal(allbodies))
    write("fuzz_snappy", "literal_300", snappy_literal(bytes(range(256)) + b"x" * 44))
    write("fuzz_snappy", "copy1", b"\x0c\x08abc\x15\x03")  # "abc" x4 via a 1-byte-offset copy
    write("fuzz_snappy", "copy2", b"\x14\x0cabcd\x3e\x04\x00")  # 4 + 16 via a 2-byte offset
    write("fuzz_snappy", "empty", b"\x00")
    write("fuzz_snappy", "bad_offset", b"\x08\x00a\x0d\x05")
    write("fuzz_snappy", "bad_short", b"\x0a\x08abc")
    write("fuzz_snappy", "bomb", b"\xff\xff\xff\xff\x0f\x00x")


if __name__ == "__main__":
    main()
