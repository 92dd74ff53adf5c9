/* handlers.c - the seed protocol's front end: one handler per request type, found in one table,
 * and the answers to completed store requests. A handler decodes what its request asks, runs
 * it through the operation layer (ops.c) and encodes the answer; the policy is not here.
 *
 * Ownership, one rule: every handler takes m, the decoded request. It frees m once answered, or
 * hands it to the operation layer as the answer context of a store request, which gives it
 * back to done() at completion.
 */
#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_log.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define NAME(m) cq_mq_type_name((m)->type)

/* ---- shared by the handlers ----------------------------------------------------------------- */

/* Checks the optional client_id against the connection's. */
static bool check_client_id(cq_mqsrv_conn_t *c, const cq_mq_msg_t *m)
{
    if (!(m->has & CQ_MQ_F_CLIENT_ID) || (uint64_t)m->client_id == c->id)
        return true;
    cq__mqsrv_reply(c, m, CQ_EFIELD, "%s: field \"client_id\": %lld is not this connection's id",
                    NAME(m), (long long)m->client_id);
    return false;
}

/* The operation layer's topic check, answered in the seed protocol's words on failure. */
static mq_topic_t *topic_check(cq_mqsrv_conn_t *c, const cq_mq_msg_t *m, cq_mqperm_right_t right,
                               bool need_online)
{
    mq_topic_t *t = NULL;
    int r = cq__mqop_topic(c->l.s, c->l.module_id, right, m->topic, need_online, &t);
    if (r == CQ_EACL)
        cq__mqsrv_reply(c, m, r, "%s: module %u may not %s topic \"%s\"", NAME(m), c->l.module_id,
                        right == CQ_MQPERM_PRODUCE ? "produce to" : "consume", m->topic);
    else if (r == CQ_ENOTOPIC)
        cq__mqsrv_reply(c, m, r, "%s: topic \"%s\" does not exist", NAME(m), m->topic);
    else if (r == CQ_EOFFLINE)
        cq__mqsrv_reply(c, m, r, "%s: topic \"%s\" is offline", NAME(m), m->topic);
    return r == 0 ? t : NULL;
}

/* After a submission that returned r: m was taken (0), or is answered with the refusal (*why,
 * read only now: an argument is evaluated before the call) and freed. */
static void submitted(cq_mqsrv_conn_t *c, cq_mq_msg_t *m, int r, const char *const *why)
{
    if (r == 0)
        return;
    cq__mqsrv_reply(c, m, r, "%s: %s", NAME(m), *why);
    cq_mq_msg_free(m);
}

/* The read policy (--slave-reads off): a standby whose shard has a master answers
 * read_on_master naming it. False when m was answered so. */
static bool read_ok(cq_mqsrv_conn_t *c, const cq_mq_msg_t *m)
{
    const char *why;
    int r = cq__mqop_may_read(c->l.s, &why);
    if (r < 0)
        cq__mqsrv_reply(c, m, r, "%s: %s", NAME(m), why);
    return r == 0;
}

/* add_topic_resp and watch_resp: the client's topic count and the topic's message count. */
static void reply_counted(cq_mqsrv_conn_t *c, const cq_mq_msg_t *m, uint32_t nums)
{
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    const mq_topic_t *t = cq__mqsrv_topic(c->l.s, m->topic);
    if (resp) {
        resp->topic_nums = nums;
        resp->topic_message_total = t ? (int64_t)t->count : 0;
        resp->has |= CQ_MQ_F_TOPIC_NUMS | CQ_MQ_F_TOPIC_MESSAGE_TOTAL;
    }
    cq__mqsrv_send(c, resp);
}

/* ---- handlers: each takes m ----------------------------------------------------------------- */

/* The credentials of a connect: the address budget first (a blocked address is refused
 * whatever it sends), then the permissions. False (answered, closing) when refused. */
static bool connect_auth(cq_mqsrv_conn_t *c, const cq_mq_msg_t *m)
{
    cq_mqsrv_t *s = c->l.s;
    uint64_t now = cq_clock_mono_ns() / 1000000u;
    char note[48];
    bool blocked = cq_authlim_blocked(s->authlim, c->l.peer, CQ_AUTHLIM_MQ, now);
    if (!blocked && cq_mqperm_auth(s->perms, m->module_id, m->token))
        return true;
    bool now_blocked = !blocked && cq_authlim_failed(s->authlim, c->l.peer, now);
    if (cq_authlim_log_allow(s->authlim, now, note, sizeof(note)))
        CQ_INFO("mq", "connect from %s, module %u: %s%s%s", c->l.peer, m->module_id,
                blocked ? "refused: too many failed authentications from this address"
                        : "authentication failed",
                now_blocked ? ", address now blocked" : "", note);
    cq__mqsrv_reply(c, m, CQ_EAUTH, "connect: %s",
                    blocked ? "too many failed authentications from this address, retry later"
                            : "unknown module_id or wrong token");
    cq__mqsrv_close(c);
    return false;
}

static void on_connect(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    if (m->client_type != CQ_MQ_PRODUCER && m->client_type != CQ_MQ_CONSUMER) {
        cq__mqsrv_reply(c, m, CQ_EFIELD, "connect: field \"client_type\": must be 1 or 2");
    } else if (connect_auth(c, m)) {
        c->authed = true;
        c->l.module_id = m->module_id;
        c->client_type = m->client_type;
        cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
        if (resp) {
            resp->client_type = c->client_type;
            resp->client_id = (int64_t)c->id;
            resp->has |= CQ_MQ_F_CLIENT_TYPE | CQ_MQ_F_CLIENT_ID;
        }
        cq__mqsrv_send(c, resp);
    }
    cq_mq_msg_free(m);
}

static void on_keepalive(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    c->l.s->st.keepalives++;
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    if (resp) {
        resp->weight = cq__mqsrv_weight(c->l.s);
        resp->has |= CQ_MQ_F_WEIGHT;
    }
    cq__mqsrv_send(c, resp);
    cq_mq_msg_free(m);
}

/* add_topic: an existing topic the module may see is registered; a missing one is created when
 * the module is admin. */
static void on_add_topic(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    cq_mqsrv_t *s = c->l.s;
    const char *why;
    if (cq__mqsrv_topic(s, m->topic)) {
        bool may = read_ok(c, m); /* a registration reads: refused on a standby, as consume */
        if (may && cq__mqop_may_see(s, c->l.module_id, m->topic))
            reply_counted(c, m, ++c->registered);
        else if (may)
            cq__mqsrv_reply(c, m, CQ_EACL, "add_topic: module %u has no right on topic \"%s\"",
                            c->l.module_id, m->topic);
    } else {
        int r = cq__mqop_create(&c->l, c->l.module_id, m->topic, -1, m, &why);
        if (r != CQ_EACL) {
            submitted(c, m, r, &why);
            return;
        }
        cq__mqsrv_reply(c, m, CQ_EACL, "add_topic: module %u %s", c->l.module_id, why);
    }
    cq_mq_msg_free(m);
}

/* The messages of m, moved into a PRODUCE request on t. NULL (answered) on failure. */
static cq_writer_req_t *produce_req(cq_mqsrv_conn_t *c, cq_mq_msg_t *m, const mq_topic_t *t)
{
    cq_writer_req_t *req;
    int r = cq_writer_req_new(CQ_WRITER_PRODUCE, t->name, NULL, &req);
    if (r < 0) {
        cq__mqsrv_reply(c, m, r, "%s: %s", NAME(m), cq_strerror(r));
        return NULL;
    }
    bool keyed = m->has & CQ_MQ_F_PRODUCER_ID;
    if (keyed && m->nitems && (uint64_t)m->seq > (uint64_t)CQ_MQ_MAX_U53 - (m->nitems - 1)) {
        /* message i's seq is seq + i: the last one must stay a JSON-safe integer too */
        cq__mqsrv_reply(c, m, CQ_EFIELD,
                        "produce: field \"seq\": %lld + %zu messages - 1 exceeds 2^53 - 1",
                        (long long)m->seq, m->nitems);
        cq_writer_req_free(req);
        return NULL;
    }
    for (size_t i = 0; i < m->nitems; i++) {
        cq_mq_item_t *it = &m->items[i];
        r = cq_writer_req_add_msg_take(req, it->content, it->len,
                                       keyed ? (uint64_t)m->producer_id : 0,
                                       keyed ? (uint64_t)m->seq + i : 0);
        it->content = NULL;
        it->len = 0;
        if (r < 0) {
            cq__mqsrv_reply(c, m, r, "produce: %s", cq_strerror(r));
            cq_writer_req_free(req);
            return NULL;
        }
    }
    return req;
}

static void on_produce(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    const char *why;
    mq_topic_t *t = topic_check(c, m, CQ_MQPERM_PRODUCE, true);
    cq_writer_req_t *req = t ? produce_req(c, m, t) : NULL;
    if (req)
        submitted(c, m, cq__mqop_produce(&c->l, req, m, &why), &why);
    else
        cq_mq_msg_free(m);
}

static void on_consume(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    const char *why;
    mq_topic_t *t = read_ok(c, m) ? topic_check(c, m, CQ_MQPERM_CONSUME, true) : NULL;
    if (!t) {
        cq_mq_msg_free(m);
        return;
    }
    int r = cq__mqop_consume(&c->l, t, (uint64_t)m->offset, m->has & CQ_MQ_F_MAX_COUNT,
                             m->max_count, m, &why);
    submitted(c, m, r, &why);
}

/* Whether an instance id is 1 to CQ_MQ_INSTANCE_MAX printable ASCII bytes, none a space. */
static bool instance_ok(const char *s)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (s[i] <= 0x20 || s[i] > 0x7e)
            return false;
    return i > 0 && i <= CQ_MQ_INSTANCE_MAX;
}

/* commit (store the offset) and offset (read it back): the consumer is "m<module_id>", or
 * "m<module_id>/<instance>" for an instance of the module with an offset of its own. */
static void on_commit(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    char consumer[16 + CQ_MQ_INSTANCE_MAX];
    const char *why;
    bool commit = m->type == CQ_MQ_REQ_COMMIT;
    const char *inst = (m->has & CQ_MQ_F_INSTANCE) ? m->instance : NULL;
    if (inst && !instance_ok(inst)) {
        cq__mqsrv_reply(c, m, CQ_EFIELD,
                        "%s: instance must be 1 to %d printable ASCII characters, no space",
                        NAME(m), CQ_MQ_INSTANCE_MAX);
        cq_mq_msg_free(m);
        return;
    }
    mq_topic_t *t = commit || read_ok(c, m) ? topic_check(c, m, CQ_MQPERM_CONSUME, false) : NULL;
    if (!t) {
        cq_mq_msg_free(m);
        return;
    }
    snprintf(consumer, sizeof(consumer), inst ? "m%u/%s" : "m%u", c->l.module_id, inst);
    int r = cq__mqop_offset(&c->l, t, consumer, commit, (uint64_t)m->offset, m, &why);
    submitted(c, m, r, &why);
}

/* topics: the topics this module may see, sorted, from the engine's cache (no store round
 * trip). */
static void on_topics(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    mq_topic_t **v = NULL;
    size_t n = 0;
    if (!read_ok(c, m)) {
        cq_mq_msg_free(m);
        return;
    }
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    if (!resp || cq__mqop_topics(c->l.s, true, c->l.module_id, &v, &n) < 0)
        resp = cq_mq_msg_free(resp);
    if (resp) {
        resp->has |= CQ_MQ_F_TOPICS | CQ_MQ_F_TOPIC_NUMS;
        resp->topic_nums = (uint32_t)n;
    }
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
    cq_mq_msg_free(m);
}

static void on_watch(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    bool on = m->type == CQ_MQ_REQ_WATCH;
    mq_topic_t *t = !on || read_ok(c, m) ? topic_check(c, m, CQ_MQPERM_CONSUME, on) : NULL;
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

/* ---- the table ------------------------------------------------------------------------------ */

typedef void (*handler_fn)(cq_mqsrv_conn_t *c, cq_mq_msg_t *m);

/* One row per request type: its handler, and whether it is served before connect. The decoder
 * lets only request types through. */
static const struct {
    handler_fn fn;
    bool anytime;
} handlers[CQ_MQ_TYPE_MAX + 1] = {
    [CQ_MQ_REQ_CONNECT] = {on_connect, true},      [CQ_MQ_REQ_KEEPALIVE] = {on_keepalive, true},
    [CQ_MQ_REQ_ADD_TOPIC] = {on_add_topic, false}, [CQ_MQ_REQ_WATCH] = {on_watch, false},
    [CQ_MQ_REQ_UNWATCH] = {on_watch, false},       [CQ_MQ_REQ_PRODUCE] = {on_produce, false},
    [CQ_MQ_REQ_CONSUME] = {on_consume, false},     [CQ_MQ_REQ_COMMIT] = {on_commit, false},
    [CQ_MQ_REQ_OFFSET] = {on_commit, false},       [CQ_MQ_REQ_TOPICS] = {on_topics, false},
};

void cq__mqsrv_dispatch(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    if (!handlers[m->type].fn) { /* cannot happen: decode checks the type */
        cq__mqsrv_reply(c, m, CQ_ENOTYPE, "%s: not served", NAME(m));
        cq_mq_msg_free(m);
        return;
    }
    if (!handlers[m->type].anytime && (!c->authed || !check_client_id(c, m))) {
        if (!c->authed)
            cq__mqsrv_reply(c, m, CQ_EAUTH, "%s: connect first", NAME(m));
        cq_mq_msg_free(m);
        return;
    }
    handlers[m->type].fn(c, m);
}

/* ---- answers to completed store requests ---------------------------------------------------- */

/* total (produce_resp, consume_resp): the messages in the topic now. */
static void set_total(cq_mqsrv_conn_t *c, cq_mq_msg_t *resp, const char *topic)
{
    const mq_topic_t *t = cq__mqsrv_topic(c->l.s, topic);
    if (resp && t) {
        resp->total = (int64_t)t->count;
        resp->has |= CQ_MQ_F_TOTAL;
    }
}

static void done_produce(cq_mqsrv_conn_t *c, const cq_writer_req_t *req, int err,
                         const cq_mq_msg_t *m)
{
    char why[CQ_MQ_ERR_MSG_MAX];
    if (err == CQ_ENOTMASTER) {
        cq__mqsrv_reply(c, m, err,
                        "produce: this server lost its shard's master role before the commit "
                        "was acknowledged; the messages may be stored: retry with the same "
                        "producer_id and seq on the shard's master");
        return;
    }
    if (err) {
        cq__mqsrv_reply(c, m, err, "produce: %s; %s", cq__mqop_err_text(req, err, why, sizeof(why)),
                        cq__mqop_produce_advice(err));
        return;
    }
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    set_total(c, resp, req->topic);
    for (size_t i = 0; resp && i < req->n_msgs; i++)
        if (cq_mq_msg_add_offset(resp, (int64_t)req->offsets[i]) < 0)
            resp = cq_mq_msg_free(resp);
    cq__mqsrv_send(c, resp);
}

/* The records' contents move into the answer (no copy), as many as fit in the frame maximum
 * once encoded; the answer's offset says where the next consume continues. */
static void done_read(cq_mqsrv_conn_t *c, cq_writer_req_t *req, int err, const cq_mq_msg_t *m)
{
    size_t budget = cq__mqop_reply_budget(c->l.s), used = 0;
    char why[CQ_MQ_ERR_MSG_MAX];
    if (err) {
        cq__mqsrv_reply(c, m, err, "consume: %s", cq__mqop_err_text(req, err, why, sizeof(why)));
        return;
    }
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    if (!resp)
        return;
    resp->has |= CQ_MQ_F_MESSAGES | CQ_MQ_F_OFFSET;
    resp->offset = m->offset;
    set_total(c, resp, req->topic);
    for (size_t i = 0; i < req->n_recs; i++) {
        cq_store_rec_t *r = &req->recs[i];
        cq_mq_item_t key = {0};
        cq__mqsrv_item_key(&key, r->producer_id, r->seq);
        size_t len = cq_mq_answer_item_len((int64_t)r->offset, r->create_ms, r->content, r->len);
        len += cq_mq_answer_key_len(key.producer_id, key.seq) + (i > 0); /* i > 0: the comma */
        if (i > 0 && used + len > budget)
            break; /* the rest is read again by the next consume */
        used += len;
        char *content = r->content;
        r->content = NULL; /* taken, also on failure */
        if (cq_mq_msg_add_item_take(resp, (int64_t)r->offset, r->create_ms, content, r->len) < 0) {
            cq__mqsrv_reply(c, m, CQ_EFIELD, "consume: message %llu is not valid UTF-8 text",
                            (unsigned long long)r->offset);
            cq_mq_msg_free(resp);
            return;
        }
        resp->items[resp->nitems - 1].producer_id = key.producer_id;
        resp->items[resp->nitems - 1].seq = key.seq;
        resp->offset = (int64_t)r->offset;
    }
    c->l.s->st.consumed += resp->nitems;
    cq__mqsrv_send(c, resp);
}

/* add_topic, commit and offset. */
static void done_simple(cq_mqsrv_conn_t *c, const cq_writer_req_t *req, const mq_result_t *res,
                        const cq_mq_msg_t *m)
{
    if (req->op == CQ_WRITER_TOPIC_CREATE && res->err == -ENOMEM && req->err != -ENOMEM) {
        cq__mqsrv_reply(c, m, -ENOMEM, "add_topic: out of memory");
        return;
    }
    char why[CQ_MQ_ERR_MSG_MAX];
    if (res->err) {
        cq__mqsrv_reply(c, m, res->err, "%s: %s", NAME(m),
                        cq__mqop_err_text(req, res->err, why, sizeof(why)));
        return;
    }
    if (req->op == CQ_WRITER_TOPIC_CREATE) {
        reply_counted(c, m, ++c->registered);
        return;
    }
    cq_mq_msg_t *resp = cq_mq_resp_new(m, 0, NULL);
    if (resp) {
        resp->offset = (int64_t)res->offset;
        resp->has |= CQ_MQ_F_OFFSET;
    }
    if (resp && req->op == CQ_WRITER_GET_OFFSET) {
        resp->committed = res->committed;
        resp->last_offset = (int64_t)res->last_offset;
        resp->has |= CQ_MQ_F_COMMITTED | CQ_MQ_F_LAST_OFFSET;
    }
    cq__mqsrv_send(c, resp);
}

static void done(mq_link_t *l, cq_writer_req_t *req, const mq_result_t *res, void *ctx)
{
    cq_mqsrv_conn_t *c = (cq_mqsrv_conn_t *)l;
    cq_mq_msg_t *m = ctx;
    if (l->dead)
        ;
    else if (req->op == CQ_WRITER_PRODUCE)
        done_produce(c, req, res->err, m);
    else if (req->op == CQ_WRITER_READ)
        done_read(c, req, res->err, m);
    else
        done_simple(c, req, res, m);
    cq_mq_msg_free(m);
}

const mq_fe_t cq__mqsrv_fe = {done, cq__mqsrv_conn_free};
