/* cq_ws.h - a server-side WebSocket session (RFC 6455) over libwslay's event API.
 *
 * Sans-I/O: the caller feeds the bytes received after the HTTP upgrade (cq_wsup) into
 * cq_ws_input() and gets back
 *   - on_message() for each complete text or binary message,
 *   - on_send() with the wire bytes to transmit (pongs, Close frames, outbound messages), in
 *     wire order; the caller batches them into one write per loop iteration,
 *   - on_close() when the peer's Close frame arrives.
 *
 * Rules enforced on input (the session "fails the connection": it queues and emits the Close
 * frame given here, then cq_ws_input() returns the negative code):
 *   - client frames must be masked; RSV bits set (no extension is negotiated), reserved opcodes
 *     (3-7, 11-15), fragmented or over-125-byte control frames, non-minimal or 64-bit lengths
 *     with the top bit set, a stray continuation or a new data frame inside a fragmented
 *     message, a Close with a 1-byte payload or an invalid status code (e.g. 999)
 *       -> Close 1002, CQ_EWSPROTO;
 *   - invalid UTF-8 in a text message (checked across fragments) or in a Close reason
 *       -> Close 1007, CQ_EWSDATA;
 *   - a message longer than max_message -> Close 1009, CQ_ETOOBIG.
 * Pings are answered with pongs automatically; pongs are ignored. A Close from the peer is
 * echoed with its status code (1005 "no status" gives an empty Close), on_close() is called,
 * and cq_ws_done() becomes true. Bytes after the peer's Close are ignored.
 *
 * chanq carries the channeld byte stream in binary messages: the caller appends each message
 * payload to the connection's input stream and sends each outbound packet as one binary
 * message (cq_ws_send_binary or cq_ws_begin_binary). Text messages are accepted as well and
 * delivered the same way (opcode CQ_WS_TEXT), so a client that can only send text still works;
 * chanq never sends text.
 *
 * Thread: a session is owned by one thread. Callbacks run synchronously inside the cq_ws_*
 * call that caused them. From inside on_message() the caller may call cq_ws_send_binary(),
 * cq_ws_send(), cq_ws_begin_binary(), cq_ws_ping() and cq_ws_close(), but must not call
 * cq_ws_input() or cq_ws_free().
 */
#ifndef CQ_WS_H
#define CQ_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define CQ_WS_DEFAULT_MAX_MESSAGE (1u << 20) /* 1 MiB */
#define CQ_WS_HEADER_MAX          10         /* largest server frame header (no mask) */

enum { CQ_WS_TEXT = 1, CQ_WS_BINARY = 2 };

typedef struct cq_ws cq_ws_t;

typedef struct cq_ws_callbacks {
    /* A complete data message. opcode is CQ_WS_TEXT (valid UTF-8) or CQ_WS_BINARY. data is
     * borrowed for the duration of the call (NULL when len is 0). */
    void (*on_message)(void *ud, int opcode, const uint8_t *data, size_t len);
    /* Wire bytes to transmit, in order. bytes is borrowed for the duration of the call: copy
     * (or write) them before returning. Return 0, or a negative error if they cannot be
     * queued; the session then stops sending and the calling cq_ws_* function returns that
     * error. Required. */
    int (*on_send)(void *ud, const uint8_t *bytes, size_t len);
    /* The peer's Close frame arrived (valid): code is its status code, or 1005 when it had
     * none; reason (borrowed, valid UTF-8, not NUL-terminated) may be empty. The echo Close has
     * been queued. Optional (may be NULL). */
    void (*on_close)(void *ud, int code, const uint8_t *reason, size_t len);
} cq_ws_callbacks_t;

/* Creates a session. cb is copied; ud is passed to every callback. max_message bounds one
 * inbound message (after reassembly; values below 125 are raised to 125, since the limit also
 * applies to control frames); 0 means CQ_WS_DEFAULT_MAX_MESSAGE. Memory per session is wslay's
 * context (about 8 KiB: its input and output buffers) plus the message being reassembled. Returns
 * an owned session or NULL on OOM. */
cq_ws_t *cq_ws_new(const cq_ws_callbacks_t *cb, void *ud, size_t max_message);
/* Frees the session. Takes NULL. Emits nothing. */
void cq_ws_free(cq_ws_t *ws);

/* Feeds len bytes received from the peer (borrowed; the session buffers what it needs).
 * Delivers messages, answers pings and Close frames, and emits the resulting wire bytes
 * through on_send(). Returns 0, or a negative error when the connection must be failed, after
 * the matching Close frame was emitted: CQ_EWSPROTO (1002), CQ_EWSDATA (1007), CQ_ETOOBIG
 * (1009), -ENOMEM (1011 may not have been sent), or an on_send() error. After an error, or
 * once cq_ws_done() is true, input is ignored and 0 is returned. */
int cq_ws_input(cq_ws_t *ws, const uint8_t *bytes, size_t len);

/* Sends the iovcnt buffers of iov (borrowed for the call) as ONE binary message, in one frame.
 * Control frames queued before (pongs) are emitted first. The payload is passed to on_send()
 * as is, without an intermediate copy: on_send() is called with the frame header, then once
 * per non-empty iovec. Returns 0, CQ_ECLOSED once a Close has been queued or sent, or an
 * on_send() error. */
int cq_ws_send_binary(cq_ws_t *ws, const struct iovec *iov, int iovcnt);
/* Like cq_ws_send_binary, with opcode CQ_WS_TEXT or CQ_WS_BINARY (-EINVAL otherwise). A text
 * payload must be valid UTF-8; that is the caller's promise, not checked here (chanq itself
 * sends binary only; test peers echo text). */
int cq_ws_send(cq_ws_t *ws, int opcode, const struct iovec *iov, int iovcnt);

/* Zero-copy variant for a caller that assembles its own write: emits any pending control
 * frames through on_send(), then writes the header of a binary frame of len payload bytes into
 * hdr. The caller must put the returned header bytes and then exactly len payload bytes on the
 * wire right after everything on_send() has emitted so far, before any other cq_ws_* call that
 * may emit bytes. Returns the header length (2, 4 or 10), CQ_ECLOSED, or an on_send() error. */
int cq_ws_begin_binary(cq_ws_t *ws, uint64_t len, uint8_t hdr[CQ_WS_HEADER_MAX]);

/* Sends a ping with len <= 125 bytes of data (borrowed). Returns 0, -EINVAL (too long),
 * CQ_ECLOSED, -ENOMEM, or an on_send() error. */
int cq_ws_ping(cq_ws_t *ws, const uint8_t *data, size_t len);

/* Starts the closing handshake: emits a Close frame with code (1000-4999; 0 sends a Close
 * without status) and reason (borrowed, UTF-8, at most 123 bytes, may be NULL). Afterwards
 * nothing more can be sent, and cq_ws_done() becomes true once the peer's Close arrives; the
 * caller should bound that wait with a timer. Returns 0, -EINVAL, CQ_ECLOSED (a Close was
 * already queued or sent), -ENOMEM, or an on_send() error. */
int cq_ws_close(cq_ws_t *ws, uint16_t code, const char *reason);

/* True when binary messages can still be sent (no Close queued or sent, no failure). */
bool cq_ws_can_send(const cq_ws_t *ws);
/* True when the session is over: the closing handshake finished (both Close frames done) or
 * the connection was failed and its Close emitted. The caller then flushes what on_send()
 * gave it and closes the TCP connection. */
bool cq_ws_done(const cq_ws_t *ws);
/* Status code of the Close sent and received (1005 when it had none; 1006 when none was
 * sent/received yet), for logs. */
int cq_ws_close_code_sent(const cq_ws_t *ws);
int cq_ws_close_code_received(const cq_ws_t *ws);

/* Writes the header of an unmasked (server) binary frame with FIN set for a payload of len
 * bytes into hdr. Returns its length (2, 4 or 10). Pure helper, used by cq_ws_begin_binary. */
int cq_ws_binary_header(uint64_t len, uint8_t hdr[CQ_WS_HEADER_MAX]);

#endif
