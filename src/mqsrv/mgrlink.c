/* mgrlink.c - a server's link to its managers: sync reports out, commands in. See cq_mgrlink.h.
 * The messages go through the management port's codec (src/mq cq_mqmgr.h), the same one the
 * manager decodes them with. */
#include "cq_mgrlink.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_mqmgr.h"
#include "cq_mqperm.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A topic as the manager's configuration wants it. */
typedef struct mgr_topic {
    char name[CQ_MQ_TOPIC_MAX + 1];
    bool online;
    bool retention_set; /* the manager set one; else the server keeps its own */
    uint64_t retention_s;
    uint64_t tried_ms; /* monotonic ms of the last set_online submitted for it, 0: none */
} mgr_topic_t;

struct cq_mgrlink {
    cq_mqsrv_t *s;
    uint32_t group_id, appid, report_ms;
    char token[CQ_MQ_TOKEN_MAX + 1];
    char addr[80];
    bool connected, first; /* first: the next sync is the connection's first */
    uint64_t last_sync_ms;
    uint32_t next_askid;
    uint16_t next_msg_id;
    cq_sbuf_t in, out;
    mgr_topic_t *topics; /* owned: the last publish_config's topics */
    size_t ntopics;
    cq_mgrlink_stats_t st;
    atomic_bool perms_managed; /* a manager's module table is in force (read by SIGHUP) */
    int (*apply_bindings)(void *ud, const char *json, size_t len, char *err, size_t errlen);
    void *bindings_ud;
    char *bindings; /* owned: the bindings document in force (the last one applied), or NULL */
    size_t bindings_len;
    bool no_shard; /* opts.no_shard: creates no topic */
};

static void invalidated(void *ud, uint64_t tag, int err, const char *why);
static void looked_up(void *ud, uint64_t tag, const cq_writer_req_t *req, int err);

cq_mgrlink_t *cq_mgrlink_new(cq_mqsrv_t *s, const cq_mgrlink_opts_t *o)
{
    cq_mgrlink_t *l = cq_calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->s = s;
    l->group_id = o->group_id;
    l->appid = o->appid;
    l->report_ms = o->report_ms ? o->report_ms : 2000;
    snprintf(l->token, sizeof(l->token), "%s", o->token ? o->token : "");
    snprintf(l->addr, sizeof(l->addr), "%s", o->addr ? o->addr : "");
    l->apply_bindings = o->apply_bindings;
    l->bindings_ud = o->bindings_ud;
    l->no_shard = o->no_shard;
    l->next_askid = 1;
    s->mgr_invalidated = invalidated;
    s->mgr_message = looked_up;
    s->mgr_ud = l;
    cq_sbuf_init(&l->in);
    cq_sbuf_init(&l->out);
    return l;
}

void cq_mgrlink_bound(cq_mgrlink_t *l, const char *bound)
{
    const char *colon = strrchr(bound, ':');
    if (!l->addr[0])
        snprintf(l->addr, sizeof(l->addr), "%s", bound);
    if (!l->appid && colon)
        l->appid = l->s->shard * 65536u + (uint32_t)strtoul(colon + 1, NULL, 10);
}

bool cq_mgrlink_perms_managed(cq_mgrlink_t *l)
{
    return l && atomic_load(&l->perms_managed);
}

uint32_t cq_mgrlink_appid(const cq_mgrlink_t *l)
{
    return l->appid;
}

cq_mgrlink_t *cq_mgrlink_free(cq_mgrlink_t *l)
{
    if (!l)
        return NULL;
    if (l->s->mgr_ud == l) /* the engine outlives the link: a late completion answers no one */
        l->s->mgr_invalidated = NULL, l->s->mgr_message = NULL;
    cq_sbuf_done(&l->in);
    cq_sbuf_done(&l->out);
    cq_free(l->topics);
    cq_free(l->bindings);
    cq_free(l);
    return NULL;
}

void cq_mgrlink_connected(cq_mgrlink_t *l)
{
    l->connected = true;
    l->first = true;
    l->last_sync_ms = 0;
    l->in.len = 0;
    l->out.len = 0;
}

void cq_mgrlink_disconnected(cq_mgrlink_t *l)
{
    l->connected = false;
    l->in.len = 0;
    l->out.len = 0;
}

cq_sbuf_t *cq_mgrlink_output(cq_mgrlink_t *l)
{
    return &l->out;
}

void cq_mgrlink_stats(const cq_mgrlink_t *l, cq_mgrlink_stats_t *ret)
{
    *ret = l->st;
}

/* ---- frames out ------------------------------------------------------------------------------ */

/* Queues m (borrowed) encoded. 0, -ENOMEM, CQ_EFIELD, or CQ_EBADLEN when over max bytes. */
static int send_msg(cq_mgrlink_t *l, cq_mqmgr_msg_t *m, size_t max)
{
    m->msg_id = l->next_msg_id;
    int r = cq_mqmgr_encode_to(m, max, &l->out);
    if (r == 0)
        l->next_msg_id++;
    return r;
}

static void serverinfo(const cq_mgrlink_t *l, const cq_mgrlink_host_t *h, cq_mqmgr_info_t *i)
{
    cq_writer_stats_t ws;
    const cq_mqport_t *p = &l->s->port;
    uint64_t pending = 0;
    if (p->ops->control && p->ops->control(p->ud, CQ_MQPORT_WRITER_STATS, &ws) == 0)
        pending = ws.pending;
    /* packages: units waiting for the store thread plus the KiB queued for sending */
    uint64_t packages = pending + (h->queued_bytes + 1023) / 1024;
    *i = (cq_mqmgr_info_t){.threads = h->threads,
                           .packages = packages > UINT32_MAX ? UINT32_MAX : (uint32_t)packages,
                           .cpu = h->cpu,
                           .mem = h->mem,
                           .sockets = h->sockets};
}

static int64_t i53(uint64_t v)
{
    return v > (uint64_t)CQ_MQ_MAX_U53 ? CQ_MQ_MAX_U53 : (int64_t)v;
}

static void ext_repl(cq_mqmgr_ext_t *x, const cq_mgrlink_repl_t *r)
{
    x->has |= CQ_MQMGR_X_REPL;
    x->repl = (cq_mqmgr_repl_t){.replica = r->replica,
                                .io_running = r->io_running,
                                .sql_running = r->sql_running,
                                .lag_seconds = r->lag_seconds < -1 ? -1 : r->lag_seconds,
                                .lag_transactions = i53(r->lag_transactions),
                                .behind_ms = i53(r->behind_ms)};
}

static void ext_relay(cq_mqmgr_ext_t *x, const cq_mgrlink_relay_t *r)
{
    x->has |= CQ_MQMGR_X_RELAY;
    cq_mqmgr_relay_t *o = &x->relay;
    o->connections[0] = i53(r->tcp);
    o->connections[1] = i53(r->ws);
    o->connections[2] = i53(r->wss);
    o->connections[3] = i53(r->kcp);
    for (int t = 0; t < CQ_MGRLINK_CHAN_N && t < CQ_MQMGR_NCHANTYPES; t++)
        o->channels[t] = i53(r->channels[t]);
    o->subscribers = i53(r->subscribers);
    o->fanouts_total = i53(r->fanouts_total);
    o->slow_consumer_closes_total = i53(r->slow_consumer_closes_total);
}

/* A relay node's identity and links (the codec checks what it takes). 0 or -ENOMEM. */
static int ext_relay_node(cq_mqmgr_msg_t *m, const cq_mgrlink_relay_t *r)
{
    cq_mqmgr_relay_t *o = &m->ext.relay;
    if (!r->node)
        return 0;
    o->node = r->node;
    o->global_home = r->global_home;
    o->members = r->members;
    snprintf(o->cluster, sizeof(o->cluster), "%s", r->cluster ? r->cluster : "");
    for (int t = 0; t < CQ_MGRLINK_TRANSPORTS && t < CQ_MQMGR_NTRANSPORTS; t++)
        snprintf(o->addrs[t], sizeof(o->addrs[t]), "%s", r->addrs[t] ? r->addrs[t] : "");
    for (size_t i = 0; i < r->nlinks; i++) {
        const cq_mgrlink_link_t *l = &r->links[i];
        cq_mqmgr_link_t k = {.peer = l->peer,
                             .up = l->up,
                             .packets_in = i53(l->packets_in),
                             .packets_out = i53(l->packets_out),
                             .bytes_out = i53(l->bytes_out),
                             .gaps = i53(l->gaps),
                             .resets = i53(l->resets),
                             .lost = i53(l->lost)};
        int rc = cq_mqmgr_msg_add_link(m, &k);
        if (rc == -ENOMEM)
            return rc; /* a peer the codec refuses (over its bounds) is left out */
    }
    return 0;
}

/* The engine's first ntopics topics and their consumers. 0 or -ENOMEM. */
static int ext_topics(cq_mqmgr_msg_t *m, const cq_mqsrv_t *s, size_t ntopics)
{
    m->ext.has |= CQ_MQMGR_X_TOPICS;
    for (size_t i = 0; i < s->ntopics && i < ntopics; i++) {
        const mq_topic_t *t = s->topics[i];
        int r =
            cq_mqmgr_msg_add_topic(m, t->name, t->online, i53(t->last_offset), i53(t->produced));
        if (r == -ENOMEM)
            return r;
        if (r < 0)
            continue; /* a name the codec refuses is not reported */
        size_t n = 0;
        for (size_t j = 0; j < t->nconsumers && n < CQ_MGRLINK_CONSUMERS_MAX; j++) {
            uint64_t off = t->consumers[j].offset;
            r = cq_mqmgr_msg_add_consumer(m, t->consumers[j].id, i53(off),
                                          i53(t->last_offset > off ? t->last_offset - off : 0));
            if (r == -ENOMEM)
                return r;
            n += r == 0;
        }
    }
    return 0;
}

/* A sync of h's figures and the engine's with at most ntopics topics, owned in *ret. */
static int sync_msg(const cq_mgrlink_t *l, const cq_mgrlink_host_t *h, size_t ntopics,
                    cq_mqmgr_msg_t **ret)
{
    const cq_mqsrv_t *s = l->s;
    cq_mqmgr_msg_t *m = cq_mqmgr_msg_new(CQ_MQMGR_SYNC, 0);
    if (!m)
        return -ENOMEM;
    m->askid = l->next_askid;
    m->has_askid = true;
    m->group_id = l->group_id;
    m->appid = l->appid;
    int r = cq_mqmgr_msg_set_str(m, &m->token, l->token);
    serverinfo(l, h, &m->info);
    cq_mqmgr_ext_t *x = &m->ext;
    x->has |= CQ_MQMGR_X_EXT | CQ_MQMGR_X_SHARD | CQ_MQMGR_X_MASTER | CQ_MQMGR_X_OFFLINE |
              CQ_MQMGR_X_DRAINING | CQ_MQMGR_X_CONFIG_VERSION | CQ_MQMGR_X_PRODUCED |
              CQ_MQMGR_X_CONSUMED;
    if (l->addr[0]) {
        x->has |= CQ_MQMGR_X_ADDR;
        snprintf(x->addr, sizeof(x->addr), "%s", l->addr);
    }
    x->shard = s->shard;
    x->master = cq__mqsrv_writable(s);
    cq_mqsrv_offline_state(s, &x->offline, &x->draining);
    x->config_version = i53(l->st.config_version);
    x->produced_total = i53(s->st.produced);
    x->consumed_total = i53(s->st.consumed);
    if (h->has_repl)
        ext_repl(x, &h->repl);
    if (h->has_relay)
        ext_relay(x, &h->relay);
    if (r == 0 && h->has_relay)
        r = ext_relay_node(m, &h->relay);
    if (r == 0)
        r = ext_topics(m, s, ntopics);
    if (r < 0) {
        cq_mqmgr_msg_free(m);
        return r;
    }
    *ret = m;
    return 0;
}

bool cq_mgrlink_sync_due(const cq_mgrlink_t *l, uint64_t now_ms)
{
    return l->connected &&
           (l->first || !l->last_sync_ms || now_ms - l->last_sync_ms >= l->report_ms);
}

int cq_mgrlink_sync(cq_mgrlink_t *l, const cq_mgrlink_host_t *h, uint64_t now_ms)
{
    size_t max = l->first ? CQ_MGRLINK_FIRST_MAX : CQ_MGRLINK_MAX;
    size_t ntopics = CQ_MGRLINK_TOPICS_MAX;
    int r;
    for (;;) {
        cq_mqmgr_msg_t *m = NULL;
        r = sync_msg(l, h, ntopics, &m);
        if (r == 0)
            r = send_msg(l, m, max);
        cq_mqmgr_msg_free(m);
        if (r != CQ_EBADLEN || ntopics == 0)
            break;
        ntopics /= 2; /* too many topics or consumers for one frame: report fewer */
    }
    if (r < 0)
        return r;
    l->next_askid = l->next_askid == UINT32_MAX ? 1 : l->next_askid + 1;
    l->first = false;
    l->last_sync_ms = now_ms ? now_ms : 1;
    l->st.syncs++;
    return 0;
}

/* ---- commands ---------------------------------------------------------------------------- */

static void answer(cq_mgrlink_t *l, uint32_t askid, uint32_t cmdid, int err, const char *why)
{
    cq_mqmgr_msg_t *m = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND_RESP, 0);
    int r = m ? 0 : -ENOMEM;
    if (m) {
        m->askid = askid;
        m->has_askid = true;
        m->cmdid = cmdid;
        m->err_code = (uint32_t)cq_mq_errcode(err);
    }
    if (r == 0 && err && why)
        r = cq_mqmgr_msg_set_str(m, &m->err_msg, why);
    if (r == 0)
        r = send_msg(l, m, CQ_MGRLINK_MAX);
    cq_mqmgr_msg_free(m);
    if (err)
        l->st.command_errors++;
    if (r < 0)
        CQ_WARN("mgr", "cannot queue the answer to command %u: %s", askid, cq_strerror(r));
}

/* A master creates a managed topic it has not got (an operator created it from the console;
 * in a cluster its registry takes it to the other shards too), then makes each managed flag so
 * (through the operation layer, as an admin's set_online would); retention is this engine's own
 * and applies on every role, also to a managed topic that appears after the configuration
 * came. */
static void create_topic(cq_mgrlink_t *l, mgr_topic_t *m, uint64_t now_ms)
{
    m->tried_ms = now_ms ? now_ms : 1;
    int days = !m->retention_set                  ? -1
               : m->retention_s / 86400 > INT_MAX ? INT_MAX
                                                  : (int)(m->retention_s / 86400);
    CQ_INFO("mgr", "topic %s: created, as the manager's configuration has it", m->name);
    int r = cq__mqop_create_own(l->s, m->name, days);
    if (r < 0)
        CQ_WARN("mgr", "topic %s: cannot create: %s", m->name, cq_strerror(r));
}

static void apply_topics(cq_mgrlink_t *l, uint64_t now_ms)
{
    cq_mqsrv_t *s = l->s;
    bool writable = cq__mqsrv_writable(s);
    for (size_t i = 0; i < l->ntopics; i++) {
        mgr_topic_t *m = &l->topics[i];
        const mq_topic_t *t = cq__mqsrv_topic(s, m->name);
        if (!t) {
            if (writable && !l->no_shard &&
                (!m->tried_ms || now_ms - m->tried_ms >= CQ_MGRLINK_RETRY_MS))
                create_topic(l, m, now_ms);
            continue;
        }
        if (m->retention_set && (!t->retention_managed || t->retention_s != m->retention_s))
            cq_mqsrv_topic_set_retention(s, m->name, m->retention_s);
        if (!writable || t->online == m->online)
            continue;
        if (m->tried_ms && now_ms - m->tried_ms < CQ_MGRLINK_RETRY_MS)
            continue; /* in flight, or failed a moment ago */
        m->tried_ms = now_ms ? now_ms : 1;
        int r = cq_mqsrv_topic_set_online(s, m->name, m->online);
        if (r < 0)
            CQ_WARN("mgr", "topic %s: cannot set %s: %s", m->name, m->online ? "online" : "offline",
                    cq_strerror(r));
    }
}

/* The manager's bindings, unless they are the ones in force: every change the manager pushes
 * carries them, and applying them again would empty the bridge's dedup window and end the
 * resumes in progress for nothing. 0, or CQ_EFIELD / -ENOMEM with why (nothing applied). */
static int apply_bindings(cq_mgrlink_t *l, const cq_mqmgr_config_t *c, char *why, size_t wlen)
{
    if (!l->apply_bindings || (l->bindings && l->bindings_len == c->bindings_len &&
                               memcmp(l->bindings, c->bindings, c->bindings_len) == 0))
        return 0; /* a server without a bridge is no one's to bind (a relay node) */
    char *copy = cq_strndup(c->bindings, c->bindings_len);
    if (!copy) {
        snprintf(why, wlen, "content.bindings: out of memory");
        return -ENOMEM;
    }
    char err[256] = "";
    int r = l->apply_bindings(l->bindings_ud, c->bindings, c->bindings_len, err, sizeof(err));
    if (r < 0) {
        snprintf(why, wlen, "content.bindings: %s", err);
        cq_free(copy);
        return r == -ENOMEM ? r : CQ_EFIELD;
    }
    cq_free(l->bindings);
    l->bindings = copy;
    l->bindings_len = c->bindings_len;
    return 0;
}

/* publish_config: the permissions are loaded, then the bindings applied (either refused changes
 * nothing), then the table swapped in and the topics taken. 0, or CQ_EFIELD / -ENOMEM with
 * why. */
static int publish_config(cq_mgrlink_t *l, const cq_mqmgr_config_t *c, uint64_t now_ms, char *why,
                          size_t wlen)
{
    cq_mqperm_t *perms = NULL;
    char err[256] = "";
    mgr_topic_t *topics = cq_calloc(c->ntopics ? c->ntopics : 1, sizeof(*topics));
    if (!topics)
        return -ENOMEM;
    /* No modules: the manager has none yet and leaves this server's own table in force. */
    int r = c->modules ? cq_mqperm_load(c->modules, c->modules_len, &perms, err, sizeof(err)) : 0;
    if (r < 0) {
        snprintf(why, wlen, "content.modules: %s", err);
        cq_free(topics);
        return r == -ENOMEM ? r : CQ_EFIELD;
    }
    /* No bindings: the manager never saved any and leaves this server's --bridge-file in force. */
    r = c->bindings ? apply_bindings(l, c, why, wlen) : 0;
    if (r < 0) {
        cq_mqperm_free(perms);
        cq_free(topics);
        return r;
    }
    for (size_t i = 0; i < c->ntopics; i++) {
        snprintf(topics[i].name, sizeof(topics[i].name), "%s", c->topics[i].name);
        topics[i].online = c->topics[i].online;
        topics[i].retention_set = c->topics[i].retention != CQ_MQMGR_RETENTION_UNSET;
        topics[i].retention_s = c->topics[i].retention > 0 ? (uint64_t)c->topics[i].retention : 0;
    }
    if (c->modules) {
        cq_mqsrv_set_perms(l->s, perms); /* the SIGHUP path: swapped in at the next drain */
        atomic_store(&l->perms_managed, true);
    }
    cq_free(l->topics);
    l->topics = topics;
    l->ntopics = c->ntopics;
    l->st.config_version = c->version > 0 ? (uint64_t)c->version : 0;
    apply_topics(l, now_ms);
    CQ_INFO("mgr", "configuration version %llu applied (%zu topics managed)",
            (unsigned long long)l->st.config_version, c->ntopics);
    return 0;
}

/* The store's answer to command 3: the manager gets it now (on the connection of the moment:
 * a manager that reconnected in between finds no command of that askid and drops it). */
static void invalidated(void *ud, uint64_t tag, int err, const char *why)
{
    cq_mgrlink_t *l = ud;
    if (!l->connected)
        return; /* the manager's command went with its connection */
    if (err)
        CQ_WARN("mgr", "command %u (invalidate) failed: %s", (unsigned)tag, why);
    answer(l, (uint32_t)tag, CQ_MQMGR_CMD_INVALIDATE, err, why);
}

/* Command 3: answered when the store has done it (invalidated), or now when refused. */
static int invalidate(cq_mgrlink_t *l, const cq_mqmgr_msg_t *m, char *why, size_t wlen)
{
    const mq_topic_t *t = cq__mqsrv_topic(l->s, m->topic);
    const char *w = NULL;
    int r = t ? cq__mqop_invalidate(l->s, NULL, t, m->offset, m->askid, &w) : CQ_ENOTOPIC;
    if (r == CQ_ENOTOPIC)
        snprintf(why, wlen, "topic %s: unknown on this server", m->topic);
    else if (r < 0)
        snprintf(why, wlen, "%s", w ? w : cq_strerror(r));
    else
        CQ_INFO("mgr", "command %u: invalidating %s offset %llu", m->askid, m->topic,
                (unsigned long long)m->offset);
    return r;
}

/* The store's answer to command 4. */
static void looked_up(void *ud, uint64_t tag, const cq_writer_req_t *req, int err)
{
    cq_mgrlink_t *l = ud;
    char why[CQ_MQ_ERR_MSG_MAX] = "";
    if (!l->connected)
        return;
    if (err == 0 && !req->n_recs)
        err = CQ_ENOMSG;
    if (err == CQ_ENOMSG && !req->offset)
        snprintf(why, sizeof(why), "topic %s: no message of producer %llu seq %llu", req->topic,
                 (unsigned long long)req->key_producer, (unsigned long long)req->key_seq);
    else if (err == CQ_ENOMSG)
        snprintf(why, sizeof(why), "topic %s: no message at offset %llu", req->topic,
                 (unsigned long long)req->offset);
    else if (err)
        cq__mqop_err_text(req, err, why, sizeof(why));
    cq_mqmgr_msg_t *m = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND_RESP, 0);
    int r = m ? 0 : -ENOMEM;
    if (m) {
        m->askid = (uint32_t)tag;
        m->has_askid = true;
        m->cmdid = CQ_MQMGR_CMD_MESSAGE;
        m->err_code = (uint32_t)cq_mq_errcode(err);
    }
    if (r == 0 && err)
        r = cq_mqmgr_msg_set_str(m, &m->err_msg, why);
    if (r == 0 && !err) {
        const cq_store_rec_t *c = &req->recs[0];
        const cq_mqmgr_found_t f = {c->offset, req->state, c->create_ms, c->producer_id,
                                    c->seq,    c->content, c->len,       CQ_MGRLINK_CONTENT_CAP};
        r = cq_mqmgr_msg_set_found(m, &f);
    }
    if (r == 0)
        r = send_msg(l, m, CQ_MGRLINK_MAX);
    cq_mqmgr_msg_free(m);
    if (r < 0)
        CQ_WARN("mgr", "cannot queue the answer to command %u: %s", (unsigned)tag, cq_strerror(r));
}

/* Command 4: answered when the store has read the row, or now when refused. */
static int message(cq_mgrlink_t *l, const cq_mqmgr_msg_t *m, char *why, size_t wlen)
{
    const mq_topic_t *t = cq__mqsrv_topic(l->s, m->topic);
    const char *w = NULL;
    int r = !t          ? CQ_ENOTOPIC
            : m->offset ? cq__mqop_read_one(l->s, t, m->offset, m->askid, &w)
                        : cq__mqop_read_key(l->s, t, m->key_producer, m->key_seq, m->askid, &w);
    if (r == CQ_ENOTOPIC)
        snprintf(why, wlen, "topic %s: unknown on this server", m->topic);
    else if (r < 0)
        snprintf(why, wlen, "%s", w ? w : cq_strerror(r));
    return r;
}

static void on_command(cq_mgrlink_t *l, const cq_mqmgr_msg_t *m, uint64_t now_ms)
{
    char why[320] = "";
    int r = 0;
    l->st.commands++;
    if (m->cmdid == CQ_MQMGR_CMD_INVALIDATE || m->cmdid == CQ_MQMGR_CMD_MESSAGE) {
        r = m->cmdid == CQ_MQMGR_CMD_INVALIDATE ? invalidate(l, m, why, sizeof(why))
                                                : message(l, m, why, sizeof(why));
        if (r < 0)
            answer(l, m->askid, m->cmdid, r, why);
        return;
    }
    if (m->cmdid == CQ_MQMGR_CMD_PUBLISH_CONFIG)
        r = publish_config(l, &m->config, now_ms, why, sizeof(why));
    else if (m->cmdid == CQ_MQMGR_CMD_OFFLINE)
        cq_mqsrv_set_offline(l->s, m->offline);
    if (r < 0)
        CQ_WARN("mgr", "command %u refused: %s", m->cmdid, why[0] ? why : cq_strerror(r));
    answer(l, m->askid, m->cmdid, r, why[0] ? why : cq_strerror(r));
}

/* The manager's answer to a sync: 0, or CQ_EAUTH when it refused our token. */
static int on_sync_answer(cq_mgrlink_t *l, const cq_mqmgr_msg_t *m)
{
    if (m->config_version > 0)
        l->st.mgr_version = (uint64_t)m->config_version;
    if (m->err_code == 0)
        return 0;
    l->st.sync_errors++;
    CQ_WARN("mgr", "the manager refused our report: err_code %u (%s)%s%s", m->err_code,
            cq_mq_errcode_name((int)m->err_code), m->err_msg ? ": " : "",
            m->err_msg ? m->err_msg : "");
    return m->err_code == CQ_MQ_ERR_UNAUTHENTICATED ? CQ_EAUTH : 0;
}

/* A command that did not decode is answered as the codec says (err 5 naming the field, the
 * askid and cmdid echoed); anything else broken closes. */
static int on_bad_frame(cq_mgrlink_t *l, const cq_mq_frame_t *f, int err, const char *why)
{
    CQ_WARN("mgr", "a frame of type %u from the manager does not decode: %s", f->type, why);
    if (f->type != CQ_MQMGR_REQ_COMMAND || err == CQ_EJSON || err == -ENOMEM)
        return err;
    cq_buf_t *b = NULL;
    l->st.commands++;
    l->st.command_errors++;
    int r = cq_mqmgr_encode_error_buf(f, err, why, 0, &b);
    if (r == 0)
        r = cq_sbuf_append(&l->out, b->data, b->len);
    cq_buf_unref(b);
    return r;
}

static int on_frame(cq_mgrlink_t *l, const cq_mq_frame_t *f, uint64_t now_ms)
{
    cq_mqmgr_msg_t *m = NULL;
    char err[CQ_MQ_ERR_MSG_MAX];
    int r = cq_mqmgr_decode(f, 0, &m, err, sizeof(err));
    if (r < 0)
        return on_bad_frame(l, f, r, err);
    if (m->kind == CQ_MQMGR_COMMAND) {
        on_command(l, m, now_ms);
    } else if (m->kind == CQ_MQMGR_SYNC_RESP) {
        r = on_sync_answer(l, m);
    } else if (m->kind == CQ_MQMGR_ERROR_FRAME) {
        CQ_WARN("mgr", "the manager answered an error frame: err_code %u %s", m->err_code,
                m->err_msg ? m->err_msg : "");
        r = m->err_code == CQ_MQ_ERR_UNAUTHENTICATED ? CQ_EAUTH : CQ_EHEADER;
    } else {
        CQ_WARN("mgr", "a %s frame from the manager: ignored", cq_mqmgr_kind_name(m->kind));
    }
    cq_mqmgr_msg_free(m);
    return r;
}

typedef struct feed_ctx {
    cq_mgrlink_t *l;
    uint64_t now_ms;
} feed_ctx_t;

static int feed_frame(void *ud, const cq_mq_frame_t *f)
{
    feed_ctx_t *x = ud;
    return on_frame(x->l, f, x->now_ms);
}

int cq_mgrlink_input(cq_mgrlink_t *l, const uint8_t *p, size_t n, uint64_t now_ms)
{
    feed_ctx_t x = {l, now_ms};
    int r = cq_mq_feed(&l->in, p, n, CQ_MQMGR_MAX_TOTAL, feed_frame, &x);
    if (r < 0 && r != CQ_EAUTH)
        CQ_WARN("mgr", "closing the connection to the manager: %s", cq_strerror(r));
    return r;
}

void cq_mgrlink_tick(cq_mgrlink_t *l, uint64_t now_ms)
{
    apply_topics(l, now_ms);
}
