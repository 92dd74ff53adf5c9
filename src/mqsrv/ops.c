/* ops.c - the operation layer: what a produce, consume, commit, offset, create or set_online
 * does, whichever protocol asked (mosquitto's db__ side of its handle_* files).
 *
 * Why a layer of its own: the seed protocol (handlers.c) and the HTTP API (http.c) used to
 * each check rights, look the topic up, clamp counts, build store requests, count refusals and
 * apply completions to the cache, in two copies that had started to differ. Here that policy
 * exists once; the front ends only decode requests and encode answers. The shard router and
 * failover fencing will sit below this file, behind the store port, not in the front ends.
 */
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "mqsrv_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A submitted request's context (writer req->ud). */
typedef struct mq_pend {
    cq_mqsrv_t *s; /* the engine: its inbox receives the completion */
    mq_link_t *l;  /* NULL for the engine's own requests */
    void *ctx;     /* the front end's answer context (taken) */
    bool decl;     /* the cluster's declaration asked for it (topics.c): not told on_topic */
    uint8_t sink;  /* the sink's: SINK_ROWS (cq_mqsrv_sink_read), SINK_OFFSET (sink_*_offset),
                    * SINK_INVALIDATED (the manager's invalidate: s->mgr_invalidated, tag) */
    uint64_t tag;
} mq_pend_t;

enum { SINK_NONE = 0, SINK_ROWS, SINK_OFFSET, SINK_INVALIDATED, SINK_MESSAGE };

static const char inflight_why[] = "too many requests in flight on this connection";

/* ---- checks --------------------------------------------------------------------------------- */

/* Without a permissions file every module may do everything: fine on a developer's machine,
 * not for whoever reaches the port over the network. So writes (create, produce, commit,
 * set_online) then need a loopback peer; reads stay open as before. */
static const char write_why[] = "needs a permissions file (--mq-permissions-file) to write from "
                                "an address that is not loopback";

/* A write answered server_offline (err 19): the client goes to another server. */
static const char offline_why[] = "this server was taken offline by an operator: produce on "
                                  "another server";

/* Produces and creations on a server taken out of service: refused before the store. */
static int refuse_offline(cq_mqsrv_t *s, const char **ret_why)
{
    if (!s->offline)
        return 0;
    s->st.offline_refused++;
    *ret_why = offline_why;
    return CQ_ESRVOFFLINE;
}

/* A write answered not_master (err 18): the client goes to its shard's master. */
static const char not_master_why[] = "this server is not its shard's master now";

int cq__mqop_may_write(const mq_link_t *l, const char **ret_why)
{
    if (!l->s->perms && !l->peer_loopback) {
        *ret_why = write_why;
        return CQ_EACL;
    }
    if (!cq__mqsrv_writable(l->s)) {
        l->s->st.not_master++;
        *ret_why = not_master_why;
        return CQ_ENOTMASTER;
    }
    return 0;
}

int cq__mqop_may_read(cq_mqsrv_t *s, const char **ret_why)
{
    if (!cq__mqsrv_refuses_reads(s))
        return 0;
    *ret_why = s->read_why;
    return CQ_EREADMASTER;
}

bool cq__mqop_may(const cq_mqsrv_t *s, uint32_t module_id, cq_mqperm_right_t right,
                  const char *topic)
{
    return cq_mqperm_allows(s->perms, module_id, right, topic);
}

bool cq__mqop_may_see(const cq_mqsrv_t *s, uint32_t module_id, const char *topic)
{
    return cq__mqop_may(s, module_id, CQ_MQPERM_ADMIN, NULL) ||
           cq__mqop_may(s, module_id, CQ_MQPERM_PRODUCE, topic) ||
           cq__mqop_may(s, module_id, CQ_MQPERM_CONSUME, topic);
}

int cq__mqop_topic(const cq_mqsrv_t *s, uint32_t module_id, cq_mqperm_right_t right,
                   const char *name, bool need_online, mq_topic_t **ret_t)
{
    if (!cq__mqop_may(s, module_id, right, name))
        return CQ_EACL;
    mq_topic_t *t = cq__mqsrv_topic(s, name);
    if (!t)
        return CQ_ENOTOPIC;
    *ret_t = t;
    return need_online && !t->online ? CQ_EOFFLINE : 0;
}

/* ---- submission ----------------------------------------------------------------------------- */

/* req (taken) is refused with err before the store saw it: a produce's keys may become holes
 * (a busy produce is retried with the same keys). */
static void refused(cq_mqsrv_t *s, cq_writer_req_t *req, int err)
{
    if (req->op == CQ_WRITER_PRODUCE)
        cq__mqsrv_holes_refused(s, cq__mqsrv_topic(s, req->topic), req, err);
    cq_writer_req_free(req);
}

/* Hands req (taken, freed on failure) to the store for l (NULL: the engine's own) with ctx
 * (taken on success); decl: for the cluster's declaration. Returns 0 or the code to answer with
 * *ret_why. */
static int submit_pend(cq_mqsrv_t *s, mq_link_t *l, cq_writer_req_t *req, mq_pend_t pend,
                       const char **ret_why)
{
    int r = -ENOMEM;
    mq_pend_t *p = NULL;
    if (l && l->inflight >= CQ_MQSRV_CONN_INFLIGHT) {
        *ret_why = inflight_why;
        refused(s, req, CQ_EBUSY);
        return CQ_EBUSY;
    }
    if ((p = cq_malloc(sizeof(*p)))) {
        *p = pend;
        req->ud = p;
        r = s->port.ops->submit(s->port.ud, req);
    }
    if (r < 0) {
        cq_free(p);
        refused(s, req, r); /* before ELIMIT turns busy: a produce that never fits is no hole */
        if (r == CQ_EBUSY || r == CQ_ELIMIT) {
            s->st.busy++;
            r = CQ_EBUSY;
        }
        *ret_why = cq_strerror(r);
        return r;
    }
    /* completions run on this thread, later: counting after the submit is not too late */
    cq__mqsrv_metrics_submitted(s, req);
    s->inflight++;
    if (l)
        l->inflight++;
    return 0;
}

static int submit_as(cq_mqsrv_t *s, mq_link_t *l, cq_writer_req_t *req, void *ctx, bool decl,
                     const char **ret_why)
{
    return submit_pend(s, l, req, (mq_pend_t){s, l, ctx, decl, SINK_NONE, 0}, ret_why);
}

static int submit(cq_mqsrv_t *s, mq_link_t *l, cq_writer_req_t *req, void *ctx,
                  const char **ret_why)
{
    return submit_as(s, l, req, ctx, false, ret_why);
}

/* A new request of op on topic; *ret_why set on failure. */
static int new_req(cq_writer_op_t op, const char *topic, const char *consumer,
                   cq_writer_req_t **ret, const char **ret_why)
{
    int r = cq_writer_req_new(op, topic, consumer, ret);
    if (r < 0)
        *ret_why = cq_strerror(r);
    return r;
}

int cq__mqop_produce(mq_link_t *l, cq_writer_req_t *req, void *ctx, const char **ret_why)
{
    int r = cq__mqop_may_write(l, ret_why);
    mq_topic_t *t = cq__mqsrv_topic(l->s, req->topic);
    if (r == 0)
        r = refuse_offline(l->s, ret_why);
    if (r == 0 && t && t->reload) {
        /* a new master answers only once it knows the offsets replication moved */
        *ret_why = "this server is taking over as its shard's master: retry";
        r = CQ_EBUSY;
    }
    if (r < 0) {
        refused(l->s, req, r);
        return r;
    }
    cq__mqsrv_holes_mark(t, req); /* retries of refused keys may be below the last seq */
    return submit(l->s, l, req, ctx, ret_why);
}

size_t cq__mqop_reply_budget(const cq_mqsrv_t *s)
{
    size_t total = s->lim.max_total ? s->lim.max_total : CQ_MQ_DEFAULT_MAX_TOTAL;
    return total - CQ_MQ_ANSWER_HEAD_MAX;
}

int cq__mqop_consume(mq_link_t *l, const mq_topic_t *t, uint64_t from, bool has_max, uint64_t max,
                     void *ctx, const char **ret_why)
{
    cq_writer_req_t *req;
    int r = new_req(CQ_WRITER_READ, t->name, NULL, &req, ret_why);
    if (r < 0)
        return r;
    if (!has_max)
        max = CQ_MQSRV_CONSUME_DFL;
    if (max > l->s->lim.max_batch)
        max = l->s->lim.max_batch;
    if (max > CQ_WRITER_READ_MAX)
        max = CQ_WRITER_READ_MAX;
    req->max = max ? (size_t)max : 1;
    /* Contents are never longer than their encoding: what the answer cannot hold is not read,
     * so one big read neither fills memory nor keeps the store thread long. */
    req->max_bytes = cq__mqop_reply_budget(l->s);
    req->from_offset = from;
    return submit(l->s, l, req, ctx, ret_why);
}

int cq__mqop_offset(mq_link_t *l, const mq_topic_t *t, const char *consumer, bool commit,
                    uint64_t offset, void *ctx, const char **ret_why)
{
    cq_writer_req_t *req;
    cq_writer_op_t op = commit ? CQ_WRITER_COMMIT_OFFSET : CQ_WRITER_GET_OFFSET;
    int r = commit ? cq__mqop_may_write(l, ret_why) : 0;
    if (r < 0)
        return r;
    if (commit && offset > t->last_offset && offset > t->read_offset) {
        /* A consumer cannot have processed what was never committed: such an offset would make
         * it skip the messages produced up to it. */
        *ret_why = "offset is beyond the topic's last offset";
        return CQ_EOFFRANGE;
    }
    r = new_req(op, t->name, consumer, &req, ret_why);
    if (r < 0)
        return r;
    req->offset = commit ? offset : 0;
    req->now_ms = l->s->now_ms;
    return submit(l->s, l, req, ctx, ret_why);
}

int cq__mqop_create(mq_link_t *l, uint32_t module_id, const char *topic, int retention_days,
                    void *ctx, const char **ret_why)
{
    if (!cq__mqop_may(l->s, module_id, CQ_MQPERM_ADMIN, NULL)) {
        *ret_why = "may not create topics";
        return CQ_EACL;
    }
    cq_writer_req_t *req;
    int r = cq__mqop_may_write(l, ret_why);
    if (r == 0)
        r = refuse_offline(l->s, ret_why);
    if (r < 0)
        return r;
    r = new_req(CQ_WRITER_TOPIC_CREATE, topic, NULL, &req, ret_why);
    if (r < 0)
        return r;
    req->retention_days = retention_days < 0 ? CQ_STORE_DEFAULT_RETENTION : retention_days;
    req->now_ms = l->s->now_ms;
    return submit(l->s, l, req, ctx, ret_why);
}

int cq__mqop_invalidate(cq_mqsrv_t *s, mq_link_t *l, const mq_topic_t *t, uint64_t offset,
                        uint64_t tag, const char **ret_why)
{
    int r = l ? cq__mqop_may_write(l, ret_why) : 0;
    if (r == 0 && !cq__mqsrv_writable(s)) {
        s->st.not_master++;
        *ret_why = not_master_why;
        r = CQ_ENOTMASTER;
    }
    if (r == 0 && (offset == 0 || offset > (uint64_t)CQ_MQ_MAX_U53)) {
        *ret_why = "offset: must be an integer in [1, 9007199254740991]";
        r = CQ_EOFFRANGE;
    }
    cq_writer_req_t *req;
    if (r == 0)
        r = new_req(CQ_WRITER_INVALIDATE, t->name, NULL, &req, ret_why);
    if (r < 0)
        return r;
    req->offset = offset;
    return l ? submit(s, l, req, NULL, ret_why)
             : submit_pend(s, NULL, req, (mq_pend_t){s, NULL, NULL, false, SINK_INVALIDATED, tag},
                           ret_why);
}

int cq__mqop_read_one(cq_mqsrv_t *s, const mq_topic_t *t, uint64_t offset, uint64_t tag,
                      const char **ret_why)
{
    cq_writer_req_t *req;
    int r = new_req(CQ_WRITER_READ_ONE, t->name, NULL, &req, ret_why);
    if (r < 0)
        return r;
    req->offset = offset;
    return submit_pend(s, NULL, req, (mq_pend_t){s, NULL, NULL, false, SINK_MESSAGE, tag}, ret_why);
}

int cq__mqop_read_key(cq_mqsrv_t *s, const mq_topic_t *t, uint64_t producer_id, uint64_t seq,
                      uint64_t tag, const char **ret_why)
{
    cq_writer_req_t *req;
    int r = new_req(CQ_WRITER_READ_ONE, t->name, NULL, &req, ret_why);
    if (r < 0)
        return r;
    req->key_producer = producer_id;
    req->key_seq = seq;
    return submit_pend(s, NULL, req, (mq_pend_t){s, NULL, NULL, false, SINK_MESSAGE, tag}, ret_why);
}

int cq__mqop_create_own(cq_mqsrv_t *s, const char *topic, int retention_days)
{
    const char *why;
    cq_writer_req_t *req;
    int r = new_req(CQ_WRITER_TOPIC_CREATE, topic, NULL, &req, &why);
    if (r < 0)
        return r;
    req->online = true;
    req->retention_days = retention_days < 0 ? CQ_STORE_DEFAULT_RETENTION : retention_days;
    req->now_ms = s->now_ms;
    return submit(s, NULL, req, NULL, &why);
}

int cq__mqop_set_online(cq_mqsrv_t *s, mq_link_t *l, const char *topic, bool online,
                        const char **ret_why)
{
    mq_topic_t *t = cq__mqsrv_topic(s, topic);
    cq_writer_req_t *req;
    int r = l ? cq__mqop_may_write(l, ret_why) : 0;
    if (r == 0 && !cq__mqsrv_writable(s)) {
        s->st.not_master++;
        *ret_why = not_master_why;
        r = CQ_ENOTMASTER;
    }
    if (r < 0)
        return r;
    if (!t) {
        *ret_why = cq_strerror(CQ_ENOTOPIC);
        return CQ_ENOTOPIC;
    }
    r = new_req(CQ_WRITER_TOPIC_SET_ONLINE, t->name, NULL, &req, ret_why);
    if (r < 0)
        return r;
    req->online = online;
    return submit(s, l, req, NULL, ret_why);
}

static int topic_name_cmp(const void *a, const void *b)
{
    return strcasecmp((*(mq_topic_t *const *)a)->name, (*(mq_topic_t *const *)b)->name);
}

int cq__mqop_topics(const cq_mqsrv_t *s, bool visible_to_module, uint32_t module_id,
                    mq_topic_t ***ret_v, size_t *ret_n)
{
    mq_topic_t **v = s->ntopics ? cq_malloc(s->ntopics * sizeof(*v)) : NULL;
    size_t n = 0;
    if (s->ntopics && !v)
        return -ENOMEM;
    for (size_t i = 0; i < s->ntopics; i++)
        if (!visible_to_module || cq__mqop_may_see(s, module_id, s->topics[i]->name))
            v[n++] = s->topics[i];
    if (visible_to_module && n > CQ_MQ_TOPICS_MAX)
        n = CQ_MQ_TOPICS_MAX;
    if (visible_to_module && n > 1)
        qsort(v, n, sizeof(*v), topic_name_cmp);
    *ret_v = v;
    *ret_n = n;
    return 0;
}

static int purge(cq_mqsrv_t *s, mq_topic_t *t, size_t max, int64_t older_than_ms)
{
    const char *why;
    cq_writer_req_t *req;
    int r = new_req(CQ_WRITER_PURGE, t->name, NULL, &req, &why);
    if (r < 0)
        return r;
    req->max = max;
    req->older_than_ms = older_than_ms;
    r = submit(s, NULL, req, NULL, &why);
    if (r == 0)
        t->purging = true;
    return r;
}

int cq__mqop_submit_own(cq_mqsrv_t *s, cq_writer_req_t *req)
{
    const char *why;
    return submit(s, NULL, req, NULL, &why);
}

int cq__mqop_submit_decl(cq_mqsrv_t *s, cq_writer_req_t *req)
{
    const char *why;
    return submit_as(s, NULL, req, NULL, true, &why);
}

/* Bounded by bytes too: one read never holds more than a chunk's worth of contents. */
int cq_mqsrv_sink_read(cq_mqsrv_t *s, const char *topic, uint64_t from, size_t max, uint64_t tag)
{
    const char *why;
    cq_writer_req_t *req;
    if (!cq__mqsrv_topic(s, topic))
        return CQ_ENOTOPIC;
    int r = new_req(CQ_WRITER_READ, topic, NULL, &req, &why);
    if (r < 0)
        return r;
    req->max = max < CQ_WRITER_READ_MAX ? max : CQ_WRITER_READ_MAX;
    req->max_bytes = 4u << 20;
    req->from_offset = from;
    return submit_pend(s, NULL, req, (mq_pend_t){s, NULL, NULL, false, SINK_ROWS, tag}, &why);
}

int cq_mqsrv_sink_get_offset(cq_mqsrv_t *s, const char *topic, const char *consumer, uint64_t tag)
{
    const char *why;
    cq_writer_req_t *req;
    if (!cq__mqsrv_topic(s, topic))
        return CQ_ENOTOPIC;
    int r = new_req(CQ_WRITER_GET_OFFSET, topic, consumer, &req, &why);
    if (r < 0)
        return r;
    return submit_pend(s, NULL, req, (mq_pend_t){s, NULL, NULL, false, SINK_OFFSET, tag}, &why);
}

int cq_mqsrv_sink_commit_offset(cq_mqsrv_t *s, const char *topic, const char *consumer,
                                uint64_t offset, uint64_t tag)
{
    const char *why;
    cq_writer_req_t *req;
    const mq_topic_t *t = cq__mqsrv_topic(s, topic);
    if (!t)
        return CQ_ENOTOPIC;
    if (!cq__mqsrv_writable(s))
        return CQ_ENOTMASTER;
    if (offset > t->last_offset && offset > t->read_offset)
        return CQ_EOFFRANGE; /* as a consumer's commit (cq__mqop_offset) */
    int r = new_req(CQ_WRITER_COMMIT_OFFSET, topic, consumer, &req, &why);
    if (r < 0)
        return r;
    req->offset = offset;
    req->now_ms = s->now_ms;
    return submit_pend(s, NULL, req, (mq_pend_t){s, NULL, NULL, false, SINK_OFFSET, tag}, &why);
}

int cq__mqop_read_log(cq_mqsrv_t *s, const mq_topic_t *t, uint64_t from, size_t max)
{
    const char *why;
    cq_writer_req_t *req;
    int r = new_req(CQ_WRITER_READ, t->name, NULL, &req, &why);
    if (r < 0)
        return r;
    req->max = max;
    req->from_offset = from;
    return submit(s, NULL, req, NULL, &why);
}

void cq__mqop_retention(cq_mqsrv_t *s, int64_t now_unix_ms)
{
    if (!cq__mqsrv_writable(s))
        return; /* the master purges; its deletes reach the replicas */
    for (size_t i = 0; i < s->ntopics; i++) {
        mq_topic_t *t = s->topics[i];
        int64_t keep_ms = t->retention_managed ? (int64_t)t->retention_s * 1000
                                               : (int64_t)t->retention_days * 86400000;
        if (keep_ms > 0 && !t->purging)
            purge(s, t, CQ_MQSRV_PURGE_ROWS, now_unix_ms - keep_ms);
    }
}

/* ---- completions ---------------------------------------------------------------------------- */

/* The engine's own requests: logged failures, catch-up reads, and purges repeated while a
 * batch was full. */
static void done_internal(cq_mqsrv_t *s, const cq_writer_req_t *req, mq_topic_t *t)
{
    if (req->err)
        CQ_WARN("mq", "topic %s: store request %d failed: %s %s", req->topic, (int)req->op,
                cq_strerror(req->err), req->errmsg);
    if (t && req->op == CQ_WRITER_READ)
        cq__mqsrv_log_read(s, t, req);
    if (req->op == CQ_WRITER_TOPIC_LIST || req->op == CQ_WRITER_HIGH_WATER ||
        req->op == CQ_WRITER_TOPIC_STATS)
        cq__mqsrv_role_done(s, req, t);
    if (!t || req->op != CQ_WRITER_PURGE)
        return;
    t->purging = false;
    t->count += req->unseen; /* before the rows it removed: they may be among them */
    if (req->err == 0)
        t->count = req->purged < t->count ? t->count - req->purged : 0;
    if (req->err == 0 && req->purged == req->max && cq__mqsrv_writable(s))
        purge(s, t, req->max, req->older_than_ms);
}

/* Counts what a produce's completion adds to its topic: the rows the store thread found
 * committed earlier without their answer (unseen, whatever the outcome), and, when it
 * committed, its new messages: the offsets above prev_offset (those at or below it were stored
 * before, an idempotent retry's). Why not "above last_offset": the rows a lost COMMIT answer
 * left lie below a later produce's offsets, and a retry finds them there. */
static void count_produce(mq_topic_t *t, const cq_writer_req_t *req)
{
    t->count += req->unseen;
    if (req->err)
        return;
    uint64_t hi = req->prev_offset;
    for (size_t i = 0; i < req->n_msgs; i++) {
        if (req->offsets[i] > hi) {
            hi = req->offsets[i];
            t->count++;
        }
    }
}

/* The engine's side of a completion: the cache and the pushes follow the store; the result is
 * what the answer says. */
static void apply(cq_mqsrv_t *s, const cq_writer_req_t *req, mq_topic_t *t, mq_result_t *res)
{
    *res = (mq_result_t){.err = req->err, .offset = req->offset};
    switch (req->op) {
    case CQ_WRITER_PRODUCE:
        if (req->err == 0)
            cq__mqsrv_produced(s, req);
        else if (req->err == CQ_ESTORE)
            CQ_WARN("mq", "produce to %s failed: %s", req->topic, req->errmsg);
        break;
    case CQ_WRITER_TOPIC_CREATE:
        res->created = req->err == 0;
        if (req->err == 0 || req->err == CQ_EEXIST)
            res->err = cq__mqsrv_topic_add(s, req->topic, true, req->retention_days) ? 0 : -ENOMEM;
        break;
    case CQ_WRITER_TOPIC_SET_ONLINE:
        if (req->err == 0 && t)
            t->online = req->online;
        break;
    case CQ_WRITER_READ:
        if (req->err == 0 && t && req->n_recs && req->recs[req->n_recs - 1].offset > t->read_offset)
            t->read_offset = req->recs[req->n_recs - 1].offset;
        break;
    case CQ_WRITER_INVALIDATE:
        if (req->err == -ENOENT)
            res->err = CQ_ENOMSG;
        if (req->err == 0)
            cq__mqsrv_invalidated(s, req->topic, req->offset);
        break;
    case CQ_WRITER_GET_OFFSET:
        res->committed = req->err == 0;
        if (req->err == -ENOENT) /* never committed: offset 0 */
            res->err = 0;
        res->offset = res->committed ? req->offset : 0;
        res->last_offset = t ? t->last_offset : 0;
        break;
    default:
        break;
    }
}

const char *cq__mqop_err_text(const cq_writer_req_t *req, int err, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s", cq_strerror(err));
    if ((err == CQ_ESEQCONFLICT || err == CQ_ESEQORDER) && req->errmsg[0]) {
        /* the store's own words: which message and seq broke the rule, no database text */
        snprintf(buf + n, n < len ? len - n : 0, ": %s", req->errmsg);
        return buf;
    }
    if (err != CQ_ESTORE || !req->errmsg[0] || n + 3 >= len)
        return buf;
    buf[n++] = ':';
    buf[n++] = ' ';
    char quote = 0;
    for (const char *p = req->errmsg; *p && n + 2 < len; p++) {
        /* a quote opens after a non-word character only: "doesn't" has no quoted part */
        bool word = p > req->errmsg && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool q = !word && (*p == '\'' || *p == '"' || *p == '`');
        if (quote && *p == quote) { /* the closing quote */
            buf[n++] = *p;
            quote = 0;
        } else if (!quote && q) {
            buf[n++] = *p;
            buf[n++] = '?';
            quote = *p;
        } else if (!quote) {
            buf[n++] = *p;
        }
    }
    buf[n] = '\0';
    return buf;
}

const char *cq__mqop_produce_advice(int err)
{
    switch (err) {
    case CQ_ESEQCONFLICT:
    case CQ_ECONTENT:
    case CQ_ENOTOPIC:
    case -EINVAL:
        return "nothing was acknowledged"; /* the same request would fail the same way */
    case CQ_ESEQORDER:
        return "nothing was stored: send these messages again with seqs above the producer's "
               "last stored seq";
    default: /* storage, internal: not stored, or stored with the answer lost */
        return "nothing was acknowledged: retry with the same producer_id and seq";
    }
}

cq_mqsrv_t *cq__mqop_engine(const cq_writer_req_t *req)
{
    return ((const mq_pend_t *)req->ud)->s;
}

/* The manager's invalidate completed: its link answers, if it is still there. */
static void mgr_invalidated(cq_mqsrv_t *s, const cq_writer_req_t *req, uint64_t tag, int err)
{
    char why[CQ_MQ_ERR_MSG_MAX] = "";
    if (err == CQ_ENOMSG)
        snprintf(why, sizeof(why), "topic %s: no message at offset %llu", req->topic,
                 (unsigned long long)req->offset);
    else if (err)
        cq__mqop_err_text(req, err, why, sizeof(why));
    if (s->mgr_invalidated)
        s->mgr_invalidated(s->mgr_ud, tag, err, err ? why : NULL);
}

void cq__mqop_complete(cq_mqsrv_t *s, cq_writer_req_t *req)
{
    mq_pend_t *p = req->ud;
    mq_link_t *l = p ? p->l : NULL;
    mq_topic_t *t = req->op == CQ_WRITER_TOPIC_LIST ? NULL : cq__mqsrv_topic(s, req->topic);
    mq_result_t res;
    if (req->op == CQ_WRITER_PRODUCE && t)
        count_produce(t, req); /* before the fence: a fenced commit's rows are in the store */
    if (req->op == CQ_WRITER_PRODUCE && req->err == 0 && !cq__mqsrv_writable(s)) {
        /* Fenced between submission and commit: another server may be master already, so this
         * one acknowledges nothing and pushes nothing, as if the commit had failed. The rows may
         * be stored: a retry with the same (producer_id, seq) on the shard's master finds them. */
        req->err = CQ_ENOTMASTER;
        s->st.not_master++;
    }
    if (req->op == CQ_WRITER_PRODUCE && req->err)
        cq__mqsrv_holes_refused(s, t, req, req->err);
    cq__mqsrv_metrics_completed(s, req);
    s->inflight--;
    apply(s, req, t, &res);
    if (p && p->decl)
        cq__mqsrv_decl_done(s, req);
    else if (req->op == CQ_WRITER_TOPIC_CREATE || req->op == CQ_WRITER_TOPIC_SET_ONLINE)
        cq__mqsrv_topic_changed(s, req, t);
    if (l) {
        l->fe->done(l, req, &res, p->ctx);
        l->inflight--;
        cq__mq_link_put(l);
    } else if (p && p->sink == SINK_ROWS) {
        if (s->sink_rows)
            s->sink_rows(s->sink_ud, s, p->tag, req->err, req->recs, req->n_recs);
    } else if (p && p->sink == SINK_INVALIDATED) {
        mgr_invalidated(s, req, p->tag, res.err);
    } else if (p && p->sink == SINK_MESSAGE) {
        if (s->mgr_message)
            s->mgr_message(s->mgr_ud, p->tag, req, req->err == -ENOENT ? CQ_ENOMSG : req->err);
    } else if (p && p->sink == SINK_OFFSET) {
        if (s->sink_offset)
            s->sink_offset(s->sink_ud, s, p->tag, req->err, req->offset);
    } else {
        done_internal(s, req, t);
    }
    cq_free(p);
    cq_writer_req_free(req);
}
