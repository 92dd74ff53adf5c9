/* mgrlink.c - a server's link to its managers: sync reports out, commands in. See cq_mgrlink.h.
 *
 * Why the bodies are built and read with jansson here rather than through cq_mq_msg_t: the
 * management messages (serverinfo, ext, content) are nested objects the seed codec's flat
 * message has no room for; the frame header is the seed's (cq_mq_parse, cq_mq_header_write).
 */
#include "cq_mgrlink.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_mqperm.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    MGR_REQ_SYNC = 1,
    MGR_RESP_SYNC = 2,
    MGR_REQ_COMMAND = 3,
    MGR_RESP_COMMAND = 4,
    MGR_ERROR = 20,
    CMD_PUBLISH_CONFIG = 1,
    CMD_OFFLINE = 2,
};

/* A topic as the manager's configuration wants it. */
typedef struct mgr_topic {
    char name[CQ_MQ_TOPIC_MAX + 1];
    bool online;
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
};

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
    l->next_askid = 1;
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

uint32_t cq_mgrlink_appid(const cq_mgrlink_t *l)
{
    return l->appid;
}

cq_mgrlink_t *cq_mgrlink_free(cq_mgrlink_t *l)
{
    if (!l)
        return NULL;
    cq_sbuf_done(&l->in);
    cq_sbuf_done(&l->out);
    cq_free(l->topics);
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

static int dump_cb(const char *p, size_t n, void *ud)
{
    return cq_sbuf_append(ud, p, n) < 0 ? -1 : 0;
}

/* Appends v as compact JSON to b. 0 or -ENOMEM. */
static int dump(const json_t *v, cq_sbuf_t *b)
{
    return json_dump_callback(v, dump_cb, b, JSON_COMPACT) < 0 ? -ENOMEM : 0;
}

/* Queues body (taken) as a frame of type. 0, -ENOMEM, or CQ_EBADLEN when over max. */
static int send_body(cq_mgrlink_t *l, uint8_t type, json_t *body, size_t max)
{
    size_t at = l->out.len;
    uint8_t hdr[CQ_MQ_HDR_LEN] = {0};
    int r = body ? cq_sbuf_append(&l->out, hdr, sizeof(hdr)) : -ENOMEM;
    if (r == 0)
        r = dump(body, &l->out);
    json_decref(body);
    size_t total = l->out.len - at;
    if (r == 0 && total > max)
        r = CQ_EBADLEN;
    if (r < 0) {
        l->out.len = at; /* nothing of it is sent */
        return r;
    }
    cq_mq_header_write(l->out.data + at, (uint32_t)total, type, l->next_msg_id++);
    return 0;
}

/* json_object_set_new that tells failure: counts into *bad. */
static void set(json_t *o, const char *k, json_t *v, int *bad)
{
    if (!v || json_object_set_new(o, k, v) < 0)
        (*bad)++;
}

static json_t *serverinfo(const cq_mgrlink_t *l, const cq_mgrlink_host_t *h)
{
    cq_writer_stats_t ws;
    const cq_mqport_t *p = &l->s->port;
    uint64_t pending = 0;
    if (p->ops->control && p->ops->control(p->ud, CQ_MQPORT_WRITER_STATS, &ws) == 0)
        pending = ws.pending;
    uint64_t packages = pending + (h->queued_bytes + 1023) / 1024;
    return json_pack("{s:I,s:I,s:I,s:I,s:I}", "threads", (json_int_t)h->threads, "packages",
                     (json_int_t)(packages > UINT32_MAX ? UINT32_MAX : packages), "cpu",
                     (json_int_t)h->cpu, "mem", (json_int_t)h->mem, "sockets",
                     (json_int_t)h->sockets);
}

static json_t *repl_obj(const cq_mgrlink_repl_t *r)
{
    return json_pack("{s:b,s:b,s:b,s:I,s:I,s:I}", "replica", r->replica, "io_running",
                     r->io_running, "sql_running", r->sql_running, "lag_seconds",
                     (json_int_t)r->lag_seconds, "lag_transactions",
                     (json_int_t)r->lag_transactions, "behind_ms", (json_int_t)r->behind_ms);
}

static json_t *relay_obj(const cq_mgrlink_relay_t *r)
{
    const uint64_t *c = r->channels;
    return json_pack(
        "{s:{s:I,s:I,s:I,s:I},s:{s:I,s:I,s:I,s:I,s:I},s:I,s:I,s:I}", "connections", "tcp",
        (json_int_t)r->tcp, "ws", (json_int_t)r->ws, "wss", (json_int_t)r->wss, "kcp",
        (json_int_t)r->kcp, "channels", "GLOBAL", (json_int_t)c[CQ_MGRLINK_CHAN_GLOBAL], "PRIVATE",
        (json_int_t)c[CQ_MGRLINK_CHAN_PRIVATE], "SUBWORLD", (json_int_t)c[CQ_MGRLINK_CHAN_SUBWORLD],
        "SPATIAL", (json_int_t)c[CQ_MGRLINK_CHAN_SPATIAL], "ENTITY",
        (json_int_t)c[CQ_MGRLINK_CHAN_ENTITY], "subscribers", (json_int_t)r->subscribers,
        "fanouts_total", (json_int_t)r->fanouts_total, "slow_consumer_closes_total",
        (json_int_t)r->slow_consumer_closes_total);
}

static json_t *topic_obj(const mq_topic_t *t)
{
    json_t *cons = json_array();
    size_t n = t->nconsumers < CQ_MGRLINK_CONSUMERS_MAX ? t->nconsumers : CQ_MGRLINK_CONSUMERS_MAX;
    for (size_t i = 0; cons && i < n; i++) {
        uint64_t off = t->consumers[i].offset;
        json_array_append_new(
            cons, json_pack("{s:s,s:I,s:I}", "id", t->consumers[i].id, "offset", (json_int_t)off,
                            "lag", (json_int_t)(t->last_offset > off ? t->last_offset - off : 0)));
    }
    return json_pack("{s:s,s:b,s:I,s:I,s:o*}", "name", t->name, "online", t->online, "last_offset",
                     (json_int_t)t->last_offset, "produced_total", (json_int_t)t->produced,
                     "consumers", cons);
}

/* chanq's extension of the report, with at most ntopics topics. */
static json_t *ext_obj(const cq_mgrlink_t *l, const cq_mgrlink_host_t *h, size_t ntopics)
{
    const cq_mqsrv_t *s = l->s;
    bool offline, draining;
    int bad = 0;
    cq_mqsrv_offline_state(s, &offline, &draining);
    json_t *e = json_object(), *topics = json_array();
    if (!e || !topics) {
        json_decref(e);
        json_decref(topics);
        return NULL;
    }
    set(e, "addr", json_string(l->addr), &bad);
    set(e, "shard", json_integer(s->shard), &bad);
    set(e, "master", json_boolean(cq__mqsrv_writable(s)), &bad);
    set(e, "offline", json_boolean(offline), &bad);
    set(e, "draining", json_boolean(draining), &bad);
    set(e, "config_version", json_integer((json_int_t)l->st.config_version), &bad);
    set(e, "produced_total", json_integer((json_int_t)s->st.produced), &bad);
    set(e, "consumed_total", json_integer((json_int_t)s->st.consumed), &bad);
    if (h->has_repl)
        set(e, "repl", repl_obj(&h->repl), &bad);
    for (size_t i = 0; i < s->ntopics && i < ntopics; i++)
        if (json_array_append_new(topics, topic_obj(s->topics[i])) < 0)
            bad++;
    set(e, "topics", topics, &bad);
    if (h->has_relay)
        set(e, "relay", relay_obj(&h->relay), &bad);
    if (bad) {
        json_decref(e);
        return NULL;
    }
    return e;
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
        json_t *b =
            json_pack("{s:I,s:I,s:I,s:s,s:o*,s:o*}", "askid", (json_int_t)l->next_askid, "group_id",
                      (json_int_t)l->group_id, "appid", (json_int_t)l->appid, "token", l->token,
                      "serverinfo", serverinfo(l, h), "ext", ext_obj(l, h, ntopics));
        if (b && (!json_object_get(b, "serverinfo") || !json_object_get(b, "ext"))) {
            json_decref(b);
            b = NULL;
        }
        r = send_body(l, MGR_REQ_SYNC, b, max);
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

static void answer(cq_mgrlink_t *l, json_int_t askid, json_int_t cmdid, int err, const char *why)
{
    json_t *b =
        json_pack("{s:I,s:I,s:i}", "askid", askid, "cmdid", cmdid, "err_code", cq_mq_errcode(err));
    if (b && err && why)
        json_object_set_new(b, "err_msg", json_string(why));
    if (err)
        l->st.command_errors++;
    if (send_body(l, MGR_RESP_COMMAND, b, CQ_MGRLINK_MAX) < 0)
        CQ_WARN("mgr", "cannot queue the answer to command %lld", (long long)askid);
}

static bool is_u53(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0 &&
           json_integer_value(v) <= CQ_MQ_MAX_U53;
}

/* content.topics into a new array (*ret owned). 0 or CQ_EFIELD with why. */
static int parse_topics(const json_t *topics, mgr_topic_t **ret, size_t *ret_n, char *why,
                        size_t wlen)
{
    size_t n = topics ? json_object_size(topics) : 0, i = 0;
    const char *k;
    json_t *v;
    if (topics && !json_is_object(topics)) {
        snprintf(why, wlen, "content.topics: not an object");
        return CQ_EFIELD;
    }
    mgr_topic_t *t = cq_calloc(n ? n : 1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    json_object_foreach((json_t *)topics, k, v)
    {
        json_t *on = json_object_get(v, "online"), *ret_s = json_object_get(v, "retention");
        const char *bad = !json_is_object(v)                   ? "not an object"
                          : strlen(k) > CQ_MQ_TOPIC_MAX || !*k ? "bad topic name"
                          : on && !json_is_boolean(on)         ? "online: not a boolean"
                          : ret_s && !is_u53(ret_s) ? "retention: not an integer 0..2^53-1"
                                                    : NULL;
        if (bad) {
            snprintf(why, wlen, "content.topics.%.64s: %s", k, bad);
            cq_free(t);
            return CQ_EFIELD;
        }
        snprintf(t[i].name, sizeof(t[i].name), "%s", k);
        t[i].online = on ? json_is_true(on) : true;
        t[i].retention_s = ret_s ? (uint64_t)json_integer_value(ret_s) : 0;
        i++;
    }
    *ret = t;
    *ret_n = n;
    return 0;
}

/* A master makes each managed flag so (through the operation layer, as an admin's set_online
 * would); retention is this engine's own and applies on every role. */
static void apply_topics(cq_mgrlink_t *l, uint64_t now_ms, bool retention)
{
    cq_mqsrv_t *s = l->s;
    bool writable = cq__mqsrv_writable(s);
    for (size_t i = 0; i < l->ntopics; i++) {
        mgr_topic_t *m = &l->topics[i];
        const mq_topic_t *t = cq__mqsrv_topic(s, m->name);
        if (!t)
            continue; /* a topic this shard does not have: the registry creates topics */
        if (retention)
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

static int publish_config(cq_mgrlink_t *l, const json_t *c, uint64_t now_ms, char *why, size_t wlen)
{
    json_t *ver = json_object_get(c, "version"), *mods = json_object_get(c, "modules");
    mgr_topic_t *topics = NULL;
    size_t ntopics = 0;
    cq_mqperm_t *perms = NULL;
    char err[256] = "";
    if (!is_u53(ver)) {
        snprintf(why, wlen, "content.version: required, an integer 0..2^53-1");
        return CQ_EFIELD;
    }
    if (!json_is_object(mods)) {
        snprintf(why, wlen, "content.modules: required, an object");
        return CQ_EFIELD;
    }
    cq_sbuf_t text;
    cq_sbuf_init(&text);
    int r = parse_topics(json_object_get(c, "topics"), &topics, &ntopics, why, wlen);
    if (r == 0)
        r = dump(mods, &text);
    if (r == 0 &&
        (r = cq_mqperm_load((const char *)text.data, text.len, &perms, err, sizeof(err))) < 0)
        snprintf(why, wlen, "content.modules: %s", err);
    cq_sbuf_done(&text);
    if (r < 0) {
        cq_free(topics);
        return r == -ENOMEM ? r : CQ_EFIELD;
    }
    cq_mqsrv_set_perms(l->s, perms); /* the SIGHUP path: swapped in at the next drain */
    cq_free(l->topics);
    l->topics = topics;
    l->ntopics = ntopics;
    l->st.config_version = (uint64_t)json_integer_value(ver);
    apply_topics(l, now_ms, true);
    CQ_INFO("mgr", "configuration version %llu applied (%zu topics managed)",
            (unsigned long long)l->st.config_version, ntopics);
    return 0;
}

static void on_command(cq_mgrlink_t *l, const json_t *b, uint64_t now_ms)
{
    json_t *askid = json_object_get(b, "askid"), *cmdid = json_object_get(b, "cmdid");
    json_t *content = json_object_get(b, "content"), *off;
    char why[320] = "";
    int r = 0;
    l->st.commands++;
    if (!json_is_integer(askid) || json_integer_value(askid) < 0 ||
        json_integer_value(askid) > UINT32_MAX) {
        CQ_WARN("mgr", "a command without a valid askid: ignored");
        l->st.command_errors++;
        return;
    }
    json_int_t cmd = json_is_integer(cmdid) ? json_integer_value(cmdid) : -1;
    if (!json_is_object(content)) {
        snprintf(why, sizeof(why), "content: required, an object");
        r = CQ_EFIELD;
    } else if (cmd == CMD_PUBLISH_CONFIG) {
        r = publish_config(l, content, now_ms, why, sizeof(why));
    } else if (cmd == CMD_OFFLINE && json_is_boolean(off = json_object_get(content, "offline"))) {
        cq_mqsrv_set_offline(l->s, json_is_true(off));
    } else if (cmd == CMD_OFFLINE) {
        snprintf(why, sizeof(why), "content.offline: required, a boolean");
        r = CQ_EFIELD;
    } else {
        snprintf(why, sizeof(why), "cmdid: unknown (1 publish_config, 2 offline)");
        r = CQ_EFIELD;
    }
    if (r < 0)
        CQ_WARN("mgr", "command %lld refused: %s", (long long)cmd, why[0] ? why : cq_strerror(r));
    answer(l, json_integer_value(askid), cmd < 0 ? 0 : cmd, r, why[0] ? why : cq_strerror(r));
}

/* The manager's answer to a sync: 0, or CQ_EAUTH when it refused us (the edge closes and tries
 * again after its back-off). */
static int on_sync_answer(cq_mgrlink_t *l, const json_t *b)
{
    json_t *code = json_object_get(b, "err_code"), *ver = json_object_get(b, "config_version");
    if (is_u53(ver))
        l->st.mgr_version = (uint64_t)json_integer_value(ver);
    if (!json_is_integer(code) || json_integer_value(code) == 0)
        return 0;
    const char *msg = json_string_value(json_object_get(b, "err_msg"));
    l->st.sync_errors++;
    CQ_WARN("mgr", "the manager refused our report: err_code %lld (%s)%s%s",
            (long long)json_integer_value(code), cq_mq_errcode_name((int)json_integer_value(code)),
            msg ? ": " : "", msg ? msg : "");
    return json_integer_value(code) == CQ_MQ_ERR_UNAUTHENTICATED ? CQ_EAUTH : 0;
}

static int on_frame(cq_mgrlink_t *l, const cq_mq_frame_t *f, uint64_t now_ms)
{
    json_error_t je;
    json_t *b = json_loadb((const char *)f->body, f->body_len, JSON_REJECT_DUPLICATES, &je);
    int r = 0;
    if (!json_is_object(b)) {
        CQ_WARN("mgr", "a frame of type %u that is not a JSON object: closing", f->type);
        json_decref(b);
        return CQ_EJSON;
    }
    if (f->type == MGR_REQ_COMMAND) {
        on_command(l, b, now_ms);
    } else if (f->type == MGR_RESP_SYNC) {
        r = on_sync_answer(l, b);
    } else if (f->type == MGR_ERROR) {
        const char *msg = json_string_value(json_object_get(b, "err_msg"));
        CQ_WARN("mgr", "the manager answered an error frame: %s", msg ? msg : "(no err_msg)");
        r = CQ_EHEADER;
    } else {
        CQ_WARN("mgr", "a frame of unknown type %u from the manager: ignored", f->type);
    }
    json_decref(b);
    return r;
}

int cq_mgrlink_input(cq_mgrlink_t *l, const uint8_t *p, size_t n, uint64_t now_ms)
{
    if (cq_sbuf_append(&l->in, p, n) < 0)
        return -ENOMEM;
    size_t at = 0;
    int r = 0;
    while (r == 0 && at < l->in.len) {
        cq_mq_frame_t f;
        ssize_t k = cq_mq_parse(l->in.data + at, l->in.len - at, CQ_MGRLINK_MAX, &f);
        if (k <= 0) {
            r = (int)k;
            break;
        }
        at += (size_t)k;
        r = on_frame(l, &f, now_ms);
    }
    cq_sbuf_consume(&l->in, at);
    if (r < 0 && r != CQ_EAUTH)
        CQ_WARN("mgr", "closing the connection to the manager: %s", cq_strerror(r));
    return r;
}

void cq_mgrlink_tick(cq_mgrlink_t *l, uint64_t now_ms)
{
    apply_topics(l, now_ms, false);
}
