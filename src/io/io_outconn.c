/* io_outconn.c - one outgoing TCP connection of an engine loop. See io_outconn.h. */
#include "io_outconn.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <string.h>

#define RD_BUF (64u * 1024u)

/* Freed by its close callback, after lost() told the owner. */
struct io_outconn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    const io_outconn_ops_t *ops;
    void *ud;
    cq_sbuf_t wbuf; /* the bytes of the write in flight */
    bool up, writing, dead;
    uint8_t rbuf[RD_BUF];
};

static void closed(uv_handle_t *h)
{
    io_outconn_t *o = h->data;
    cq_sbuf_done(&o->wbuf);
    cq_free(o);
}

void cq__io_outconn_close(io_outconn_t *o, const char *why)
{
    if (!o || o->dead)
        return;
    o->dead = true;
    o->ops->lost(o->ud, o->up, why);
    uv_close((uv_handle_t *)&o->tcp, closed);
}

static void on_written(uv_write_t *req, int status)
{
    io_outconn_t *o = req->data;
    o->writing = false;
    o->wbuf.len = 0;
    if (o->dead)
        return;
    if (status < 0) {
        cq__io_outconn_close(o, uv_strerror(status));
        return;
    }
    cq__io_outconn_flush(o);
}

void cq__io_outconn_flush(io_outconn_t *o)
{
    if (!o || o->dead || !o->up || o->writing)
        return;
    cq_sbuf_t *out = o->ops->output(o->ud);
    if (!out->len)
        return;
    cq_sbuf_t t = o->wbuf; /* swap: the link's buffer is written, the empty one takes more */
    o->wbuf = *out;
    *out = t;
    uv_buf_t b = uv_buf_init((char *)o->wbuf.data, (unsigned)o->wbuf.len);
    o->wreq.data = o;
    int r = uv_write(&o->wreq, (uv_stream_t *)&o->tcp, &b, 1, on_written);
    if (r < 0) {
        o->wbuf.len = 0;
        cq__io_outconn_close(o, uv_strerror(r));
        return;
    }
    o->writing = true;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    io_outconn_t *o = h->data;
    (void)hint;
    *buf = uv_buf_init((char *)o->rbuf, RD_BUF);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    io_outconn_t *o = s->data;
    if (o->dead || nread == 0)
        return;
    if (nread < 0) {
        cq__io_outconn_close(o, nread == UV_EOF ? "closed by the peer" : uv_strerror((int)nread));
        return;
    }
    int r = o->ops->input(o->ud, (const uint8_t *)buf->base, (size_t)nread);
    if (r < 0) {
        cq__io_outconn_close(o, cq_strerror(r));
        return;
    }
    cq__io_outconn_flush(o);
}

static void on_connect(uv_connect_t *req, int status)
{
    io_outconn_t *o = req->data;
    if (o->dead)
        return; /* closed meanwhile (shutdown) */
    if (status < 0) {
        cq__io_outconn_close(o, uv_strerror(status));
        return;
    }
    o->up = true;
    uv_tcp_nodelay(&o->tcp, 1);
    uv_read_start((uv_stream_t *)&o->tcp, on_alloc, on_read);
    o->ops->up(o->ud);
    cq__io_outconn_flush(o);
}

io_outconn_t *cq__io_outconn_start(uv_loop_t *loop, const struct sockaddr *addr,
                                   const io_outconn_ops_t *ops, void *ud, int *ret_err)
{
    io_outconn_t *o = cq_calloc(1, sizeof(*o));
    if (!o) {
        *ret_err = -ENOMEM;
        return NULL;
    }
    o->ops = ops;
    o->ud = ud;
    cq_sbuf_init(&o->wbuf);
    uv_tcp_init(loop, &o->tcp);
    o->tcp.data = o;
    o->creq.data = o;
    int r = uv_tcp_connect(&o->creq, &o->tcp, addr, on_connect);
    if (r < 0) {
        *ret_err = r;
        o->dead = true;
        uv_close((uv_handle_t *)&o->tcp, closed);
        return NULL;
    }
    return o;
}

bool cq__io_outconn_up(const io_outconn_t *o)
{
    return o && o->up && !o->dead;
}

bool cq__io_outconn_owns(const io_outconn_t *o, const uv_handle_t *h)
{
    return o && h == (const uv_handle_t *)&o->tcp;
}
