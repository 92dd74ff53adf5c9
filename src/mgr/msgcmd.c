/* msgcmd.c - the manager's commands about one message (issue 25): invalidate, sent to the
 * shard's master as management command 3, and lookup, sent to the shard's standby (else its
 * master) as command 4 (doc/mgr.md "Messages"); each answered to the API when the server
 * answers, when its connection goes, or at the deadline. Engine thread only, no I/O:
 * the waits are a small table the tick sweeps. */
#include "cq_err.h"
#include "cq_log.h"
#include "engine.h"

#include <errno.h>
#include <jansson.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The connection of shard's master that may take a command: synced, not closing, reporting
 * itself master and fresh. NULL when there is none. */
static cq_mgr_conn_t *master_conn(const cq_mgr_t *m, uint32_t shard, uint64_t now_ms)
{
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (!s->conn || !s->conn->synced || s->conn->closing || !s->last ||
            cq__mgr_server_relay_only(s) || cq__mgr_server_shard(s) != shard ||
            !cq__mgr_server_master(s) || cq__mgr_server_stale(m, s, now_ms))
            continue;
        return s->conn;
    }
    return NULL;
}

/* The connection of a standby of shard that may take a command (fresh, synced), or NULL. */
static cq_mgr_conn_t *standby_conn(const cq_mgr_t *m, uint32_t shard, uint64_t now_ms)
{
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (s->conn && s->conn->synced && !s->conn->closing && s->last &&
            !cq__mgr_server_relay_only(s) && cq__mgr_server_shard(s) == shard &&
            !cq__mgr_server_master(s) && !cq__mgr_server_stale(m, s, now_ms))
            return s->conn;
    }
    return NULL;
}

static int command_buf(uint32_t askid, uint32_t cmdid, const mgr_wait_t *w, cq_buf_t **ret)
{
    cq_mqmgr_msg_t *cmd = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND, 0);
    if (!cmd)
        return -ENOMEM;
    cmd->askid = askid;
    cmd->cmdid = cmdid;
    snprintf(cmd->topic, sizeof(cmd->topic), "%s", w->topic);
    cmd->offset = w->offset;
    cmd->key_producer = w->key_producer;
    cmd->key_seq = w->key_seq;
    int rc = cq_mqmgr_encode_buf(cmd, ret);
    cq_mqmgr_msg_free(cmd);
    return rc;
}

/* Checks a message command's arguments and room for its wait: 0 or the refusal (err). */
static int command_check(const cq_mgr_t *m, const char *topic, uint64_t offset, char *err,
                         size_t errlen)
{
    if (!cq_mq_topic_valid(topic, strlen(topic)))
        return cq_err_fmt(err, errlen, CQ_EBADTOPIC,
                          "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    if (offset == 0 || offset > (uint64_t)CQ_MQ_MAX_U53)
        return cq_err_fmt(err, errlen, CQ_EOFFRANGE,
                          "offset: must be an integer in [1, 9007199254740991]");
    if (m->nwaits == MGR_WAITS_MAX)
        return cq_err_fmt(err, errlen, CQ_EBUSY, "%d message commands in flight: retry later",
                          MGR_WAITS_MAX);
    return 0;
}

/* Sends command cmdid for w's message (topic, shard, offset or key; the rest is filled) to c
 * and records its wait for ud. 0 or the refusal (err). */
static int command_send(cq_mgr_t *m, cq_mgr_conn_t *c, uint32_t cmdid, mgr_wait_t w, void *ud,
                        char *err, size_t errlen)
{
    w.askid = ++m->next_askid;
    w.cmdid = cmdid;
    w.c = c;
    w.ud = ud;
    w.deadline_ms = m->now_ms + MGR_WAIT_MS;
    cq_buf_t *b = NULL;
    if (command_buf(w.askid, cmdid, &w, &b) < 0)
        return cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    bool sent = cq__mgr_conn_send(c, b);
    cq_buf_unref(b);
    if (!sent)
        return cq_err_fmt(err, errlen, CQ_ECLOSED,
                          "shard %" PRIu32 ": the server's connection closed", w.shard);
    m->waits[m->nwaits++] = w;
    cq_log(CQ_LOG_INFO, "mgr", "server %" PRIu32 " (%s): %s %s offset %" PRIu64,
           c->srv ? c->srv->appid : 0, c->peer,
           cmdid == CQ_MQMGR_CMD_INVALIDATE ? "invalidate" : "look up", w.topic, w.offset);
    return 0;
}

/* A wait's message: topic, shard, offset (or 0 and a key). */
static mgr_wait_t target(const char *topic, uint32_t shard, uint64_t offset, uint64_t producer,
                         uint64_t seq)
{
    mgr_wait_t w = {.shard = shard, .offset = offset, .key_producer = producer, .key_seq = seq};
    snprintf(w.topic, sizeof(w.topic), "%s", topic);
    return w;
}

int cq__mgr_invalidate(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t offset,
                       uint64_t now, void *ud, char *err, size_t errlen)
{
    if (now > m->now_ms)
        m->now_ms = now;
    int r = command_check(m, topic, offset, err, errlen);
    if (r < 0)
        return r;
    cq_mgr_conn_t *c = master_conn(m, shard, m->now_ms);
    if (!c)
        return cq_err_fmt(err, errlen, CQ_ENOTMASTER,
                          "shard %" PRIu32 ": no master reports to this manager now", shard);
    return command_send(m, c, CQ_MQMGR_CMD_INVALIDATE, target(topic, shard, offset, 0, 0), ud, err,
                        errlen);
}

/* Command 4 for w to shard's standby, else its master. */
static int lookup(cq_mgr_t *m, mgr_wait_t w, void *ud, char *err, size_t errlen)
{
    cq_mgr_conn_t *c = standby_conn(m, w.shard, m->now_ms);
    if (!c)
        c = master_conn(m, w.shard, m->now_ms);
    if (!c)
        return cq_err_fmt(err, errlen, CQ_ENOTMASTER,
                          "shard %" PRIu32 ": no server reports to this manager now", w.shard);
    return command_send(m, c, CQ_MQMGR_CMD_MESSAGE, w, ud, err, errlen);
}

int cq__mgr_message_key(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t producer_id,
                        uint64_t seq, uint64_t now, void *ud, char *err, size_t errlen)
{
    if (now > m->now_ms)
        m->now_ms = now;
    if (producer_id == 0 || producer_id > (uint64_t)CQ_MQ_MAX_U53 || seq > (uint64_t)CQ_MQ_MAX_U53)
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "producer_id: must be an integer in [1, 9007199254740991], seq in [0, "
                          "9007199254740991]");
    int r = command_check(m, topic, 1, err, errlen);
    return r < 0 ? r : lookup(m, target(topic, shard, 0, producer_id, seq), ud, err, errlen);
}

int cq__mgr_message(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t offset, uint64_t now,
                    void *ud, char *err, size_t errlen)
{
    if (now > m->now_ms)
        m->now_ms = now;
    int r = command_check(m, topic, offset, err, errlen);
    if (r < 0)
        return r;
    return r < 0 ? r : lookup(m, target(topic, shard, offset, 0, 0), ud, err, errlen);
}

/* The consumers of topic as the report of srv (borrowed) has them, each with whether its
 * committed offset is at or past offset (it has processed the message). */
static json_t *consumers_json(const mgr_server_t *srv, const char *topic, uint64_t offset)
{
    json_t *a = json_array();
    const cq_mqmgr_ext_t *x = srv && srv->last ? &srv->last->ext : NULL;
    for (size_t i = 0; a && x && i < x->ntopics; i++) {
        const cq_mqmgr_topic_t *t = &x->topics[i];
        if (strcasecmp(t->name, topic) != 0)
            continue;
        for (size_t k = 0; k < t->nconsumers; k++)
            json_array_append_new(a, json_pack("{s:s,s:I,s:b}", "id", t->consumers[k].id, "offset",
                                               (json_int_t)t->consumers[k].offset, "consumed",
                                               (uint64_t)t->consumers[k].offset >= offset));
    }
    return a;
}

/* The shard's master's server, for its consumers' offsets (a standby's may lag), or NULL. */
static const mgr_server_t *master_of(const cq_mgr_t *m, uint32_t shard)
{
    cq_mgr_conn_t *c = master_conn(m, shard, m->now_ms);
    return c ? c->srv : NULL;
}

/* Command 4's answer as the API's document, told to the API. */
static void message_end(cq_mgr_t *m, const mgr_wait_t *w, const cq_mqmgr_msg_t *resp)
{
    const mgr_server_t *own = w->c->srv, *master = master_of(m, w->shard);
    json_error_t jerr;
    json_t *msg = resp->message ? json_loadb(resp->message, resp->message_len, 0, &jerr) : NULL;
    uint64_t off =
        w->offset ? w->offset : (uint64_t)json_integer_value(json_object_get(msg, "offset"));
    json_t *doc =
        json_pack("{s:s,s:I,s:I,s:I,s:s,s:o,s:o}", "topic", w->topic, "shard", (json_int_t)w->shard,
                  "offset", (json_int_t)off, "served_by", (json_int_t)(own ? own->appid : 0),
                  "role", own && cq__mgr_server_master(own) ? "master" : "standby", "message",
                  msg ? msg : json_object(), "consumers",
                  consumers_json(master ? master : own, w->topic, off));
    char *s = doc ? json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(doc);
    if (s)
        cq__mgr_api_message(m->api, w->ud, 0, NULL, s);
    else
        cq__mgr_api_message(m->api, w->ud, -ENOMEM, "out of memory", NULL);
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    if (s)
        jfree(s);
}

/* Ends wait i: the API is told err (0: done; resp the answer) with why. */
static void wait_end(cq_mgr_t *m, size_t i, int err, const char *why, const cq_mqmgr_msg_t *resp)
{
    mgr_wait_t w = m->waits[i];
    m->waits[i] = m->waits[--m->nwaits];
    if (w.cmdid == CQ_MQMGR_CMD_INVALIDATE)
        cq__mgr_api_invalidated(m->api, w.ud, err, why);
    else if (err || !resp)
        cq__mgr_api_message(m->api, w.ud, err ? err : -EPROTO, why, NULL);
    else
        message_end(m, &w, resp);
}

bool cq__mgr_wait_answer(cq_mgr_conn_t *c, const cq_mqmgr_msg_t *resp)
{
    cq_mgr_t *m = c->m;
    for (size_t i = 0; i < m->nwaits; i++) {
        if (m->waits[i].c != c || m->waits[i].askid != resp->askid)
            continue;
        int err = resp->err_code ? cq_mq_err_of_code((int)resp->err_code) : 0;
        wait_end(m, i, err, resp->err_msg ? resp->err_msg : cq_strerror(err), resp);
        return true;
    }
    return false;
}

void cq__mgr_waits_lost(cq_mgr_conn_t *c)
{
    cq_mgr_t *m = c->m;
    for (size_t i = m->nwaits; i-- > 0;)
        if (m->waits[i].c == c)
            wait_end(m, i, CQ_ECLOSED,
                     m->waits[i].cmdid == CQ_MQMGR_CMD_INVALIDATE
                         ? "the master's connection closed before it answered: the message may "
                           "be invalid already, look it up"
                         : "the server's connection closed before it answered",
                     NULL);
}

void cq__mgr_waits_end(cq_mgr_t *m)
{
    while (m->nwaits)
        wait_end(m, m->nwaits - 1, CQ_ECLOSED, "the manager is shutting down", NULL);
}

void cq__mgr_waits_tick(cq_mgr_t *m, uint64_t now_ms)
{
    for (size_t i = m->nwaits; i-- > 0;)
        if (now_ms >= m->waits[i].deadline_ms)
            wait_end(m, i, CQ_ETIMEOUT,
                     m->waits[i].cmdid == CQ_MQMGR_CMD_INVALIDATE
                         ? "the master did not answer in time: the message may be invalid "
                           "already, look it up"
                         : "the server did not answer in time",
                     NULL);
}

void cq__mgr_invalidate_cancel(cq_mgr_t *m, void *ud)
{
    for (size_t i = m->nwaits; i-- > 0;)
        if (m->waits[i].ud == ud)
            m->waits[i] = m->waits[--m->nwaits];
}
