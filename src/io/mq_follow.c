/* mq_follow.c - the MQ loop's connections to followed shards. See mq_follow.h; the protocol is
 * in src/mqsrv/follow.c, this file only connects, moves bytes and reconnects. */
#include "mq_follow.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "io_int.h"
#include "io_outconn.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* One link's connection state. */
typedef struct flink {
    struct mq_follow *m;
    size_t idx; /* the follower's link */
    struct sockaddr_storage addr[CQ_MQFOLLOW_SERVERS_MAX];
    io_outconn_t *c; /* the current attempt or connection, NULL between attempts */
    uv_timer_t retry;
    uint64_t backoff_ms;
    bool warned; /* the current outage was logged */
} flink_t;

struct mq_follow {
    uv_loop_t *loop;
    cq_mqfollow_t *f;
    flink_t *links;
    size_t n;
    bool closed;
};

static void connect_next(flink_t *k);

static void on_retry(uv_timer_t *t)
{
    connect_next(t->data);
}

static const char *name_of(const flink_t *k)
{
    return cq_mqfollow_addr(k->m->f, k->idx, NULL);
}

/* The connection (or attempt) ended: the next attempt goes to the server the follower names
 * next (cq_mqfollow_closed moves it on), after the back-off. */
static void on_lost(void *ud, bool was_up, const char *why)
{
    flink_t *k = ud;
    mq_follow_t *m = k->m;
    k->c = NULL;
    uint32_t shard = cq_mqfollow_shard(m->f, k->idx);
    if (m->closed)
        CQ_INFO("mq", "follow shard %u: connection to %s closed: %s", shard, name_of(k), why);
    else if (was_up)
        CQ_WARN("mq", "follow shard %u: connection to %s lost: %s", shard, name_of(k), why);
    else if (!k->warned)
        CQ_WARN("mq",
                "follow shard %u: cannot connect to %s: %s (trying the shard's servers in "
                "turn)",
                shard, name_of(k), why);
    k->warned = true;
    cq_mqfollow_closed(m->f, k->idx, uv_now(m->loop));
    if (m->closed)
        return;
    uv_timer_start(&k->retry, on_retry, k->backoff_ms, 0);
    k->backoff_ms = k->backoff_ms * 2 > CQ_MQ_FOLLOW_BACKOFF_MAX_MS ? CQ_MQ_FOLLOW_BACKOFF_MAX_MS
                                                                    : k->backoff_ms * 2;
}

static void on_up(void *ud)
{
    flink_t *k = ud;
    k->warned = false;
    k->backoff_ms = CQ_MQ_FOLLOW_BACKOFF_MIN_MS;
    cq_mqfollow_connected(k->m->f, k->idx, uv_now(k->m->loop));
}

static int on_input(void *ud, const uint8_t *p, size_t n)
{
    flink_t *k = ud;
    int r = cq_mqfollow_input(k->m->f, k->idx, p, n, uv_now(k->m->loop));
    if (r >= 0)
        cq__mq_follow_flush(k->m); /* an event may have asked another link for rows */
    return r;
}

static cq_sbuf_t *on_output(void *ud)
{
    flink_t *k = ud;
    return cq_mqfollow_output(k->m->f, k->idx);
}

static const io_outconn_ops_t conn_ops = {
    .up = on_up, .input = on_input, .output = on_output, .lost = on_lost};

static void connect_next(flink_t *k)
{
    mq_follow_t *m = k->m;
    if (m->closed || k->c)
        return;
    size_t i = 0;
    cq_mqfollow_addr(m->f, k->idx, &i);
    int err = 0;
    k->c = cq__io_outconn_start(m->loop, (const struct sockaddr *)&k->addr[i], &conn_ops, k, &err);
    if (!k->c) /* could not even start: as a failed attempt */
        on_lost(k, false, err == -ENOMEM ? "out of memory" : uv_strerror(err));
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
        cq__io_outconn_flush(m->links[i].c);
}

void cq__mq_follow_tick(mq_follow_t *m, uint64_t now_ms)
{
    if (!m || m->closed)
        return;
    for (size_t i = 0; i < m->n; i++) {
        flink_t *k = &m->links[i];
        int r = cq_mqfollow_tick(m->f, i, now_ms);
        if (r < 0)
            cq__io_outconn_close(k->c, cq_strerror(r));
    }
    cq__mq_follow_flush(m);
}

void cq__mq_follow_close(mq_follow_t *m)
{
    if (!m || m->closed)
        return;
    m->closed = true;
    for (size_t i = 0; i < m->n; i++) {
        cq__io_outconn_close(m->links[i].c, "shutting down");
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
