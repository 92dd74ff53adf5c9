/* ws_client.h - the client side of a WebSocket connection (RFC 6455), sans I/O, for cqbench.
 *
 * Minimal but strict enough to notice a misbehaving server:
 *  - bench_ws_request() starts a session and writes the opening handshake (GET with a random
 *    16-byte Sec-WebSocket-Key, Sec-WebSocket-Version 13, no extension, no subprotocol);
 *  - bench_ws_feed() takes the bytes the server sends: first the HTTP response head, which must
 *    be "HTTP/1.1 101" with Upgrade: websocket, a Connection header holding "upgrade" and the
 *    right Sec-WebSocket-Accept; then unmasked server frames. The payload of every data frame
 *    (binary, text and continuation) is passed on as it arrives, possibly in several slices:
 *    chanq treats the messages as one byte stream, so frame boundaries do not matter. Pings are
 *    answered with pongs, a Close is echoed and ends the session;
 *  - bench_ws_frame() builds one masked client frame (a fresh random masking key per frame).
 * A violation (masked server frame, RSV bits, reserved opcode, fragmented or oversized control
 * frame, 64-bit length with the top bit set, continuation outside a message, data frame inside
 * one) fails the session with CQ_EWSPROTO; bench_ws_why() says what it was.
 *
 * Threads: a session belongs to one thread. Memory: a session is a plain struct (no
 * allocation); bytes given to the callbacks are borrowed for the duration of the call.
 */
#ifndef BENCH_WS_CLIENT_H
#define BENCH_WS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_WS_HEAD_MAX  4096 /* largest response head accepted */
#define BENCH_WS_FRAME_HDR 14   /* largest client frame header (with the masking key) */

enum { BENCH_WS_CONT = 0, BENCH_WS_TEXT = 1, BENCH_WS_BINARY = 2 };
enum { BENCH_WS_CLOSE = 8, BENCH_WS_PING = 9, BENCH_WS_PONG = 10 };
enum { BENCH_WS_S_HEAD, BENCH_WS_S_OPEN, BENCH_WS_S_CLOSED, BENCH_WS_S_FAILED };

typedef struct bench_ws {
    int state;       /* BENCH_WS_S_* */
    char accept[29]; /* the Sec-WebSocket-Accept the server must send */
    char head[BENCH_WS_HEAD_MAX];
    size_t head_len;  /* response head bytes collected so far */
    uint8_t hdr[14];  /* the server frame header being collected */
    size_t hdr_len;   /* its bytes so far */
    size_t hdr_need;  /* its full size, once known (2 before) */
    uint64_t left;    /* payload bytes of the current frame still to come */
    uint8_t opcode;   /* of the current frame */
    bool fin;         /* of the current frame */
    bool in_header;   /* collecting a frame header (not its payload) */
    bool in_msg;      /* a fragmented data message is open */
    uint8_t ctl[125]; /* payload of the current control frame */
    size_t ctl_len;
    const char *why; /* why the session failed (static text), or NULL */
} bench_ws_t;

typedef struct bench_ws_cbs {
    /* Payload bytes of data frames, in order. Required. */
    void (*on_data)(void *ud, const uint8_t *p, size_t n);
    /* A complete frame to write to the server (a pong or the Close echo). Required. */
    void (*on_send)(void *ud, const uint8_t *p, size_t n);
} bench_ws_cbs_t;

/* Starts a session in *ws and writes the handshake request for ws://host/path (host is
 * "HOST:PORT" as sent in the Host header, path starts with '/') into buf. Returns the request
 * length, -ENOSPC when cap is too small, or -EIO when no random key could be drawn. */
int bench_ws_request(bench_ws_t *ws, const char *host, const char *path, char *buf, size_t cap);

/* Feeds n bytes received from the server. Returns 0 (more may come; bench_ws_open() tells
 * whether the handshake is done), CQ_ECLOSED once the server's Close arrived (the echo went to
 * on_send), or CQ_EWSPROTO (a bad handshake response or frame; see bench_ws_why()). After a
 * non-zero return, further input is ignored and the same code is returned. */
int bench_ws_feed(bench_ws_t *ws, const uint8_t *p, size_t n, const bench_ws_cbs_t *cb, void *ud);

/* True once the 101 response was accepted and until the session ends. */
bool bench_ws_open(const bench_ws_t *ws);
/* Why the session failed, or NULL. */
const char *bench_ws_why(const bench_ws_t *ws);

/* Writes one masked client frame with FIN set: opcode, then the n payload bytes of p, masked
 * with a fresh random key. out must have room for n + BENCH_WS_FRAME_HDR bytes. Returns the
 * frame length, or -EIO when no random key could be drawn. */
int bench_ws_frame(uint8_t opcode, const uint8_t *p, size_t n, uint8_t *out);

#endif
