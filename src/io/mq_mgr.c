/* mq_mgr.c - the MQ loop's connection to a manager. See mq_mgr.h; the protocol is in
 * src/mqsrv/mgrlink.c, this file only connects, moves bytes and reconnects. */
#include "mq_mgr.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "io_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MGR_MAX    16 /* managers in --mgr-servers */
#define MGR_RD_BUF (64u * 1024u)

/* One connection attempt and, once connected, the connection; freed by its close callback. */
typedef struct mgr_conn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    struct mq_mgr *m;
    cq_sbuf_t wbuf; /* the bytes of the write in flight */
    bool up, writing, dead;
} mgr_conn_t;

struct mq_mgr {
    uv_loop_t *loop;
    cq_mgrlink_t *link;
    mq_mgr_figures_fn figures;
    void *ud;
    struct sockaddr_storage addr[MGR_MAX];
    char name[MGR_MAX][256];
    size_t n, cur;
    mgr_conn_t *c; /* the current attempt or connection, NULL between attempts */
    uv_timer_t retry;
    uint64_t backoff_ms;
    bool closed, warned; /* warned: the current outage was logged */
    uint8_t rbuf[MGR_RD_BUF];
};

static void connect_next(mq_mgr_t *m);

static void on_retry(uv_timer_t *t)
{
    connect_next(t->data);
}

static void conn_closed(uv_handle_t *h)
{
    mgr_conn_t *c = h->data;
    cq_sbuf_done(&c->wbuf);
    cq_free(c);
}

/* Drops the connection (or attempt) and schedules the next attempt, on the next manager. */
static void conn_lost(mq_mgr_t *m, const char *why)
{
    mgr_conn_t *c = m->c;
    if (!c)
        return;
    m->c = NULL;
    c->dead = true;
    if (m->closed)
        CQ_INFO("mgr", "connection to manager %s closed: %s", m->name[m->cur], why);
    else if (c->up)
        CQ_WARN("mgr", "connection to manager %s lost: %s", m->name[m->cur], why);
    else if (!m->warned)
        CQ_WARN("mgr", "cannot connect to manager %s: %s (trying the others every %llu ms at most)",
                m->name[m->cur], why, (unsigned long long)CQ_MQ_MGR_BACKOFF_MAX_MS);
    m->warned = true;
    if (c->up)
        cq_mgrlink_disconnected(m->link);
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    if (m->closed)
        return;
    m->cur = (m->cur + 1) % m->n;
    uv_timer_start(&m->retry, on_retry, m->backoff_ms, 0);
    m->backoff_ms =
        m->backoff_ms * 2 > CQ_MQ_MGR_BACKOFF_MAX_MS ? CQ_MQ_MGR_BACKOFF_MAX_MS : m->backoff_ms * 2;
}

static void flush(mq_mgr_t *m);

static void on_written(uv_write_t *req, int status)
{
    mgr_conn_t *c = req->data;
    c->writing = false;
    c->wbuf.len = 0;
    if (c->dead)
        return;
    if (status < 0) {
        conn_lost(c->m, uv_strerror(status));
        return;
    }
    flush(c->m);
}

/* Writes what the link queued (one write in flight at a time). */
static void flush(mq_mgr_t *m)
{
    mgr_conn_t *c = m->c;
    cq_sbuf_t *out = cq_mgrlink_output(m->link);
    if (!c || !c->up || c->writing || !out->len)
        return;
    cq_sbuf_t t = c->wbuf; /* swap: the link's buffer is written, the empty one takes new bytes */
    c->wbuf = *out;
    *out = t;
    uv_buf_t b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
    c->wreq.data = c;
    int r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (r < 0) {
        c->wbuf.len = 0;
        conn_lost(m, uv_strerror(r));
        return;
    }
    c->writing = true;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    mgr_conn_t *c = h->data;
    (void)hint;
    *buf = uv_buf_init((char *)c->m->rbuf, MGR_RD_BUF);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    mgr_conn_t *c = s->data;
    mq_mgr_t *m = c->m;
    if (c->dead || nread == 0)
        return;
    if (nread < 0) {
        conn_lost(m, nread == UV_EOF ? "closed by the manager" : uv_strerror((int)nread));
        return;
    }
    int r = cq_mgrlink_input(m->link, (const uint8_t *)buf->base, (size_t)nread, uv_now(m->loop));
    if (r < 0) {
        conn_lost(m, r == CQ_EAUTH ? "the manager refused our token (--mgr-token-file)"
                                   : cq_strerror(r));
        return;
    }
    flush(m);
}

static void on_connect(uv_connect_t *req, int status)
{
    mgr_conn_t *c = req->data;
    mq_mgr_t *m = c->m;
    if (c->dead)
        return; /* closed meanwhile (shutdown) */
    if (status < 0) {
        conn_lost(m, uv_strerror(status));
        return;
    }
    c->up = true;
    m->warned = false;
    m->backoff_ms = CQ_MQ_MGR_BACKOFF_MIN_MS;
    CQ_INFO("mgr", "connected to manager %s", m->name[m->cur]);
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    cq_mgrlink_connected(m->link); /* the first report goes at the next tick */
}

static void connect_next(mq_mgr_t *m)
{
    if (m->closed || m->c)
        return;
    mgr_conn_t *c = cq_calloc(1, sizeof(*c));
    if (!c) {
        uv_timer_start(&m->retry, on_retry, m->backoff_ms, 0);
        return;
    }
    c->m = m;
    cq_sbuf_init(&c->wbuf);
    uv_tcp_init(m->loop, &c->tcp);
    c->tcp.data = c;
    c->creq.data = c;
    m->c = c;
    int r =
        uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&m->addr[m->cur], on_connect);
    if (r < 0)
        conn_lost(m, uv_strerror(r));
}

static int parse_servers(mq_mgr_t *m, const char *servers, char *err, size_t errlen)
{
    for (const char *p = servers; *p;) {
        size_t k = strcspn(p, ",");
        char one[256];
        socklen_t sl;
        snprintf(one, sizeof(one), "%.*s", (int)k, p);
        p += k + (p[k] == ',');
        if (!*one)
            continue;
        if (m->n == MGR_MAX) {
            snprintf(err, errlen, "--mgr-servers: more than %d managers", MGR_MAX);
            return CQ_ECONFIG;
        }
        char e[256];
        if (cq__io_resolve(one, SOCK_STREAM, &m->addr[m->n], &sl, e, sizeof(e)) < 0) {
            snprintf(err, errlen, "--mgr-servers: %s", e);
            return CQ_ECONFIG;
        }
        snprintf(m->name[m->n++], sizeof(m->name[0]), "%s", one);
    }
    if (m->n)
        return 0;
    snprintf(err, errlen, "--mgr-servers: no address");
    return CQ_ECONFIG;
}

int cq__mq_mgr_start(uv_loop_t *loop, const char *servers, cq_mgrlink_t *link,
                     mq_mgr_figures_fn figures, void *ud, mq_mgr_t **ret, char *err, size_t errlen)
{
    mq_mgr_t *m = cq_calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "mgr: out of memory");
        return -ENOMEM;
    }
    m->loop = loop;
    m->link = link;
    m->figures = figures;
    m->ud = ud;
    m->backoff_ms = CQ_MQ_MGR_BACKOFF_MIN_MS;
    int r = parse_servers(m, servers, err, errlen);
    if (r < 0) {
        cq_free(m);
        return r;
    }
    uv_timer_init(loop, &m->retry);
    m->retry.data = m;
    connect_next(m);
    CQ_INFO("mgr", "reporting to %zu manager(s): %s", m->n, servers);
    *ret = m;
    return 0;
}

void cq__mq_mgr_tick(mq_mgr_t *m, uint64_t now_ms, uint32_t sockets, uint64_t queued)
{
    if (!m || m->closed)
        return;
    cq_mgrlink_tick(m->link, now_ms);
    if (m->c && m->c->up && cq_mgrlink_sync_due(m->link, now_ms)) {
        cq_mgrlink_host_t h;
        memset(&h, 0, sizeof(h));
        if (m->figures)
            m->figures(m->ud, &h);
        h.sockets += sockets;
        h.queued_bytes += queued;
        if (cq_mgrlink_sync(m->link, &h, now_ms) < 0)
            CQ_WARN("mgr", "cannot build the report (out of memory)");
    }
    flush(m);
}

bool cq__mq_mgr_owns(const mq_mgr_t *m, const uv_handle_t *h)
{
    return m && (h == (const uv_handle_t *)&m->retry || (m->c && h == (uv_handle_t *)&m->c->tcp));
}

void cq__mq_mgr_close(mq_mgr_t *m)
{
    if (!m || m->closed)
        return;
    m->closed = true;
    if (m->c)
        conn_lost(m, "shutting down");
    uv_close((uv_handle_t *)&m->retry, NULL);
}

bool cq__mq_mgr_connected(const mq_mgr_t *m)
{
    return m && m->c && m->c->up;
}

void cq__mq_mgr_free(mq_mgr_t *m)
{
    cq_free(m);
}
