#!/usr/bin/env python3
"""Writes the fuzz_http seed corpus into tests/fuzz/corpus/fuzz_http/ (idempotent).

Seeds are request heads from the tests of the parser's three callers: the admin endpoint
(GET /metrics, /healthz), the MQ HTTP API (tests/unit/mqsrv/test_mqhttp.c and the
it-mqhttp requests: keep-alive, Authorization, Content-Length, pipelining, each malformed form)
and the WebSocket upgrade (tests/unit/transport/ws/test_wsup.c: a valid upgrade, bare LF, obs-fold,
duplicates, the size limit), plus one head per fault of pkg/http. Files are named by the SHA-1
of their content. The generated files are committed; rerun this after editing it. -merge=1
keeps 28 of the 30; the Prometheus scrape and the authorized GET add no coverage but are the
requests those listeners see most, so they stay.
"""
import hashlib
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus", "fuzz_http")
KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def head(first, *headers, end="\r\n"):
    return (first + end + "".join(h + end for h in headers) + end).encode("latin-1")


SEEDS = [
    # admin endpoint
    head("GET /metrics HTTP/1.1", "Host: 127.0.0.1:9100", "User-Agent: Prometheus/2.45.0",
         "Accept: text/plain;version=0.0.4;q=1,*/*;q=0.1", "Accept-Encoding: gzip"),
    head("GET /healthz?probe=1 HTTP/1.0"),
    head("POST /metrics HTTP/1.1", "Host: a"),
    # MQ HTTP API
    head("POST /v1/topics/orders/messages?x=1 HTTP/1.1", "Host: a",
         "Authorization:  Bearer 1:tok ", "Content-Length: 5", "Connection: close") + b"hello",
    head("GET /v1/health HTTP/1.1") + head("GET /v1/topics HTTP/1.1", "Connection: close"),
    head("GET /x HTTP/1.0", "Connection: Keep-Alive"),
    head("GET /x HTTP/1.0", "Content-Length: 3", "content-length: 3"),
    head("GET /v1/topics/orders/messages?offset=1&max=10 HTTP/1.1", "Authorization: 3:s3"),
    head("POST /v1/topics HTTP/1.1", "Transfer-Encoding: chunked"),
    head("GET /x HTTP/1.1", "Content-Length: 9999999999999999999"),
    head("GET /x HTTP/1.1", "A: b\nc"),
    b"GET\r\n\r\n",
    b"GET /x HTTP/2.0\r\n\r\n",
    # WebSocket upgrade
    head("GET /chat?room=1 HTTP/1.1", "Host: server.example.com", "Upgrade: websocket",
         "Connection: Upgrade", "Sec-WebSocket-Key: " + KEY, "Origin: http://example.com",
         "Sec-WebSocket-Protocol: chat, superchat", "Sec-WebSocket-Version: 13")
    + b"\x82\x85\x01\x02\x03\x04abcde",
    head("GET http://h.example/chat HTTP/1.1", "host: h.example", "UPGRADE: WebSocket",
         "connection: keep-alive", "Connection: foo, UPGRADE", "sec-websocket-key:" + KEY + "  ",
         "Sec-WebSocket-Version:   13", "Sec-WebSocket-Protocol: a", "Sec-WebSocket-Protocol: b",
         end="\n"),
    head("GET / HTTP/1.1", "Host: x", "X: a", " folded"),
    head("GET / HTTP/1.1", "Host: x", "X: a", "\tfolded"),
    head("HEAD /index.html HTTP/1.0"),
    head("GET / HTTP/1.1", "Host: x", "X-Pad: " + "a" * 9000),
    b"GET / HTTP/1.1\nHost: x\r\n\n",
    # one per fault of pkg/http
    b"\r\n\r\n",
    b"GET  / HTTP/1.1\r\n\r\n",
    b"GET /\x01 HTTP/1.1\r\n\r\n",
    b"GET /caf\xc3\xa9 HTTP/1.9\r\n\r\n",
    head("GET / HTTP/1.1", "A: b\rc"),
    head("GET / HTTP/1.1", "A: b\x00c"),
    head("GET / HTTP/1.1", "NoColon"),
    head("GET / HTTP/1.1", "Bad Name: v"),
    head("GET / HTTP/1.1", "A: b\x01c", "D: \x7f\xff"),
    head("GET / HTTP/1.1", *["H%d: %d" % (i, i) for i in range(40)]),
]


def main():
    os.makedirs(CORPUS, exist_ok=True)
    for d in SEEDS:
        with open(os.path.join(CORPUS, hashlib.sha1(d).hexdigest()), "wb") as f:
            f.write(d)


if __name__ == "__main__":
    main()
