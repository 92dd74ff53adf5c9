#!/usr/bin/env python3
"""Writes the fuzz_wsup and fuzz_ws seed corpora into tests/fuzz/corpus/ (idempotent).

fuzz_wsup seeds are request heads: a valid upgrade (RFC 6455 sample), lenient forms, plain
GET/HEAD, and one request per error status. fuzz_ws seeds are masked client frame sequences
covering the conformance checklist of transports.md section 7 (lengths, fragmentation with a
ping, control-frame rules, close codes, UTF-8, unmasked frames). Files are named by the SHA-1
of their content. The generated files are committed; rerun this after editing it. The corpora
also hold inputs found by libFuzzer, minimised with -merge=1 (see tests/fuzz/run-fuzzers.sh).
"""
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus")
KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def write(target, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


# ---- fuzz_wsup ------------------------------------------------------------------------------

def head(first, *headers, end="\r\n"):
    return (first + end + "".join(h + end for h in headers) + end).encode("latin-1")


WS = ["Host: x", "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: " + KEY,
      "Sec-WebSocket-Version: 13"]

WSUP = [
    head("GET /chat HTTP/1.1", "Host: server.example.com", "Upgrade: websocket",
         "Connection: Upgrade", "Sec-WebSocket-Key: " + KEY, "Origin: http://example.com",
         "Sec-WebSocket-Protocol: chat, superchat", "Sec-WebSocket-Version: 13")
    + b"\x82\x85\x01\x02\x03\x04abcde",
    head("GET / HTTP/1.1", *WS),
    head("GET / HTTP/1.1", *WS, end="\n"),
    head("GET http://x/chat?q=1 HTTP/1.1", "host: x", "UPGRADE: WebSocket",
         "connection: keep-alive, Upgrade", "sec-websocket-key:" + KEY,
         "Sec-WebSocket-Version:13", "Sec-WebSocket-Protocol: a", "Sec-WebSocket-Protocol: b",
         "Origin: https://a.example"),
    head("GET /index.html?v=1 HTTP/1.1", "Host: x", "Accept: */*"),
    head("HEAD /x HTTP/1.0"),
    head("POST / HTTP/1.1", "Host: x", "Content-Length: 3") + b"abc",
    head("GET / HTTP/1.1", *WS[:4]),                                     # 426
    head("GET / HTTP/1.1", *WS[:4], "Sec-WebSocket-Version: 8"),        # 426
    head("GET /nope HTTP/1.1", *WS),                                     # 404
    head("GET / HTTP/1.1", *WS, "Origin: https://evil.example"),       # 403 (chat config)
    head("GET / HTTP/1.1", "Host: x", "Connection: Upgrade", *WS[3:]),  # missing Upgrade
    head("GET / HTTP/1.1", "Host: x", "X: a", " folded"),               # obs-fold
    head("GET / HTTP/1.1", *WS, "Sec-WebSocket-Key: " + KEY),           # duplicate key
    head("GET / HTTP/1.0", *WS),
    head("GET / HTTP/1.1", "Host: x", "X-Pad: " + "a" * 9000),          # 431
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",                    # TLS on a ws port
    b"\r\n\r\n",
]


# ---- fuzz_ws --------------------------------------------------------------------------------

MASK = b"\x37\xfa\x21\x3d"
CONT, TEXT, BIN, CLOSE, PING, PONG = 0, 1, 2, 8, 9, 10


def frame(op, payload=b"", fin=True, rsv=0, mask=True, force=None):
    b0 = (0x80 if fin else 0) | (rsv << 4) | op
    n = len(payload)
    m = 0x80 if mask else 0
    if (n < 126 and force is None) or force == 7:
        h = bytes([b0, m | n])
    elif (n < 65536 and force is None) or force == 16:
        h = bytes([b0, m | 126]) + struct.pack(">H", n)
    else:
        h = bytes([b0, m | 127]) + struct.pack(">Q", n)
    if not mask:
        return h + payload
    return h + MASK + bytes(c ^ MASK[i % 4] for i, c in enumerate(payload))


def close(code, reason=b""):
    return frame(CLOSE, struct.pack(">H", code) + reason)


WSF = [
    frame(BIN, b"CH\x00\x14\x00\x0a\x12\x18\x01\x20\x01\x2a\x0c\x0a\x04test\x12\x04test"),
    frame(TEXT, "héllo €".encode()),
    frame(BIN, bytes(range(256)) * 2),                   # 16-bit length
    frame(BIN, bytes(70000)),                            # 64-bit length
    frame(BIN, b"ab", fin=False) + frame(PING, b"p") + frame(CONT, b"cd", fin=False)
    + frame(CONT, b"ef"),
    frame(TEXT, b"x\xe2\x82", fin=False) + frame(CONT, b"\xac"),
    b"".join(frame(BIN, b"m%d" % i) for i in range(50)),
    frame(PING, b"z" * 125) + frame(PONG, b"u"),
    frame(PING, b"z" * 126),
    frame(PING, b"x", fin=False),
    frame(BIN, b"x", rsv=4),
    frame(3, b"x") + frame(11, b"x"),
    frame(CONT, b"stray"),
    frame(TEXT, b"a", fin=False) + frame(TEXT, b"b"),
    frame(TEXT, b"ok\xff"),
    close(1000, b"bye") + frame(BIN, b"late"),
    close(999),
    frame(CLOSE, b"\x03"),
    close(1000, b"\xc0\xaf"),
    frame(CLOSE),
    frame(BIN, b"x", mask=False),
    frame(BIN, b"abc", force=16),
    frame(BIN, b"abc", force=64),
    bytes([0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1]) + MASK,
    frame(BIN, bytes(5000)),                             # over the fuzzer's 4 KiB limit
]


def main():
    for d in WSUP:
        write("fuzz_wsup", d)
    for d in WSF:
        write("fuzz_ws", d)


if __name__ == "__main__":
    main()
