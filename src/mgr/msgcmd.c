/* msgcmd.c - the manager's commands about one message (issue 25): invalidate, sent to the
 * shard's master as management command 3 (doc/mgr.md "Commands") and answered to the API when
 * the server answers, when its connection goes, or at the deadline. Engine thread only, no I/O:
 * the waits are a small table the tick sweeps. */
#include "cq_err.h"
#include "cq_log.h"
#include "engine.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

static int invalidate_buf(uint32_t askid, const char *topic, uint64_t offset, cq_buf_t **ret)
{
    cq_mqmgr_msg_t *cmd = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND, 0);
    if (!cmd)
        return -ENOMEM;
    cmd->askid = askid;
    cmd->cmdid = CQ_MQMGR_CMD_INVALIDATE;
    snprintf(cmd->topic, sizeof(cmd->topic), "%s", topic);
    cmd->offset = offset;
    int rc = cq_mqmgr_encode_buf(cmd, ret);
    cq_mqmgr_msg_free(cmd);
    return rc;
}

int cq__mgr_invalidate(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t offset,
                       uint64_t now, void *ud, char *err, size_t errlen)
{
    if (now > m->now_ms)
        m->now_ms = now;
    if (!cq_mq_topic_valid(topic, strlen(topic)))
        return cq_err_fmt(err, errlen, CQ_EBADTOPIC,
                          "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    if (offset == 0 || offset > (uint64_t)CQ_MQ_MAX_U53)
        return cq_err_fmt(err, errlen, CQ_EOFFRANGE,
                          "offset: must be an integer in [1, 9007199254740991]");
    if (m->nwaits == MGR_WAITS_MAX)
        return cq_err_fmt(err, errlen, CQ_EBUSY, "%d message commands in flight: retry later",
                          MGR_WAITS_MAX);
    cq_mgr_conn_t *c = master_conn(m, shard, m->now_ms);
    if (!c)
        return cq_err_fmt(err, errlen, CQ_ENOTMASTER,
                          "shard %" PRIu32 ": no master reports to this manager now", shard);
    uint32_t askid = ++m->next_askid;
    cq_buf_t *b = NULL;
    if (invalidate_buf(askid, topic, offset, &b) < 0)
        return cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    bool sent = cq__mgr_conn_send(c, b);
    cq_buf_unref(b);
    if (!sent)
        return cq_err_fmt(err, errlen, CQ_ECLOSED,
                          "shard %" PRIu32 ": the master's connection closed", shard);
    m->waits[m->nwaits++] = (mgr_wait_t){askid, c, ud, m->now_ms + MGR_WAIT_MS};
    cq_log(CQ_LOG_INFO, "mgr", "server %" PRIu32 " (%s): invalidate %s offset %" PRIu64,
           c->srv ? c->srv->appid : 0, c->peer, topic, offset);
    return 0;
}

/* Ends wait i: the API is told err (0: done) with why. */
static void wait_end(cq_mgr_t *m, size_t i, int err, const char *why)
{
    void *ud = m->waits[i].ud;
    m->waits[i] = m->waits[--m->nwaits];
    cq__mgr_api_invalidated(m->api, ud, err, why);
}

bool cq__mgr_wait_answer(cq_mgr_conn_t *c, const cq_mqmgr_msg_t *resp)
{
    cq_mgr_t *m = c->m;
    for (size_t i = 0; i < m->nwaits; i++) {
        if (m->waits[i].c != c || m->waits[i].askid != resp->askid)
            continue;
        int err = resp->err_code ? cq_mq_err_of_code((int)resp->err_code) : 0;
        wait_end(m, i, err, resp->err_msg ? resp->err_msg : cq_strerror(err));
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
                     "the master's connection closed before it answered: the message may be "
                     "invalid already, look it up");
}

void cq__mgr_waits_tick(cq_mgr_t *m, uint64_t now_ms)
{
    for (size_t i = m->nwaits; i-- > 0;)
        if (now_ms >= m->waits[i].deadline_ms)
            wait_end(m, i, CQ_ETIMEOUT,
                     "the master did not answer in time: the message may be invalid already, "
                     "look it up");
}

void cq__mgr_invalidate_cancel(cq_mgr_t *m, void *ud)
{
    for (size_t i = m->nwaits; i-- > 0;)
        if (m->waits[i].ud == ud)
            m->waits[i] = m->waits[--m->nwaits];
}
