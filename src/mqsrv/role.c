/* role.c - the engine in a cluster (issue 11): the role handed over by the coordination runtime,
 * the fence every write passes, a slave's view of what replication brings, a new master's
 * reload, and the keepalive weight. See cq_mqport.h (cq_mqsrv_set_role) and doc/protocol-mq.md.
 *
 * Why the engine reads the store on its own as a slave: its database is a replica, written by
 * no one on this server. Watchers and the topic cache would otherwise see only what this
 * server produced, that is nothing. So the tick reads what is new (the same catch-up reads a
 * master uses when rows committed without their answer) and the topic list, on a timer.
 */
#include "cq_err.h"
#include "cq_log.h"
#include "mqsrv_int.h"

#include <stdio.h>
#include <string.h>

bool cq__mqsrv_writable(const cq_mqsrv_t *s)
{
    return s->master && (!s->may_write || s->may_write(s->fence_ud));
}

void cq_mqsrv_set_role(cq_mqsrv_t *s, bool master, uint32_t shard, uint64_t epoch)
{
    pthread_mutex_lock(&s->inbox_mu);
    s->role_next_master = master;
    s->role_next_shard = shard;
    s->role_next_epoch = epoch;
    s->role_handed = true;
    if (s->ops)
        s->ops->wake(s->ops_ud);
    pthread_mutex_unlock(&s->inbox_mu);
}

void cq_mqsrv_set_master(cq_mqsrv_t *s, const char *adv)
{
    pthread_mutex_lock(&s->inbox_mu);
    snprintf(s->master_next, sizeof(s->master_next), "%s", adv ? adv : "");
    s->master_handed = true;
    if (s->ops)
        s->ops->wake(s->ops_ud);
    pthread_mutex_unlock(&s->inbox_mu);
}

/* The master handed over by cq_mqsrv_set_master takes effect, with the err_msg of the reads it
 * refuses. */
static void master_swap(cq_mqsrv_t *s)
{
    pthread_mutex_lock(&s->inbox_mu);
    bool handed = s->master_handed;
    if (handed)
        memcpy(s->master_adv, s->master_next, sizeof(s->master_adv));
    s->master_handed = false;
    pthread_mutex_unlock(&s->inbox_mu);
    if (!handed)
        return;
    snprintf(s->read_why, sizeof(s->read_why),
             "this server is a standby of shard %u and serves no reads while the shard has a "
             "master (--slave-reads off): read on master=%s",
             s->shard, s->master_adv);
}

bool cq__mqsrv_refuses_reads(const cq_mqsrv_t *s)
{
    return s->slave_reads_off && !s->master && s->master_adv[0];
}

/* The engine's own request of op on t (NULL: the topic list). 0 or the submit error. */
static int own_req(cq_mqsrv_t *s, cq_writer_op_t op, mq_topic_t *t)
{
    cq_writer_req_t *req;
    int r = cq_writer_req_new(op, t ? t->name : NULL, NULL, &req);
    if (r == 0)
        r = cq__mqop_submit_own(s, req);
    if (r == 0 && t)
        t->hw_reading = true;
    if (r == 0 && !t)
        s->listing = true;
    return r;
}

/* A new master: every topic's high water and count, and the list, are read again before the
 * topic takes produces (they moved by replication while this server was a slave). A request
 * that cannot be submitted now is tried again at the next tick. */
static void reload(cq_mqsrv_t *s)
{
    if (s->reload_list && !s->listing && own_req(s, CQ_WRITER_TOPIC_LIST, NULL) == 0)
        s->reload_list = false;
    for (size_t i = 0; i < s->ntopics; i++) {
        mq_topic_t *t = s->topics[i];
        if (t->reload && !t->hw_reading)
            own_req(s, CQ_WRITER_TOPIC_STATS, t);
    }
}

void cq__mqsrv_role_swap(cq_mqsrv_t *s)
{
    master_swap(s);
    pthread_mutex_lock(&s->inbox_mu);
    bool handed = s->role_handed, master = s->role_next_master;
    uint32_t shard = s->role_next_shard;
    uint64_t epoch = s->role_next_epoch;
    s->role_handed = false;
    pthread_mutex_unlock(&s->inbox_mu);
    if (!handed)
        return;
    bool became = master && !s->master;
    if (master != s->master || shard != s->shard)
        CQ_INFO("mq", "role: %s of shard %u (epoch %llu)", master ? "master" : "slave", shard,
                (unsigned long long)epoch);
    s->master = master;
    s->shard = shard;
    s->epoch = epoch;
    if (!became)
        return;
    for (size_t i = 0; i < s->ntopics; i++)
        s->topics[i]->reload = true;
    s->reload_list = true;
    cq__mqsrv_decl_all(s); /* applied once the topic list was read back */
    reload(s);
}

/* Every topic's high water, so that topics lists and offset answers follow the master's. */
static void refresh_high_water(cq_mqsrv_t *s)
{
    for (size_t i = 0; i < s->ntopics; i++)
        if (!s->topics[i]->hw_reading)
            own_req(s, CQ_WRITER_HIGH_WATER, s->topics[i]);
}

/* The mean commit time since the last sample, for the weight. */
static void sample_health(cq_mqsrv_t *s, uint64_t now_ms)
{
    cq_writer_stats_t st;
    if (now_ms - s->health_ms < CQ_MQSRV_REFRESH_MS && s->health_ms)
        return;
    s->health_ms = now_ms;
    if (!s->port.ops->control || s->port.ops->control(s->port.ud, CQ_MQPORT_WRITER_STATS, &st))
        return;
    uint64_t txns = st.transactions - s->health_txns, us = st.commit_us_sum - s->health_us;
    s->commit_us_recent = txns ? us / txns : 0; /* idle: nothing says it is slow */
    s->health_txns = st.transactions;
    s->health_us = st.commit_us_sum;
}

void cq__mqsrv_role_tick(cq_mqsrv_t *s, uint64_t now_ms)
{
    sample_health(s, now_ms);
    if (s->master)
        reload(s);
    if (cq__mqsrv_writable(s))
        return;
    if (now_ms - s->poll_ms >= CQ_MQSRV_POLL_MS || !s->poll_ms) {
        s->poll_ms = now_ms;
        for (size_t i = 0; i < s->ntopics; i++)
            if (cq__mqsrv_watched(s->topics[i]))
                cq__mqsrv_poll(s, s->topics[i]);
    }
    if (now_ms - s->refresh_ms >= CQ_MQSRV_REFRESH_MS || !s->refresh_ms) {
        s->refresh_ms = now_ms;
        if (!s->listing)
            own_req(s, CQ_WRITER_TOPIC_LIST, NULL);
        refresh_high_water(s);
    }
}

/* The store's topics: new ones join the cache (their high water is read before they are
 * polled), known ones take the store's online flag and retention. */
static void listed(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    for (size_t i = 0; i < req->n_topics; i++) {
        const cq_store_topic_t *st = &req->topics[i];
        mq_topic_t *t = cq__mqsrv_topic(s, st->name);
        if (t) {
            t->online = st->online;
            t->retention_days = st->retention_days; /* a managed retention stays in force */
            continue;
        }
        t = cq__mqsrv_topic_add(s, st->name, st->online, st->retention_days);
        if (!t)
            return; /* out of memory: the next refresh tries again */
        t->hw_unknown = true;
        t->reload = s->master;
        own_req(s, s->master ? CQ_WRITER_TOPIC_STATS : CQ_WRITER_HIGH_WATER, t);
    }
}

/* t's high water (and, after TOPIC_STATS, its count) as the store has them now. */
static void high_water(cq_mqsrv_t *s, const cq_writer_req_t *req, mq_topic_t *t)
{
    if (req->offset > t->last_offset)
        t->last_offset = req->offset;
    /* a watcher sees what commits after it watched (on a slave: after the last refresh) */
    bool idle = !cq__mqsrv_watched(t) && !t->catchup_reading && !t->catchup_to;
    if (t->hw_unknown || idle)
        t->pushed = t->last_offset;
    t->hw_unknown = false;
    if (req->op != CQ_WRITER_TOPIC_STATS)
        return;
    t->count = req->count;
    t->reload = false;
    if (t->pushed < t->last_offset && cq__mqsrv_watched(t))
        cq__mqsrv_poll(s, t); /* what the watchers have not seen yet, before new produces */
}

void cq__mqsrv_role_done(cq_mqsrv_t *s, const cq_writer_req_t *req, mq_topic_t *t)
{
    if (req->op == CQ_WRITER_TOPIC_LIST) {
        s->listing = false;
        if (req->err == 0)
            listed(s, req);
        return;
    }
    if (!t)
        return;
    t->hw_reading = false;
    if (req->err == 0)
        high_water(s, req, t);
}

uint32_t cq__mqsrv_weight(const cq_mqsrv_t *s)
{
    if (!cq__mqsrv_writable(s) || s->offline)
        return 0;
    uint64_t w = 100;
    cq_writer_stats_t st;
    if (s->port.ops->control &&
        s->port.ops->control(s->port.ud, CQ_MQPORT_WRITER_STATS, &st) == 0 && st.max_pending)
        w = st.pending >= st.max_pending ? 0 : w * (st.max_pending - st.pending) / st.max_pending;
    if (s->commit_us_recent > CQ_MQSRV_WEIGHT_SLOW_US)
        w = w * CQ_MQSRV_WEIGHT_SLOW_US / s->commit_us_recent;
    return w ? (uint32_t)w : 1; /* a master that takes writes never says 0 */
}

void cq__mqsrv_stamp(const cq_mqsrv_t *s, cq_mq_msg_t *m)
{
    bool hello = m->type == CQ_MQ_RESP_CONNECT || m->type == CQ_MQ_RESP_KEEPALIVE;
    if (hello) {
        m->master = cq__mqsrv_writable(s);
        m->has |= CQ_MQ_F_MASTER;
        /* the history generation a follower labels this shard's events with (src/mqsrv/
         * follow.c); absent while 0, as before epochs existed */
        m->epoch = (int64_t)(s->epoch & 0x1fffffffffffffull);
        if (m->epoch)
            m->has |= CQ_MQ_F_EPOCH;
    }
    if (hello || m->type == CQ_MQ_RESP_PRODUCE || m->type == CQ_MQ_RESP_CONSUME ||
        m->type == CQ_MQ_RESP_OFFSET || m->type == CQ_MQ_PUSH) {
        m->shard = s->shard;
        m->has |= CQ_MQ_F_SHARD;
    }
}
