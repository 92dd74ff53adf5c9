/* chanq_uv.c - libuv adapter: uv_tcp_t reads feed the core; a uv_prepare_t flushes writes. A
 * moving client (chanq_uv_connect_list) adds a uv_timer_t for the engine's backoff and
 * deadlines, and initialises its uv_tcp_t again for each connection try. */
#include "chanq_uv.h"

#include "cq_alloc.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#define READ_BUF 65536

struct chanq_uv {
    uv_loop_t *loop;
    uv_tcp_t tcp;
    uv_prepare_t prep;
    uv_timer_t timer; /* moving clients only */
    uv_connect_t creq;
    uv_write_t wreq;
    chanq_client_t *core;
    chanq_uv_cbs_t cbs;
    void *ud;
    uint8_t *wbuf; /* owned by the in-flight uv_write until its callback */
    size_t wlen;   /* 0 when no write is in flight */
    int close_err;
    int handles_open; /* initialised handles not yet reported closed */
    bool tcp_open;    /* tcp initialised and not closing */
    bool prep_init, timer_init;
    bool connected;
    bool closing;
    chanq_move_t *mv;              /* chanq_uv_connect_list; NULL otherwise */
    struct sockaddr_storage *addr; /* the list, parsed */
    bool reported;                 /* on_connect was called */
};

static void free_all(chanq_uv_t *c)
{
    cq_free(c->wbuf);
    chanq_move_free(c->mv); /* before the core: it may hold a stub there */
    chanq_client_free(c->core);
    cq_free(c->addr);
    cq_free(c);
}

static void mv_schedule(chanq_uv_t *c);

static void on_closed(uv_handle_t *h)
{
    chanq_uv_t *c = h->data;
    if (--c->handles_open > 0 || !c->closing) {
        if (!c->closing && h == (uv_handle_t *)&c->tcp)
            mv_schedule(c); /* a moving client's connection: on to the next try */
        return;
    }
    if (c->cbs.on_close)
        c->cbs.on_close(c, c->close_err, c->ud);
    free_all(c);
}

static void close_with(chanq_uv_t *c, int err)
{
    if (c->closing)
        return;
    c->closing = true;
    c->close_err = err;
    if (c->mv && !c->reported && c->cbs.on_connect)
        c->cbs.on_connect(c, err ? err : UV_ECANCELED, c->ud); /* no address answered */
    if (c->timer_init)
        uv_close((uv_handle_t *)&c->timer, on_closed);
    if (c->prep_init)
        uv_close((uv_handle_t *)&c->prep, on_closed);
    if (c->tcp_open)
        uv_close((uv_handle_t *)&c->tcp, on_closed);
    c->tcp_open = false;
    c->connected = false;
}

void chanq_uv_close(chanq_uv_t *c)
{
    close_with(c, 0);
}

/* ---- moving ------------------------------------------------------------------------------ */

/* The connection losses a moving client moves on; anything else (a core error: bad bytes from
 * the server) closes it as it closes a client without a list. */
static bool is_loss(int err)
{
    return err == UV_EOF || err == UV_ECONNRESET || err == UV_EPIPE || err == UV_ETIMEDOUT ||
           err == UV_EHOSTUNREACH || err == UV_ENETUNREACH || err == UV_ENETDOWN ||
           err == UV_ECONNABORTED || err == UV_EHOSTDOWN;
}

/* Closes this try's connection; on_closed then schedules what the engine decided. */
static void tcp_drop(chanq_uv_t *c)
{
    if (!c->tcp_open)
        return;
    c->tcp_open = false;
    c->connected = false;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

/* The connection ended with err: a moving client tells the engine and drops it. */
static void lose(chanq_uv_t *c, int err)
{
    if (!c->mv || !is_loss(err)) {
        close_with(c, err);
        return;
    }
    if (!c->tcp_open || c->closing)
        return;
    uint64_t now = uv_now(c->loop);
    if (chanq_move_state(c->mv) == CHANQ_MOVE_UP)
        chanq_move_lost(c->mv, c->core, err, (int64_t)now);
    else
        chanq_move_failed(c->mv, err, (int64_t)now);
    tcp_drop(c);
}

static void on_deadline(uv_timer_t *t)
{
    chanq_uv_t *c = t->data;
    if (chanq_move_tick(c->mv, (int64_t)uv_now(c->loop)))
        tcp_drop(c);
}

static void timer_at(chanq_uv_t *c, int64_t at, uv_timer_cb cb)
{
    int64_t now = (int64_t)uv_now(c->loop);
    uv_timer_start(&c->timer, cb, at > now ? (uint64_t)(at - now) : 0, 0);
}

/* After connected or a feed in AUTH: acts on the engine's state. */
static void mv_after(chanq_uv_t *c)
{
    switch (chanq_move_state(c->mv)) {
    case CHANQ_MOVE_UP:
        uv_timer_stop(&c->timer);
        if (!c->reported) {
            c->reported = true;
            if (c->cbs.on_connect)
                c->cbs.on_connect(c, 0, c->ud);
        }
        break;
    case CHANQ_MOVE_AUTH:
        timer_at(c, chanq_move_deadline(c->mv), on_deadline);
        break;
    case CHANQ_MOVE_WAIT:
        tcp_drop(c); /* this try failed */
        break;
    case CHANQ_MOVE_FAILED:
        close_with(c, chanq_move_error(c->mv));
        break;
    default:
        break;
    }
}

static void on_connect(uv_connect_t *req, int status);

/* Probes an idle connection so that a peer gone without a close is noticed (UV_ETIMEDOUT). */
static void set_keepalive(chanq_uv_t *c)
{
    uint32_t idle = chanq_move_opts(c->mv)->keepalive_s;
    uv_os_fd_t fd;
    if (!idle || uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0)
        return;
    int one = 1, secs = (int)idle, intvl = 1, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &secs, sizeof(secs));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static void on_due(uv_timer_t *t)
{
    chanq_uv_t *c = t->data;
    int64_t now = (int64_t)uv_now(c->loop);
    chanq_move_connecting(c->mv, now);
    int r = uv_tcp_init(c->loop, &c->tcp);
    if (r < 0) {
        chanq_move_failed(c->mv, r, now);
        mv_schedule(c);
        return;
    }
    c->handles_open++;
    c->tcp_open = true;
    c->tcp.data = c;
    uv_tcp_nodelay(&c->tcp, 1);
    const struct sockaddr *a = (const struct sockaddr *)&c->addr[chanq_move_target(c->mv)];
    r = uv_tcp_connect(&c->creq, &c->tcp, a, on_connect);
    if (r < 0) {
        lose(c, UV_ECONNABORTED); /* a failed try: the next address */
        return;
    }
    timer_at(c, chanq_move_deadline(c->mv), on_deadline);
}

/* Between connections: waits for the next try, or gives up. */
static void mv_schedule(chanq_uv_t *c)
{
    if (c->closing)
        return;
    if (chanq_move_state(c->mv) == CHANQ_MOVE_WAIT)
        timer_at(c, chanq_move_due(c->mv), on_due);
    else if (chanq_move_state(c->mv) == CHANQ_MOVE_FAILED)
        close_with(c, chanq_move_error(c->mv));
}

/* ---- writing ----------------------------------------------------------------------------- */

static void on_write(uv_write_t *req, int status)
{
    chanq_uv_t *c = req->data;
    cq_free(c->wbuf);
    c->wbuf = NULL;
    c->wlen = 0;
    if (status < 0 && status != UV_ECANCELED)
        lose(c, status);
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
        lose(c, k);
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
        lose(c, r);
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
        lose(c, (int)n);
        return;
    }
    if (n == 0 || c->closing || !c->tcp_open)
        return;
    bool authing = c->mv && chanq_move_state(c->mv) == CHANQ_MOVE_AUTH;
    int r = chanq_client_feed(c->core, buf->base, (size_t)n);
    if (r < 0 && authing && chanq_move_state(c->mv) == CHANQ_MOVE_AUTH)
        chanq_move_failed(c->mv, r, (int64_t)uv_now(c->loop)); /* garbage instead of a result */
    else if (r < 0)
        close_with(c, r);
    if (authing && !c->closing)
        mv_after(c);
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
    if (status == UV_ECANCELED || c->closing)
        return; /* the handle is closing: its close reports */
    if (status == 0)
        status = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (!c->mv) {
        c->connected = status == 0;
        if (c->cbs.on_connect)
            c->cbs.on_connect(c, status, c->ud);
        if (status < 0)
            close_with(c, status);
        return;
    }
    if (status < 0) {
        chanq_move_failed(c->mv, status, (int64_t)uv_now(c->loop));
        tcp_drop(c);
        return;
    }
    c->connected = true;
    set_keepalive(c);
    uv_timer_stop(&c->timer);
    chanq_move_connected(c->mv, c->core, (int64_t)uv_now(c->loop));
    mv_after(c);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

/* The adapter and its core, on loop, with no handle yet. */
static int uv_new(uv_loop_t *loop, const chanq_opts_t *opts, const chanq_uv_cbs_t *cbs, void *ud,
                  chanq_uv_t **ret_c)
{
    chanq_uv_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return UV_ENOMEM;
    c->loop = loop;
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
    c->creq.data = c;
    c->wreq.data = c;
    *ret_c = c;
    return 0;
}

/* The flush hook, and for a moving client its timer. */
static int init_prep(chanq_uv_t *c)
{
    int r = uv_prepare_init(c->loop, &c->prep);
    if (r < 0)
        return r;
    c->handles_open++;
    c->prep_init = true;
    c->prep.data = c;
    r = uv_prepare_start(&c->prep, on_prepare);
    if (r < 0)
        return r;
    uv_unref((uv_handle_t *)&c->prep); /* the socket, not the flush hook, keeps the loop alive */
    if (!c->mv)
        return 0;
    r = uv_timer_init(c->loop, &c->timer);
    if (r < 0)
        return r;
    c->handles_open++;
    c->timer_init = true;
    c->timer.data = c;
    return 0;
}

/* Creation failed with r after some handles were registered: they close without callbacks. */
static int fail_new(chanq_uv_t *c, int r)
{
    c->cbs.on_close = NULL;
    c->reported = true; /* no on_connect either */
    if (c->handles_open)
        close_with(c, r);
    else
        free_all(c);
    return r;
}

int chanq_uv_connect(uv_loop_t *loop, const struct sockaddr *addr, const chanq_opts_t *opts,
                     const chanq_uv_cbs_t *cbs, void *ud, chanq_uv_t **ret_c)
{
    if (!loop || !addr || !ret_c)
        return UV_EINVAL;
    chanq_uv_t *c;
    int r = uv_new(loop, opts, cbs, ud, &c);
    if (r < 0)
        return r;
    r = uv_tcp_init(loop, &c->tcp);
    if (r < 0)
        return fail_new(c, r);
    c->handles_open++;
    c->tcp_open = true;
    c->tcp.data = c;
    uv_tcp_nodelay(&c->tcp, 1);
    r = init_prep(c);
    if (r == 0)
        r = uv_tcp_connect(&c->creq, &c->tcp, addr, on_connect);
    if (r < 0)
        return fail_new(c, r);
    *ret_c = c;
    return 0;
}

/* Every address of the list as a sockaddr (numeric hosts only). */
static int parse_addrs(chanq_uv_t *c)
{
    size_t n = chanq_move_addr_count(c->mv);
    c->addr = cq_calloc(n, sizeof(*c->addr));
    if (!c->addr)
        return UV_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const char *h = chanq_move_host(c->mv, i);
        int port = chanq_move_port(c->mv, i);
        if (uv_ip4_addr(h, port, (struct sockaddr_in *)&c->addr[i]) < 0 &&
            uv_ip6_addr(h, port, (struct sockaddr_in6 *)&c->addr[i]) < 0)
            return UV_EINVAL;
    }
    return 0;
}

int chanq_uv_connect_list(uv_loop_t *loop, const char *addrs, const chanq_opts_t *opts,
                          const chanq_move_opts_t *mopts, const chanq_uv_cbs_t *cbs, void *ud,
                          chanq_uv_t **ret_c)
{
    if (!loop || !addrs || !ret_c)
        return UV_EINVAL;
    chanq_uv_t *c;
    int r = uv_new(loop, opts, cbs, ud, &c);
    if (r < 0)
        return r;
    r = chanq_move_new(addrs, mopts, &c->mv);
    if (r == 0)
        r = parse_addrs(c);
    if (r == 0)
        r = init_prep(c);
    if (r < 0)
        return fail_new(c, r);
    chanq_move_start(c->mv, (int64_t)uv_now(loop));
    mv_schedule(c);
    *ret_c = c;
    return 0;
}

chanq_client_t *chanq_uv_client(chanq_uv_t *c)
{
    return c->core;
}

const chanq_move_t *chanq_uv_move(const chanq_uv_t *c)
{
    return c->mv;
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
