/* chanq_uv.c - libuv adapter: uv_tcp_t reads feed the core; a uv_prepare_t flushes writes. */
#include "chanq_uv.h"

#include "cq_alloc.h"

#include <errno.h>
#include <string.h>

#define READ_BUF 65536

struct chanq_uv {
    uv_tcp_t tcp;
    uv_prepare_t prep;
    uv_connect_t creq;
    uv_write_t wreq;
    chanq_client_t *core;
    chanq_uv_cbs_t cbs;
    void *ud;
    uint8_t *wbuf; /* owned by the in-flight uv_write until its callback */
    size_t wlen;   /* 0 when no write is in flight */
    int close_err;
    int handles_open; /* initialised handles (tcp, then prep) not yet reported closed */
    bool connected;
    bool closing;
};

static void finish_close(uv_handle_t *h)
{
    chanq_uv_t *c = h->data;
    if (--c->handles_open > 0)
        return;
    if (c->cbs.on_close)
        c->cbs.on_close(c, c->close_err, c->ud);
    cq_free(c->wbuf);
    chanq_client_free(c->core);
    cq_free(c);
}

static void close_with(chanq_uv_t *c, int err)
{
    if (c->closing)
        return;
    c->closing = true;
    c->close_err = err;
    if (c->handles_open == 2)
        uv_close((uv_handle_t *)&c->prep, finish_close);
    uv_close((uv_handle_t *)&c->tcp, finish_close);
}

void chanq_uv_close(chanq_uv_t *c)
{
    close_with(c, 0);
}

/* ---- writing ----------------------------------------------------------------------------- */

static void on_write(uv_write_t *req, int status)
{
    chanq_uv_t *c = req->data;
    cq_free(c->wbuf);
    c->wbuf = NULL;
    c->wlen = 0;
    if (status < 0)
        close_with(c, status); /* no-op if already closing (UV_ECANCELED) */
}

/* Runs once per loop iteration, before the loop blocks for I/O. */
static void on_prepare(uv_prepare_t *p)
{
    chanq_uv_t *c = p->data;
    if (!c->connected || c->closing || c->wlen)
        return;
    const uint8_t *out;
    size_t n;
    int r = chanq_client_out(c->core, &out, &n);
    if (r < 0) {
        close_with(c, r);
        return;
    }
    if (!n)
        return;
    uv_buf_t b = uv_buf_init((char *)out, (unsigned)n);
    int k = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (k < 0 && k != UV_EAGAIN) {
        close_with(c, k);
        return;
    }
    size_t done = k > 0 ? (size_t)k : 0;
    chanq_client_out_consume(c->core, done);
    if (done == n)
        return;
    /* The core's buffer may move when more messages are queued: copy the rest. */
    c->wlen = n - done;
    c->wbuf = cq_malloc(c->wlen);
    if (!c->wbuf) {
        c->wlen = 0;
        close_with(c, UV_ENOMEM);
        return;
    }
    memcpy(c->wbuf, out + done, c->wlen);
    chanq_client_out_consume(c->core, c->wlen);
    b = uv_buf_init((char *)c->wbuf, (unsigned)c->wlen);
    r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (r < 0) {
        cq_free(c->wbuf);
        c->wbuf = NULL;
        c->wlen = 0;
        close_with(c, r);
    }
}

/* ---- reading ----------------------------------------------------------------------------- */

/* One read buffer per thread: chanq_client_feed() consumes (or copies what it must keep) before
 * the callback returns, so connections need no 64 KiB buffer each. */
static _Thread_local uint8_t rbuf[READ_BUF];

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)h;
    (void)hint;
    *buf = uv_buf_init((char *)rbuf, READ_BUF);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    chanq_uv_t *c = s->data;
    if (n < 0) {
        close_with(c, (int)n);
        return;
    }
    if (n == 0 || c->closing)
        return;
    int r = chanq_client_feed(c->core, buf->base, (size_t)n);
    if (r < 0)
        close_with(c, r);
}

static void on_core_msg(void *ud, const chanq_msg_t *m)
{
    chanq_uv_t *c = ud;
    if (c->cbs.on_message && !c->closing)
        c->cbs.on_message(c, m, c->ud);
}

static void on_connect(uv_connect_t *req, int status)
{
    chanq_uv_t *c = req->data;
    if (status == 0 && !c->closing)
        status = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (status == 0 && !c->closing)
        c->connected = true;
    if (c->cbs.on_connect && status != UV_ECANCELED)
        c->cbs.on_connect(c, status, c->ud);
    if (status < 0)
        close_with(c, status);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static int init_handles(uv_loop_t *loop, chanq_uv_t *c)
{
    int r = uv_tcp_init(loop, &c->tcp);
    if (r < 0)
        return r;
    c->handles_open = 1;
    c->tcp.data = c;
    r = uv_prepare_init(loop, &c->prep);
    if (r < 0)
        return r;
    c->handles_open = 2;
    c->prep.data = c;
    c->creq.data = c;
    c->wreq.data = c;
    uv_tcp_nodelay(&c->tcp, 1);
    r = uv_prepare_start(&c->prep, on_prepare);
    if (r < 0)
        return r;
    uv_unref((uv_handle_t *)&c->prep); /* the socket, not the flush hook, keeps the loop alive */
    return 0;
}

int chanq_uv_connect(uv_loop_t *loop, const struct sockaddr *addr, const chanq_opts_t *opts,
                     const chanq_uv_cbs_t *cbs, void *ud, chanq_uv_t **ret_c)
{
    if (!loop || !addr || !ret_c)
        return UV_EINVAL;
    chanq_uv_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return UV_ENOMEM;
    if (cbs)
        c->cbs = *cbs;
    c->ud = ud;
    chanq_opts_t o;
    if (opts)
        o = *opts;
    else
        chanq_opts_init(&o);
    o.on_message = on_core_msg;
    o.ud = c;
    int r = chanq_client_new(&o, &c->core);
    if (r < 0) {
        cq_free(c);
        return r;
    }
    r = init_handles(loop, c);
    if (r == 0)
        r = uv_tcp_connect(&c->creq, &c->tcp, addr, on_connect);
    if (r < 0) {
        /* Handles may already be registered with the loop: close them without callbacks. */
        c->cbs.on_close = NULL;
        if (c->handles_open)
            close_with(c, r);
        else {
            chanq_client_free(c->core);
            cq_free(c);
        }
        return r;
    }
    *ret_c = c;
    return 0;
}

chanq_client_t *chanq_uv_client(chanq_uv_t *c)
{
    return c->core;
}

int chanq_uv_send(chanq_uv_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                  uint32_t msg_type, const ProtobufCMessage *msg)
{
    if (c->closing)
        return CQ_ECLOSED;
    return chanq_client_send(c->core, channel_id, broadcast, stub_id, msg_type, msg);
}

int chanq_uv_send_raw(chanq_uv_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                      uint32_t msg_type, const void *body, size_t len)
{
    if (c->closing)
        return CQ_ECLOSED;
    return chanq_client_send_raw(c->core, channel_id, broadcast, stub_id, msg_type, body, len);
}

size_t chanq_uv_pending(const chanq_uv_t *c)
{
    return chanq_client_out_pending(c->core) + c->wlen;
}
