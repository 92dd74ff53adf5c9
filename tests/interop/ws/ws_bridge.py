#!/usr/bin/python3
"""ws_bridge.py - a TCP <-> WebSocket bridge on python3-websockets (Debian), for running
TCP-speaking clients (chanq's C integration tests) over a real WebSocket client stack.

Usage:
  ws_bridge.py [--listen 127.0.0.1:0] [--cafile CA.pem] [--origin O] [--max-size BYTES]
               [--close-log FILE] ws://HOST:PORT/PATH | wss://HOST:PORT/PATH

Listens on --listen (port 0 picks a free port) and prints "ready <port>" on stdout. For each
TCP connection it opens a WebSocket client connection to the URL (wss: the certificate is not
checked unless --cafile is given), then
  - forwards each TCP read as ONE binary message,
  - writes each received message's payload (binary, or text as UTF-8) to the TCP side,
  - when either side closes, closes the other: TCP EOF sends a Close 1000 and waits for the
    server's Close; a WebSocket close (or error) closes the TCP connection.
A failed WebSocket handshake closes the TCP connection at once. No compression, no keepalive
pings.

A TCP connection cannot carry a Close code, so with --close-log the bridge appends one line per
connection to FILE before it closes the TCP side: "<tcp-port> <code> <reason>", where tcp-port
is the TCP client's own port (its getsockname) and code the status of the server's Close frame
(1005 for a Close without one, 1006 when the server sent no Close at all). A test that sees
its TCP connection end can then look up the code the server sent. Run with /usr/bin/python3 (Debian's python3-websockets). Stops on SIGTERM/SIGINT.
"""
import argparse
import asyncio
import signal
import ssl
import sys

try:
    import websockets
except ImportError:
    sys.stderr.write("ws_bridge: python3-websockets is missing (run with /usr/bin/python3)\n")
    sys.exit(77)


def log(msg):
    sys.stderr.write("ws_bridge: %s\n" % msg)
    sys.stderr.flush()


def ssl_context(args):
    if not args.url.startswith("wss://"):
        return None
    if args.cafile:
        return ssl.create_default_context(cafile=args.cafile)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def tcp_to_ws(reader, ws):
    while True:
        data = await reader.read(65536)
        if not data:
            break
        await ws.send(data)  # bytes: one binary message per read
    await ws.close(1000)


async def ws_to_tcp(ws, writer):
    try:
        async for msg in ws:
            writer.write(msg if isinstance(msg, bytes) else msg.encode())
            await writer.drain()
    except websockets.ConnectionClosed:
        pass


def log_close(args, writer, ws):
    """Records the server's Close for the TCP client (see --close-log)."""
    if not args.close_log:
        return
    rcvd = getattr(ws, "close_rcvd", None)  # websockets 10: the Close frame received, if any
    code, reason = (rcvd.code, rcvd.reason) if rcvd is not None else (1006, "")
    port = writer.get_extra_info("peername")[1]
    with open(args.close_log, "a") as f:
        f.write("%d %d %s\n" % (port, code, reason.replace("\n", " ")))


async def bridge(args, reader, writer):
    headers = {"Origin": args.origin} if args.origin else None
    try:
        ws = await websockets.connect(args.url, ssl=ssl_context(args), compression=None,
                                      max_size=args.max_size, ping_interval=None,
                                      extra_headers=headers, open_timeout=10)
    except Exception as e:  # handshake refused, connection refused, TLS failure...
        log("connect %s: %s" % (args.url, e))
        writer.close()
        return
    up = asyncio.ensure_future(tcp_to_ws(reader, ws))
    down = asyncio.ensure_future(ws_to_tcp(ws, writer))
    done, pending = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
    if down in done:  # the server closed: drop the TCP side and stop reading it
        up.cancel()
    else:  # TCP EOF: the Close 1000 was sent; let the server's remaining bytes through
        try:
            await asyncio.wait_for(down, 10)
        except asyncio.TimeoutError:
            down.cancel()
    for t in (up, down):
        try:
            await t
        except (asyncio.CancelledError, websockets.ConnectionClosed, ConnectionError):
            pass
    log_close(args, writer, ws)  # before the TCP close, which is what the test waits for
    await ws.close()
    writer.close()


async def main(args):
    host, _, port = args.listen.rpartition(":")
    server = await asyncio.start_server(lambda r, w: bridge(args, r, w), host or "127.0.0.1",
                                        int(port))
    print("ready %d" % server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set_result, None)
    await stop
    server.close()
    await server.wait_closed()


def parse_args(argv):
    p = argparse.ArgumentParser(description="TCP <-> WebSocket bridge (see the docstring)")
    p.add_argument("url", help="ws://HOST:PORT/PATH or wss://HOST:PORT/PATH")
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on")
    p.add_argument("--cafile", default="", help="verify the wss certificate against this CA")
    p.add_argument("--origin", default="", help="send this Origin header")
    p.add_argument("--max-size", type=int, default=1 << 24, help="largest inbound message")
    p.add_argument("--close-log", default="", help="append each server Close code to this file")
    args = p.parse_args(argv)
    if not args.url.startswith(("ws://", "wss://")):
        p.error("the URL must start with ws:// or wss://")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args(sys.argv[1:])))
