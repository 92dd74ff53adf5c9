#!/usr/bin/python3
"""ws_conformance.py - an RFC 6455 conformance probe for WebSocket servers (stdlib only).

Stands in for the Autobahn fuzzingclient, which is not available offline (transports.md
section 7). It speaks raw frames over a plain or TLS socket and runs the 26 cases of that
section (27 with --max-message N, the server's message limit: a message of N + 1 bytes must
fail with 1009), each on a fresh connection, printing one line per case and then "N passed, N failed".
The exit status is 1 if any case failed (2 for usage errors).

Usage:
  ws_conformance.py [--mode echo|chanq] [--tls] [--timeout S] [--origin O] [--case NAME]...
                    [--max-message N] ws://HOST:PORT/PATH          (wss://... implies --tls)
  ws_conformance.py --list

Modes:
  echo   the server echoes each message (npm ws's echo server, tests/interop/ws/
         ws_echo_server.mjs); replies must equal what was sent, with the same type.
  chanq  the server is chanqd, which carries the channeld byte stream in binary messages. The
         data sent is a valid channeld AUTH packet (or several back to back when a case needs a
         longer message; or the packet split across messages), and a case succeeds when a
         binary message whose payload starts with b"CH" comes back.

"Fail the connection" cases require the server's Close frame with the expected code, then the
TCP close (for wss, after the Close frame); a TCP close without that Close frame (what a
browser reports as 1006), another code, data in reply or bytes after the Close fail them.
With --tls the certificate is not verified.
"""
import argparse
import base64
import hashlib
import os
import socket
import ssl
import struct
import sys
import time
import urllib.parse

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONT, TEXT, BIN, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

# The channeld AUTH packet of the brief: 'C' 'H', body length 20, compression 0, then
# Packet{messages: MessagePack{stubId 1, msgType 1 (AUTH), msgBody AuthMessage{"test","test"}}}.
AUTH = bytes.fromhex("43480014000a1218012001" "2a0c0a0474657374120474657374")


class Failed(Exception):
    pass


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def ld(field, payload):
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def auth_packet(pit=b"test", lt=b"test"):
    """A CH-framed AUTH packet; the brief's AUTH bytes for the default tokens."""
    body = ld(1, bytes([0x18, 0x01, 0x20, 0x01]) + ld(5, ld(1, pit) + ld(2, lt)))
    return b"CH" + struct.pack(">HB", len(body), 0) + body


assert auth_packet() == AUTH


# ---- frames -----------------------------------------------------------------------------------

def frame(op, payload=b"", fin=True, rsv=0, mask=True, length_form=None):
    """A client frame: masked with a random key unless mask=False; length_form 16 or 64 forces
    that (possibly non-minimal) length encoding."""
    b0 = (0x80 if fin else 0) | (rsv << 4) | op
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126 and length_form is None:
        head = bytes([b0, m | n])
    elif n < 65536 and length_form in (None, 16):
        head = bytes([b0, m | 126]) + struct.pack(">H", n)
    else:
        head = bytes([b0, m | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(c ^ key[i & 3] for i, c in enumerate(payload))


def close_frame(code=None, reason=b""):
    return frame(CLOSE, b"" if code is None else struct.pack(">H", code) + reason)


class Conn:
    """One client connection: handshake, frame I/O with a timeout."""

    def __init__(self, args):
        self.args = args
        self.buf = b""
        raw = socket.create_connection((args.host, args.port), timeout=args.timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if args.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            raw = ctx.wrap_socket(raw, server_hostname=args.host)
        self.sock = raw
        self.sock.settimeout(args.timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data):
        self.sock.sendall(data)

    def send_bytewise(self, data):
        for i in range(len(data)):
            self.sock.sendall(data[i:i + 1])

    def _fill(self):
        """Reads more bytes; returns False on EOF or reset."""
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return False
        except socket.timeout:
            raise Failed("timed out waiting for the server")
        if not chunk:
            return False
        self.buf += chunk
        return True

    def _take(self, n):
        while len(self.buf) < n:
            if not self._fill():
                return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    # -- handshake --

    def request(self, headers):
        """Sends a GET with headers (list of "Name: value"); returns (status, headers dict)."""
        lines = ["GET %s HTTP/1.1" % self.args.path, "Host: %s:%d" % (self.args.host,
                                                                      self.args.port)]
        if self.args.origin:
            lines.append("Origin: " + self.args.origin)
        self.send(("\r\n".join(lines + headers) + "\r\n\r\n").encode())
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise Failed("connection closed during the handshake")
            if len(self.buf) > 65536:
                raise Failed("response head too large")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise Failed("bad status line %r" % lines[0])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        return int(parts[1]), hdrs

    def upgrade(self):
        key = base64.b64encode(os.urandom(16)).decode()
        status, hdrs = self.request(["Upgrade: websocket", "Connection: Upgrade",
                                     "Sec-WebSocket-Key: " + key, "Sec-WebSocket-Version: 13"])
        if status != 101:
            raise Failed("upgrade answered %d" % status)
        want = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
        if hdrs.get("sec-websocket-accept") != want:
            raise Failed("wrong Sec-WebSocket-Accept %r" % hdrs.get("sec-websocket-accept"))
        if "websocket" not in hdrs.get("upgrade", "").lower():
            raise Failed("101 without Upgrade: websocket")

    # -- frames --

    def read_frame(self):
        """Returns (fin, opcode, payload) of the next server frame, or None on EOF."""
        h = self._take(2)
        if h is None:
            return None
        fin, rsv, op = h[0] >> 7, (h[0] >> 4) & 7, h[0] & 0x0F
        if rsv:
            raise Failed("server frame with RSV bits 0x%x" % rsv)
        if h[1] & 0x80:
            raise Failed("server frame is masked")
        n = h[1] & 0x7F
        if n == 126:
            ext = self._take(2)
            n = None if ext is None else struct.unpack(">H", ext)[0]
        elif n == 127:
            ext = self._take(8)
            n = None if ext is None else struct.unpack(">Q", ext)[0]
        if n is None:
            return None
        payload = self._take(n)
        if payload is None:
            return None
        return fin, op, payload

    def read_event(self):
        """Next complete message, pong or close: ("msg", opcode, data), ("pong", data),
        ("close", code, reason), or None on EOF. Server pings are answered."""
        parts, first = [], None
        while True:
            f = self.read_frame()
            if f is None:
                return None
            fin, op, payload = f
            if op == PING:
                self.send(frame(PONG, payload))
                continue
            if op == PONG:
                return ("pong", payload)
            if op == CLOSE:
                if len(payload) == 1:
                    raise Failed("server sent a 1-byte Close")
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 1005
                return ("close", code, payload[2:])
            if op not in (CONT, TEXT, BIN):
                raise Failed("server sent opcode %d" % op)
            if (op == CONT) != (first is not None):
                raise Failed("bad fragmentation from the server")
            if first is None:
                first = op
            parts.append(payload)
            if fin:
                return ("msg", first, b"".join(parts))


# ---- what each mode sends and expects ---------------------------------------------------------

class Mode:
    def __init__(self, name):
        self.name = name

    def data(self, n):
        """A message of at least n bytes (exactly n in echo mode)."""
        if self.name == "echo":
            return bytes((i * 7 + 3) % 251 for i in range(n))
        reps = max(1, -(-n // len(AUTH)))
        return AUTH * reps

    def expect_reply(self, conn, sent, opcode=BIN, skip_pongs=False):
        """Reads the reply to one message."""
        while True:
            ev = conn.read_event()
            if ev is None:
                raise Failed("connection closed instead of a reply")
            if ev[0] == "pong" and skip_pongs:
                continue
            if ev[0] != "msg":
                raise Failed("expected a message, got %s" % describe(ev))
            break
        _, op, data = ev
        if self.name == "echo":
            if op != opcode or data != sent:
                raise Failed("echo mismatch: opcode %d, %d bytes (sent opcode %d, %d bytes)"
                             % (op, len(data), opcode, len(sent)))
        elif op != BIN or not data.startswith(b"CH"):
            raise Failed("expected a binary CH packet, got opcode %d %r" % (op, data[:8]))


def describe(ev):
    if ev is None:
        return "EOF"
    if ev[0] == "close":
        return "Close %d" % ev[1]
    if ev[0] == "pong":
        return "pong"
    return "message (opcode %d, %d bytes)" % (ev[1], len(ev[2]))


def expect_fail(conn, code):
    """The server must fail the connection: its Close frame with code, then the TCP close."""
    while True:
        ev = conn.read_event()
        if ev is None or ev[0] != "pong":
            break
    if ev is None or ev[0] != "close" or ev[1] != code:
        raise Failed("expected Close %d, got %s" % (code, describe(ev)))
    ev = conn.read_event()
    if ev is not None:
        raise Failed("expected the TCP close after Close %d, got %s" % (code, describe(ev)))


def expect_close(conn, code):
    ev = conn.read_event()
    if ev is None or ev[0] != "close" or ev[1] != code:
        raise Failed("expected Close %d, got %s" % (code, describe(ev)))


# ---- the cases --------------------------------------------------------------------------------

def c_len7(c, m):
    d = m.data(20 if m.name == "echo" else 1)
    c.send(frame(BIN, d))
    m.expect_reply(c, d)


def c_len16(c, m):
    d = m.data(300)
    c.send(frame(BIN, d))
    m.expect_reply(c, d)


def c_len64(c, m):
    d = m.data(70000)
    c.send(frame(BIN, d))
    m.expect_reply(c, d)


def c_chopped(c, m):
    d = m.data(200 if m.name == "echo" else 1)
    c.send_bytewise(frame(BIN, d))
    m.expect_reply(c, d)


def c_fifty_frames(c, m):
    if m.name == "echo":
        msgs = [m.data(i + 1) for i in range(50)]
        c.send(b"".join(frame(BIN, x) for x in msgs))
        for x in msgs:
            m.expect_reply(c, x)
        return
    # chanq: the AUTH packet cut into 25 one-byte messages, each followed by an empty one;
    # the stream is reassembled across messages.
    out = b"".join(frame(BIN, AUTH[i:i + 1]) + frame(BIN, b"") for i in range(len(AUTH)))
    c.send(out)
    m.expect_reply(c, AUTH)


def c_text(c, m):
    d = "héllo wörld €".encode() if m.name == "echo" else AUTH
    c.send(frame(TEXT, d))
    m.expect_reply(c, d, TEXT)


def c_ping(c, m):
    c.send(frame(PING, b"ping-payload"))
    ev = c.read_event()
    if ev is None or ev[0] != "pong" or ev[1] != b"ping-payload":
        raise Failed("expected pong 'ping-payload', got %s" % describe(ev))


def c_unsolicited_pong(c, m):
    d = m.data(10 if m.name == "echo" else 1)
    c.send(frame(PONG, b"unsolicited") + frame(BIN, d))
    m.expect_reply(c, d)


def c_oversized_ping(c, m):
    c.send(frame(PING, b"x" * 126))
    expect_fail(c, 1002)


def c_rsv(c, m):
    c.send(frame(BIN, b"x", rsv=1))
    expect_fail(c, 1002)


def c_opcode3(c, m):
    c.send(frame(3, b"x"))
    expect_fail(c, 1002)


def c_opcode11(c, m):
    c.send(frame(11, b"x"))
    expect_fail(c, 1002)


def c_fragmented_ping(c, m):
    d = m.data(30 if m.name == "echo" else 1)
    c.send(frame(BIN, d[:7], fin=False) + frame(PING, b"mid") + frame(CONT, d[7:15], fin=False)
           + frame(CONT, d[15:]))
    ev = c.read_event()
    if ev is None or ev[0] != "pong" or ev[1] != b"mid":
        raise Failed("expected pong 'mid' first, got %s" % describe(ev))
    m.expect_reply(c, d)


def c_fragmented_control(c, m):
    c.send(frame(PING, b"a", fin=False) + frame(CONT, b"b"))
    expect_fail(c, 1002)


def c_stray_continuation(c, m):
    c.send(frame(CONT, b"stray"))
    expect_fail(c, 1002)


def c_unfinished_continuation(c, m):
    c.send(frame(TEXT, b"first", fin=False) + frame(TEXT, b"second"))
    expect_fail(c, 1002)


def c_invalid_utf8(c, m):
    c.send(frame(TEXT, b"valid then \xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80"))
    expect_fail(c, 1007)


def c_utf8_split(c, m):
    if m.name == "echo":
        d = "κόσμε €".encode()
    else:
        d = auth_packet(b"test", "tést".encode())  # still valid UTF-8 as a whole
    cut = d.index(b"\xc3" if m.name == "chanq" else b"\xe2") + 1  # inside a character
    c.send(frame(TEXT, d[:cut], fin=False))
    time.sleep(0.05)
    c.send(frame(CONT, d[cut:]))
    m.expect_reply(c, d, TEXT)


def c_close_1000(c, m):
    c.send(close_frame(1000, b"bye"))
    expect_close(c, 1000)


def c_close_999(c, m):
    c.send(close_frame(999))
    expect_fail(c, 1002)


def c_close_1byte(c, m):
    c.send(frame(CLOSE, b"\x03"))
    expect_fail(c, 1002)


def c_close_reason_utf8(c, m):
    c.send(close_frame(1000, b"\xc0\xaf"))
    expect_fail(c, 1007)


def c_data_after_close(c, m):
    c.send(close_frame(1000) + frame(BIN, m.data(10 if m.name == "echo" else 1)))
    expect_close(c, 1000)
    ev = c.read_event()  # the server must send nothing more
    if ev is not None:
        raise Failed("data after the Close: %s" % describe(ev))


def c_unmasked(c, m):
    c.send(frame(BIN, m.data(10 if m.name == "echo" else 1), mask=False))
    expect_fail(c, 1002)


def c_too_big(c, m):
    # The length in the header is enough to fail; the client stops sending after 1 KiB of the
    # payload, since a server that closes while the client is still sending makes the kernel
    # answer with a reset, which can cost the client the Close frame (lingering close).
    d = frame(BIN, m.data(c.args.max_message + 1))
    c.send(d[:14 + 1024])
    expect_fail(c, 1009)


def c_bad_version(c, m):
    key = base64.b64encode(os.urandom(16)).decode()
    status, hdrs = c.request(["Upgrade: websocket", "Connection: Upgrade",
                              "Sec-WebSocket-Key: " + key, "Sec-WebSocket-Version: 12"])
    if status == 426:
        if "13" not in [v.strip() for v in hdrs.get("sec-websocket-version", "").split(",")]:
            raise Failed("426 without Sec-WebSocket-Version: 13")
    elif status != 400:
        raise Failed("expected 426 or 400, got %d" % status)


def c_missing_upgrade(c, m):
    key = base64.b64encode(os.urandom(16)).decode()
    status, _ = c.request(["Connection: Upgrade", "Sec-WebSocket-Key: " + key,
                           "Sec-WebSocket-Version: 13"])
    if not 400 <= status < 500:
        raise Failed("expected a 4xx status, got %d" % status)


# name, function, needs the upgrade first
CASES = [
    ("len7_binary", c_len7, True),
    ("len16_binary", c_len16, True),
    ("len64_binary", c_len64, True),
    ("chopped_1byte_writes", c_chopped, True),
    ("fifty_frames_one_write", c_fifty_frames, True),
    ("text_message", c_text, True),
    ("ping_pong", c_ping, True),
    ("unsolicited_pong", c_unsolicited_pong, True),
    ("oversized_ping_1002", c_oversized_ping, True),
    ("rsv_bits_1002", c_rsv, True),
    ("reserved_opcode_3_1002", c_opcode3, True),
    ("reserved_opcode_11_1002", c_opcode11, True),
    ("fragmented_with_ping", c_fragmented_ping, True),
    ("fragmented_control_1002", c_fragmented_control, True),
    ("stray_continuation_1002", c_stray_continuation, True),
    ("unfinished_continuation_1002", c_unfinished_continuation, True),
    ("invalid_utf8_1007", c_invalid_utf8, True),
    ("utf8_split_across_fragments", c_utf8_split, True),
    ("close_1000_echo", c_close_1000, True),
    ("close_code_999_1002", c_close_999, True),
    ("close_1byte_payload_1002", c_close_1byte, True),
    ("close_reason_invalid_utf8_1007", c_close_reason_utf8, True),
    ("data_after_close", c_data_after_close, True),
    ("unmasked_client_frame_1002", c_unmasked, True),
    ("message_too_big_1009", c_too_big, True),  # only with --max-message
    ("bad_version_426", c_bad_version, False),
    ("missing_upgrade_4xx", c_missing_upgrade, False),
]


def run_case(args, mode, fn, upgrade):
    c = Conn(args)
    try:
        if upgrade:
            c.upgrade()
        fn(c, mode)
    finally:
        c.close()


def parse_args(argv):
    p = argparse.ArgumentParser(description="RFC 6455 conformance probe (see the docstring)")
    p.add_argument("url", nargs="?", help="ws://HOST:PORT/PATH or wss://...")
    p.add_argument("--mode", choices=["echo", "chanq"], default="echo")
    p.add_argument("--tls", action="store_true", help="TLS without certificate checks")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per read (5)")
    p.add_argument("--origin", default="", help="send this Origin header")
    p.add_argument("--case", action="append", default=[], help="run only these cases")
    p.add_argument("--max-message", type=int, default=0,
                   help="the server's message size limit: adds message_too_big_1009")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    args = p.parse_args(argv)
    if args.list:
        return args
    if not args.url:
        p.error("a ws:// or wss:// URL is required")
    u = urllib.parse.urlsplit(args.url)
    if u.scheme not in ("ws", "wss") or not u.hostname or not u.port:
        p.error("URL must be ws://HOST:PORT/PATH or wss://HOST:PORT/PATH")
    args.tls = args.tls or u.scheme == "wss"
    args.host, args.port = u.hostname, u.port
    args.path = (u.path or "/") + ("?" + u.query if u.query else "")
    unknown = set(args.case) - {n for n, _, _ in CASES}
    if unknown:
        p.error("unknown case(s): " + ", ".join(sorted(unknown)))
    return args


def main(argv):
    args = parse_args(argv)
    if args.list:
        for i, (name, _, _) in enumerate(CASES, 1):
            print("%2d %s" % (i, name))
        return 0
    mode = Mode(args.mode)
    passed = failed = 0
    for i, (name, fn, upgrade) in enumerate(CASES, 1):
        if args.case and name not in args.case:
            continue
        if fn is c_too_big and not args.max_message:
            continue
        try:
            run_case(args, mode, fn, upgrade)
            print("ok   %2d %s" % (i, name))
            passed += 1
        except (Failed, OSError) as e:
            print("FAIL %2d %s: %s" % (i, name, e))
            failed += 1
        sys.stdout.flush()
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
