/* mq_follow.c - the MQ loop's connections to followed shards. See mq_follow.h; the protocol is
 * in src/mqsrv/follow.c, this file only connects, moves bytes and reconnects. */
#include "mq_follow.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "io_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define FOLLOW_RD_BUF (64u * 1024u)

typedef struct fconn fconn_t;

/* One link's connection state. */
typedef struct flink {
    struct mq_follow *m;
    size_t idx; /* the follower's link */
    struct sockaddr_storage addr[CQ_MQFOLLOW_SERVERS_MAX];
    fconn_t *c; /* the current attempt or connection, NULL between attempts */
    uv_timer_t retry;
    uint64_t backoff_ms;
    bool warned; /* the current outage was logged */
} flink_t;

/* One connection attempt and, once connected, the connection; freed by its close callback. */
struct fconn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    flink_t *k;
    cq_sbuf_t wbuf; /* the bytes of the write in flight */
    bool up, writing, dead;
};

struct mq_follow {
    uv_loop_t *loop;
    cq_mqfollow_t *f;
    flink_t *links;
    size_t n;
    bool closed;
    uint8_t rbuf[FOLLOW_RD_BUF];
};

static void connect_next(flink_t *k);

static void on_retry(uv_timer_t *t)
{
    connect_next(t->data);
}

static void conn_closed(uv_handle_t *h)
{
    fconn_t *c = h->data;
    cq_sbuf_done(&c->wbuf);
    cq_free(c);
}

static const char *name_of(const flink_t *k)
{
    return cq_mqfollow_addr(k->m->f, k->idx, NULL);
}

/* Drops the connection (or attempt) and schedules the next attempt, on the server the follower
 * names next. */
static void conn_lost(flink_t *k, const char *why)
{
    mq_follow_t *m = k->m;
    fconn_t *c = k->c;
    if (!c)
        return;
    k->c = NULL;
    c->dead = true;
    uint32_t shard = cq_mqfollow_shard(m->f, k->idx);
    if (m->closed)
        CQ_INFO("mq", "follow shard %u: connection to %s closed: %s", shard, name_of(k), why);
    else if (c->up)
        CQ_WARN("mq", "follow shard %u: connection to %s lost: %s", shard, name_of(k), why);
    else if (!k->warned)
        CQ_WARN("mq",
                "follow shard %u: cannot connect to %s: %s (trying the shard's servers in "
                "turn)",
                shard, name_of(k), why);
    k->warned = true;
    cq_mqfollow_closed(m->f, k->idx, uv_now(m->loop));
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    if (m->closed)
        return;
    uv_timer_start(&k->retry, on_retry, k->backoff_ms, 0);
    k->backoff_ms = k->backoff_ms * 2 > CQ_MQ_FOLLOW_BACKOFF_MAX_MS ? CQ_MQ_FOLLOW_BACKOFF_MAX_MS
                                                                    : k->backoff_ms * 2;
}

static void flush(flink_t *k);

static void on_written(uv_write_t *req, int status)
{
    fconn_t *c = req->data;
    c->writing = false;
    c->wbuf.len = 0;
    if (c->dead)
        return;
    if (status < 0) {
        conn_lost(c->k, uv_strerror(status));
        return;
    }
    flush(c->k);
}

/* Writes what the follower queued for this link (one write in flight at a time). */
static void flush(flink_t *k)
{
    fconn_t *c = k->c;
    cq_sbuf_t *out = cq_mqfollow_output(k->m->f, k->idx);
    if (!c || !c->up || c->writing || !out->len)
        return;
    cq_sbuf_t t = c->wbuf; /* swap: the follower's buffer is written, the empty one takes more */
    c->wbuf = *out;
    *out = t;
    uv_buf_t b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
    c->wreq.data = c;
    int r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (r < 0) {
        c->wbuf.len = 0;
        conn_lost(k, uv_strerror(r));
        return;
    }
    c->writing = true;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    fconn_t *c = h->data;
    (void)hint;
    *buf = uv_buf_init((char *)c->k->m->rbuf, FOLLOW_RD_BUF);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    fconn_t *c = s->data;
    flink_t *k = c->k;
    if (c->dead || nread == 0)
        return;
    if (nread < 0) {
        conn_lost(k, nread == UV_EOF ? "closed by the server" : uv_strerror((int)nread));
        return;
    }
    int r = cq_mqfollow_input(k->m->f, k->idx, (const uint8_t *)buf->base, (size_t)nread,
                              uv_now(k->m->loop));
    if (r < 0) {
        conn_lost(k, cq_strerror(r));
        return;
    }
    cq__mq_follow_flush(k->m); /* an event may have asked another link for rows */
}

static void on_connect(uv_connect_t *req, int status)
{
    fconn_t *c = req->data;
    flink_t *k = c->k;
    if (c->dead)
        return; /* closed meanwhile (shutdown) */
    if (status < 0) {
        conn_lost(k, uv_strerror(status));
        return;
    }
    c->up = true;
    k->warned = false;
    k->backoff_ms = CQ_MQ_FOLLOW_BACKOFF_MIN_MS;
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    cq_mqfollow_connected(k->m->f, k->idx, uv_now(k->m->loop));
    flush(k);
}

static void connect_next(flink_t *k)
{
    mq_follow_t *m = k->m;
    if (m->closed || k->c)
        return;
    fconn_t *c = cq_calloc(1, sizeof(*c));
    if (!c) {
        uv_timer_start(&k->retry, on_retry, k->backoff_ms, 0);
        return;
    }
    c->k = k;
    cq_sbuf_init(&c->wbuf);
    uv_tcp_init(m->loop, &c->tcp);
    c->tcp.data = c;
    c->creq.data = c;
    k->c = c;
    size_t i = 0;
    cq_mqfollow_addr(m->f, k->idx, &i);
    int r = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&k->addr[i], on_connect);
    if (r < 0)
        conn_lost(k, uv_strerror(r));
}

static int resolve_link(mq_follow_t *m, flink_t *k, char *err, size_t errlen)
{
    for (size_t i = 0; i < cq_mqfollow_nservers(m->f, k->idx); i++) {
        socklen_t sl;
        char e[256];
        const char *one = cq_mqfollow_server(m->f, k->idx, i);
        if (cq__io_resolve(one, SOCK_STREAM, &k->addr[i], &sl, e, sizeof(e)) < 0) {
            snprintf(err, errlen, "--bridge-follow: %s", e);
            return CQ_ECONFIG;
        }
    }
    return 0;
}

int cq__mq_follow_start(uv_loop_t *loop, cq_mqfollow_t *f, mq_follow_t **ret, char *err,
                        size_t errlen)
{
    mq_follow_t *m = cq_calloc(1, sizeof(*m));
    size_t n = cq_mqfollow_nlinks(f);
    if (m)
        m->links = cq_calloc(n ? n : 1, sizeof(*m->links));
    if (!m || !m->links) {
        cq_free(m);
        snprintf(err, errlen, "follow: out of memory");
        return -ENOMEM;
    }
    m->loop = loop;
    m->f = f;
    m->n = n;
    for (size_t i = 0; i < n; i++) {
        flink_t *k = &m->links[i];
        k->m = m;
        k->idx = i;
        k->backoff_ms = CQ_MQ_FOLLOW_BACKOFF_MIN_MS;
        int r = resolve_link(m, k, err, errlen);
        if (r < 0) {
            cq_free(m->links);
            cq_free(m);
            return r;
        }
    }
    for (size_t i = 0; i < n; i++) {
        uv_timer_init(loop, &m->links[i].retry);
        m->links[i].retry.data = &m->links[i];
        connect_next(&m->links[i]);
        CQ_INFO("mq", "following shard %u (%zu server(s), first %s)", cq_mqfollow_shard(f, i),
                cq_mqfollow_nservers(f, i), cq_mqfollow_server(f, i, 0));
    }
    *ret = m;
    return 0;
}

void cq__mq_follow_flush(mq_follow_t *m)
{
    for (size_t i = 0; m && !m->closed && i < m->n; i++)
        flush(&m->links[i]);
}

void cq__mq_follow_tick(mq_follow_t *m, uint64_t now_ms)
{
    if (!m || m->closed)
        return;
    for (size_t i = 0; i < m->n; i++) {
        flink_t *k = &m->links[i];
        int r = cq_mqfollow_tick(m->f, i, now_ms);
        if (r < 0 && k->c)
            conn_lost(k, cq_strerror(r));
    }
    cq__mq_follow_flush(m);
}

void cq__mq_follow_close(mq_follow_t *m)
{
    if (!m || m->closed)
        return;
    m->closed = true;
    for (size_t i = 0; i < m->n; i++) {
        if (m->links[i].c)
            conn_lost(&m->links[i], "shutting down");
        uv_close((uv_handle_t *)&m->links[i].retry, NULL);
    }
}

void cq__mq_follow_free(mq_follow_t *m)
{
    if (!m)
        return;
    cq_free(m->links);
    cq_free(m);
}
