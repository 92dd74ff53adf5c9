/* mq_mgr.c - the MQ loop's connection to a manager. See mq_mgr.h; the protocol is in
 * src/mqsrv/mgrlink.c, this file only connects, moves bytes and reconnects. */
#include "mq_mgr.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "io_int.h"
#include "io_outconn.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MGR_MAX 16 /* managers in --mgr-servers */

struct mq_mgr {
    uv_loop_t *loop;
    cq_mgrlink_t *link;
    mq_mgr_figures_fn figures;
    void *ud;
    struct sockaddr_storage addr[MGR_MAX];
    char name[MGR_MAX][256];
    size_t n, cur;
    io_outconn_t *c; /* the current attempt or connection, NULL between attempts */
    uv_timer_t retry;
    uint64_t backoff_ms;
    bool closed, warned; /* warned: the current outage was logged */
    bool refused;        /* the manager refused our token (said instead of the code) */
};

static void connect_next(mq_mgr_t *m);

static void on_retry(uv_timer_t *t)
{
    connect_next(t->data);
}

/* The connection (or attempt) ended: logged once per outage, and the next attempt goes to the
 * next manager after the back-off. */
static void on_lost(void *ud, bool was_up, const char *why)
{
    mq_mgr_t *m = ud;
    m->c = NULL;
    if (m->refused)
        why = "the manager refused our token (--mgr-token-file)";
    m->refused = false;
    if (m->closed)
        CQ_INFO("mgr", "connection to manager %s closed: %s", m->name[m->cur], why);
    else if (was_up)
        CQ_WARN("mgr", "connection to manager %s lost: %s", m->name[m->cur], why);
    else if (!m->warned)
        CQ_WARN("mgr", "cannot connect to manager %s: %s (trying the others every %llu ms at most)",
                m->name[m->cur], why, (unsigned long long)CQ_MQ_MGR_BACKOFF_MAX_MS);
    m->warned = true;
    if (was_up)
        cq_mgrlink_disconnected(m->link);
    if (m->closed)
        return;
    m->cur = (m->cur + 1) % m->n;
    uv_timer_start(&m->retry, on_retry, m->backoff_ms, 0);
    m->backoff_ms =
        m->backoff_ms * 2 > CQ_MQ_MGR_BACKOFF_MAX_MS ? CQ_MQ_MGR_BACKOFF_MAX_MS : m->backoff_ms * 2;
}

static void on_up(void *ud)
{
    mq_mgr_t *m = ud;
    m->warned = false;
    m->backoff_ms = CQ_MQ_MGR_BACKOFF_MIN_MS;
    CQ_INFO("mgr", "connected to manager %s", m->name[m->cur]);
    cq_mgrlink_connected(m->link); /* the first report goes at the next tick */
}

static int on_input(void *ud, const uint8_t *p, size_t n)
{
    mq_mgr_t *m = ud;
    int r = cq_mgrlink_input(m->link, p, n, uv_now(m->loop));
    m->refused = r == CQ_EAUTH;
    return r;
}

static cq_sbuf_t *on_output(void *ud)
{
    return cq_mgrlink_output(((mq_mgr_t *)ud)->link);
}

static const io_outconn_ops_t conn_ops = {
    .up = on_up, .input = on_input, .output = on_output, .lost = on_lost};

static void connect_next(mq_mgr_t *m)
{
    if (m->closed || m->c)
        return;
    int err = 0;
    m->c = cq__io_outconn_start(m->loop, (const struct sockaddr *)&m->addr[m->cur], &conn_ops, m,
                                &err);
    if (!m->c) /* could not even start: as a failed attempt */
        on_lost(m, false, err == -ENOMEM ? "out of memory" : uv_strerror(err));
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
    if (cq__io_outconn_up(m->c) && cq_mgrlink_sync_due(m->link, now_ms)) {
        cq_mgrlink_host_t h;
        memset(&h, 0, sizeof(h));
        if (m->figures)
            m->figures(m->ud, &h);
        h.sockets += sockets;
        h.queued_bytes += queued;
        if (cq_mgrlink_sync(m->link, &h, now_ms) < 0)
            CQ_WARN("mgr", "cannot build the report (out of memory)");
    }
    cq__io_outconn_flush(m->c);
}

bool cq__mq_mgr_owns(const mq_mgr_t *m, const uv_handle_t *h)
{
    return m && (h == (const uv_handle_t *)&m->retry || cq__io_outconn_owns(m->c, h));
}

void cq__mq_mgr_close(mq_mgr_t *m)
{
    if (!m || m->closed)
        return;
    m->closed = true;
    cq__io_outconn_close(m->c, "shutting down");
    uv_close((uv_handle_t *)&m->retry, NULL);
}

bool cq__mq_mgr_connected(const mq_mgr_t *m)
{
    return m && cq__io_outconn_up(m->c);
}

void cq__mq_mgr_free(mq_mgr_t *m)
{
    cq_free(m);
}
