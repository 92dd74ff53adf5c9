/* io_sqconn.c - a TCP connection writing an engine's send queue. See io_sqconn.h. */
#include "io_sqconn.h"

#include "cq_util.h"
#include "io_stream.h"

#include <unistd.h>

static void on_closed(uv_handle_t *h)
{
    io_sqconn_t *c = h->data;
    c->cls->closed(c); /* after every write callback: the queue may go */
}

static void unlist(io_sqconn_t *c)
{
    if (cq_list_empty(&c->node))
        return;
    cq_list_remove(&c->node);
    cq_list_init(&c->node);
    c->cls->nopen--;
}

void cq__io_sqconn_drop(io_sqconn_t *c)
{
    c->closing = c->dropped = true;
    unlist(c);
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    cq__io_sqconn_drop(req->data);
}

/* A closing connection that wrote everything: shut the write side down, then close. */
static void finish(io_sqconn_t *c)
{
    if (c->dropped || c->writing || c->shut || !cq_sendq_idle(c->q))
        return;
    c->shut = true;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
        cq__io_sqconn_drop(c);
}

static void delivered(io_sqconn_t *c)
{
    if (c->cls->delivered && !c->dropped)
        c->cls->delivered(c);
}

static void on_written(uv_write_t *req, int status);

/* A write left in flight continues from on_written. */
void cq__io_sqconn_flush(void *tctx)
{
    io_sqconn_t *c = tctx;
    size_t left = 0;
    if (c->cls->http && !cq_sendq_idle(c->q))
        c->active_ms = uv_now(c->tcp.loop); /* an answer: the request was whole */
    if (c->dropped || c->writing)
        return;
    bool had = !cq_sendq_idle(c->q);
    int r = cq__io_stream_write((uv_stream_t *)&c->tcp, c->q, &c->wreq, on_written, true, &left);
    if (r < 0) {
        cq__io_sqconn_drop(c);
        return;
    }
    if (had && left == 0)
        delivered(c);
    c->writing = left > 0;
    c->inflight = left;
    if (c->closing)
        finish(c);
}

static void on_written(uv_write_t *req, int status)
{
    io_sqconn_t *c = cq_container_of(req, io_sqconn_t, wreq);
    c->writing = false;
    if (c->dropped)
        return; /* canceled by the close */
    if (status < 0) {
        cq__io_sqconn_drop(c);
        return;
    }
    cq_sendq_written(c->q, c->inflight);
    c->inflight = 0;
    delivered(c);
    cq__io_sqconn_flush(c);
}

void cq__io_sqconn_close(void *tctx)
{
    io_sqconn_t *c = tctx;
    if (c->closing)
        return;
    c->closing = true;
    uv_read_stop((uv_stream_t *)&c->tcp);
    cq__io_sqconn_flush(c);
}

int cq__io_sqconn_peer(void *tctx, char *buf, size_t len)
{
    io_sqconn_t *c = tctx;
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    int r = uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl);
    return r < 0 ? r : cq__io_addr_str((struct sockaddr *)&ss, buf, len);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    io_sqconn_t *c = h->data;
    *buf = uv_buf_init((char *)c->cls->rbuf, (unsigned)c->cls->rlen);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    io_sqconn_t *c = s->data;
    if (nread == 0 || c->closing)
        return;
    if (nread < 0) {
        cq__io_sqconn_drop(c);
        return;
    }
    c->cls->input(c, (const uint8_t *)buf->base, (size_t)nread);
}

bool cq__io_sqclass_full(io_sqclass_t *cls, int fd)
{
    if (cls->nopen < cls->max_conns)
        return false;
    cq__io_lsn_refused(cls->lsn, fd, cls->cap_text);
    return true;
}

int cq__io_sqconn_open(io_sqconn_t *c, io_sqclass_t *cls, uv_loop_t *loop, int fd)
{
    c->cls = cls;
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    cq_list_init(&c->node);
    int r = uv_tcp_open(&c->tcp, fd);
    if (r < 0)
        close(fd);
    return r;
}

void cq__io_sqconn_start(io_sqconn_t *c, cq_list_t *list)
{
    cq_list_insert_tail(list, &c->node);
    c->cls->nopen++;
    c->accepted_ms = c->active_ms = uv_now(c->tcp.loop);
    uv_tcp_nodelay(&c->tcp, 1);
    if (c->cls->keepalive_s > 0)
        uv_tcp_keepalive(&c->tcp, 1, (unsigned)c->cls->keepalive_s);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ---- timeouts ------------------------------------------------------------------------------
 * Checked on the owner's tick, so a limit holds to within that. A connection over a limit is
 * dropped at once, with what it has queued: a peer that dribbles bytes or never reads gets no
 * more of the server's memory or time. */

int cq__io_sqconn_expired(const io_sqconn_t *c, uint64_t now)
{
    const io_sqclass_t *k = c->cls;
    if (k->http)
        return k->timeout_ms && now - c->active_ms >= k->timeout_ms ? IO_CLOSE_TIMEOUT : -1;
    if (k->authed && k->auth_timeout_ms && now - c->accepted_ms >= k->auth_timeout_ms &&
        !k->authed(c))
        return IO_CLOSE_PREAUTH;
    if (k->idle_timeout_ms && now - c->active_ms >= k->idle_timeout_ms)
        return IO_CLOSE_IDLE;
    return -1;
}

void cq__io_sqconn_sweep(cq_list_t *list, uint64_t now)
{
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, list)
    {
        io_sqconn_t *c = cq_container_of(n, io_sqconn_t, node);
        int why = cq__io_sqconn_expired(c, now);
        if (why < 0)
            continue;
        cq__io_lsn_count(c->cls->lsn, why);
        cq__io_sqconn_drop(c);
    }
}
