/* ws.c - the WebSocket and WSS side of a stream connection.
 *
 * A WS connection is an io_conn_t (io.c) whose ws field points here. Bytes read from the socket
 * go through TLS (WSS only), then the HTTP head parser until the upgrade, then the WebSocket
 * session; each message payload is fed to the core as stream bytes. Outbound, every CH packet
 * of the send queue becomes one binary message (as channeld sends), framed into `pend`, sealed
 * by TLS for WSS, and written with at most one uv_write in flight. A plain GET on the same port
 * is answered from --web-root and the connection is closed after the response.
 *
 * Backpressure: packets leave the send queue only while no write is in flight and less than
 * PEND_HIGH bytes wait, so the send queue's soft and hard limits still see a slow reader.
 */
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_sbuf.h"
#include "cq_sendq.h"
#include "cq_tls.h"
#include "cq_util.h"
#include "cq_ws.h"
#include "cq_wsup.h"
#include "io_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PEND_HIGH    (64u * 1024u)
#define MAX_WEB_FILE (16u * 1024u * 1024u)
#define HDR_SCRATCH  512

enum { WS_HEAD, WS_OPEN, WS_ENDING };

typedef struct io_ws {
    io_conn_t *ic;
    cq_wsup_t *up;   /* the request-head parser; NULL once the head is done */
    cq_ws_t *ws;     /* the session; NULL before the upgrade */
    cq_tls_t *tls;   /* WSS only */
    cq_sbuf_t plain; /* WSS: plaintext waiting for cq_tls_write */
    cq_sbuf_t pend;  /* wire bytes waiting for the next write */
    cq_sbuf_t out;   /* wire bytes of the uv_write in flight */
    uint8_t state;
    uint8_t end_after_write; /* last words queued (HTTP answer, Close): close once written */
    int end_err;             /* the reason handed to the core then */
    const char *end_why;
} io_ws_t;

static void ws_kick(io_conn_t *ic);
static void ws_flush(void *tctx);

/* ---- output ----------------------------------------------------------------------------- */

static int on_tls_out(void *ud, const uint8_t *p, size_t n)
{
    io_ws_t *iw = ud;
    return cq_sbuf_append(&iw->pend, p, n);
}

/* Plaintext for the peer: straight to pend, or through TLS at the next seal(). */
static int emit(io_ws_t *iw, const void *p, size_t n)
{
    return cq_sbuf_append(iw->tls ? &iw->plain : &iw->pend, p, n);
}

static int on_ws_send(void *ud, const uint8_t *p, size_t n)
{
    return emit(ud, p, n);
}

/* Encrypts what emit() collected (one TLS record per flush, not per frame). */
static int seal(io_ws_t *iw)
{
    int r = 0;
    if (!iw->tls)
        return 0;
    if (iw->plain.len && cq_tls_ready(iw->tls)) {
        r = cq_tls_write(iw->tls, iw->plain.data, iw->plain.len);
        iw->plain.len = 0;
    }
    int o = cq_tls_out(iw->tls, on_tls_out, iw);
    return r < 0 ? r : o;
}

static void on_ws_write(uv_write_t *req, int status)
{
    io_conn_t *ic = cq_container_of(req, io_conn_t, wreq);
    io_ws_t *iw = ic->ws;
    ic->writing = 0;
    iw->out.len = 0;
    if (ic->closing)
        return;
    if (status < 0) {
        cq__io_conn_lost(ic, status, "write failed");
        return;
    }
    if (iw->state == WS_OPEN)
        ws_flush(ic);
    else
        ws_kick(ic);
}

/* Writes pend: uv_try_write first, the rest with one uv_write. */
static void ws_kick(io_conn_t *ic)
{
    io_ws_t *iw = ic->ws;
    if (ic->writing || ic->closing)
        return;
    if (iw->pend.len) {
        uv_buf_t b = uv_buf_init((char *)iw->pend.data, (unsigned)iw->pend.len);
        int r = uv_try_write((uv_stream_t *)&ic->tcp, &b, 1);
        if (r < 0 && r != UV_EAGAIN) {
            cq__io_conn_lost(ic, r, "write failed");
            return;
        }
        if (r > 0)
            cq_sbuf_consume(&iw->pend, (size_t)r);
    }
    if (iw->pend.len) {
        cq_sbuf_t t = iw->out; /* swap: pend is written, out collects */
        iw->out = iw->pend;
        iw->pend = t;
        iw->pend.len = 0;
        uv_buf_t b = uv_buf_init((char *)iw->out.data, (unsigned)iw->out.len);
        int r = uv_write(&ic->wreq, (uv_stream_t *)&ic->tcp, &b, 1, on_ws_write);
        if (r < 0) {
            cq__io_conn_lost(ic, r, "write failed");
            return;
        }
        ic->writing = 1;
        return;
    }
    if (iw->end_after_write)
        cq__io_conn_lost(ic, iw->end_err, iw->end_why);
}

/* ---- packets of the send queue -> binary messages ---------------------------------------- */

typedef struct iov_cur {
    const struct iovec *iov;
    int n, i;
    size_t off;
} iov_cur_t;

static size_t cur_copy(iov_cur_t *c, uint8_t *dst, size_t want, bool advance)
{
    iov_cur_t save = *c;
    size_t got = 0;
    while (got < want && c->i < c->n) {
        size_t avail = c->iov[c->i].iov_len - c->off, k = want - got;
        if (k > avail)
            k = avail;
        if (dst)
            memcpy(dst + got, (const uint8_t *)c->iov[c->i].iov_base + c->off, k);
        got += k;
        c->off += k;
        if (c->off == c->iov[c->i].iov_len) {
            c->i++;
            c->off = 0;
        }
    }
    if (!advance)
        *c = save;
    return got;
}

/* Appends the packet at the cursor (5-byte CH header + body) as one binary message. Returns
 * its wire size, 0 at the end, or a negative error. */
static int frame_packet(io_ws_t *iw, iov_cur_t *c, size_t *ret_len)
{
    uint8_t h[CQ_FRAME_HDR_LEN];
    size_t got = cur_copy(c, h, sizeof(h), false);
    if (got == 0)
        return 0;
    if (got < sizeof(h))
        return CQ_EDECODE; /* the queue only holds whole packets */
    size_t len = sizeof(h) + (((size_t)h[2] << 8) | h[3]);
    uint8_t wh[CQ_WS_HEADER_MAX];
    int hl = cq_ws_begin_binary(iw->ws, len, wh);
    if (hl < 0)
        return hl;
    cq_sbuf_t *b = iw->tls ? &iw->plain : &iw->pend;
    if (cq_sbuf_reserve(b, (size_t)hl + len) < 0)
        return -ENOMEM;
    memcpy(b->data + b->len, wh, (size_t)hl);
    if (cur_copy(c, b->data + b->len + hl, len, true) != len)
        return CQ_EDECODE;
    b->len += (size_t)hl + len;
    *ret_len = len;
    return 1;
}

static int move_batches(io_ws_t *iw)
{
    cq_sendq_t *q = cq_conn_sendq(iw->ic->conn);
    while (iw->pend.len + iw->plain.len < PEND_HIGH) {
        const struct iovec *iov;
        int n;
        if (cq_sendq_prepare(q, &iov, &n) < 0)
            return -ENOMEM;
        if (n == 0)
            return 0;
        iov_cur_t c = {iov, n, 0, 0};
        size_t total = 0, len = 0;
        int r;
        while ((r = frame_packet(iw, &c, &len)) > 0)
            total += len;
        if (r < 0)
            return r;
        cq_sendq_written(q, total);
    }
    return 0;
}

static void ws_flush(void *tctx)
{
    io_conn_t *ic = tctx;
    io_ws_t *iw = ic->ws;
    if (ic->closing || ic->writing || iw->state != WS_OPEN)
        return;
    int r = move_batches(iw);
    if (r == 0)
        r = seal(iw);
    if (r < 0 && r != CQ_ECLOSED) {
        cq__io_conn_lost(ic, r, "websocket write failed");
        return;
    }
    ws_kick(ic);
}

/* Best effort: the last bytes (a Close frame, an HTTP error) before the socket closes. */
static void try_write_pend(io_conn_t *ic)
{
    io_ws_t *iw = ic->ws;
    if (ic->writing || !iw->pend.len)
        return;
    uv_buf_t b = uv_buf_init((char *)iw->pend.data, (unsigned)iw->pend.len);
    int r = uv_try_write((uv_stream_t *)&ic->tcp, &b, 1);
    if (r > 0)
        cq_sbuf_consume(&iw->pend, (size_t)r);
}

/* The Close code for a close the core decided, by its reason (doc/transports.md, "Close
 * codes"): a malformed channeld packet is a protocol error, a refusal under the server's rules
 * (failed AUTH, timeouts, limits, a slow reader) a policy violation. */
static uint16_t close_code(int reason)
{
    switch (reason) {
    case 0:
        return 1000;
    case CQ_EAUTH:
    case CQ_ETIMEOUT:
    case CQ_ELIMIT:
    case CQ_ESLOW:
    case CQ_EFSM:
    case CQ_EACL:
        return 1008;
    default: /* every other project code is about the peer's bytes; -errno is ours */
        return reason <= CQ_EMAGIC ? 1002 : 1011;
    }
}

static void ws_close(void *tctx)
{
    io_conn_t *ic = tctx;
    io_ws_t *iw = ic->ws;
    if (ic->closing)
        return;
    if (iw->ws && cq_ws_can_send(iw->ws)) {
        int reason = cq_conn_close_reason(ic->conn);
        char text[124]; /* a Close reason is at most 123 bytes */
        snprintf(text, sizeof(text), "%s", reason ? cq_strerror(reason) : "closed by server");
        ws_flush(ic); /* replies queued before the close */
        cq_ws_close(iw->ws, close_code(reason), text);
    }
    if (iw->tls && cq_tls_ready(iw->tls)) {
        seal(iw);
        cq_tls_shutdown(iw->tls);
    }
    seal(iw);
    try_write_pend(ic);
    cq__io_conn_shut(ic);
}

const cq_transport_ops_t cq__io_ws_ops = {"ws", ws_flush, ws_close, cq__io_tcp_peer};

/* ---- input ------------------------------------------------------------------------------ */

static void on_ws_message(void *ud, int opcode, const uint8_t *data, size_t len)
{
    io_ws_t *iw = ud;
    io_conn_t *ic = iw->ic;
    if (ic->closing || !len)
        return;
    cq_core_conn_input(ic->w->core, ic->conn, data, len, uv_now(&ic->w->loop));
}

static void on_ws_close(void *ud, int code, const uint8_t *reason, size_t len)
{
    io_ws_t *iw = ud;
    CQ_DEBUG("ws", "conn %p: peer sent Close %d", (void *)iw->ic, code);
}

/* Ends the exchange after what is in pend has been written (an HTTP answer, the Close frame
 * of a failed connection): reading stops now, and the core hears of the end (err, why) once
 * the last byte is out, so the TCP close never overtakes it. */
static void end_after_write(io_ws_t *iw, int err, const char *why)
{
    iw->state = WS_ENDING;
    iw->end_after_write = 1;
    iw->end_err = err;
    iw->end_why = why;
    uv_read_stop((uv_stream_t *)&iw->ic->tcp);
}

static int answer_http_error(io_ws_t *iw, int status, const char *reason)
{
    char head[HDR_SCRATCH];
    int n = cq_wsup_response_error(status, reason, head, sizeof(head));
    if (n > 0)
        emit(iw, head, (size_t)n);
    char peer[64] = "?";
    cq__io_ws_ops.peer(iw->ic, peer, sizeof(peer));
    CQ_INFO("ws", "HTTP %d to %s: %s", status, peer, reason);
    end_after_write(iw, 0, "bad WebSocket upgrade request");
    return 0;
}

/* Reads root/path into b (bounded). Returns 0, -ENOENT, or another negative error. */
static int read_web_file(const char *root, const char *path, cq_sbuf_t *b)
{
    char full[1024];
    if (!*root || path[0] != '/' || strstr(path, "..") || strchr(path, '\\'))
        return -ENOENT;
    int n = snprintf(full, sizeof(full), "%s%s%s", root, path,
                     path[strlen(path) - 1] == '/' ? "index.html" : "");
    if (n < 0 || (size_t)n >= sizeof(full))
        return -ENOENT;
    int fd = open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    struct stat st;
    int r = 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > MAX_WEB_FILE) {
        r = -ENOENT;
        goto out;
    }
    if ((r = cq_sbuf_reserve(b, (size_t)st.st_size)) < 0)
        goto out;
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t k = read(fd, b->data + b->len + got, (size_t)st.st_size - got);
        if (k <= 0) {
            r = k < 0 ? -errno : -EIO;
            goto out;
        }
        got += (size_t)k;
    }
    b->len += got;
out:
    close(fd);
    return r;
}

static void serve_plain(io_ws_t *iw, const cq_wsup_request_t *req)
{
    cq_sbuf_t body;
    cq_sbuf_init(&body);
    const char *root = iw->ic->w->io->opts.web_root;
    int r = read_web_file(root ? root : "", req->path, &body);
    int status = r < 0 ? 404 : 200;
    const char *name = strcmp(req->path, "/") == 0 ? "index.html" : req->path;
    if (r < 0) {
        body.len = 0;
        cq_sbuf_append(&body, "not found\n", 10);
    }
    char head[HDR_SCRATCH];
    int n = cq_wsup_response_file(status, name, body.len, head, sizeof(head));
    if (n > 0) {
        emit(iw, head, (size_t)n);
        if (!req->head)
            emit(iw, body.data, body.len);
    }
    cq_sbuf_done(&body);
    CQ_DEBUG("ws", "HTTP %d for %s", status, req->path);
    end_after_write(iw, 0, "HTTP request served");
}

static int upgrade(io_ws_t *iw, const cq_wsup_request_t *req)
{
    static const cq_ws_callbacks_t cbs = {on_ws_message, on_ws_send, on_ws_close};
    char head[HDR_SCRATCH];
    int n = cq_wsup_response_101(req, NULL, head, sizeof(head));
    if (n < 0)
        return n;
    iw->ws = cq_ws_new(&cbs, iw, iw->ic->w->io->opts.ws_max_message);
    if (!iw->ws)
        return -ENOMEM;
    iw->state = WS_OPEN;
    return emit(iw, head, (size_t)n);
}

/* Plaintext from the peer (after TLS). Returns 0 or a negative error (connection lost). */
static int ws_plain(void *ud, const uint8_t *p, size_t n)
{
    io_ws_t *iw = ud;
    if (iw->state == WS_HEAD) {
        size_t used = 0;
        int r = cq_wsup_feed(iw->up, p, n, &used);
        if (r == CQ_WSUP_NEED_MORE)
            return 0;
        if (r == CQ_EHTTP)
            return answer_http_error(iw, cq_wsup_status(iw->up), cq_wsup_reason(iw->up));
        if (r < 0)
            return r;
        if (r == CQ_WSUP_PLAIN) {
            serve_plain(iw, cq_wsup_request(iw->up));
            return 0;
        }
        if ((r = upgrade(iw, cq_wsup_request(iw->up))) < 0)
            return r;
        p += used;
        n -= used;
    }
    if (iw->state != WS_OPEN || !n)
        return 0;
    return cq_ws_input(iw->ws, p, n);
}

static const char *ws_error_text(int r)
{
    switch (r) {
    case CQ_EWSPROTO:
        return "WebSocket protocol error (closed with 1002)";
    case CQ_EWSDATA:
        return "invalid UTF-8 in a WebSocket text message or close reason (closed with 1007)";
    case CQ_ETOOBIG:
        return "WebSocket message over --ws-max-message (closed with 1009)";
    case CQ_ETLS:
        return "TLS error";
    default:
        return "WebSocket input failed";
    }
}

void cq__io_ws_input(io_conn_t *ic, const uint8_t *p, size_t n)
{
    io_ws_t *iw = ic->ws;
    if (iw->state == WS_ENDING)
        return;
    int r = iw->tls ? cq_tls_input(iw->tls, p, n, ws_plain, iw) : ws_plain(iw, p, n);
    int s = seal(iw);
    if (ic->closing)
        return;
    if (r < 0) {
        if (r == CQ_ETLS) {
            char peer[64] = "?";
            cq__io_tcp_peer(ic, peer, sizeof(peer));
            CQ_INFO("ws", "TLS error from %s: %s", peer, cq_tls_error(iw->tls));
        }
        end_after_write(iw, r == CQ_ECLOSED ? 0 : r,
                        r == CQ_ECLOSED ? "TLS closed by peer" : ws_error_text(r));
        ws_kick(ic);
        return;
    }
    if (iw->ws && cq_ws_done(iw->ws)) {
        end_after_write(iw, 0, "WebSocket closed by peer");
        ws_kick(ic);
        return;
    }
    if (s < 0) {
        cq__io_conn_lost(ic, s, "TLS write failed");
        return;
    }
    ws_kick(ic);
}

/* ---- lifecycle -------------------------------------------------------------------------- */

static bool loopback_addr(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family != AF_INET6)
        return false;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* True when the listener that accepted ic is on loopback: the connection arrived on a loopback
 * address, and not through a wildcard listener on that port (which serves every address). */
static bool listener_on_loopback(io_conn_t *ic)
{
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    if (uv_tcp_getsockname(&ic->tcp, (struct sockaddr *)&ss, &sl) < 0 || !loopback_addr(&ss))
        return false;
    unsigned port = ntohs(((struct sockaddr_in *)&ss)->sin_port); /* same offset in _in6 */
    char any4[32], any6[32];
    snprintf(any4, sizeof(any4), "0.0.0.0:%u", port);
    snprintf(any6, sizeof(any6), "[::]:%u", port);
    for (int i = 0; i < IO_B__COUNT; i++) {
        const char *b = ic->w->io->bound[i];
        if (strcmp(b, any4) == 0 || strcmp(b, any6) == 0)
            return false;
    }
    return true;
}

int cq__io_ws_start(io_conn_t *ic)
{
    const cq_io_opts_t *o = &ic->w->io->opts;
    io_ws_t *iw = cq_calloc(1, sizeof(*iw));
    if (!iw)
        return -ENOMEM;
    iw->ic = ic;
    cq_sbuf_init(&iw->plain);
    cq_sbuf_init(&iw->pend);
    cq_sbuf_init(&iw->out);
    /* With no --ws-origins, a listener other hosts can reach refuses cross-site pages. */
    cq_wsup_config_t cfg = {o->ws_path, o->ws_origins, !listener_on_loopback(ic), 0};
    iw->up = cq_wsup_new(&cfg);
    if (ic->kind == IO_WSS)
        iw->tls = cq_tls_new(ic->w->io->tls);
    ic->ws = iw;
    if (!iw->up || (ic->kind == IO_WSS && !iw->tls))
        return -ENOMEM;
    return 0;
}

void cq__io_ws_free(io_conn_t *ic)
{
    io_ws_t *iw = ic->ws;
    if (!iw)
        return;
    cq_wsup_free(iw->up);
    cq_ws_free(iw->ws);
    cq_tls_free(iw->tls);
    cq_sbuf_done(&iw->plain);
    cq_sbuf_done(&iw->pend);
    cq_sbuf_done(&iw->out);
    cq_free(iw);
    ic->ws = NULL;
}

int cq__io_tls_init(cq_io_t *io, char *err, size_t errlen)
{
    const cq_io_opts_t *o = &io->opts;
    if (!o->wss_addr || !*o->wss_addr)
        return 0;
    if (!o->tls_cert || !*o->tls_cert || !o->tls_key || !*o->tls_key) {
        snprintf(err, errlen, "--wss-addr needs --tls-cert and --tls-key");
        return CQ_ECONFIG;
    }
    char why[256] = "";
    io->tls = cq_tls_ctx_new(o->tls_cert, o->tls_key, why, sizeof(why));
    if (!io->tls) {
        snprintf(err, errlen, "cannot load the TLS certificate or key: %s", why);
        return CQ_ECONFIG;
    }
    return 0;
}

void cq__io_tls_done(cq_io_t *io)
{
    cq_tls_ctx_free(io->tls);
    io->tls = NULL;
}
