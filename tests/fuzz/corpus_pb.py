"""Protobuf and channeld record bytes for the seed-corpus scripts in this folder (imported by
make-corpus.py and make-corpus-core.py; Python puts the script's folder on sys.path)."""


def varint(v):
    v &= (1 << 64) - 1  # negative numbers as protobuf writes them: ten bytes
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def ld(field, payload):
    """A length-delimited field."""
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vi(field, v):
    """A varint field."""
    return varint(field << 3) + varint(v)


def record(ch=0, bc=0, stub=0, mtype=0, body=b""):
    """One Packet.messages entry: a MessagePack {channelId, broadcast, stubId, msgType, body}."""
    mp = b""
    for f, v in ((1, ch), (2, bc), (3, stub), (4, mtype)):
        if v:
            mp += vi(f, v)
    if body:
        mp += ld(5, body)
    return ld(1, mp)
