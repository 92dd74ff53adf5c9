/* cq_ws.c - a server-side WebSocket session over libwslay's event API.
 *
 * wslay does the message layer: fragmentation, control frames, ping -> pong, the closing
 * handshake, close-code and UTF-8 checks and the message size limit. The gaps of wslay 1.1.1
 * are closed here:
 *
 *  - wslay answers frame-header errors found by its frame parser (a fragmented or over-125-byte
 *    control frame, a non-minimal or top-bit-set length) with a Close that carries no status
 *    code. A small scanner follows the frame headers of the input stream ahead of wslay, and
 *    when a header breaks a rule, wslay is fed only the bytes before that frame and a Close
 *    1002 is queued instead. The scanner checks every header-local rule (RSV bits, reserved
 *    opcodes, masking too), so all of them fail the same way, at the same byte wslay would.
 *  - wslay skips the first two bytes of EVERY payload chunk of a Close frame when it checks the
 *    reason's UTF-8, so a Close that arrives in pieces is checked wrongly (an invalid reason
 *    echoed, a valid one refused). The scanner therefore holds a Close frame back (at most
 *    131 bytes) until it is complete and hands it to wslay in one piece; wslay then gets its
 *    payload as one chunk. Nothing after a Close is read anyway.
 *  - A Close whose payload is exactly one byte is answered by wslay with a status-less Close;
 *    on_frame_recv_start queues Close 1002 first (transports.md section 8).
 *  - Queueing a Close discards control frames already queued, so each pong is emitted as soon
 *    as wslay queues it (and before the session queues a Close of its own).
 *
 * Output: wslay's send callback and the own binary frames both go through cb.on_send, which
 * always takes everything, so wslay never holds a partly sent frame; running wslay_event_send
 * before writing an own frame therefore keeps the wire order.
 */
#include "cq_ws.h"

#include <errno.h>
#include <string.h>

#include <wslay/wslay.h>

#include "cq_alloc.h"
#include "cq_err.h"

#define CLOSE_FRAME_MAX (2 + 4 + 125)

struct cq_ws {
    wslay_event_context_ptr ctx;
    cq_ws_callbacks_t cb;
    void *ud;
    const uint8_t *in; /* the part of the current input wslay may still read */
    size_t inlen;
    int send_err;      /* first on_send error, sticky */
    int fail;          /* the error returned when the connection was failed, sticky */
    bool close_queued; /* cq_ws_close was called */
    bool bad_close;    /* a 1-byte Close arrived: 1002 was queued instead of the echo */
    /* frame-header scanner */
    bool scan_bad;      /* a header broke a rule: nothing from that frame on goes to wslay */
    uint8_t hdr[14];    /* header bytes of the current frame seen so far */
    uint8_t hdr_len;    /* 0 between frames */
    uint8_t hdr_need;   /* full header length, known once hdr_len >= 2 */
    uint64_t len;       /* payload length of the current frame */
    uint64_t skip;      /* payload bytes of the current frame still to pass */
    uint8_t close_need; /* bytes of a held-back Close frame still missing (0: none) */
    uint8_t close_len;
    uint8_t close_buf[CLOSE_FRAME_MAX];
};

/* ---- frame-header scanner -------------------------------------------------------------- */

enum { SCAN_OK = 0, SCAN_BAD = -1, SCAN_CLOSE = 1 };

static bool reserved_opcode(uint8_t op)
{
    return (op >= 3 && op <= 7) || op >= 11;
}

/* Checks the first two header bytes; sets hdr_need and, for 7-bit lengths, len. */
static int scan_first(cq_ws_t *ws)
{
    uint8_t b0 = ws->hdr[0], b1 = ws->hdr[1];
    uint8_t op = b0 & 0x0f, len7 = b1 & 0x7f;
    if ((b0 & 0x70) || reserved_opcode(op) || !(b1 & 0x80))
        return SCAN_BAD;
    if ((op & 0x08) && (!(b0 & 0x80) || len7 > 125))
        return SCAN_BAD;
    ws->hdr_need = (uint8_t)(2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + 4);
    ws->len = len7;
    return op == WSLAY_CONNECTION_CLOSE ? SCAN_CLOSE : SCAN_OK;
}

/* Checks an extended length as soon as its bytes are there (before the mask key), as wslay
 * does. */
static int scan_length(cq_ws_t *ws)
{
    uint8_t len7 = ws->hdr[1] & 0x7f;
    uint64_t len = 0;
    for (int i = 0; i < (len7 == 126 ? 2 : 8); i++)
        len = len << 8 | ws->hdr[2 + i];
    if (len7 == 126 ? len < 126 : (len < 65536 || (len >> 63)))
        return SCAN_BAD;
    ws->len = len;
    return SCAN_OK;
}

/* Takes one more header byte. */
static int scan_header_byte(cq_ws_t *ws, uint8_t byte)
{
    ws->hdr[ws->hdr_len++] = byte;
    if (ws->hdr_len == 2)
        return scan_first(ws);
    if (ws->hdr_len == ws->hdr_need - 4 && ws->hdr_need > 6)
        return scan_length(ws);
    if (ws->hdr_len == ws->hdr_need) {
        ws->skip = ws->len;
        ws->hdr_len = 0;
    }
    return SCAN_OK;
}

/* Follows frame headers through data. Returns how many bytes of data wslay may read now: all
 * of them; or the bytes before a frame whose header breaks a rule (scan_bad is set); or the
 * bytes before a Close frame, whose remaining close_need bytes must then be collected and fed
 * in one piece. Nothing after either is scanned. */
static size_t scan(cq_ws_t *ws, const uint8_t *data, size_t len)
{
    uint8_t carried = ws->hdr_len; /* header bytes of a frame begun in an earlier input */
    size_t i = 0;
    while (i < len) {
        if (ws->skip > 0) {
            size_t n = ws->skip < len - i ? (size_t)ws->skip : len - i;
            ws->skip -= n;
            i += n;
            continue;
        }
        size_t start = i >= ws->hdr_len ? i - ws->hdr_len : 0; /* frame start in data */
        int r = scan_header_byte(ws, data[i++]);
        if (r == SCAN_BAD) {
            ws->scan_bad = true;
            return start;
        }
        if (r == SCAN_CLOSE) {
            size_t fed = start == 0 ? carried : 0; /* given to wslay in an earlier input */
            ws->close_need = (uint8_t)(6 + ws->len - fed);
            return start;
        }
        if (ws->hdr_len == 0)
            carried = 0;
    }
    return len;
}

/* ---- wslay callbacks ------------------------------------------------------------------- */

static ssize_t recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags,
                       void *user_data)
{
    cq_ws_t *ws = user_data;
    (void)flags;
    if (ws->inlen == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    size_t n = len < ws->inlen ? len : ws->inlen;
    memcpy(buf, ws->in, n);
    ws->in += n;
    ws->inlen -= n;
    return (ssize_t)n;
}

static ssize_t send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *user_data)
{
    cq_ws_t *ws = user_data;
    (void)flags;
    int r = ws->send_err ? ws->send_err : ws->cb.on_send(ws->ud, data, len);
    if (r < 0) {
        ws->send_err = r;
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return (ssize_t)len;
}

static int genmask_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user_data)
{
    (void)ctx;
    (void)user_data;
    memset(buf, 0, len); /* a server never masks; wslay does not call this for servers */
    return 0;
}

static void on_frame_start(wslay_event_context_ptr ctx,
                           const struct wslay_event_on_frame_recv_start_arg *arg, void *user_data)
{
    cq_ws_t *ws = user_data;
    if (arg->opcode == WSLAY_CONNECTION_CLOSE && arg->payload_length == 1) {
        ws->bad_close = true;
        wslay_event_queue_close(ctx, WSLAY_CODE_PROTOCOL_ERROR, NULL, 0);
    }
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
                   void *user_data)
{
    cq_ws_t *ws = user_data;
    if (arg->opcode == WSLAY_PING) {
        /* wslay has just queued the pong; emit it now, since queueing a Close (for a later
         * frame in the same input) would discard it. */
        wslay_event_send(ctx);
    } else if (arg->opcode == WSLAY_TEXT_FRAME || arg->opcode == WSLAY_BINARY_FRAME) {
        if (ws->cb.on_message)
            ws->cb.on_message(ws->ud, arg->opcode, arg->msg_length ? arg->msg : NULL,
                              arg->msg_length);
    } else if (arg->opcode == WSLAY_CONNECTION_CLOSE && !ws->bad_close && ws->cb.on_close) {
        size_t rlen = arg->msg_length >= 2 ? arg->msg_length - 2 : 0;
        ws->cb.on_close(ws->ud, arg->status_code ? arg->status_code : 1005,
                        rlen ? arg->msg + 2 : (const uint8_t *)"", rlen);
    }
}

/* ---- life cycle ------------------------------------------------------------------------ */

cq_ws_t *cq_ws_new(const cq_ws_callbacks_t *cb, void *ud, size_t max_message)
{
    static const struct wslay_event_callbacks wcb = {
        recv_cb, send_cb, genmask_cb, on_frame_start, NULL, NULL, on_msg,
    };
    cq_ws_t *ws = cq_calloc(1, sizeof(*ws));
    if (!ws)
        return NULL;
    ws->cb = *cb;
    ws->ud = ud;
    if (wslay_event_context_server_init(&ws->ctx, &wcb, ws) != 0) {
        cq_free(ws);
        return NULL;
    }
    if (max_message == 0)
        max_message = CQ_WS_DEFAULT_MAX_MESSAGE;
    /* wslay applies the limit to control frames too: never below their 125-byte maximum */
    wslay_event_config_set_max_recv_msg_length(ws->ctx, max_message < 125 ? 125 : max_message);
    return ws;
}

void cq_ws_free(cq_ws_t *ws)
{
    if (!ws)
        return;
    wslay_event_context_free(ws->ctx);
    cq_free(ws);
}

/* ---- input ----------------------------------------------------------------------------- */

static int map_wslay(cq_ws_t *ws, int r)
{
    if (ws->send_err)
        return ws->send_err;
    return r == WSLAY_ERR_NOMEM ? -ENOMEM : CQ_EWSPROTO;
}

/* Error for a failed connection (read disabled without the peer's Close), from the Close code
 * that went out: the first failure decides. */
static int failure_code(cq_ws_t *ws)
{
    switch (wslay_event_get_status_code_sent(ws->ctx)) {
    case WSLAY_CODE_INVALID_FRAME_PAYLOAD_DATA:
        return CQ_EWSDATA;
    case WSLAY_CODE_MESSAGE_TOO_BIG:
        return CQ_ETOOBIG;
    default:
        return CQ_EWSPROTO;
    }
}

/* Lets wslay read len bytes, emits its output, and returns the input result. */
static int feed_wslay(cq_ws_t *ws, const uint8_t *bytes, size_t len)
{
    ws->in = bytes;
    ws->inlen = len;
    int r = wslay_event_recv(ws->ctx);
    ws->inlen = 0;
    if (r == 0 && ws->scan_bad && wslay_event_get_read_enabled(ws->ctx)) {
        wslay_event_send(ws->ctx); /* pongs first: queueing a Close discards them */
        wslay_event_queue_close(ws->ctx, WSLAY_CODE_PROTOCOL_ERROR, NULL, 0);
        wslay_event_shutdown_read(ws->ctx);
    }
    int s = wslay_event_send(ws->ctx);
    if (r != 0 || s != 0 || ws->send_err) /* send_err: also from sends inside callbacks */
        return ws->fail = map_wslay(ws, r != 0 ? r : s);
    if (ws->bad_close ||
        (!wslay_event_get_read_enabled(ws->ctx) && !wslay_event_get_close_received(ws->ctx)))
        return ws->fail = failure_code(ws);
    return 0;
}

/* Collects the rest of a held-back Close frame; feeds it to wslay once complete. Bytes after
 * the Close are dropped: wslay reads nothing after a Close. */
static int collect_close(cq_ws_t *ws, const uint8_t *bytes, size_t len)
{
    size_t n = len < ws->close_need ? len : ws->close_need;
    if (n)
        memcpy(ws->close_buf + ws->close_len, bytes, n);
    ws->close_len += (uint8_t)n;
    ws->close_need -= (uint8_t)n;
    if (ws->close_need > 0)
        return 0;
    return feed_wslay(ws, ws->close_buf, ws->close_len);
}

int cq_ws_input(cq_ws_t *ws, const uint8_t *bytes, size_t len)
{
    if (ws->fail || ws->send_err || !wslay_event_get_read_enabled(ws->ctx))
        return 0;
    if (ws->close_need > 0)
        return collect_close(ws, bytes, len);
    size_t n = scan(ws, bytes, len);
    int r = feed_wslay(ws, bytes, n);
    if (r == 0 && ws->close_need > 0 && wslay_event_get_read_enabled(ws->ctx))
        r = collect_close(ws, bytes + n, len - n);
    return r;
}

/* ---- output ---------------------------------------------------------------------------- */

int cq_ws_binary_header(uint64_t len, uint8_t hdr[CQ_WS_HEADER_MAX])
{
    hdr[0] = 0x80 | WSLAY_BINARY_FRAME;
    if (len < 126) {
        hdr[1] = (uint8_t)len;
        return 2;
    }
    if (len <= 0xffff) {
        hdr[1] = 126;
        hdr[2] = (uint8_t)(len >> 8);
        hdr[3] = (uint8_t)len;
        return 4;
    }
    hdr[1] = 127;
    for (int i = 0; i < 8; i++)
        hdr[2 + i] = (uint8_t)(len >> (56 - 8 * i));
    return 10;
}

bool cq_ws_can_send(const cq_ws_t *ws)
{
    return !ws->fail && !ws->send_err && !ws->close_queued &&
           wslay_event_get_write_enabled(ws->ctx) && !wslay_event_get_close_sent(ws->ctx);
}

/* Emits wslay's queued control frames. */
static int flush(cq_ws_t *ws)
{
    int r = wslay_event_send(ws->ctx);
    return r == 0 && !ws->send_err ? 0 : map_wslay(ws, r);
}

int cq_ws_begin_binary(cq_ws_t *ws, uint64_t len, uint8_t hdr[CQ_WS_HEADER_MAX])
{
    if (!cq_ws_can_send(ws))
        return ws->send_err ? ws->send_err : CQ_ECLOSED;
    int r = flush(ws);
    if (r < 0)
        return r;
    if (!cq_ws_can_send(ws)) /* the flush emitted a Close */
        return CQ_ECLOSED;
    return cq_ws_binary_header(len, hdr);
}

static int emit(cq_ws_t *ws, const void *p, size_t n)
{
    int r = ws->cb.on_send(ws->ud, p, n);
    if (r < 0)
        ws->send_err = r;
    return r < 0 ? r : 0;
}

int cq_ws_send(cq_ws_t *ws, int opcode, const struct iovec *iov, int iovcnt)
{
    if (opcode != CQ_WS_TEXT && opcode != CQ_WS_BINARY)
        return -EINVAL;
    uint64_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    uint8_t hdr[CQ_WS_HEADER_MAX];
    int h = cq_ws_begin_binary(ws, total, hdr);
    if (h < 0)
        return h;
    hdr[0] = (uint8_t)(0x80 | opcode);
    int r = emit(ws, hdr, (size_t)h);
    for (int i = 0; r == 0 && i < iovcnt; i++)
        if (iov[i].iov_len)
            r = emit(ws, iov[i].iov_base, iov[i].iov_len);
    return r;
}

int cq_ws_send_binary(cq_ws_t *ws, const struct iovec *iov, int iovcnt)
{
    return cq_ws_send(ws, CQ_WS_BINARY, iov, iovcnt);
}

int cq_ws_ping(cq_ws_t *ws, const uint8_t *data, size_t len)
{
    if (len > 125)
        return -EINVAL;
    if (!cq_ws_can_send(ws))
        return ws->send_err ? ws->send_err : CQ_ECLOSED;
    struct wslay_event_msg m = {WSLAY_PING, data, len};
    int r = wslay_event_queue_msg(ws->ctx, &m);
    if (r != 0)
        return r == WSLAY_ERR_NOMEM ? -ENOMEM : CQ_ECLOSED;
    return flush(ws);
}

static bool sendable_code(uint16_t code)
{
    return code == 0 || (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1011) ||
           (code >= 3000 && code <= 4999);
}

int cq_ws_close(cq_ws_t *ws, uint16_t code, const char *reason)
{
    size_t rlen = reason ? strlen(reason) : 0;
    if (!sendable_code(code) || rlen > 123 || (code == 0 && rlen > 0))
        return -EINVAL;
    if (!cq_ws_can_send(ws))
        return ws->send_err ? ws->send_err : CQ_ECLOSED;
    int r = flush(ws); /* pongs first: queueing a Close discards them */
    if (r < 0)
        return r;
    r = wslay_event_queue_close(ws->ctx, code, (const uint8_t *)reason, rlen);
    if (r != 0)
        return r == WSLAY_ERR_NOMEM ? -ENOMEM : CQ_ECLOSED;
    ws->close_queued = true;
    return flush(ws);
}

/* ---- state ----------------------------------------------------------------------------- */

bool cq_ws_done(const cq_ws_t *ws)
{
    return !wslay_event_want_read(ws->ctx) && !wslay_event_want_write(ws->ctx);
}

int cq_ws_close_code_sent(const cq_ws_t *ws)
{
    return wslay_event_get_status_code_sent(ws->ctx);
}

int cq_ws_close_code_received(const cq_ws_t *ws)
{
    return wslay_event_get_status_code_received(ws->ctx);
}
