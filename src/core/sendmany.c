/* sendmany.c - channel-data fan-out to connections of other workers.
 *
 * Only channel data goes this way: its recipients are known one by one (each subscriber has its
 * own window and masks), while a user-space broadcast goes to a whole local list and travels
 * as one XM_FANOUT per worker (forward.c). Runs on the channel's worker while it ticks, and on
 * each recipient's worker when the SENDMANY arrives. Records are collected per
 * target worker during a tick and sent as one XM_SENDMANY per (worker, record), so a fan-out
 * costs one cross-worker message per worker, not one per subscriber.
 *
 * A recipient whose queue still holds more than --sendq-data-limit from earlier loop
 * iterations is behind: its record is
 * not queued, and the channel's scheduler is told to send it the full state at its next due
 * time (cq_sched_resync, on the channel's worker: XM_RESYNC when the recipient lives on
 * another). The full state holds every update it missed, so a slow reader gets fewer, larger
 * fan-outs instead of a queue that grows until it is closed, and the worker's memory and the
 * others' latency do not pay for it (doc/spatial.md "Overload"). Only channel data takes this
 * path; replies, handovers and subscription results are always queued. */
#include "core.h"

#include "cq_alloc.h"

#include <errno.h>
#include <string.h>

/* Collects during a scheduler tick; nothing is pushed until cq__sendmany_flush(), because a
 * push may close a slow subscriber, which must not happen inside the tick. Each entry holds a
 * reference to its record. A recipient the batch cannot take (OOM) misses this fan-out. */
static int sm_grow(cq_sendmany_t *s)
{
    uint32_t ncap = s->cap ? s->cap * 2 : 16;
    uint32_t *ids = cq_realloc(s->ids, ncap * sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    s->ids = ids;
    uint32_t *chans = cq_realloc(s->chans, ncap * sizeof(*chans));
    if (!chans)
        return -ENOMEM;
    s->chans = chans;
    cq_buf_t **recs = cq_realloc(s->recs, ncap * sizeof(*recs));
    if (!recs)
        return -ENOMEM;
    s->recs = recs;
    s->cap = ncap;
    return 0;
}

void cq__sendmany_add(cq_core_t *c, uint32_t chan_id, uint32_t conn_id, cq_buf_t *rec)
{
    int w = cq__conn_worker(c, conn_id);
    cq_sendmany_t *s = &c->sm[w];
    if (s->n == s->cap && sm_grow(s))
        return;
    s->ids[s->n] = conn_id;
    s->chans[s->n] = chan_id;
    s->recs[s->n++] = cq_buf_ref(rec);
}

/* The connection still holds more than --sendq-data-limit (0: no limit) from earlier loop
 * iterations: it is behind. What this iteration queued does not count: a client whose cells
 * all fall due in one tick may take more than the limit at once and still read it all in time
 * (a reader that keeps up was counted behind at every 100 ms mark otherwise). */
static bool behind(const cq_core_t *c, cq_conn_t *conn)
{
    size_t lim = c->sh->o.sendq_data_limit;
    if (!lim)
        return false;
    if (conn->data_iter != c->iter) {
        size_t q = cq_sendq_bytes(&conn->sendq);
        conn->data_iter = c->iter;
        conn->data_base = q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
    }
    return conn->data_base > lim;
}

/* On the channel's worker: the next fan-out of chan_id to conn_id is the full state. */
static void resync_here(cq_core_t *c, uint32_t chan_id, uint32_t conn_id)
{
    cq_chan_t *ch = cq__chan_get(c, chan_id);
    if (ch && ch->data)
        cq_sched_resync(ch->data->sched, conn_id);
}

/* Sends the run [i, j) of entries that share one record: one message and one reference for the
 * run, however many recipients it has on that worker. */
static void post_run(cq_core_t *c, int w, cq_sendmany_t *s, uint32_t i, uint32_t j)
{
    cq_xmsg_t *m = cq__xmsg_new(XM_SENDMANY, (j - i) * sizeof(uint32_t));
    if (!m)
        return;
    m->chan_id = s->chans[i]; /* one record: one channel */
    memcpy(m->body, &s->ids[i], (j - i) * sizeof(uint32_t));
    m->buf = cq_buf_ref(s->recs[i]);
    cq__xmsg_post(c, w, m);
}

/* This worker's own recipients are pushed directly, now that the tick is over. */
static void deliver_local(cq_core_t *c, cq_sendmany_t *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        cq_conn_t *conn = cq_map_get(&c->conns, s->ids[i]);
        if (!conn)
            continue;
        if (behind(c, conn)) {
            CQ_METRIC_ADD(c, M_DATA_RESYNCS, 0, 1);
            resync_here(c, s->chans[i], s->ids[i]);
        } else if (conn->out_ct != CQ_CT_SNAPPY) {
            cq__conn_push_record_ref(c, conn, s->recs[i]); /* the batch's reference moves */
            s->recs[i] = NULL;
        } else {
            cq__conn_push(c, conn, s->recs[i]); /* compressed for it: a copy of its own */
        }
    }
}

/* After every channel due in this call (cq_core_run_due), so records of several channels for one
 * worker leave together, before the flush that wakes it. The batch's own references are
 * dropped here: each message took one of its own. */
void cq__sendmany_flush(cq_core_t *c)
{
    for (int w = 0; w < c->nplaces; w++) {
        cq_sendmany_t *s = &c->sm[w];
        uint32_t i = 0;
        if (w == c->index) {
            deliver_local(c, s);
            i = s->n;
        }
        while (i < s->n) {
            uint32_t j = i + 1;
            while (j < s->n && s->recs[j] == s->recs[i])
                j++;
            post_run(c, w, s, i, j);
            i = j;
        }
        for (uint32_t k = 0; k < s->n; k++)
            cq_buf_unref(s->recs[k]); /* NULL where a local queue took it */
        s->n = 0;
    }
}

/* XM_SENDMANY on the recipients' worker: a recipient that closed meanwhile is skipped; the
 * others' queues take their own references to the one record. */
void cq__sendmany_deliver(cq_core_t *c, const cq_xmsg_t *m)
{
    uint32_t n = m->body_len / sizeof(uint32_t), nb = 0;
    cq_xmsg_t *back = NULL; /* the ids that were behind, for the channel's worker */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id;
        memcpy(&id, m->body + i * sizeof(uint32_t), sizeof(id));
        cq_conn_t *conn = cq_map_get(&c->conns, id);
        if (!conn)
            continue;
        if (!behind(c, conn)) {
            cq__conn_push(c, conn, m->buf);
            continue;
        }
        CQ_METRIC_ADD(c, M_DATA_RESYNCS, 0, 1);
        if (!back && !(back = cq__xmsg_new(XM_RESYNC, (n - i) * sizeof(uint32_t))))
            continue; /* out of memory: it misses this fan-out, not the later ones */
        memcpy(back->body + nb++ * sizeof(uint32_t), &id, sizeof(id));
    }
    if (!back)
        return;
    back->body_len = nb * sizeof(uint32_t);
    back->chan_id = m->chan_id;
    cq__xmsg_post(c, cq__chan_worker(c, m->chan_id), back);
}

/* XM_RESYNC on the channel's worker. */
void cq__sendmany_resync(cq_core_t *c, const cq_xmsg_t *m)
{
    uint32_t n = m->body_len / sizeof(uint32_t);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id;
        memcpy(&id, m->body + i * sizeof(uint32_t), sizeof(id));
        resync_here(c, m->chan_id, id);
    }
}

void cq__sendmany_free(cq_core_t *c)
{
    if (!c->sm)
        return;
    for (int w = 0; w < c->nplaces; w++) {
        for (uint32_t k = 0; k < c->sm[w].n; k++)
            cq_buf_unref(c->sm[w].recs[k]);
        cq_free(c->sm[w].ids);
        cq_free(c->sm[w].chans);
        cq_free(c->sm[w].recs);
    }
    cq_free(c->sm);
    c->sm = NULL;
}
