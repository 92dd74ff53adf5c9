#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_coord (tests/fuzz/corpus/fuzz_coord/).

A step is one byte: low 3 bits the op, high 5 bits its argument (see fuzz_coord.c step()).
The seeds walk the main paths: to master (odd and even lengths: promote off and on), expiry,
CONNECTING, a database going down, wild member lists, and the two text formats."""
import os
import random

CONNECTED, CONNECTING, EXPIRED = 0x02, 0x0A, 0x12
OK, FAIL, NEXT = 0x05, 0x06, 0x04
def tick(n): return bytes([(n << 3) | 0])
def wild(i): return bytes([(i << 3) | 1])
MCHG = b'\x03'

happy = bytes([CONNECTED]) + bytes([OK]) * 12 + (bytes([NEXT, OK, OK]) * 10)
seeds = {
    'master': happy,
    'master_promote': happy + tick(0),
    'expired': happy + bytes([EXPIRED, OK, OK, CONNECTED]) + bytes([OK]) * 10 + bytes([NEXT, OK]) * 6,
    'connecting': happy + bytes([CONNECTING]) + tick(10) + bytes([CONNECTED, OK, OK, OK]) + tick(31) + bytes([OK]) * 4,
    'db_down': happy + (bytes([NEXT, FAIL]) * 12) + bytes([OK]) * 6 + (bytes([NEXT, OK]) * 6),
    'wild_members': bytes([CONNECTED, OK, OK, OK]) + wild(0) + b'\x03\x03\x12\x21' + MCHG + wild(0) + b'\x02\x03\x02' + bytes([OK]) * 8,
    'stray': bytes([CONNECTED]) + bytes([0x07, 0x0F, 0x17, 0x1F, 0x27, 0x2F]) + bytes([OK]) * 6,
    'text_member': b'v1 adv=10.0.0.1:7000 db=10.0.0.1:3306 elig=1',
    'text_epoch': b'3 5 10.0.0.1:3306',
}
rng = random.Random(11)
for i in range(4):
    seeds['random%d' % i] = bytes(rng.randrange(256) for _ in range(200 + i))
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus', 'fuzz_coord')
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
