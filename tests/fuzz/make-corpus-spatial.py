#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_spatial: a layout JSON, a NUL, then query bytes.

Usage: make-corpus-spatial.py OUT_DIR"""
import os
import struct
import sys

LAYOUT = (b'{"Config":{"WorldOffsetX":-2000,"WorldOffsetZ":-500,"GridWidth":1000,'
          b'"GridHeight":1000,"GridCols":4,"GridRows":1,"ServerCols":2,"ServerRows":1,'
          b'"ServerInterestBorderSize":1},"Handover":{"PositionPath":"transform.position",'
          b'"Axes":"xzy"}}')


def small(v):
    """A coordinate in num()'s small form: (k - 0x70) * 50 + frac / 8."""
    k = int(v // 50) + 0x70
    return bytes([k, min(255, int((v - (k - 0x70) * 50) * 8))])


def raw(d):
    return b'\xf0' + struct.pack('<d', d)


def vec(x, y, z, enc=small):
    return enc(x) + enc(y) + enc(z)


def query(flags, has, sphere_c=(0, 0, 0), radius=small(500)):
    body = bytes([flags, has])
    body += vec(0, 0, 0) + vec(100, 0, 100)         # box centre, extent
    body += vec(*sphere_c) + radius                 # sphere
    body += vec(-1500, 0, 0) + vec(50, 0, 0)        # cone centre, direction
    body += small(0.75) + small(1200)               # cone angle, radius
    return body


SEEDS = {
    'sphere_4x1': LAYOUT + b'\0' + query(0x04, 0x04, (-1900, 0, 100), small(3900)),
    'sphere_huge': LAYOUT + b'\0' + query(0x04, 0x04, (-1900, 0, 100), raw(1e300)),
    'sphere_inf': LAYOUT + b'\0' + query(0x04, 0x04, (-1900, 0, 100), raw(float('inf'))),
    'box_cone': LAYOUT + b'\0' + query(0x0a, 0x1b),
    'all_shapes': LAYOUT + b'\0' + query(0x5f, 0x1f) + bytes(range(0, 64, 3)),
    'no_centre': LAYOUT + b'\0' + query(0x0e, 0x00),
    'bad_config': b'{"Config":{"GridCols":5,"ServerCols":2}}\0' + query(0x04, 0x04),
    'groups': b'\0' + bytes([0, 0]) + bytes([0x01, 2, 3, 0, 0x05, 4, 4, 4, 0x0b, 3, 3, 3,
                                             0x31, 0, 0, 0, 0x1b, 3, 0, 0, 0x32, 0, 0, 0]),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
