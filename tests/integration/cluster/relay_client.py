#!/usr/bin/env python3
"""relay_client.py SERVER_ADDR CLIENT_ADDR - one broadcast across relay nodes, on raw sockets
(doc/protocol.md: packets, MessagePack; proto/channeld.proto: the field numbers).

A game server on SERVER_ADDR (node 1's --server-addr) creates a SUBWORLD channel and
subscribes a client connected to CLIENT_ADDR (node 3's --client-addr); the server broadcasts a
user message (type 100, ALL) and the client must receive exactly it: the channel, the type,
the broadcast flags and the ServerForwardMessage's bytes. Each step checks the exact reply.
Ids carry their node in their top 4 bits (--relay-node-bits 4): a connection's of 31, a
channel's of 16. Prints what it saw; exit 0 when every check held, 1 otherwise.
Every wait is bounded (WAIT_S): a reply that never comes fails the run, it is not timed."""
import socket
import sys
import time

WAIT_S = 30.0
AUTH, CREATE, SUB = 1, 3, 6
SUBWORLD, CONN_CLIENT = 3, 2
USER_TYPE, BROADCAST_ALL = 100, 2


class Fail(Exception):
    pass


def check(what, got, want):
    if got != want:
        raise Fail("%s: got %r, expected %r" % (what, got, want))


# ---- protobuf, the few shapes used here (varints and length-delimited fields) -------------
def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_int(num, v):
    return varint(num << 3) + varint(v) if v else b""


def field_bytes(num, b):
    return varint(num << 3 | 2) + varint(len(b)) + b


def read_varint(buf, i):
    v = shift = 0
    while True:
        if i >= len(buf):
            raise Fail("truncated varint")
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def decode(buf):
    """{field number: [values]}: ints for varints, bytes for length-delimited fields."""
    fields, i = {}, 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 2:
            n, i = read_varint(buf, i)
            v, i = bytes(buf[i:i + n]), i + n
        else:
            raise Fail("unexpected wire type %d" % wt)
        fields.setdefault(num, []).append(v)
    return fields


def one(fields, num, default=0):
    return fields.get(num, [default])[-1]


# ---- a connection -----------------------------------------------------------------------
class Conn:
    def __init__(self, name, addr):
        host, port = addr.rsplit(":", 1)
        self.name = name
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        self.buf = b""
        self.pending = []

    def send(self, channel, msg_type, body, stub=0, broadcast=0):
        mp = (field_int(1, channel) + field_int(2, broadcast) + field_int(3, stub) +
              field_int(4, msg_type) + field_bytes(5, body))
        pkt = field_bytes(1, mp)
        self.sock.sendall(b"CH" + len(pkt).to_bytes(2, "big") + b"\0" + pkt)

    def _read_packet(self, end):
        while True:
            if len(self.buf) >= 5:
                check(self.name + ": packet magic", self.buf[:2], b"CH")
                check(self.name + ": compression", self.buf[4], 0)
                n = int.from_bytes(self.buf[2:4], "big")
                if len(self.buf) >= 5 + n:
                    body, self.buf = self.buf[5:5 + n], self.buf[5 + n:]
                    return body
            left = end - time.monotonic()
            if left <= 0:
                raise Fail("%s: nothing more after %.0f s" % (self.name, WAIT_S))
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not data:
                raise Fail("%s: the connection closed" % self.name)
            self.buf += data

    def expect(self, msg_type):
        """The next message of msg_type (other types are skipped) as its MessagePack fields."""
        end = time.monotonic() + WAIT_S
        while True:
            while self.pending:
                mp = self.pending.pop(0)
                if one(mp, 4) == msg_type:
                    return mp
            for raw in decode(self._read_packet(end)).get(1, []):
                self.pending.append(decode(raw))

    def auth(self, pit, lt):
        self.send(0, AUTH, field_bytes(1, pit.encode()) + field_bytes(2, lt.encode()), stub=1)
        r = decode(one(self.expect(AUTH), 5, b""))
        check(self.name + ": AuthResult.result", one(r, 1), 0)
        self.id = one(r, 2)
        return self.id


def run(server_addr, client_addr):
    s = Conn("server (node 1)", server_addr)
    c = Conn("client (node 3)", client_addr)
    print("# server id %d (node %d), client id %d (node %d)" %
          (s.auth("server", ""), s.id >> 27, c.auth("pit", "lt"), c.id >> 27))
    check("the server's node", s.id >> 27, 1)
    check("the client's node", c.id >> 27, 3)

    s.send(0, CREATE, field_int(1, SUBWORLD) + field_bytes(2, b"relay-try"), stub=2)
    cr = decode(one(s.expect(CREATE), 5, b""))
    check("CreateChannelResult.ownerConnId", one(cr, 3), s.id)
    ch = one(cr, 4)
    check("the channel's node", ch >> 12, 1)
    print("# channel %d (node %d)" % (ch, ch >> 12))

    s.send(ch, SUB, field_int(1, c.id), stub=3)
    mp = c.expect(SUB)
    sr = decode(one(mp, 5, b""))
    check("the client's SUB result: channel", one(mp, 1), ch)
    check("the client's SUB result: connId", one(sr, 1), c.id)
    check("the client's SUB result: connType", one(sr, 3), CONN_CLIENT)
    check("the client's SUB result: channelType", one(sr, 4), SUBWORLD)

    fwd = field_bytes(2, b"hello from node 1")
    s.send(ch, USER_TYPE, fwd, broadcast=BROADCAST_ALL)
    mp = c.expect(USER_TYPE)
    check("the broadcast's channel", one(mp, 1), ch)
    check("the broadcast's flags", one(mp, 2), BROADCAST_ALL)
    check("the broadcast's stub", one(mp, 3), 0)
    check("the broadcast's body", one(mp, 5, b""), fwd)
    print("# the client on node 3 received %r on channel %d" %
          (decode(one(mp, 5))[2][0].decode(), ch))


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 64
    try:
        run(argv[1], argv[2])
    except (Fail, OSError, ValueError) as e:
        print("FAIL: %s" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
