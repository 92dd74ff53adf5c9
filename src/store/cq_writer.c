/* cq_writer.c - the store thread with per-topic group commit. See cq_writer.h for the contract.
 *
 * Wake-up protocol (no lost wake-ups, no syscall per submit while the thread is busy):
 *   submitter: push; queued++ (seq_cst); if (sleeping) { lock; signal; unlock; }
 *   thread:    lock; sleeping = 1 (seq_cst); if (queued == 0 && !stop) wait; sleeping = 0; unlock
 * Either the submitter sees sleeping == 1 and signals under the mutex (which the thread releases
 * only inside the wait), or the thread sees queued > 0 and does not wait.
 *
 * Shutdown protocol: submitters bracket their work with submitting++/--; shutdown sets closing,
 * waits for submitting == 0 (no push can be in flight afterwards), then sets stop. The thread,
 * seeing stop, drains the queue completely, commits every group and exits.
 */
#include "cq_writer.h"

#include "cq_store_impl.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_smap.h"
#include "cq_util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The reader thread (opts.reader): READ requests only, same wake-up protocol as the writer. */
typedef struct reader {
    cq_writer_t *w;
    cq_store_t *store;
    cq_mpsc_t q;
    atomic_size_t queued;
    atomic_bool sleeping, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started;
} reader_t;

/* Produce requests of one topic waiting for their transaction, oldest first. A group lives as
 * long as the writer once its topic had a produce (found by name in w->group_idx); it is in
 * w->active while it holds requests.
 *
 * Counting (cq_writer.h): told is the highest offset of the topic the caller was told about,
 * from the group's first transaction on (its base: before it, the caller counted the topic
 * itself, at start or with a TOPIC_STATS) and then from each commit. A transaction that failed
 * after it locked the topic leaves the group unsure: its COMMIT may have gone through with the
 * answer lost. reconcile() then counts what lies above told before the topic's next append or
 * purge, and unseen holds that count until a completion of the topic carries it. */
typedef struct group {
    char topic[CQ_STORE_TOPIC_MAX + 1]; /* the first waiting request's spelling; the index key */
    cq_writer_req_t *head, *tail;
    size_t n_msgs;
    bool active;
    bool told_known, unsure;
    uint64_t told, unseen;
} group_t;

struct cq_writer {
    /* shared between threads */
    cq_mpsc_t q;
    atomic_size_t queued;  /* pushed and not yet popped */
    atomic_size_t pending; /* units accepted and not yet done */
    atomic_int submitting; /* submits in flight (shutdown waits for 0) */
    atomic_bool closing;   /* no new submits */
    atomic_bool stop;      /* thread: drain and exit */
    atomic_bool sleeping;  /* thread is (about to be) in cond wait */
    atomic_bool paused;    /* tests */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool joined;

    /* stats */
    atomic_uint_least64_t st_txns, st_failed_txns, st_msgs, st_reqs, st_rejected, st_busy, st_other,
        st_max_txn;
    atomic_uint_least64_t st_batch[CQ_WRITER_HIST_N], st_commit[CQ_WRITER_HIST_N];
    atomic_uint_least64_t st_batch_sum, st_commit_sum;

    /* read-only after new */
    size_t max_batch, max_pending;
    uint64_t max_wait_ns;
    cq_writer_done_fn done;
    void *ud;
    reader_t *rd; /* NULL: reads run on the writer thread */

    /* writer thread only */
    cq_store_t *store;
    cq_smap_t group_idx; /* topic (ASCII case folded, as the store compares) -> group_t, owned */
    group_t **active;    /* the groups holding requests */
    size_t n_active, cap_active;
    cq_store_msg_t *scratch; /* one transaction's messages (shallow copies) */
    uint64_t *offs;
    size_t cap_scratch;
};

/* ---- requests ------------------------------------------------------------------------------ */

static bool op_valid(cq_writer_op_t op)
{
    return op >= CQ_WRITER_PRODUCE && op <= CQ_WRITER_READ_ONE;
}

static bool op_has_consumer(cq_writer_op_t op)
{
    return op == CQ_WRITER_COMMIT_OFFSET || op == CQ_WRITER_GET_OFFSET;
}

int cq_writer_req_new(cq_writer_op_t op, const char *topic, const char *consumer,
                      cq_writer_req_t **ret_req)
{
    if (!ret_req || !op_valid(op))
        return -EINVAL;
    if (op != CQ_WRITER_TOPIC_LIST && !cq_store_topic_name_ok(topic))
        return CQ_EBADTOPIC;
    if (op_has_consumer(op) && !cq_store_consumer_id_ok(consumer))
        return -EINVAL;
    cq_writer_req_t *req = cq_calloc(1, sizeof(*req));
    if (!req)
        return -ENOMEM;
    req->op = op;
    if (op != CQ_WRITER_TOPIC_LIST)
        snprintf(req->topic, sizeof(req->topic), "%s", topic);
    if (op_has_consumer(op))
        snprintf(req->consumer, sizeof(req->consumer), "%s", consumer);
    *ret_req = req;
    return 0;
}

static int grow_msgs(cq_writer_req_t *req)
{
    if (req->n_msgs < req->cap_msgs)
        return 0;
    size_t cap = req->cap_msgs ? req->cap_msgs * 2 : 1;
    cq_store_msg_t *m = cq_realloc(req->msgs, cap * sizeof(*m));
    if (!m)
        return -ENOMEM;
    req->msgs = m;
    uint64_t *o = cq_realloc(req->offsets, cap * sizeof(*o));
    if (!o)
        return -ENOMEM;
    req->offsets = o;
    req->cap_msgs = cap;
    return 0;
}

int cq_writer_req_add_msg_take(cq_writer_req_t *req, void *content, size_t len,
                               uint64_t producer_id, uint64_t seq)
{
    int r = -EINVAL;
    if (!req || req->op != CQ_WRITER_PRODUCE || (len && !content))
        goto fail;
    r = grow_msgs(req);
    if (r < 0)
        goto fail;
    req->msgs[req->n_msgs++] =
        (cq_store_msg_t){.content = content, .len = len, .producer_id = producer_id, .seq = seq};
    return 0;
fail:
    cq_free(content);
    return r;
}

int cq_writer_req_add_msg(cq_writer_req_t *req, const void *content, size_t len,
                          uint64_t producer_id, uint64_t seq)
{
    if (!req || (len && !content))
        return -EINVAL;
    void *copy = cq_malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    if (len)
        memcpy(copy, content, len);
    return cq_writer_req_add_msg_take(req, copy, len, producer_id, seq);
}

void cq_writer_req_free(cq_writer_req_t *req)
{
    if (!req)
        return;
    for (size_t i = 0; i < req->n_msgs; i++)
        cq_free((void *)req->msgs[i].content);
    cq_free(req->msgs);
    cq_free(req->offsets);
    cq_store_recs_done(req->recs, req->n_recs);
    cq_free(req->recs);
    cq_free(req->topics);
    cq_free(req);
}

/* ---- completion ---------------------------------------------------------------------------- */

static void fail_req(cq_writer_req_t *req, int err, const char *msg)
{
    req->err = err;
    snprintf(req->errmsg, sizeof(req->errmsg), "%s", msg && *msg ? msg : cq_strerror(err));
}

static void complete(cq_writer_t *w, cq_writer_req_t *req)
{
    atomic_fetch_sub(&w->pending, req->weight);
    w->done(w->ud, req); /* req may be gone after this */
}

static void stat_max(atomic_uint_least64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
}

static void stat_add(atomic_uint_least64_t *a, uint64_t v)
{
    atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}

const uint64_t cq_writer_batch_bounds[CQ_WRITER_HIST_N - 1] = {1,   2,   5,   10,   20,  50,
                                                               100, 200, 500, 1000, 5000};
const uint64_t cq_writer_commit_bounds[CQ_WRITER_HIST_N - 1] = {
    250, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 500000, 1000000};

static void stat_hist(atomic_uint_least64_t *buckets, const uint64_t *bounds, uint64_t v)
{
    size_t i = 0;
    while (i < CQ_WRITER_HIST_N - 1 && v > bounds[i])
        i++;
    stat_add(&buckets[i], 1);
}

/* ---- group commit (writer thread) ---------------------------------------------------------- */

static int scratch_reserve(cq_writer_t *w, size_t n)
{
    if (n <= w->cap_scratch)
        return 0;
    cq_store_msg_t *m = cq_realloc(w->scratch, n * sizeof(*m));
    if (!m)
        return -ENOMEM;
    w->scratch = m;
    uint64_t *o = cq_realloc(w->offs, n * sizeof(*o));
    if (!o)
        return -ENOMEM;
    w->offs = o;
    w->cap_scratch = n;
    return 0;
}

/* Detaches the next transaction's requests from the head of g: whole requests while they fit in
 * max_batch messages (at least one). Returns the chain and its message count in *ret_n. */
static cq_writer_req_t *take_batch(cq_writer_t *w, group_t *g, size_t *ret_n)
{
    cq_writer_req_t *first = g->head, *last = NULL;
    size_t n = 0;
    for (cq_writer_req_t *r = g->head; r && (n == 0 || n + r->n_msgs <= w->max_batch);
         r = r->next) {
        n += r->n_msgs;
        last = r;
    }
    g->head = last->next;
    if (!g->head)
        g->tail = NULL;
    last->next = NULL;
    g->n_msgs -= n;
    *ret_n = n;
    return first;
}

/* Appends chain (n messages) in one transaction; offsets to w->offs. */
static int append_chain(cq_writer_t *w, const group_t *g, cq_writer_req_t *chain, size_t n)
{
    int r = scratch_reserve(w, n);
    if (r < 0)
        return r;
    size_t k = 0;
    for (cq_writer_req_t *q = chain; q; q = q->next) {
        memcpy(&w->scratch[k], q->msgs, q->n_msgs * sizeof(*q->msgs));
        k += q->n_msgs;
    }
    uint64_t t0 = cq_clock_mono_ns();
    r = cq_store_append_batch(w->store, g->topic, w->scratch, n, w->offs);
    uint64_t us = (cq_clock_mono_ns() - t0) / 1000;
    stat_hist(w->st_commit, cq_writer_commit_bounds, us);
    stat_add(&w->st_commit_sum, us);
    return r;
}

/* ---- counting what a lost COMMIT answer left behind (writer thread) ----------------------- */

/* A completion of g's topic carries the rows reconcile() found. */
static void hand_unseen(group_t *g, cq_writer_req_t *req)
{
    req->unseen = g->unseen;
    g->unseen = 0;
}

/* Before g's next append or purge, when a failed transaction left it unsure: the rows committed
 * above told without their answer are counted (one range scan of the few rows above told), so
 * that the next completion hands them to the caller before anything newer, or a purge, could
 * change them. A failure leaves g unsure: the caller of this append or purge fails with it. */
static int reconcile(cq_writer_t *w, group_t *g)
{
    uint64_t hw = 0, n = 0;
    if (!g->unsure)
        return 0;
    int r = cq_store_high_water(w->store, g->topic, &hw);
    if (r == 0 && hw > g->told)
        r = cq_store_count_range(w->store, g->topic, g->told, hw, &n);
    if (r < 0)
        return r;
    g->unseen += n;
    g->told = hw > g->told ? hw : g->told;
    g->unsure = false;
    return 0;
}

/* g's transaction failed with base as cq_store_append_base() says: one that locked the topic
 * may have committed (an unknown COMMIT outcome), so g is unsure until reconciled. */
static void note_failed(group_t *g, uint64_t base)
{
    if (base == CQ_STORE_BASE_NONE) /* nothing of it was written */
        return;
    /* the group's first transaction: up to its base, the caller counted the topic itself */
    if (!g->told_known) {
        g->told = base;
        g->told_known = true;
    }
    g->unsure = true;
}

/* After a sequence error: detaches from *chain the request holding message bad (of the batch),
 * fails it with err and the store's text, and completes it; *n loses its messages. */
static void reject_seq(cq_writer_t *w, group_t *g, cq_writer_req_t **chain, size_t *n, size_t bad,
                       int err)
{
    cq_writer_req_t **pp = chain, *q = *chain;
    while (q->next && bad >= q->n_msgs) {
        bad -= q->n_msgs;
        pp = &q->next;
        q = q->next;
    }
    *pp = q->next;
    q->next = NULL;
    *n -= q->n_msgs;
    fail_req(q, err, cq_store_errmsg(w->store));
    stat_add(&w->st_rejected, 1); /* before done */
    hand_unseen(g, q);
    complete(w, q);
}

/* Fills each acknowledged request's offsets and prev_offset from one committed append; g was
 * told everything up to the highest offset. */
static void ack_chain(cq_writer_t *w, group_t *g, cq_writer_req_t *chain)
{
    uint64_t hw = cq_store_append_base(w->store);
    size_t k = 0;
    for (cq_writer_req_t *q = chain; q; q = q->next) {
        memcpy(q->offsets, &w->offs[k], q->n_msgs * sizeof(*q->offsets));
        q->prev_offset = hw;
        for (size_t i = 0; i < q->n_msgs; i++)
            hw = q->offsets[i] > hw ? q->offsets[i] : hw;
        k += q->n_msgs;
    }
    g->told = hw;
    g->told_known = true;
}

/* Commits the next batch of g in one transaction and completes its requests. A request that
 * breaks the sequence rules fails alone and the rest is appended again. */
static void commit_batch(cq_writer_t *w, group_t *g)
{
    size_t n = 0;
    cq_writer_req_t *chain = take_batch(w, g, &n);
    int r = reconcile(w, g);
    uint64_t base = CQ_STORE_BASE_NONE; /* the last append's, once one ran */
    if (r == 0) {
        r = append_chain(w, g, chain, n);
        base = cq_store_append_base(w->store);
    }
    while ((r == CQ_ESEQCONFLICT || r == CQ_ESEQORDER) && chain) {
        reject_seq(w, g, &chain, &n, cq_store_append_bad(w->store), r);
        r = chain ? append_chain(w, g, chain, n) : 0;
        base = cq_store_append_base(w->store);
    }
    if (!chain)
        return;
    /* counters first, so that a done callback already sees its transaction counted */
    stat_add(&w->st_txns, 1);
    stat_max(&w->st_max_txn, n);
    stat_hist(w->st_batch, cq_writer_batch_bounds, n);
    stat_add(&w->st_batch_sum, n);
    if (r < 0) {
        stat_add(&w->st_failed_txns, 1);
        note_failed(g, base);
    } else {
        size_t reqs = 0;
        for (cq_writer_req_t *q = chain; q; q = q->next)
            reqs++;
        stat_add(&w->st_msgs, n);
        stat_add(&w->st_reqs, reqs);
        ack_chain(w, g, chain);
    }
    const char *msg = r < 0 ? cq_store_errmsg(w->store) : "";
    for (cq_writer_req_t *q = chain, *next; q; q = next) {
        next = q->next;
        q->next = NULL;
        if (r < 0)
            fail_req(q, r, msg);
        hand_unseen(g, q);
        complete(w, q);
    }
}

static bool group_due(const cq_writer_t *w, const group_t *g, uint64_t now_ns, bool all)
{
    if (!g->head)
        return false;
    return all || w->max_wait_ns == 0 || g->n_msgs >= w->max_batch ||
           now_ns >= g->head->submit_ns + w->max_wait_ns;
}

/* Commits every batch that is due (all of them when all is set); emptied groups leave the
 * active list. */
static void flush_due(cq_writer_t *w, bool all)
{
    uint64_t now = cq_clock_mono_ns();
    for (size_t i = 0; i < w->n_active;) {
        group_t *g = w->active[i];
        while (group_due(w, g, now, all))
            commit_batch(w, g);
        if (g->head) {
            i++;
            continue;
        }
        g->active = false;
        w->active[i] = w->active[--w->n_active];
    }
}

/* The group of topic (any case), made active for a request spelled topic. */
static group_t *group_get(cq_writer_t *w, const char *topic)
{
    group_t *g = cq_smap_get(&w->group_idx, topic);
    if (!g && (g = cq_calloc(1, sizeof(*g)))) {
        snprintf(g->topic, sizeof(g->topic), "%s", topic);
        if (cq_smap_put(&w->group_idx, g->topic, g) < 0)
            g = (cq_free(g), NULL);
    }
    if (!g || g->active)
        return g;
    if (w->n_active == w->cap_active) {
        size_t cap = w->cap_active ? w->cap_active * 2 : 8;
        group_t **a = cq_realloc(w->active, cap * sizeof(*a));
        if (!a)
            return NULL;
        w->active = a;
        w->cap_active = cap;
    }
    snprintf(g->topic, sizeof(g->topic), "%s", topic); /* same key, folded: the index holds */
    g->active = true;
    w->active[w->n_active++] = g;
    return g;
}

static void groups_free(cq_writer_t *w)
{
    uint32_t it = 0;
    void *g;
    while (cq_smap_next(&w->group_idx, &it, NULL, &g))
        cq_free(g);
    cq_smap_done(&w->group_idx);
    cq_free(w->active);
}

/* Rejects a produce request alone when one of its messages can never be stored. */
static int produce_check(cq_writer_t *w, cq_writer_req_t *req)
{
    size_t limit = w->store->max_content;
    for (size_t i = 0; i < req->n_msgs; i++) {
        const cq_store_msg_t *m = &req->msgs[i];
        if (m->len > limit) {
            snprintf(req->errmsg, sizeof(req->errmsg),
                     "message %zu: %zu bytes, over the limit of %zu", i, m->len, limit);
            return CQ_ECONTENT;
        }
        if (m->len && !m->content) {
            snprintf(req->errmsg, sizeof(req->errmsg), "message %zu: no content", i);
            return -EINVAL;
        }
    }
    return 0;
}

static void enqueue_produce(cq_writer_t *w, cq_writer_req_t *req)
{
    int r = produce_check(w, req);
    if (r < 0) {
        req->err = r;
        stat_add(&w->st_rejected, 1); /* before done */
        complete(w, req);
        return;
    }
    group_t *g = group_get(w, req->topic);
    if (!g) {
        fail_req(req, -ENOMEM, "out of memory for a topic group");
        complete(w, req);
        return;
    }
    req->next = NULL;
    if (g->tail)
        g->tail->next = req;
    else
        g->head = req;
    g->tail = req;
    g->n_msgs += req->n_msgs;
    while (g->n_msgs >= w->max_batch)
        commit_batch(w, g);
}

/* ---- other requests (writer thread) -------------------------------------------------------- */

static int run_read(cq_store_t *store, cq_writer_req_t *req)
{
    cq_store_rec_t *recs = cq_calloc(req->max, sizeof(*recs));
    if (!recs)
        return -ENOMEM;
    size_t n = 0;
    int r = cq_store_read_bounded(store, req->topic, req->from_offset, req->max, req->max_bytes,
                                  recs, &n);
    if (r < 0) {
        cq_free(recs);
        return r;
    }
    req->recs = recs;
    req->n_recs = n;
    return 0;
}

static int run_read_one(cq_store_t *store, cq_writer_req_t *req)
{
    int r = req->offset ? 0
                        : cq_store_find_key(store, req->topic, req->key_producer, req->key_seq,
                                            &req->offset);
    if (r < 0)
        return r;
    cq_store_rec_t *rec = cq_calloc(1, sizeof(*rec));
    if (!rec)
        return -ENOMEM;
    r = cq_store_read_one(store, req->topic, req->offset, rec, &req->state);
    if (r < 0) {
        cq_free(rec);
        return r;
    }
    req->recs = rec;
    req->n_recs = 1;
    return 0;
}

/* A purge of a topic whose group is unsure first counts the rows a lost COMMIT answer left: it
 * could otherwise remove rows the caller never counted, and subtract them. */
static int run_purge(cq_writer_t *w, cq_writer_req_t *req)
{
    group_t *g = cq_smap_get(&w->group_idx, req->topic);
    int r = g ? reconcile(w, g) : 0;
    if (r < 0)
        return r;
    if (g)
        hand_unseen(g, req);
    return cq_store_purge(w->store, req->topic, req->older_than_ms, req->max, &req->purged);
}

/* The caller counted the topic again (TOPIC_STATS, read just now): the group starts over
 * from what it read. */
static void stats_read(cq_writer_t *w, const cq_writer_req_t *req)
{
    group_t *g = cq_smap_get(&w->group_idx, req->topic);
    if (!g)
        return;
    g->told = req->offset;
    g->told_known = true;
    g->unsure = false;
    g->unseen = 0;
}

static int run_stats(cq_writer_t *w, cq_writer_req_t *req)
{
    int r = cq_store_high_water(w->store, req->topic, &req->offset);
    if (r == 0)
        r = cq_store_count(w->store, req->topic, &req->count);
    if (r == 0)
        stats_read(w, req);
    return r;
}

static int run_op(cq_writer_t *w, cq_writer_req_t *req)
{
    cq_store_t *s = w->store;
    switch (req->op) {
    case CQ_WRITER_READ:
        return run_read(w->store, req);
    case CQ_WRITER_COMMIT_OFFSET:
        return cq_store_commit_offset(s, req->topic, req->consumer, req->offset, req->now_ms);
    case CQ_WRITER_GET_OFFSET:
        return cq_store_get_offset(s, req->topic, req->consumer, &req->offset);
    case CQ_WRITER_TOPIC_CREATE:
        return cq_store_topic_create(s, req->topic, req->retention_days, req->now_ms);
    case CQ_WRITER_TOPIC_LIST:
        return cq_store_topic_list(s, &req->topics, &req->n_topics);
    case CQ_WRITER_TOPIC_SET_ONLINE:
        return cq_store_topic_set_online(s, req->topic, req->online);
    case CQ_WRITER_PURGE:
        return run_purge(w, req);
    case CQ_WRITER_HIGH_WATER:
        return cq_store_high_water(s, req->topic, &req->offset);
    case CQ_WRITER_INVALIDATE:
        return cq_store_invalidate(s, req->topic, req->offset);
    case CQ_WRITER_TOPIC_STATS:
        return run_stats(w, req);
    case CQ_WRITER_READ_ONE:
        return run_read_one(w->store, req);
    case CQ_WRITER_PRODUCE:
        break;
    }
    return -EINVAL;
}

static void run_other(cq_writer_t *w, cq_writer_req_t *req)
{
    int r = run_op(w, req);
    if (r < 0)
        fail_req(req, r, cq_store_errmsg(w->store));
    stat_add(&w->st_other, 1); /* before done, like every counter */
    complete(w, req);
}

/* ---- the thread ---------------------------------------------------------------------------- */

/* Pops everything queued now: produces join their topic group, other requests run at once. */
static void drain(cq_writer_t *w)
{
    cq_mpsc_node_t *n;
    while ((n = cq_mpsc_pop(&w->q)) != NULL) {
        atomic_fetch_sub(&w->queued, 1);
        cq_writer_req_t *req = cq_container_of(n, cq_writer_req_t, node);
        if (req->op == CQ_WRITER_PRODUCE)
            enqueue_produce(w, req);
        else
            run_other(w, req);
    }
}

/* The earliest moment a waiting group becomes due; 0 when no group waits. */
static uint64_t next_deadline(const cq_writer_t *w)
{
    uint64_t d = 0;
    for (size_t i = 0; i < w->n_active; i++) {
        uint64_t t = w->active[i]->head->submit_ns + w->max_wait_ns;
        if (d == 0 || t < d)
            d = t;
    }
    return d;
}

static void wait_until(cq_writer_t *w, uint64_t deadline_ns)
{
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->sleeping, true);
    bool idle = atomic_load(&w->queued) == 0 && !atomic_load(&w->stop);
    if (idle && deadline_ns == 0) {
        pthread_cond_wait(&w->cv, &w->mu);
    } else if (idle) {
        struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                              .tv_nsec = (long)(deadline_ns % 1000000000u)};
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    atomic_store(&w->sleeping, false);
    pthread_mutex_unlock(&w->mu);
}

static void wait_unpaused(cq_writer_t *w)
{
    if (!atomic_load(&w->paused))
        return;
    pthread_mutex_lock(&w->mu);
    while (atomic_load(&w->paused) && !atomic_load(&w->stop))
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static void *writer_main(void *arg)
{
    cq_writer_t *w = arg;
    for (;;) {
        wait_unpaused(w);
        bool stopping = atomic_load(&w->stop);
        drain(w);
        if (stopping && atomic_load(&w->queued) > 0) {
            sched_yield(); /* a push is between exchange and link: it completes shortly */
            continue;
        }
        flush_due(w, stopping);
        if (stopping)
            break;
        if (atomic_load(&w->queued) == 0)
            wait_until(w, next_deadline(w));
    }
    return NULL;
}

/* ---- the reader thread ---------------------------------------------------------------------- */

static void reader_wait(reader_t *rd)
{
    pthread_mutex_lock(&rd->mu);
    atomic_store(&rd->sleeping, true);
    if (atomic_load(&rd->queued) == 0 && !atomic_load(&rd->stop))
        pthread_cond_wait(&rd->cv, &rd->mu);
    atomic_store(&rd->sleeping, false);
    pthread_mutex_unlock(&rd->mu);
}

static void *reader_main(void *arg)
{
    reader_t *rd = arg;
    for (;;) {
        bool stopping = atomic_load(&rd->stop);
        cq_mpsc_node_t *n;
        while ((n = cq_mpsc_pop(&rd->q)) != NULL) {
            atomic_fetch_sub(&rd->queued, 1);
            cq_writer_req_t *req = cq_container_of(n, cq_writer_req_t, node);
            int r = run_read(rd->store, req);
            if (r < 0)
                fail_req(req, r, cq_store_errmsg(rd->store));
            stat_add(&rd->w->st_other, 1);
            complete(rd->w, req);
        }
        if (atomic_load(&rd->queued) > 0) {
            sched_yield(); /* a push is between exchange and link: it completes shortly */
            continue;
        }
        if (stopping)
            break;
        reader_wait(rd);
    }
    return NULL;
}

static void reader_push(reader_t *rd, cq_writer_req_t *req)
{
    cq_mpsc_push(&rd->q, &req->node);
    atomic_fetch_add(&rd->queued, 1);
    if (atomic_load(&rd->sleeping)) {
        pthread_mutex_lock(&rd->mu);
        pthread_cond_signal(&rd->cv);
        pthread_mutex_unlock(&rd->mu);
    }
}

/* Stops the reader once nothing can be submitted any more: it drains its queue first. */
static void reader_stop(reader_t *rd)
{
    if (!rd || !rd->started)
        return;
    pthread_mutex_lock(&rd->mu);
    atomic_store(&rd->stop, true);
    pthread_cond_signal(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
    pthread_join(rd->thread, NULL);
    rd->started = false;
}

static void reader_free(reader_t *rd)
{
    if (!rd)
        return;
    reader_stop(rd);
    pthread_cond_destroy(&rd->cv);
    pthread_mutex_destroy(&rd->mu);
    cq_store_close(rd->store);
    cq_free(rd);
}

/* Starts the reader thread on store (taken; closed on failure) into *ret. 0, -ENOMEM or the
 * error of pthread_create (negative). */
static int reader_new(cq_writer_t *w, cq_store_t *store, reader_t **ret)
{
    reader_t *rd = cq_calloc(1, sizeof(*rd));
    if (!rd) {
        cq_store_close(store);
        return -ENOMEM;
    }
    rd->w = w;
    rd->store = store;
    cq_mpsc_init(&rd->q);
    pthread_mutex_init(&rd->mu, NULL);
    pthread_cond_init(&rd->cv, NULL);
    int r = pthread_create(&rd->thread, NULL, reader_main, rd);
    rd->started = r == 0;
    if (!rd->started) {
        reader_free(rd);
        return -r;
    }
    *ret = rd;
    return 0;
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

static void wake(cq_writer_t *w)
{
    pthread_mutex_lock(&w->mu);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int sync_init(cq_writer_t *w)
{
    pthread_condattr_t ca;
    int r = pthread_condattr_init(&ca);
    if (r != 0)
        return -r;
    r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (r == 0)
        r = pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (r != 0)
        return -r;
    r = pthread_mutex_init(&w->mu, NULL);
    if (r != 0) {
        pthread_cond_destroy(&w->cv);
        return -r;
    }
    return 0;
}

/* The writer with o's settings, its queue and its scratch for max_batch messages, its lock and
 * condition; no thread yet. 0 or a negative code with its text. */
static int writer_alloc(cq_store_t *store, const cq_writer_opts_t *o, cq_writer_t **ret, char *err,
                        size_t errlen)
{
    cq_writer_t *w = cq_calloc(1, sizeof(*w));
    if (!w)
        return cq_err_fmt(err, errlen, -ENOMEM, "store writer: out of memory");
    w->store = store;
    w->max_batch = o->max_batch ? o->max_batch : CQ_WRITER_MAX_BATCH_DFL;
    w->max_pending = o->max_pending ? o->max_pending : CQ_WRITER_MAX_PENDING_DFL;
    int64_t wait_us = o->max_wait_us < 0 ? CQ_WRITER_MAX_WAIT_US_DFL : o->max_wait_us;
    w->max_wait_ns = (uint64_t)wait_us * 1000u;
    w->done = o->done;
    w->ud = o->ud;
    cq_smap_init(&w->group_idx, true);
    cq_mpsc_init(&w->q);
    int r = scratch_reserve(w, w->max_batch);
    if (r < 0) {
        cq_err_fmt(err, errlen, r, "store writer: out of memory for a batch of %zu messages",
                   w->max_batch);
        goto fail;
    }
    if ((r = sync_init(w)) < 0) {
        cq_err_fmt(err, errlen, r, "store writer: cannot create its lock: %s", cq_strerror(r));
        goto fail;
    }
    *ret = w;
    return 0;
fail:
    cq_free(w->scratch);
    cq_free(w->offs);
    cq_free(w);
    return r;
}

/* Frees a writer whose thread never started (cq_writer_new's failure path), closing its
 * store. Accepts NULL. */
static void writer_unstarted_free(cq_writer_t *w)
{
    if (!w)
        return;
    reader_free(w->rd);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    cq_store_close(w->store);
    cq_free(w->scratch);
    cq_free(w->offs);
    cq_free(w);
}

int cq_writer_new(cq_store_t *store, const cq_writer_opts_t *o, cq_writer_t **ret, char *err,
                  size_t errlen)
{
    cq_writer_t *w = NULL;
    cq_store_t *reader = o ? o->reader : NULL;
    int r = -EINVAL;
    if (!store || !o || !o->done) {
        cq_err_fmt(err, errlen, r, "store writer: %s",
                   !store ? "no store"
                   : !o   ? "no options"
                          : "no done callback");
        goto fail;
    }
    if ((r = writer_alloc(store, o, &w, err, errlen)) < 0)
        goto fail;
    store = NULL; /* w's now */
    r = reader ? reader_new(w, reader, &w->rd) : 0;
    reader = NULL; /* w->rd's, or closed by reader_new */
    if (r < 0) {
        cq_err_fmt(err, errlen, r, "store writer: cannot start the reader thread: %s",
                   cq_strerror(r));
        goto fail;
    }
    if ((r = -pthread_create(&w->thread, NULL, writer_main, w)) < 0) {
        cq_err_fmt(err, errlen, r, "store writer: cannot start its thread: %s", cq_strerror(r));
        goto fail;
    }
    *ret = w;
    return 0;
fail:
    writer_unstarted_free(w);
    cq_store_close(reader);
    cq_store_close(store);
    return r;
}

/* Units req counts against max_pending, or a negative code for a request that is never valid. */
static int req_weight(const cq_writer_req_t *req, size_t *ret_weight)
{
    switch (req->op) {
    case CQ_WRITER_PRODUCE:
        if (req->n_msgs == 0)
            return -EINVAL;
        *ret_weight = req->n_msgs;
        return 0;
    case CQ_WRITER_READ:
        if (req->max == 0 || req->max > CQ_WRITER_READ_MAX)
            return -EINVAL;
        break;
    case CQ_WRITER_PURGE:
        if (req->max == 0)
            return -EINVAL;
        break;
    default:
        if (!op_valid(req->op))
            return -EINVAL;
        break;
    }
    *ret_weight = 1;
    return 0;
}

static int reserve(cq_writer_t *w, size_t weight)
{
    if (weight > w->max_pending)
        return CQ_ELIMIT;
    size_t old = atomic_fetch_add(&w->pending, weight);
    if (old + weight <= w->max_pending)
        return 0;
    atomic_fetch_sub(&w->pending, weight);
    stat_add(&w->st_busy, 1);
    return CQ_EBUSY;
}

int cq_writer_submit(cq_writer_t *w, cq_writer_req_t *req)
{
    if (!w || !req)
        return -EINVAL;
    size_t weight = 0;
    int r = req_weight(req, &weight);
    if (r < 0)
        return r;
    atomic_fetch_add(&w->submitting, 1);
    if (atomic_load(&w->closing)) {
        r = CQ_ECLOSED;
        goto out;
    }
    r = reserve(w, weight);
    if (r < 0)
        goto out;
    req->weight = weight;
    req->next = NULL;
    req->err = 0;
    req->errmsg[0] = '\0';
    req->submit_ns = cq_clock_mono_ns();
    if (req->op == CQ_WRITER_READ && w->rd) {
        reader_push(w->rd, req);
        goto out;
    }
    cq_mpsc_push(&w->q, &req->node);
    atomic_fetch_add(&w->queued, 1);
    if (atomic_load(&w->sleeping))
        wake(w);
out:
    atomic_fetch_sub(&w->submitting, 1);
    return r;
}

void cq_writer_shutdown(cq_writer_t *w)
{
    if (!w || w->joined)
        return;
    atomic_store(&w->closing, true);
    while (atomic_load(&w->submitting) > 0)
        sched_yield();
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->stop, true);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    reader_stop(w->rd);
    w->joined = true;
}

cq_writer_t *cq_writer_free(cq_writer_t *w)
{
    if (!w)
        return NULL;
    cq_writer_shutdown(w);
    reader_free(w->rd);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    cq_store_close(w->store);
    groups_free(w);
    cq_free(w->scratch);
    cq_free(w->offs);
    cq_free(w);
    return NULL;
}

/* ---- stats and test hooks ------------------------------------------------------------------ */

static uint64_t ld(const atomic_uint_least64_t *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

void cq_writer_stats(const cq_writer_t *w, cq_writer_stats_t *ret_stats)
{
    *ret_stats = (cq_writer_stats_t){
        .transactions = ld(&w->st_txns),
        .failed_txns = ld(&w->st_failed_txns),
        .messages = ld(&w->st_msgs),
        .produce_reqs = ld(&w->st_reqs),
        .rejected = ld(&w->st_rejected),
        .busy = ld(&w->st_busy),
        .other_ops = ld(&w->st_other),
        .max_txn_msgs = ld(&w->st_max_txn),
        .pending = atomic_load_explicit(&w->pending, memory_order_relaxed),
        .max_pending = w->max_pending,
        .batch_sum = ld(&w->st_batch_sum),
        .commit_us_sum = ld(&w->st_commit_sum),
    };
    for (size_t i = 0; i < CQ_WRITER_HIST_N; i++) {
        ret_stats->batch[i] = ld(&w->st_batch[i]);
        ret_stats->commit_us[i] = ld(&w->st_commit[i]);
    }
}

void cq__writer_pause(cq_writer_t *w, bool paused)
{
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->paused, paused);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}
