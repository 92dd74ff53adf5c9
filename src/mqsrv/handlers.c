/* handlers.c - one function per request type, and the answers to completed store requests. */
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NAME(m) cq_mq_type_name((m)->type)

/* ---- checks shared by the handlers ------------------------------------------------------ */

/* Checks the optional client_id against the connection's. */
static bool check_client_id(cq_mqsrv_conn_t *c, const cq_mq_msg_t *m)
{
    if (!(m->has & CQ_MQ_F_CLIENT_ID) || (uint64_t)m->client_id == c->id)
        return true;
    cq__mqsrv_reply(c, m, CQ_EFIELD, "%s: field \"client_id\": %lld is not this connection's id",
                    NAME(m), (long long)m->client_id);
    return false;
}

/* Permission, existence and (when need_online) online checks. Answers and returns NULL on
 * failure. */
static mq_topic_t *topic_check(cq_mqsrv_conn_t *c, const cq_mq_msg_t *m, cq_mqperm_right_t right,
                               bool need_online)
{
    cq_mqsrv_t *s = c->s;
    if (!cq_mqperm_allows(s->perms, c->module_id, right, m->topic)) {
        cq__mqsrv_reply(c, m, CQ_EACL, "%s: module %u may not %s topic \"%s\"", NAME(m),
                        c->module_id, right == CQ_MQPERM_PRODUCE ? "produce to" : "consume",
                        m->topic);
        return NULL;
    }
    mq_topic_t *t = cq__mqsrv_topic(s, m->topic);
    if (!t)
        cq__mqsrv_reply(c, m, CQ_ENOTOPIC, "%s: topic \"%s\" does not exist", NAME(m), m->topic);
    else if (need_online && !t->online)
        cq__mqsrv_reply(c, m, CQ_EOFFLINE, "%s: topic \"%s\" is offline", NAME(m), m->topic);
    else
        return t;
    return NULL;
}

/* Submits req for m (taken either way); answers the submit error. */
static void submit(cq_mqsrv_conn_t *c, cq_mq_msg_t *m, cq_writer_req_t *req)
{
    if (c->inflight >= CQ_MQSRV_CONN_INFLIGHT) {
        cq__mqsrv_reply(c, m, CQ_EBUSY, "%s: too many requests in flight on this connection",
                        NAME(m));
        goto fail;
    }
    int r = cq__mqsrv_submit(c->s, c, m, req);
    if (r == 0)
        return;
    if (r == CQ_ELIMIT)
        r = CQ_EBUSY;
    cq__mqsrv_reply(c, m, r, "%s: %s", NAME(m), cq_strerror(r));
fail:
    cq_writer_req_free(req);
    cq_mq_msg_free(m);
}

static cq_writer_req_t *new_req(cq_mqsrv_conn_t *c, const cq_mq_msg_t *m, cq_writer_op_t op,
                                const char *topic, const char *consumer)
{
    cq_writer_req_t *req;
    int r = cq_writer_req_new(op, topic, consumer, &req);
    if (r == 0)
        return req;
    cq__mqsrv_reply(c, m, r, "%s: %s", NAME(m), cq_strerror(r));
    return NULL;
}

/* ---- handlers: each takes m ------------------------------------------------------------- */

static void on_connect(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    if (m->client_type != CQ_MQ_PRODUCER && m->client_type != CQ_MQ_CONSUMER) {
        cq__mqsrv_reply(c, m, CQ_EFIELD, "connect: field \"client_type\": must be 1 or 2");
        return;
    }
    if (!cq_mqperm_auth(c->s->perms, m->module_id, m->token)) {
        cq__mqsrv_reply(c, m, CQ_EAUTH, "connect: unknown module_id or wrong token");
        cq__mqsrv_close(c);
        return;
    }
    c->authed = true;
    c->module_id = m->module_id;
    c->client_type = m->client_type;
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    if (resp) {
        resp->client_type = c->client_type;
        resp->client_id = (int64_t)c->id;
        resp->has |= CQ_MQ_F_CLIENT_TYPE | CQ_MQ_F_CLIENT_ID;
    }
    cq__mqsrv_send(c, resp);
}

static void on_keepalive(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    c->s->st.keepalives++;
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    if (resp) {
        resp->weight = 100;
        resp->has |= CQ_MQ_F_WEIGHT;
    }
    cq__mqsrv_send(c, resp);
}

static void reply_counted(cq_mqsrv_conn_t *c, const cq_mq_msg_t *m, uint32_t nums)
{
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    if (resp) {
        resp->topic_nums = nums;
        resp->has |= CQ_MQ_F_TOPIC_NUMS;
    }
    cq__mqsrv_send(c, resp);
}

static void on_add_topic(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    const cq_mqperm_t *p = c->s->perms;
    bool admin = cq_mqperm_allows(p, c->module_id, CQ_MQPERM_ADMIN, NULL);
    if (cq__mqsrv_topic(c->s, m->topic)) {
        if (admin || cq_mqperm_allows(p, c->module_id, CQ_MQPERM_PRODUCE, m->topic) ||
            cq_mqperm_allows(p, c->module_id, CQ_MQPERM_CONSUME, m->topic))
            reply_counted(c, m, ++c->registered);
        else
            cq__mqsrv_reply(c, m, CQ_EACL, "add_topic: module %u has no right on topic \"%s\"",
                            c->module_id, m->topic);
        cq_mq_msg_free(m);
        return;
    }
    if (!admin) {
        cq__mqsrv_reply(c, m, CQ_EACL, "add_topic: module %u may not create topics", c->module_id);
        cq_mq_msg_free(m);
        return;
    }
    cq_writer_req_t *req = new_req(c, m, CQ_WRITER_TOPIC_CREATE, m->topic, NULL);
    if (!req) {
        cq_mq_msg_free(m);
        return;
    }
    req->retention_days = CQ_STORE_DEFAULT_RETENTION;
    req->now_ms = c->s->now_ms;
    submit(c, m, req);
}

static void on_produce(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    mq_topic_t *t = topic_check(c, m, CQ_MQPERM_PRODUCE, true);
    cq_writer_req_t *req = t ? new_req(c, m, CQ_WRITER_PRODUCE, t->name, NULL) : NULL;
    if (!req) {
        cq_mq_msg_free(m);
        return;
    }
    bool keyed = m->has & CQ_MQ_F_PRODUCER_ID;
    for (size_t i = 0; i < m->nitems; i++) {
        cq_mq_item_t *it = &m->items[i];
        int r = cq_writer_req_add_msg_take(req, it->content, it->len,
                                           keyed ? (uint64_t)m->producer_id : 0,
                                           keyed ? (uint64_t)m->seq + i : 0);
        it->content = NULL;
        it->len = 0;
        if (r < 0) {
            cq__mqsrv_reply(c, m, r, "produce: %s", cq_strerror(r));
            cq_writer_req_free(req);
            cq_mq_msg_free(m);
            return;
        }
    }
    submit(c, m, req);
}

static void on_consume(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    mq_topic_t *t = topic_check(c, m, CQ_MQPERM_CONSUME, true);
    cq_writer_req_t *req = t ? new_req(c, m, CQ_WRITER_READ, t->name, NULL) : NULL;
    if (!req) {
        cq_mq_msg_free(m);
        return;
    }
    size_t max = m->has & CQ_MQ_F_MAX_COUNT ? m->max_count : CQ_MQSRV_CONSUME_DFL;
    if (max > c->s->lim.max_batch)
        max = c->s->lim.max_batch;
    req->max = max ? max : 1;
    if (req->max > CQ_WRITER_READ_MAX)
        req->max = CQ_WRITER_READ_MAX;
    req->from_offset = (uint64_t)m->offset;
    submit(c, m, req);
}

/* commit (store the offset) and offset (read it back): the consumer is "m<module_id>". */
static void on_commit(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    char consumer[32];
    bool commit = m->type == CQ_MQ_REQ_COMMIT;
    snprintf(consumer, sizeof(consumer), "m%u", c->module_id);
    mq_topic_t *t = topic_check(c, m, CQ_MQPERM_CONSUME, false);
    cq_writer_req_t *req =
        t ? new_req(c, m, commit ? CQ_WRITER_COMMIT_OFFSET : CQ_WRITER_GET_OFFSET, t->name,
                    consumer)
          : NULL;
    if (!req) {
        cq_mq_msg_free(m);
        return;
    }
    req->offset = commit ? (uint64_t)m->offset : 0;
    req->now_ms = c->s->now_ms;
    submit(c, m, req);
}

static int topic_name_cmp(const void *a, const void *b)
{
    return strcasecmp((*(mq_topic_t *const *)a)->name, (*(mq_topic_t *const *)b)->name);
}

/* topics: the topics this module may produce or consume (every topic for an admin module),
 * sorted by name, from the engine's cache (no store round trip). */
static void on_topics(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    cq_mqsrv_t *s = c->s;
    const cq_mqperm_t *p = s->perms;
    bool admin = cq_mqperm_allows(p, c->module_id, CQ_MQPERM_ADMIN, NULL);
    mq_topic_t **v = s->ntopics ? cq_malloc(s->ntopics * sizeof(*v)) : NULL;
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    if ((s->ntopics && !v) || !resp) {
        cq_mq_msg_free(resp);
        cq_free(v);
        cq__mqsrv_reply(c, m, -ENOMEM, "topics: out of memory");
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < s->ntopics; i++) {
        const char *name = s->topics[i]->name;
        if (admin || cq_mqperm_allows(p, c->module_id, CQ_MQPERM_PRODUCE, name) ||
            cq_mqperm_allows(p, c->module_id, CQ_MQPERM_CONSUME, name))
            v[n++] = s->topics[i];
    }
    if (n > CQ_MQ_TOPICS_MAX)
        n = CQ_MQ_TOPICS_MAX;
    if (n > 1)
        qsort(v, n, sizeof(*v), topic_name_cmp);
    resp->has |= CQ_MQ_F_TOPICS | CQ_MQ_F_TOPIC_NUMS;
    resp->topic_nums = (uint32_t)n;
    for (size_t i = 0; resp && i < n; i++) {
        const mq_topic_t *t = v[i];
        if (cq_mq_msg_add_topic_info(resp, t->name, t->online, (uint32_t)t->retention_days,
                                     (int64_t)t->last_offset) < 0)
            resp = cq_mq_msg_free(resp);
    }
    cq_free(v);
    if (resp)
        cq__mqsrv_send(c, resp);
    else
        cq__mqsrv_reply(c, m, -ENOMEM, "topics: out of memory");
}

static void on_watch(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    bool on = m->type == CQ_MQ_REQ_WATCH;
    mq_topic_t *t = topic_check(c, m, CQ_MQPERM_CONSUME, on);
    if (t) {
        if (cq__mqsrv_watch(t, c, on))
            c->watching += on ? 1 : (uint32_t)-1;
        if (on)
            reply_counted(c, m, c->watching);
        else
            cq__mqsrv_reply(c, m, 0, NULL);
    }
    cq_mq_msg_free(m);
}

void cq__mqsrv_dispatch(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    if (m->type == CQ_MQ_REQ_CONNECT) {
        on_connect(c, m);
        cq_mq_msg_free(m);
        return;
    }
    if (m->type == CQ_MQ_REQ_KEEPALIVE) {
        on_keepalive(c, m);
        cq_mq_msg_free(m);
        return;
    }
    if (!c->authed || !check_client_id(c, m)) {
        if (!c->authed)
            cq__mqsrv_reply(c, m, CQ_EAUTH, "%s: connect first", NAME(m));
        cq_mq_msg_free(m);
        return;
    }
    switch (m->type) {
    case CQ_MQ_REQ_ADD_TOPIC:
        on_add_topic(c, m);
        break;
    case CQ_MQ_REQ_PRODUCE:
        on_produce(c, m);
        break;
    case CQ_MQ_REQ_CONSUME:
        on_consume(c, m);
        break;
    case CQ_MQ_REQ_COMMIT:
    case CQ_MQ_REQ_OFFSET:
        on_commit(c, m);
        break;
    case CQ_MQ_REQ_TOPICS:
        on_topics(c, m);
        cq_mq_msg_free(m);
        break;
    default: /* watch, unwatch: the decoder only lets request types through */
        on_watch(c, m);
        break;
    }
}

/* ---- completions ------------------------------------------------------------------------ */

/* Queues the newly committed messages of a produce for the topic's watchers. */
static void queue_push(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    mq_topic_t *t = cq__mqsrv_topic(s, req->topic);
    if (!t)
        return;
    for (size_t i = 0; i < req->n_msgs; i++) {
        if (req->offsets[i] <= t->last_offset)
            continue; /* an idempotent retry: already delivered */
        t->last_offset = req->offsets[i];
        if (!t->nwatchers)
            continue;
        if (!t->push && (t->push = cq_mq_msg_new(CQ_MQ_PUSH, 0)) &&
            cq_mq_msg_set_topic(t->push, t->name) == 0)
            t->push->has |= CQ_MQ_F_MESSAGES | CQ_MQ_F_OFFSET;
        const cq_store_msg_t *sm = &req->msgs[i];
        if (!t->push || cq_mq_msg_add_item(t->push, (int64_t)req->offsets[i], s->now_ms,
                                           sm->content, sm->len, false) < 0)
            continue;
        t->push->offset = (int64_t)req->offsets[i];
        if (t->push->nitems >= s->lim.max_batch)
            cq_mqsrv_flush(s);
    }
}

void cq__mqsrv_produced(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    s->st.produced += req->n_msgs;
    queue_push(s, req);
}

void cq__mqsrv_apply(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    mq_topic_t *t = cq__mqsrv_topic(s, req->topic);
    if (req->op == CQ_WRITER_PRODUCE && req->err == 0)
        cq__mqsrv_produced(s, req);
    else if (req->op == CQ_WRITER_TOPIC_SET_ONLINE && req->err == 0 && t)
        t->online = req->online;
}

static void done_produce(cq_mqsrv_t *s, const cq_writer_req_t *req, mq_pend_t *p)
{
    if (req->err == 0) {
        cq__mqsrv_produced(s, req);
    } else if (req->err == CQ_ESTORE) {
        CQ_WARN("mq", "produce to %s failed: %s", req->topic, req->errmsg);
    }
    if (!p->c || p->c->dead)
        return;
    if (req->err) {
        cq__mqsrv_reply(p->c, p->req, req->err, "produce: %s; nothing was acknowledged",
                        cq_strerror(req->err));
        return;
    }
    cq_mq_msg_t *resp = cq_mq_resp_new(p->req, 0, NULL);
    for (size_t i = 0; resp && i < req->n_msgs; i++)
        if (cq_mq_msg_add_offset(resp, (int64_t)req->offsets[i]) < 0)
            resp = cq_mq_msg_free(resp);
    cq__mqsrv_send(p->c, resp);
}

/* The records' contents move into the answer (no copy). */
static void done_read(cq_mqsrv_t *s, cq_writer_req_t *req, mq_pend_t *p)
{
    if (req->err) {
        cq__mqsrv_reply(p->c, p->req, req->err, "consume: %s", cq_strerror(req->err));
        return;
    }
    cq_mq_msg_t *resp = cq_mq_resp_new(p->req, 0, NULL);
    if (!resp)
        return;
    resp->has |= CQ_MQ_F_MESSAGES | CQ_MQ_F_OFFSET;
    resp->offset = p->req->offset;
    for (size_t i = 0; i < req->n_recs; i++) {
        cq_store_rec_t *r = &req->recs[i];
        char *content = r->content;
        r->content = NULL; /* taken, also on failure */
        if (cq_mq_msg_add_item_take(resp, (int64_t)r->offset, r->create_ms, content, r->len) < 0) {
            cq__mqsrv_reply(p->c, p->req, CQ_EFIELD,
                            "consume: message %llu is not valid UTF-8 text",
                            (unsigned long long)r->offset);
            cq_mq_msg_free(resp);
            return;
        }
        resp->offset = (int64_t)r->offset;
    }
    s->st.consumed += req->n_recs;
    cq__mqsrv_send(p->c, resp);
}

static void done_simple(cq_mqsrv_t *s, const cq_writer_req_t *req, mq_pend_t *p)
{
    if (req->op == CQ_WRITER_TOPIC_CREATE && (req->err == 0 || req->err == CQ_EEXIST)) {
        if (!cq__mqsrv_topic_add(s, req->topic, true, CQ_STORE_DEFAULT_RETENTION)) {
            cq__mqsrv_reply(p->c, p->req, -ENOMEM, "add_topic: out of memory");
            return;
        }
        reply_counted(p->c, p->req, ++p->c->registered);
        return;
    }
    bool never = req->op == CQ_WRITER_GET_OFFSET && req->err == -ENOENT;
    if (req->err && !never) {
        cq__mqsrv_reply(p->c, p->req, req->err, "%s: %s", NAME(p->req), cq_strerror(req->err));
        return;
    }
    cq_mq_msg_t *resp = cq_mq_resp_new(p->req, 0, NULL);
    if (resp && req->op == CQ_WRITER_COMMIT_OFFSET) {
        resp->offset = (int64_t)req->offset;
        resp->has |= CQ_MQ_F_OFFSET;
    }
    if (resp && req->op == CQ_WRITER_GET_OFFSET) { /* never committed: offset 0, false */
        const mq_topic_t *t = cq__mqsrv_topic(s, req->topic);
        resp->offset = never ? 0 : (int64_t)req->offset;
        resp->committed = !never;
        resp->last_offset = t ? (int64_t)t->last_offset : 0;
        resp->has |= CQ_MQ_F_OFFSET | CQ_MQ_F_COMMITTED | CQ_MQ_F_LAST_OFFSET;
    }
    cq__mqsrv_send(p->c, resp);
}

/* The engine's own requests: online flags and retention. */
static void done_internal(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    mq_topic_t *t = cq__mqsrv_topic(s, req->topic);
    if (req->err)
        CQ_WARN("mq", "topic %s: store request %d failed: %s %s", req->topic, (int)req->op,
                cq_strerror(req->err), req->errmsg);
    if (!t)
        return;
    if (req->op == CQ_WRITER_TOPIC_SET_ONLINE && req->err == 0)
        t->online = req->online;
    if (req->op != CQ_WRITER_PURGE)
        return;
    t->purging = false;
    if (req->err == 0 && req->purged == req->max) {
        int64_t older = req->older_than_ms;
        cq_writer_req_t *again;
        if (cq_writer_req_new(CQ_WRITER_PURGE, t->name, NULL, &again) < 0)
            return;
        again->max = req->max;
        again->older_than_ms = older;
        if (cq__mqsrv_submit(s, NULL, NULL, again) < 0)
            cq_writer_req_free(again);
        else
            t->purging = true;
    }
}

void cq__mqsrv_completed(cq_mqsrv_t *s, cq_writer_req_t *req, mq_pend_t *p)
{
    if (req->op == CQ_WRITER_PRODUCE) {
        done_produce(s, req, p);
        return;
    }
    if (!p || !p->c) {
        done_internal(s, req);
        return;
    }
    if (p->c->dead)
        return;
    if (req->op == CQ_WRITER_READ)
        done_read(s, req, p);
    else
        done_simple(s, req, p);
}
