/* holes.c - retryable holes: the keys of produces this server refused without storing them, so
 * that their retry is accepted below the producer's last stored seq (doc/protocol-mq.md,
 * produce).
 *
 * Why: a producer keeps many requests in flight, each with its own seqs. When the store fails
 * one of them (an outage) and a later one commits once the database is back, the failed one's
 * seq is below the producer's last stored seq, and the sequence rule (a new seq must rise)
 * would refuse the retry the error told the producer to send. The store cannot tell such a
 * retry from a producer that reset its sequence; the engine can, because it answered the
 * refusal. So a refusal whose answer says "retry with the same producer_id and seq" (storage,
 * internal, busy, not_master, server_offline) leaves its keys here, as ranges of seqs per
 * (topic, producer); a later produce marks its messages whose keys lie in one
 * (cq_store_msg_t.hole) and the store lets them in below the last seq, still refusing a key it
 * holds with other content. A filled hole is not removed: the store then finds the key stored,
 * and a retry is a duplicate. Ranges expire CQ_MQSRV_HOLE_TTL_MS after their last refusal, and
 * the server keeps at most CQ_MQSRV_HOLES_MAX of them (a refusal beyond that is not remembered:
 * its retry may be sequence_out_of_order, whose answer says what to do).
 *
 * Per topic, the ranges are sorted by (producer_id, lo), disjoint and not adjacent for one
 * producer (touching ranges merge), so a key is found by one binary search.
 */
#include "cq_alloc.h"
#include "cq_err.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <string.h>

struct mq_hole {
    uint64_t producer_id, lo, hi; /* seqs lo..hi */
    uint64_t expires_ms;          /* monotonic (the tick's); 0: stamped at the next tick */
};

/* Refusals whose answer tells the producer to retry with the same keys. */
static bool retryable(int err)
{
    switch (err) {
    case CQ_ESTORE:
    case CQ_EBUSY:
    case CQ_ENOTMASTER:
    case CQ_ESRVOFFLINE:
    case -ENOMEM:
        return true;
    default:
        return false;
    }
}

/* The first range of t at or after (producer_id, seq) by its end: the one holding seq, if any. */
static size_t find(const mq_topic_t *t, uint64_t producer_id, uint64_t seq)
{
    size_t lo = 0, hi = t->nholes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const mq_hole_t *h = &t->holes[mid];
        if (h->producer_id < producer_id || (h->producer_id == producer_id && h->hi < seq))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool holds(const mq_topic_t *t, uint64_t producer_id, uint64_t seq)
{
    size_t i = find(t, producer_id, seq);
    return i < t->nholes && t->holes[i].producer_id == producer_id && t->holes[i].lo <= seq;
}

/* Makes room for one more range at index i. False when the server holds its maximum. */
static bool insert_at(cq_mqsrv_t *s, mq_topic_t *t, size_t i)
{
    if (s->st.holes >= CQ_MQSRV_HOLES_MAX)
        return false;
    if (t->nholes == t->holes_cap) {
        size_t cap = t->holes_cap ? t->holes_cap * 2 : 8;
        mq_hole_t *v = cq_realloc(t->holes, cap * sizeof(*v));
        if (!v)
            return false;
        t->holes = v;
        t->holes_cap = cap;
    }
    memmove(&t->holes[i + 1], &t->holes[i], (t->nholes - i) * sizeof(*t->holes));
    t->nholes++;
    s->st.holes++;
    return true;
}

/* Remembers seqs lo..hi of producer_id in t, merged with the ranges it overlaps or touches. */
static void add(cq_mqsrv_t *s, mq_topic_t *t, uint64_t producer_id, uint64_t lo, uint64_t hi)
{
    size_t i = find(t, producer_id, lo ? lo - 1 : 0), j = i;
    while (j < t->nholes && t->holes[j].producer_id == producer_id && t->holes[j].lo <= hi + 1) {
        lo = t->holes[j].lo < lo ? t->holes[j].lo : lo;
        hi = t->holes[j].hi > hi ? t->holes[j].hi : hi;
        j++;
    }
    if (j == i && !insert_at(s, t, i)) {
        s->st.holes_dropped++;
        return;
    }
    if (j > i + 1) { /* ranges i..j-1 become one */
        memmove(&t->holes[i + 1], &t->holes[j], (t->nholes - j) * sizeof(*t->holes));
        t->nholes -= j - i - 1;
        s->st.holes -= j - i - 1;
    }
    uint64_t expires = s->tick_ms ? s->tick_ms + CQ_MQSRV_HOLE_TTL_MS : 0;
    t->holes[i] = (mq_hole_t){producer_id, lo, hi, expires};
}

void cq__mqsrv_holes_refused(cq_mqsrv_t *s, mq_topic_t *t, const cq_writer_req_t *req, int err)
{
    if (!t || !retryable(err))
        return;
    /* runs of consecutive seqs of one producer (a seed request is one run) become one range */
    for (size_t i = 0, end; i < req->n_msgs; i = end) {
        const cq_store_msg_t *m = &req->msgs[i];
        for (end = i + 1; end < req->n_msgs; end++) {
            const cq_store_msg_t *n = &req->msgs[end];
            if (n->producer_id != m->producer_id || n->seq != m->seq + (end - i))
                break;
        }
        if (m->producer_id)
            add(s, t, m->producer_id, m->seq, req->msgs[end - 1].seq);
    }
}

void cq__mqsrv_holes_mark(const mq_topic_t *t, cq_writer_req_t *req)
{
    if (!t || !t->nholes)
        return;
    for (size_t i = 0; i < req->n_msgs; i++) {
        cq_store_msg_t *m = &req->msgs[i];
        m->hole = m->producer_id && holds(t, m->producer_id, m->seq);
    }
}

/* Stamps t's new ranges and drops the expired ones. */
static void expire(cq_mqsrv_t *s, mq_topic_t *t, uint64_t now_ms)
{
    size_t k = 0;
    for (size_t i = 0; i < t->nholes; i++) {
        mq_hole_t *h = &t->holes[i];
        if (!h->expires_ms)
            h->expires_ms = now_ms + CQ_MQSRV_HOLE_TTL_MS;
        if (h->expires_ms > now_ms)
            t->holes[k++] = *h;
    }
    s->st.holes -= t->nholes - k;
    t->nholes = k;
}

void cq__mqsrv_holes_tick(cq_mqsrv_t *s, uint64_t now_ms)
{
    s->tick_ms = now_ms ? now_ms : 1; /* 0 means "no tick yet" */
    for (size_t i = 0; s->st.holes && i < s->ntopics; i++)
        if (s->topics[i]->nholes)
            expire(s, s->topics[i], now_ms);
}
