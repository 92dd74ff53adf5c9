/* registry.c - the servers that report to this manager: their last two reports (rates come
 * from the deltas of running totals), stale marks, the effective flags, and the shards' lag
 * alerts. */
#include "engine.h"

#include "cq_alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t lower_bound(const cq_mgr_t *m, uint32_t appid)
{
    size_t lo = 0, hi = m->nservers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->servers[mid]->appid < appid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* When full: forgets the server whose last report is the oldest, if it has no connection. */
static bool evict_one(cq_mgr_t *m)
{
    size_t victim = m->nservers;
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (!s->conn && (victim == m->nservers || s->last_ms < m->servers[victim]->last_ms))
            victim = i;
    }
    if (victim == m->nservers)
        return false;
    mgr_server_t *s = m->servers[victim];
    cq_mqmgr_msg_free(s->last);
    cq_mqmgr_msg_free(s->prev);
    cq_free(s);
    memmove(&m->servers[victim], &m->servers[victim + 1],
            (m->nservers - victim - 1) * sizeof(*m->servers));
    m->nservers--;
    return true;
}

mgr_server_t *cq__mgr_server_get(cq_mgr_t *m, uint32_t appid, bool create)
{
    size_t i = lower_bound(m, appid);
    if (i < m->nservers && m->servers[i]->appid == appid)
        return m->servers[i];
    if (!create || (m->nservers >= MGR_SERVERS_MAX && !evict_one(m)))
        return NULL;
    i = lower_bound(m, appid);
    if (m->nservers == m->servers_cap) {
        size_t cap = m->servers_cap ? m->servers_cap * 2 : 16;
        mgr_server_t **p = cq_realloc(m->servers, cap * sizeof(*p));
        if (!p)
            return NULL;
        m->servers = p;
        m->servers_cap = cap;
    }
    mgr_server_t *s = cq_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->appid = appid;
    memmove(&m->servers[i + 1], &m->servers[i], (m->nservers - i) * sizeof(*m->servers));
    m->servers[i] = s;
    m->nservers++;
    return s;
}

void cq__mgr_server_report(mgr_server_t *s, cq_mqmgr_msg_t *report, uint64_t now_ms)
{
    cq_mqmgr_msg_free(s->prev);
    s->prev = s->last;
    s->prev_ms = s->last_ms;
    s->last = report;
    s->last_ms = now_ms;
    s->group_id = report->group_id;
}

bool cq__mgr_server_stale(const cq_mgr_t *m, const mgr_server_t *s, uint64_t now_ms)
{
    return !s->last || now_ms > s->last_ms + m->o.stale_ms;
}

bool cq__mgr_server_master(const mgr_server_t *s)
{
    const cq_mqmgr_ext_t *x = s->last ? &s->last->ext : NULL;
    return !x || !(x->has & CQ_MQMGR_X_MASTER) || x->master;
}

uint32_t cq__mgr_server_shard(const mgr_server_t *s)
{
    return s->last && (s->last->ext.has & CQ_MQMGR_X_SHARD) ? s->last->ext.shard : 0;
}

double cq__mgr_rate(int64_t now_v, int64_t prev_v, uint64_t now_ms, uint64_t prev_ms)
{
    if (now_ms <= prev_ms || now_v < prev_v) /* no interval, or a restart reset the total */
        return 0;
    return (double)(now_v - prev_v) * 1000.0 / (double)(now_ms - prev_ms);
}

bool cq__mgr_server_offline(const cq_mgr_t *m, const mgr_server_t *s)
{
    return cq__mgr_state_offline(m->doc, s->appid);
}

bool cq__mgr_shard_alert(const cq_mgr_t *m, uint32_t shard, uint64_t now_ms, int64_t *behind_ms)
{
    *behind_ms = 0;
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (cq__mgr_server_stale(m, s, now_ms) || cq__mgr_server_shard(s) != shard ||
            cq__mgr_server_master(s) || !(s->last->ext.has & CQ_MQMGR_X_REPL))
            continue;
        if (s->last->ext.repl.behind_ms > *behind_ms)
            *behind_ms = s->last->ext.repl.behind_ms;
    }
    return *behind_ms > (int64_t)m->o.lag_alert_ms;
}

const cq_mqmgr_relay_t *cq__mgr_server_relay_node(const mgr_server_t *s)
{
    const cq_mqmgr_ext_t *x = s->last ? &s->last->ext : NULL;
    return x && (x->has & CQ_MQMGR_X_RELAY) && x->relay.node ? &x->relay : NULL;
}

bool cq__mgr_server_relay_only(const mgr_server_t *s)
{
    return cq__mgr_server_relay_node(s) && cq__mgr_server_shard(s) == 0;
}

static bool same_node(const mgr_server_t *a, const mgr_server_t *b)
{
    const cq_mqmgr_relay_t *ra = &a->last->ext.relay, *rb = &b->last->ext.relay;
    return ra->node == rb->node && strcmp(ra->cluster, rb->cluster) == 0;
}

/* By relay name, then node id, then the newest report first. */
static int relay_cmp(const void *a, const void *b)
{
    const mgr_server_t *x = *(const mgr_server_t *const *)a, *y = *(const mgr_server_t *const *)b;
    const cq_mqmgr_relay_t *rx = &x->last->ext.relay, *ry = &y->last->ext.relay;
    int c = strcmp(rx->cluster, ry->cluster);
    if (c)
        return c;
    if (rx->node != ry->node)
        return rx->node < ry->node ? -1 : 1;
    return x->last_ms > y->last_ms ? -1 : x->last_ms < y->last_ms ? 1 : 0;
}

static bool relay_live(const cq_mgr_t *m, const mgr_server_t *s, uint64_t now_ms)
{
    return cq__mgr_server_relay_node(s) && !cq__mgr_server_stale(m, s, now_ms) &&
           !cq__mgr_server_offline(m, s) &&
           !((s->last->ext.has & CQ_MQMGR_X_OFFLINE) && s->last->ext.offline);
}

int cq__mgr_relay_nodes(const cq_mgr_t *m, uint64_t now_ms, const mgr_server_t **ret, size_t cap,
                        size_t *ret_n)
{
    const mgr_server_t **all = cq_malloc((m->nservers ? m->nservers : 1) * sizeof(*all));
    size_t n = 0, k = 0;
    if (!all)
        return -ENOMEM;
    for (size_t i = 0; i < m->nservers; i++)
        if (relay_live(m, m->servers[i], now_ms))
            all[n++] = m->servers[i];
    qsort(all, n, sizeof(*all), relay_cmp);
    for (size_t i = 0; i < n && k < cap; i++)
        if (i == 0 || !same_node(all[i - 1], all[i]))
            ret[k++] = all[i];
    cq_free(all);
    *ret_n = k;
    return 0;
}
