/* proto.c - the management port's connections (common.md contract 1, doc/protocol-mq.md
 * "Management port"): frames in, the handlers of svrconfig (SDKs), sync_serverinfo and command
 * responses (servers), answers and commands out on the connection's send queue. */
#include "engine.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define SENDQ_HARD (8u << 20) /* a server that does not read its commands is dropped */

/* ---- output ---------------------------------------------------------------------------- */

static void conn_abort(cq_mgr_conn_t *c)
{
    if (c->closing)
        return;
    c->closing = true;
    c->ops.t.close(c->tctx);
}

bool cq__mgr_conn_send(cq_mgr_conn_t *c, cq_buf_t *b)
{
    if (c->closing)
        return false;
    if (cq_sendq_push(&c->sendq, b, CQ_SENDQ_PACKET, SENDQ_HARD) < 0) {
        conn_abort(c);
        return false;
    }
    if (cq_list_empty(&c->flush_node))
        cq_list_insert_tail(&c->m->flushq, &c->flush_node);
    return true;
}

static void send_msg(cq_mgr_conn_t *c, const cq_mqmgr_msg_t *msg)
{
    cq_buf_t *b = NULL;
    if (cq_mqmgr_encode_buf(msg, &b) < 0) {
        conn_abort(c); /* out of memory: the peer reconnects */
        return;
    }
    cq__mgr_conn_send(c, b);
    cq_buf_unref(b);
}

static void send_error(cq_mgr_conn_t *c, const cq_mq_frame_t *f, int err, const char *msg)
{
    cq_buf_t *b = NULL;
    int64_t ver = cq__mgr_state_version(c->m->doc);
    if (cq_mqmgr_encode_error_buf(f, err, msg, ver, &b) < 0) {
        conn_abort(c);
        return;
    }
    cq__mgr_conn_send(c, b);
    cq_buf_unref(b);
}

/* Remembers a command sent on c, so that its answer is counted under its cmdid. */
static void cmd_track(cq_mgr_conn_t *c, uint32_t askid, uint32_t cmdid)
{
    if (c->ncmds == MGR_CMDS_PENDING) { /* the oldest is given up */
        uint32_t old = c->cmds[c->cmd_head].cmdid;
        c->m->commands[old == CQ_MQMGR_CMD_OFFLINE][MGR_RES_LOST]++;
        c->cmd_head = (c->cmd_head + 1) % MGR_CMDS_PENDING;
        c->ncmds--;
    }
    uint32_t at = (c->cmd_head + c->ncmds) % MGR_CMDS_PENDING;
    c->cmds[at].askid = askid;
    c->cmds[at].cmdid = cmdid;
    c->ncmds++;
}

static void send_cmd_buf(cq_mgr_conn_t *c, cq_buf_t *b, uint32_t askid, uint32_t cmdid)
{
    if (cq__mgr_conn_send(c, b))
        cmd_track(c, askid, cmdid);
}

/* The publish_config command of the current state, encoded once. */
static int config_buf(cq_mgr_t *m, uint32_t askid, cq_buf_t **ret)
{
    cq_mqmgr_msg_t *cmd = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND, 0);
    if (!cmd)
        return -ENOMEM;
    cmd->askid = askid;
    cmd->cmdid = CQ_MQMGR_CMD_PUBLISH_CONFIG;
    int rc = cq__mgr_state_config(m->doc, &cmd->config);
    if (rc == 0)
        rc = cq_mqmgr_encode_buf(cmd, ret);
    cq_mqmgr_msg_free(cmd);
    return rc;
}

static int offline_buf(uint32_t askid, bool offline, cq_buf_t **ret)
{
    cq_mqmgr_msg_t *cmd = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND, 0);
    if (!cmd)
        return -ENOMEM;
    cmd->askid = askid;
    cmd->cmdid = CQ_MQMGR_CMD_OFFLINE;
    cmd->offline = offline;
    int rc = cq_mqmgr_encode_buf(cmd, ret);
    cq_mqmgr_msg_free(cmd);
    return rc;
}

void cq__mgr_send_config(cq_mgr_conn_t *c)
{
    uint32_t askid = ++c->m->next_askid;
    cq_buf_t *b = NULL;
    if (config_buf(c->m, askid, &b) < 0) {
        conn_abort(c);
        return;
    }
    send_cmd_buf(c, b, askid, CQ_MQMGR_CMD_PUBLISH_CONFIG);
    cq_buf_unref(b);
}

void cq__mgr_send_offline(cq_mgr_conn_t *c, bool offline)
{
    uint32_t askid = ++c->m->next_askid;
    cq_buf_t *b = NULL;
    if (offline_buf(askid, offline, &b) < 0) {
        conn_abort(c);
        return;
    }
    send_cmd_buf(c, b, askid, CQ_MQMGR_CMD_OFFLINE);
    cq_buf_unref(b);
}

void cq__mgr_broadcast(cq_mgr_t *m, const json_t *old_doc)
{
    uint32_t askid = 0;
    cq_buf_t *b = NULL; /* encoded once, for the first server that gets it */
    cq_list_t *pos;
    cq_list_foreach(pos, &m->conns)
    {
        cq_mgr_conn_t *c = (cq_mgr_conn_t *)((char *)pos - offsetof(cq_mgr_conn_t, node));
        if (!c->synced || c->closing || !c->srv)
            continue;
        if (!b && config_buf(m, askid = ++m->next_askid, &b) < 0)
            return; /* out of memory: servers get the state on their next connection */
        send_cmd_buf(c, b, askid, CQ_MQMGR_CMD_PUBLISH_CONFIG);
        bool now = cq__mgr_state_offline(m->doc, c->srv->appid);
        if (old_doc && cq__mgr_state_offline(old_doc, c->srv->appid) != now)
            cq__mgr_send_offline(c, now);
    }
    cq_buf_unref(b);
}

/* ---- handlers ---------------------------------------------------------------------------- */

/* Counts a failed authentication; answers err 6 and closes (as MQ connect does). */
static int auth_failed(cq_mgr_conn_t *c, const cq_mq_frame_t *f, const char *why, uint64_t now)
{
    cq_authlim_failed(c->m->authlim, c->peer, now);
    char note[64];
    if (cq_authlim_log_allow(c->m->authlim, now, note, sizeof(note)))
        cq_log(CQ_LOG_WARN, "mgr", "%s: %s%s", c->peer, why, note);
    send_error(c, f, CQ_EAUTH, why);
    conn_abort(c);
    return CQ_EAUTH;
}

/* Whether a server of the module's groups may be listed to it. */
static bool in_groups(const json_t *mod, uint32_t group_id)
{
    json_t *g = json_object_get(mod, "groups");
    if (!g)
        return true;
    size_t i;
    json_t *v;
    json_array_foreach(g, i, v)
    {
        if (json_integer_value(v) == (json_int_t)group_id)
            return true;
    }
    return false;
}

/* Splits "host:port" (or "[v6]:port") into the answer's ip and port. */
static bool split_addr(const char *addr, char *ip, size_t cap, uint16_t *port)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr)
        return false;
    const char *h = addr, *he = colon;
    if (*h == '[' && he[-1] == ']') {
        h++;
        he--;
    }
    unsigned long p = 0;
    for (const char *q = colon + 1; *q; q++) {
        if (*q < '0' || *q > '9' || (p = p * 10 + (unsigned long)(*q - '0')) > 65535)
            return false;
    }
    if (p == 0 || colon[1] == '\0' || (size_t)(he - h) >= cap)
        return false;
    memcpy(ip, h, (size_t)(he - h));
    ip[he - h] = '\0';
    *port = (uint16_t)p;
    return true;
}

/* A server a module may be given: live (not stale), not taken offline, a shard's (not a relay
 * node alone), with an address, in the module's groups. */
static bool usable(cq_mgr_t *m, const json_t *mod, const mgr_server_t *s, uint64_t now)
{
    return !cq__mgr_server_stale(m, s, now) && !cq__mgr_server_relay_only(s) &&
           !cq__mgr_server_offline(m, s) &&
           !(s->last->ext.has & CQ_MQMGR_X_OFFLINE && s->last->ext.offline) &&
           (s->last->ext.has & CQ_MQMGR_X_ADDR) && in_groups(mod, s->group_id);
}

/* Whether shard has a live master (reporting, not stale), in service or not: a master an
 * operator took offline is still the shard's, and its standby is not offered instead. */
static bool shard_has_master(cq_mgr_t *m, uint32_t shard, uint64_t now)
{
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (cq__mgr_server_shard(s) == shard && cq__mgr_server_master(s) &&
            !cq__mgr_server_stale(m, s, now) && !cq__mgr_server_relay_only(s))
            return true;
    }
    return false;
}

/* The servers a module may use: each shard's usable masters; a shard with no live master (it
 * is stale or gone) offers its usable standbys instead, for reads (seed §3.2 (3): the standby
 * serves while the master does not; a produce there answers not_master). The registry is
 * sorted by appid, so a stable pass per shard gives shard-then-appid order. */
static int list_servers(cq_mgr_t *m, const json_t *mod, cq_mqmgr_msg_t *r, uint64_t now)
{
    bool more = true;
    for (uint64_t shard = 0; more; shard++) {
        uint64_t next = UINT64_MAX;
        bool masters = shard <= UINT32_MAX && shard_has_master(m, (uint32_t)shard, now);
        for (size_t i = 0; i < m->nservers; i++) {
            const mgr_server_t *s = m->servers[i];
            if (!usable(m, mod, s, now))
                continue;
            uint32_t sh = cq__mgr_server_shard(s);
            if (sh > shard && sh < next)
                next = sh;
            if (sh != shard || (masters && !cq__mgr_server_master(s)))
                continue;
            char ip[CQ_MQMGR_HOST_MAX + 1];
            uint16_t port;
            if (!split_addr(s->last->ext.addr, ip, sizeof(ip), &port))
                continue;
            int rc = cq_mqmgr_msg_add_server(r, ip, port, sh);
            if (rc < 0)
                return rc == CQ_ELIMIT ? 0 : rc;
        }
        more = next != UINT64_MAX;
        if (more)
            shard = next - 1;
    }
    return 0;
}

/* The live relay nodes of the module's groups that report at least one client address. */
static int list_relay_nodes(cq_mgr_t *m, const json_t *mod, cq_mqmgr_msg_t *r, uint64_t now)
{
    const mgr_server_t **live = cq_malloc(CQ_MQMGR_RELAY_NODES_MAX * sizeof(*live));
    size_t n = 0;
    int rc = live ? cq__mgr_relay_nodes(m, now, live, CQ_MQMGR_RELAY_NODES_MAX, &n) : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const cq_mqmgr_relay_t *x = &live[i]->last->ext.relay;
        const char *addrs[CQ_MQMGR_NTRANSPORTS];
        bool any = false;
        for (int t = 0; t < CQ_MQMGR_NTRANSPORTS; t++)
            any |= *(addrs[t] = x->addrs[t]) != '\0';
        if (!any || !in_groups(mod, live[i]->group_id))
            continue;
        rc = cq_mqmgr_msg_add_relay_node(r, x->node, x->cluster, addrs);
        if (rc == CQ_EFIELD)
            rc = 0; /* a report the answer's codec refuses is left out */
    }
    cq_free(live);
    return rc == CQ_ELIMIT ? 0 : rc;
}

static int on_svrconfig(cq_mgr_conn_t *c, const cq_mq_frame_t *f, cq_mqmgr_msg_t *req, uint64_t now)
{
    cq_mgr_t *m = c->m;
    m->svrconfig_total++;
    if (cq_authlim_blocked(m->authlim, c->peer, CQ_AUTHLIM_MQ, now))
        return auth_failed(c, f, "too many failed authentications from this address", now);
    json_t *mod = cq__mgr_state_module(m->doc, req->module_id);
    const char *tok = json_string_value(json_object_get(mod, "token"));
    /* compare even when the module is absent, so that timing does not tell which exist */
    bool ok = cq_token_eq(tok ? tok : "\001absent", req->token) && mod;
    if (!ok)
        return auth_failed(c, f, "svrconfig: unknown module_id or wrong token", now);
    c->authed = true;
    cq_mqmgr_msg_t *r = cq_mqmgr_msg_new(CQ_MQMGR_SVRCONFIG_RESP, req->msg_id);
    if (!r)
        return -ENOMEM;
    r->askid = req->askid;
    r->module_id = req->module_id;
    int rc = list_servers(m, mod, r, now);
    if (rc == 0)
        rc = list_relay_nodes(m, mod, r, now);
    if (rc == 0)
        send_msg(c, r);
    cq_mqmgr_msg_free(r);
    return rc;
}

/* A new connection reporting for a known appid replaces the old one. */
static void attach(cq_mgr_conn_t *c, mgr_server_t *s)
{
    if (s->conn && s->conn != c) {
        s->conn->srv = NULL;
        conn_abort(s->conn);
    }
    if (c->srv && c->srv != s) /* the connection now reports for another appid */
        c->srv->conn = NULL;
    s->conn = c;
    c->srv = s;
}

static bool server_token_ok(cq_mgr_conn_t *c, const char *token)
{
    const cq_mgr_t *m = c->m;
    if (m->o.dev)
        return true;
    return m->server_token[0] && cq_token_eq(m->server_token, token);
}

static int on_sync(cq_mgr_conn_t *c, const cq_mq_frame_t *f, cq_mqmgr_msg_t **reqp, uint64_t now)
{
    cq_mgr_t *m = c->m;
    cq_mqmgr_msg_t *req = *reqp;
    m->sync_total++;
    if (cq_authlim_blocked(m->authlim, c->peer, CQ_AUTHLIM_MQ, now))
        return auth_failed(c, f, "too many failed authentications from this address", now);
    if (!server_token_ok(c, req->token))
        return auth_failed(c, f,
                           m->server_token[0] ? "sync_serverinfo: wrong token"
                                              : "sync_serverinfo: no --mgr-token-file configured",
                           now);
    c->authed = true;
    mgr_server_t *s = cq__mgr_server_get(m, req->appid, true);
    if (!s) {
        send_error(c, f, CQ_ELIMIT, "sync_serverinfo: too many servers");
        return 0;
    }
    attach(c, s);
    cq_mqmgr_msg_t *r = cq_mqmgr_msg_new(CQ_MQMGR_SYNC_RESP, req->msg_id);
    if (!r)
        return -ENOMEM;
    r->askid = req->askid;
    r->config_version = cq__mgr_state_version(m->doc);
    bool reported_offline = (req->ext.has & CQ_MQMGR_X_OFFLINE) && req->ext.offline;
    cq__mgr_server_report(s, req, now);
    *reqp = NULL;
    send_msg(c, r);
    cq_mqmgr_msg_free(r);
    if (!c->synced) {
        c->synced = true;
        cq__mgr_send_config(c);
        bool flagged = cq__mgr_state_offline(m->doc, s->appid);
        if (flagged || reported_offline)
            cq__mgr_send_offline(c, flagged);
    }
    return 0;
}

static void on_command_resp(cq_mgr_conn_t *c, const cq_mqmgr_msg_t *resp)
{
    if ((resp->cmdid == CQ_MQMGR_CMD_INVALIDATE || resp->cmdid == CQ_MQMGR_CMD_MESSAGE) &&
        cq__mgr_wait_answer(c, resp))
        return; /* answered when the store was done: out of order with the others */
    for (uint32_t k = 0; k < c->ncmds; k++) {
        uint32_t at = (c->cmd_head + k) % MGR_CMDS_PENDING;
        if (c->cmds[at].askid != resp->askid)
            continue;
        uint32_t cmdid = c->cmds[at].cmdid;
        bool ok = resp->err_code == 0;
        c->m->commands[cmdid == CQ_MQMGR_CMD_OFFLINE][ok ? MGR_RES_OK : MGR_RES_ERROR]++;
        if (!ok)
            cq_log(CQ_LOG_WARN, "mgr", "server %" PRIu32 " (%s): command %s failed: %u %s",
                   c->srv ? c->srv->appid : 0, c->peer,
                   cmdid == CQ_MQMGR_CMD_OFFLINE ? "offline" : "publish_config", resp->err_code,
                   resp->err_msg ? resp->err_msg : "");
        /* answers come in order: drop this one and those before it */
        c->cmd_head = (at + 1) % MGR_CMDS_PENDING;
        c->ncmds -= k + 1;
        return;
    }
}

static int on_frame(cq_mgr_conn_t *c, const cq_mq_frame_t *f, uint64_t now)
{
    cq_mqmgr_msg_t *msg = NULL;
    char err[CQ_MQ_ERR_MSG_MAX + 1] = "";
    int rc = cq_mqmgr_decode(f, 0, &msg, err, sizeof(err));
    if (rc == -ENOMEM)
        return rc;
    if (rc < 0 && f->type == CQ_MQMGR_REQ_COMMAND) {
        /* a command is the manager's to send: refused as a type, however its body reads (a
         * command's own answer, type 4, is the servers' to send) */
        rc = CQ_ENOTYPE;
        snprintf(err, sizeof(err), "%s is not accepted on the management port",
                 cq_mqmgr_kind_name(CQ_MQMGR_COMMAND));
    }
    if (rc < 0) {
        send_error(c, f, rc, err);
        return 0;
    }
    switch (msg->kind) {
    case CQ_MQMGR_SVRCONFIG:
        rc = on_svrconfig(c, f, msg, now);
        break;
    case CQ_MQMGR_SYNC:
        rc = on_sync(c, f, &msg, now);
        break;
    case CQ_MQMGR_COMMAND_RESP:
        if (c->authed)
            on_command_resp(c, msg);
        else
            send_error(c, f, CQ_EAUTH, "command_resp: not authenticated");
        break;
    case CQ_MQMGR_ERROR_FRAME:
        break; /* never answer an error with an error */
    default:
        snprintf(err, sizeof(err), "%s is not accepted on the management port",
                 cq_mqmgr_kind_name(msg->kind));
        send_error(c, f, CQ_ENOTYPE, err);
        break;
    }
    cq_mqmgr_msg_free(msg);
    return rc == CQ_EAUTH ? rc : rc == -ENOMEM ? rc : 0;
}

/* ---- connections ------------------------------------------------------------------------- */

cq_mgr_conn_t *cq_mgr_conn_new(cq_mgr_t *m, const cq_mgr_conn_ops_t *ops, void *tctx,
                               const char *peer_ip)
{
    cq_mgr_conn_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->m = m;
    c->ops = *ops;
    c->tctx = tctx;
    snprintf(c->peer, sizeof(c->peer), "%s", peer_ip ? peer_ip : "");
    cq_sbuf_init(&c->in);
    cq_sendq_init(&c->sendq, CQ_FRAMING_FIXED); /* PACKET entries only: the mode is unused */
    cq_list_init(&c->flush_node);
    cq_list_insert_tail(&m->conns, &c->node);
    return c;
}

/* Parses and handles the frames at p[0..n); returns the bytes consumed or < 0 (close). */
static ssize_t consume(cq_mgr_conn_t *c, const uint8_t *p, size_t n, uint64_t now)
{
    size_t off = 0;
    while (off < n && !c->closing) {
        uint32_t max = (uint32_t)(c->authed ? c->m->o.max_frame : c->m->o.preauth_max_frame);
        cq_mq_frame_t f;
        ssize_t r = cq_mq_parse(p + off, n - off, max, &f);
        if (r == 0)
            break;
        if (r < 0) { /* the stream cannot be resynchronised: answer and close */
            send_error(c, NULL, (int)r,
                       r == CQ_EBADLEN ? "frame total length out of bounds" : "bad frame header");
            conn_abort(c);
            return r;
        }
        c->frames++;
        int rc = on_frame(c, &f, now);
        if (rc < 0) {
            conn_abort(c);
            return rc;
        }
        off += (size_t)r;
    }
    return c->closing ? CQ_ECLOSED : (ssize_t)off;
}

int cq_mgr_conn_input(cq_mgr_conn_t *c, const uint8_t *p, size_t n, uint64_t now_ms)
{
    if (c->closing)
        return CQ_ECLOSED;
    c->m->now_ms = now_ms;
    if (c->in.len == 0) { /* the usual case: whole frames, no copy */
        ssize_t used = consume(c, p, n, now_ms);
        if (used < 0)
            return (int)used;
        if ((size_t)used < n && cq_sbuf_append(&c->in, p + used, n - (size_t)used) < 0) {
            conn_abort(c);
            return -ENOMEM;
        }
        return 0;
    }
    if (cq_sbuf_append(&c->in, p, n) < 0) {
        conn_abort(c);
        return -ENOMEM;
    }
    ssize_t used = consume(c, c->in.data, c->in.len, now_ms);
    if (used < 0)
        return (int)used;
    cq_sbuf_consume(&c->in, (size_t)used);
    return 0;
}

void cq_mgr_conn_close(cq_mgr_conn_t *c)
{
    if (!c)
        return;
    if (c->srv && c->srv->conn == c)
        c->srv->conn = NULL;
    cq__mgr_waits_lost(c);
    for (uint32_t k = 0; k < c->ncmds; k++) {
        uint32_t at = (c->cmd_head + k) % MGR_CMDS_PENDING;
        c->m->commands[c->cmds[at].cmdid == CQ_MQMGR_CMD_OFFLINE][MGR_RES_LOST]++;
    }
    cq_list_remove(&c->node);
    cq_list_remove(&c->flush_node);
    cq_sbuf_done(&c->in);
    cq_sendq_done(&c->sendq);
    cq_free(c);
}

cq_sendq_t *cq_mgr_conn_sendq(cq_mgr_conn_t *c)
{
    return &c->sendq;
}

bool cq_mgr_conn_authed(const cq_mgr_conn_t *c)
{
    return c->authed;
}

uint64_t cq_mgr_conn_frames(const cq_mgr_conn_t *c)
{
    return c->frames;
}
