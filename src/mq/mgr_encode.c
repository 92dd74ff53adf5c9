/* mgr_encode.c - cq_mqmgr_msg_t -> frame through jansson (fields in a fixed order), the
 * message builders and the answer to a body that did not decode (cq_mqmgr.h). */
#include "cq_mqmgr.h"
#include "mq_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <string.h>

const char *const cq_mqmgr_transport_names[CQ_MQMGR_NTRANSPORTS] = {"tcp", "ws", "wss", "kcp"};
const char *const cq_mqmgr_chantype_names[CQ_MQMGR_NCHANTYPES] = {"GLOBAL", "PRIVATE", "SUBWORLD",
                                                                  "SPATIAL", "ENTITY"};

/* ---- kinds and the message model ------------------------------------------------------- */

uint8_t cq_mqmgr_kind_type(cq_mqmgr_kind_t kind)
{
    static const uint8_t types[] = {0, 1, 1, 2, 2, 3, 4, 20};
    return kind >= CQ_MQMGR_SVRCONFIG && kind <= CQ_MQMGR_ERROR_FRAME ? types[kind] : 0;
}

const char *cq_mqmgr_kind_name(cq_mqmgr_kind_t kind)
{
    static const char *const names[] = {"?",
                                        "svrconfig",
                                        "sync_serverinfo",
                                        "svrconfig_resp",
                                        "sync_serverinfo_resp",
                                        "command",
                                        "command_resp",
                                        "error"};
    return kind >= CQ_MQMGR_SVRCONFIG && kind <= CQ_MQMGR_ERROR_FRAME ? names[kind] : "?";
}

cq_mqmgr_msg_t *cq_mqmgr_msg_new(cq_mqmgr_kind_t kind, uint16_t msg_id)
{
    cq_mqmgr_msg_t *m = cq_calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->kind = kind;
    m->msg_id = msg_id;
    m->ext.repl.lag_seconds = -1;
    m->has_askid = kind != CQ_MQMGR_ERROR_FRAME;
    return m;
}

cq_mqmgr_msg_t *cq_mqmgr_msg_free(cq_mqmgr_msg_t *m)
{
    if (!m)
        return NULL;
    for (size_t i = 0; i < m->ext.ntopics; i++)
        cq_free(m->ext.topics[i].consumers);
    cq_free(m->ext.topics);
    cq_free(m->ext.relay.links);
    cq_free(m->servers);
    cq_free(m->relay_nodes);
    cq_free(m->config.modules);
    cq_free(m->config.topics);
    cq_free(m->config.bindings);
    cq_free(m->token);
    cq_free(m->err_msg);
    cq_free(m->message);
    cq_free(m);
    return NULL;
}

int cq_mqmgr_msg_set_str(cq_mqmgr_msg_t *m, char **which, const char *s)
{
    (void)m;
    char *copy = NULL;
    if (s && !cq__mq_utf8_valid(s, strlen(s)))
        return CQ_EFIELD;
    if (s && !(copy = cq_strdup(s)))
        return -ENOMEM;
    cq_free(*which);
    *which = copy;
    return 0;
}

/* Makes room for element n of an array of size-sz elements whose capacity is 0 for n == 0 and
 * else the larger of 4 and the next power of two of n (what these builders allocate). */
static int grow(void **arr, size_t n, size_t sz)
{
    if (n != 0 && (n < 4 || (n & (n - 1)) != 0))
        return 0;
    void *p = cq_realloc(*arr, (n ? n * 2 : 4) * sz);
    if (!p)
        return -ENOMEM;
    *arr = p;
    return 0;
}

static bool host_ok(const char *s)
{
    size_t len = s ? strlen(s) : 0;
    return s && len <= CQ_MQMGR_HOST_MAX && cq__mq_utf8_valid(s, len);
}

int cq_mqmgr_msg_add_server(cq_mqmgr_msg_t *m, const char *ip, uint16_t port, uint32_t shard)
{
    if (!host_ok(ip) || port == 0)
        return CQ_EFIELD;
    if (m->nservers >= CQ_MQMGR_SERVERS_MAX)
        return CQ_ELIMIT;
    if (grow((void **)&m->servers, m->nservers, sizeof(*m->servers)) < 0)
        return -ENOMEM;
    cq_mqmgr_server_t *s = &m->servers[m->nservers++];
    memset(s, 0, sizeof(*s));
    memcpy(s->ip, ip, strlen(ip) + 1);
    s->port = port;
    s->shard = shard;
    return 0;
}

int cq_mqmgr_msg_add_topic(cq_mqmgr_msg_t *m, const char *name, bool online, int64_t last_offset,
                           int64_t produced_total)
{
    if (!cq_mq_topic_valid(name, strlen(name)))
        return CQ_EBADTOPIC;
    if (last_offset < 0 || last_offset > U53_MAX_ || produced_total < 0 ||
        produced_total > U53_MAX_)
        return CQ_EFIELD;
    cq_mqmgr_ext_t *x = &m->ext;
    if (x->ntopics >= CQ_MQMGR_TOPICS_MAX)
        return CQ_ELIMIT;
    if (grow((void **)&x->topics, x->ntopics, sizeof(*x->topics)) < 0)
        return -ENOMEM;
    cq_mqmgr_topic_t *t = &x->topics[x->ntopics++];
    memset(t, 0, sizeof(*t));
    memcpy(t->name, name, strlen(name) + 1);
    t->online = online;
    t->last_offset = last_offset;
    t->produced_total = produced_total;
    x->has |= CQ_MQMGR_X_TOPICS | CQ_MQMGR_X_EXT;
    return 0;
}

int cq_mqmgr_msg_add_consumer(cq_mqmgr_msg_t *m, const char *id, int64_t offset, int64_t lag)
{
    if (!m->ext.ntopics)
        return CQ_EFIELD;
    cq_mqmgr_topic_t *t = &m->ext.topics[m->ext.ntopics - 1];
    size_t len = strlen(id);
    if (len > CQ_MQMGR_ID_MAX || !cq__mq_utf8_valid(id, len) || offset < 0 || offset > U53_MAX_ ||
        lag < 0 || lag > U53_MAX_)
        return CQ_EFIELD;
    if (t->nconsumers >= CQ_MQMGR_CONSUMERS_MAX)
        return CQ_ELIMIT;
    if (grow((void **)&t->consumers, t->nconsumers, sizeof(*t->consumers)) < 0)
        return -ENOMEM;
    cq_mqmgr_consumer_t *k = &t->consumers[t->nconsumers++];
    memcpy(k->id, id, len + 1);
    k->offset = offset;
    k->lag = lag;
    return 0;
}

static bool u53_ok(int64_t v)
{
    return v >= 0 && v <= U53_MAX_;
}

int cq_mqmgr_msg_add_link(cq_mqmgr_msg_t *m, const cq_mqmgr_link_t *l)
{
    cq_mqmgr_relay_t *r = &m->ext.relay;
    if (l->peer < 1 || l->peer > CQ_MQMGR_NODE_MAX || !u53_ok(l->packets_in) ||
        !u53_ok(l->packets_out) || !u53_ok(l->bytes_out) || !u53_ok(l->gaps) ||
        !u53_ok(l->resets) || !u53_ok(l->lost))
        return CQ_EFIELD;
    if (r->nlinks >= CQ_MQMGR_LINKS_MAX)
        return CQ_ELIMIT;
    if (grow((void **)&r->links, r->nlinks, sizeof(*r->links)) < 0)
        return -ENOMEM;
    r->links[r->nlinks++] = *l;
    m->ext.has |= CQ_MQMGR_X_RELAY | CQ_MQMGR_X_EXT;
    return 0;
}

/* A relay's name and its client addresses as the codec takes them. */
static bool cluster_ok(const char *s)
{
    size_t len = s ? strlen(s) : 0;
    return len && len <= CQ_MQMGR_CLUSTER_MAX && cq__mq_utf8_valid(s, len);
}

int cq_mqmgr_msg_add_relay_node(cq_mqmgr_msg_t *m, uint32_t node, const char *cluster,
                                const char *const *addrs)
{
    if (node < 1 || node > CQ_MQMGR_NODE_MAX || !cluster_ok(cluster))
        return CQ_EFIELD;
    for (int t = 0; t < CQ_MQMGR_NTRANSPORTS; t++)
        if (addrs[t] && !host_ok(addrs[t]))
            return CQ_EFIELD;
    if (m->nrelay_nodes >= CQ_MQMGR_RELAY_NODES_MAX)
        return CQ_ELIMIT;
    if (grow((void **)&m->relay_nodes, m->nrelay_nodes, sizeof(*m->relay_nodes)) < 0)
        return -ENOMEM;
    cq_mqmgr_relay_node_t *n = &m->relay_nodes[m->nrelay_nodes++];
    memset(n, 0, sizeof(*n));
    n->node = node;
    memcpy(n->cluster, cluster, strlen(cluster) + 1);
    for (int t = 0; t < CQ_MQMGR_NTRANSPORTS; t++)
        if (addrs[t])
            memcpy(n->addrs[t], addrs[t], strlen(addrs[t]) + 1);
    return 0;
}

/* *dst (owned, *dst_len) := the compact text of the JSON object text[0..len). */
static int set_object(char **dst, size_t *dst_len, const char *text, size_t len)
{
    json_error_t jerr;
    json_t *v = cq__mq_load_json(text, len, &jerr);
    if (!v)
        return cq__mq_jansson_oom(&jerr) ? -ENOMEM : CQ_EFIELD;
    int rc = json_is_object(v) ? 0 : CQ_EFIELD;
    char *compact = rc == 0 ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    if (rc < 0)
        return rc;
    if (!compact)
        return -ENOMEM;
    char *copy = cq_strdup(compact);
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(compact);
    if (!copy)
        return -ENOMEM;
    cq_free(*dst);
    *dst = copy;
    *dst_len = strlen(copy);
    return 0;
}

int cq_mqmgr_config_set_modules(cq_mqmgr_config_t *c, const char *modules, size_t len)
{
    return set_object(&c->modules, &c->modules_len, modules, len);
}

int cq_mqmgr_config_set_bindings(cq_mqmgr_config_t *c, const char *bindings, size_t len)
{
    return set_object(&c->bindings, &c->bindings_len, bindings, len);
}

int cq_mqmgr_msg_set_message(cq_mqmgr_msg_t *m, const char *json, size_t len)
{
    return set_object(&m->message, &m->message_len, json, len);
}

int cq_mqmgr_config_add_topic(cq_mqmgr_config_t *c, const char *name, bool online,
                              int64_t retention)
{
    if (!cq_mq_topic_valid(name, strlen(name)))
        return CQ_EBADTOPIC;
    if ((retention < 0 && retention != CQ_MQMGR_RETENTION_UNSET) || retention > U53_MAX_)
        return CQ_EFIELD;
    if (c->ntopics >= CQ_MQMGR_CFG_TOPICS_MAX)
        return CQ_ELIMIT;
    if (grow((void **)&c->topics, c->ntopics, sizeof(*c->topics)) < 0)
        return -ENOMEM;
    cq_mqmgr_cfg_topic_t *t = &c->topics[c->ntopics++];
    memset(t, 0, sizeof(*t));
    memcpy(t->name, name, strlen(name) + 1);
    t->online = online;
    t->retention = retention;
    return 0;
}

/* ---- encode ---------------------------------------------------------------------------- */

/* Builders that stop at the first failure: each sets *rc and does nothing once it is < 0. */
static void put(json_t *o, const char *key, json_t *v, int *rc)
{
    if (*rc < 0) {
        json_decref(v);
        return;
    }
    if (!v || json_object_set_new_nocheck(o, key, v) < 0)
        *rc = -ENOMEM;
}

static void put_int(json_t *o, const char *key, int64_t v, int64_t min, int64_t max, int *rc)
{
    if (*rc == 0 && (v < min || v > max))
        *rc = CQ_EFIELD;
    put(o, key, *rc == 0 ? json_integer(v) : NULL, rc);
}

static void put_u53(json_t *o, const char *key, int64_t v, int *rc)
{
    put_int(o, key, v, 0, U53_MAX_, rc);
}

static void put_str(json_t *o, const char *key, const char *s, int *rc)
{
    size_t len = s ? strlen(s) : 0;
    if (*rc == 0 && (!s || !cq__mq_utf8_valid(s, len)))
        *rc = CQ_EFIELD;
    put(o, key, *rc == 0 ? json_stringn_nocheck(s, len) : NULL, rc);
}

static void put_bool(json_t *o, const char *key, bool b, int *rc)
{
    put(o, key, json_boolean(b), rc);
}

static json_t *enc_info(const cq_mqmgr_info_t *i, int *rc)
{
    json_t *o = json_object();
    put_u53(o, "threads", i->threads, rc);
    put_u53(o, "packages", i->packages, rc);
    put_u53(o, "cpu", i->cpu, rc);
    put_u53(o, "mem", i->mem, rc);
    put_u53(o, "sockets", i->sockets, rc);
    return o;
}

static json_t *enc_repl(const cq_mqmgr_repl_t *r, int *rc)
{
    json_t *o = json_object();
    put_bool(o, "replica", r->replica, rc);
    put_bool(o, "io_running", r->io_running, rc);
    put_bool(o, "sql_running", r->sql_running, rc);
    put_int(o, "lag_seconds", r->lag_seconds, -1, U53_MAX_, rc);
    put_u53(o, "lag_transactions", r->lag_transactions, rc);
    put_u53(o, "behind_ms", r->behind_ms, rc);
    return o;
}

static json_t *enc_topic(const cq_mqmgr_topic_t *t, int *rc)
{
    json_t *o = json_object();
    put_str(o, "name", t->name, rc);
    put_bool(o, "online", t->online, rc);
    put_u53(o, "last_offset", t->last_offset, rc);
    put_u53(o, "produced_total", t->produced_total, rc);
    json_t *arr = json_array();
    for (size_t i = 0; *rc == 0 && arr && i < t->nconsumers; i++) {
        json_t *k = json_object();
        put_str(k, "id", t->consumers[i].id, rc);
        put_u53(k, "offset", t->consumers[i].offset, rc);
        put_u53(k, "lag", t->consumers[i].lag, rc);
        if (!k || json_array_append_new(arr, k) < 0)
            *rc = *rc < 0 ? *rc : -ENOMEM;
    }
    put(o, "consumers", arr, rc);
    return o;
}

static json_t *enc_counts(const char *const *names, const int64_t *v, size_t n, int *rc)
{
    json_t *o = json_object();
    for (size_t i = 0; i < n; i++)
        put_u53(o, names[i], v[i], rc);
    return o;
}

/* The transports that are on (a non-empty address), as {"tcp": "h:p", ...}. */
static json_t *enc_addrs(json_t *o, const char (*addrs)[CQ_MQMGR_HOST_MAX + 1], int *rc)
{
    for (int t = 0; t < CQ_MQMGR_NTRANSPORTS; t++)
        if (addrs[t][0]) {
            if (*rc == 0 && strlen(addrs[t]) > CQ_MQMGR_HOST_MAX)
                *rc = CQ_EFIELD;
            put_str(o, cq_mqmgr_transport_names[t], addrs[t], rc);
        }
    return o;
}

static void put_cluster(json_t *o, const char *cluster, int *rc)
{
    if (*rc == 0 && strlen(cluster) > CQ_MQMGR_CLUSTER_MAX)
        *rc = CQ_EFIELD;
    put_str(o, "cluster", cluster, rc);
}

static json_t *enc_link(const cq_mqmgr_link_t *l, int *rc)
{
    json_t *o = json_object();
    put_int(o, "peer", l->peer, 1, CQ_MQMGR_NODE_MAX, rc);
    put_bool(o, "up", l->up, rc);
    put_u53(o, "packets_in", l->packets_in, rc);
    put_u53(o, "packets_out", l->packets_out, rc);
    put_u53(o, "bytes_out", l->bytes_out, rc);
    put_u53(o, "gaps", l->gaps, rc);
    put_u53(o, "resets", l->resets, rc);
    put_u53(o, "lost", l->lost, rc);
    return o;
}

/* A relay node's identity, addresses and links (node > 0). */
static void enc_relay_node(json_t *o, const cq_mqmgr_relay_t *r, int *rc)
{
    put_int(o, "node", r->node, 1, CQ_MQMGR_NODE_MAX, rc);
    put_cluster(o, r->cluster, rc);
    put_int(o, "global_home", r->global_home, 0, CQ_MQMGR_NODE_MAX, rc);
    put_u53(o, "members", r->members, rc);
    put(o, "addrs", enc_addrs(json_object(), r->addrs, rc), rc);
    json_t *arr = json_array();
    for (size_t i = 0; arr && *rc == 0 && i < r->nlinks; i++)
        if (json_array_append_new(arr, enc_link(&r->links[i], rc)) < 0)
            *rc = *rc < 0 ? *rc : -ENOMEM;
    put(o, "links", arr, rc);
}

static json_t *enc_relay(const cq_mqmgr_relay_t *r, int *rc)
{
    json_t *o = json_object();
    put(o, "connections",
        enc_counts(cq_mqmgr_transport_names, r->connections, CQ_MQMGR_NTRANSPORTS, rc), rc);
    put(o, "channels", enc_counts(cq_mqmgr_chantype_names, r->channels, CQ_MQMGR_NCHANTYPES, rc),
        rc);
    put_u53(o, "subscribers", r->subscribers, rc);
    put_u53(o, "fanouts_total", r->fanouts_total, rc);
    put_u53(o, "slow_consumer_closes_total", r->slow_consumer_closes_total, rc);
    if (r->node)
        enc_relay_node(o, r, rc);
    return o;
}

static json_t *enc_ext(const cq_mqmgr_ext_t *x, int *rc)
{
    json_t *o = json_object();
    if (x->has & CQ_MQMGR_X_ADDR)
        put_str(o, "addr", x->addr, rc);
    if (x->has & CQ_MQMGR_X_SHARD)
        put_u53(o, "shard", x->shard, rc);
    if (x->has & CQ_MQMGR_X_MASTER)
        put_bool(o, "master", x->master, rc);
    if (x->has & CQ_MQMGR_X_OFFLINE)
        put_bool(o, "offline", x->offline, rc);
    if (x->has & CQ_MQMGR_X_DRAINING)
        put_bool(o, "draining", x->draining, rc);
    if (x->has & CQ_MQMGR_X_CONFIG_VERSION)
        put_u53(o, "config_version", x->config_version, rc);
    if (x->has & CQ_MQMGR_X_PRODUCED)
        put_u53(o, "produced_total", x->produced_total, rc);
    if (x->has & CQ_MQMGR_X_CONSUMED)
        put_u53(o, "consumed_total", x->consumed_total, rc);
    if (x->has & CQ_MQMGR_X_REPL)
        put(o, "repl", enc_repl(&x->repl, rc), rc);
    if (x->has & CQ_MQMGR_X_TOPICS) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && *rc == 0 && i < x->ntopics; i++)
            if (json_array_append_new(arr, enc_topic(&x->topics[i], rc)) < 0)
                *rc = *rc < 0 ? *rc : -ENOMEM;
        put(o, "topics", arr, rc);
    }
    if (x->has & CQ_MQMGR_X_RELAY)
        put(o, "relay", enc_relay(&x->relay, rc), rc);
    return o;
}

static json_t *enc_servers(const cq_mqmgr_msg_t *m, int *rc)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && *rc == 0 && i < m->nservers; i++) {
        const cq_mqmgr_server_t *s = &m->servers[i];
        json_t *o = json_object();
        put_str(o, "ip", s->ip, rc);
        put_int(o, "port", s->port, 1, 65535, rc);
        put_u53(o, "shard", s->shard, rc);
        if (!o || json_array_append_new(arr, o) < 0)
            *rc = *rc < 0 ? *rc : -ENOMEM;
    }
    return arr;
}

static json_t *enc_relay_nodes(const cq_mqmgr_msg_t *m, int *rc)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && *rc == 0 && i < m->nrelay_nodes; i++) {
        const cq_mqmgr_relay_node_t *n = &m->relay_nodes[i];
        json_t *o = json_object();
        put_int(o, "node", n->node, 1, CQ_MQMGR_NODE_MAX, rc);
        put_cluster(o, n->cluster, rc);
        enc_addrs(o, n->addrs, rc);
        if (!o || json_array_append_new(arr, o) < 0)
            *rc = *rc < 0 ? *rc : -ENOMEM;
    }
    return arr;
}

/* The JSON object of text[0..len) (a publish_config's modules or bindings), or NULL with *rc. */
static json_t *enc_object(const char *text, size_t len, int *rc)
{
    json_error_t jerr;
    json_t *v = cq__mq_load_json(text, len, &jerr);
    if (*rc == 0 && !json_is_object(v))
        *rc = v || !cq__mq_jansson_oom(&jerr) ? CQ_EFIELD : -ENOMEM;
    return v;
}

static json_t *enc_config(const cq_mqmgr_config_t *c, int *rc)
{
    json_t *o = json_object();
    put_u53(o, "version", c->version, rc);
    if (c->modules) /* absent: permissions not managed */
        put(o, "modules", enc_object(c->modules, c->modules_len, rc), rc);
    json_t *topics = json_object();
    for (size_t i = 0; topics && *rc == 0 && i < c->ntopics; i++) {
        json_t *t = json_object();
        put_bool(t, "online", c->topics[i].online, rc);
        if (c->topics[i].retention != CQ_MQMGR_RETENTION_UNSET)
            put_u53(t, "retention", c->topics[i].retention, rc);
        if (!cq_mq_topic_valid(c->topics[i].name, strlen(c->topics[i].name)))
            *rc = *rc < 0 ? *rc : CQ_EBADTOPIC;
        put(topics, c->topics[i].name, t, rc);
    }
    put(o, "topics", topics, rc);
    if (c->bindings) /* absent: bindings not managed */
        put(o, "bindings", enc_object(c->bindings, c->bindings_len, rc), rc);
    return o;
}

static void put_err(json_t *o, const cq_mqmgr_msg_t *m, int *rc)
{
    put_int(o, "err_code", m->err_code, 0, 65535, rc);
    if (m->err_msg) {
        if (*rc == 0 && strlen(m->err_msg) > CQ_MQ_ERR_MSG_MAX)
            *rc = CQ_EFIELD;
        put_str(o, "err_msg", m->err_msg, rc);
    }
}

static void put_token(json_t *o, const cq_mqmgr_msg_t *m, int *rc)
{
    if (*rc == 0 && m->token && strlen(m->token) > CQ_MQ_TOKEN_MAX)
        *rc = CQ_EFIELD;
    put_str(o, "token", m->token ? m->token : "", rc);
}

static void enc_body(const cq_mqmgr_msg_t *m, json_t *o, int *rc)
{
    if (m->has_askid)
        put_u53(o, "askid", m->askid, rc);
    switch (m->kind) {
    case CQ_MQMGR_SVRCONFIG:
        put_u53(o, "module_id", m->module_id, rc);
        put_token(o, m, rc);
        break;
    case CQ_MQMGR_SYNC:
        put_u53(o, "group_id", m->group_id, rc);
        put_u53(o, "appid", m->appid, rc);
        put_token(o, m, rc);
        put(o, "serverinfo", enc_info(&m->info, rc), rc);
        if (m->ext.has)
            put(o, "ext", enc_ext(&m->ext, rc), rc);
        break;
    case CQ_MQMGR_SVRCONFIG_RESP:
        put_u53(o, "module_id", m->module_id, rc);
        put_err(o, m, rc);
        put(o, "servers", enc_servers(m, rc), rc);
        if (m->nrelay_nodes) /* absent when none: the answer of a relay-less setup is unchanged */
            put(o, "relay_nodes", enc_relay_nodes(m, rc), rc);
        break;
    case CQ_MQMGR_SYNC_RESP:
        put_err(o, m, rc);
        put_u53(o, "config_version", m->config_version, rc);
        break;
    case CQ_MQMGR_COMMAND:
        put_u53(o, "cmdid", m->cmdid, rc);
        if (m->cmdid == CQ_MQMGR_CMD_PUBLISH_CONFIG) {
            put(o, "content", enc_config(&m->config, rc), rc);
        } else if (m->cmdid == CQ_MQMGR_CMD_INVALIDATE || m->cmdid == CQ_MQMGR_CMD_MESSAGE) {
            json_t *c = json_object();
            if (*rc == 0 && !cq_mq_topic_valid(m->topic, strlen(m->topic)))
                *rc = CQ_EBADTOPIC;
            put_str(c, "topic", m->topic, rc);
            if (m->cmdid == CQ_MQMGR_CMD_MESSAGE && !m->offset) {
                put_int(c, "producer_id", (int64_t)m->key_producer, 1, U53_MAX_, rc);
                put_int(c, "seq", (int64_t)m->key_seq, 0, U53_MAX_, rc);
            } else {
                put_int(c, "offset", (int64_t)m->offset, 1, U53_MAX_, rc);
            }
            put(o, "content", c, rc);
        } else {
            json_t *c = json_object();
            put_bool(c, "offline", m->offline, rc);
            put(o, "content", c, rc);
        }
        break;
    case CQ_MQMGR_COMMAND_RESP:
        put_u53(o, "cmdid", m->cmdid, rc);
        put_err(o, m, rc);
        if (m->message)
            put(o, "message", enc_object(m->message, m->message_len, rc), rc);
        break;
    default:
        put_err(o, m, rc);
        break;
    }
}

static int encode_out(const cq_mqmgr_msg_t *m, mq_out_t *o, bool shared)
{
    uint8_t type = cq_mqmgr_kind_type(m->kind);
    if (!type)
        return CQ_ENOTYPE;
    json_t *root = json_object();
    int rc = root ? 0 : -ENOMEM;
    enc_body(m, root, &rc);
    size_t len = rc == 0 ? json_dumpb(root, NULL, 0, JSON_COMPACT) : 0;
    if (rc == 0 && len == 0)
        rc = -ENOMEM;
    if (rc == 0)
        rc = cq__mq_out_init(o, CQ_MQ_HDR_LEN + len, shared);
    if (rc == 0 && json_dumpb(root, (char *)o->p + CQ_MQ_HDR_LEN, len, JSON_COMPACT) != len) {
        cq__mq_out_done(o);
        rc = -ENOMEM;
    }
    json_decref(root);
    if (rc < 0)
        return rc;
    o->len = CQ_MQ_HDR_LEN + len;
    cq_mq_header_write(o->p, (uint32_t)o->len, type, m->msg_id);
    if (o->buf)
        o->buf->len = o->len;
    return 0;
}

int cq_mqmgr_encode_buf(const cq_mqmgr_msg_t *m, cq_buf_t **ret)
{
    mq_out_t o;
    int rc = encode_out(m, &o, true);
    if (rc == 0)
        *ret = o.buf;
    return rc;
}

int cq_mqmgr_encode(const cq_mqmgr_msg_t *m, uint8_t **ret, size_t *ret_len)
{
    mq_out_t o;
    int rc = encode_out(m, &o, false);
    if (rc == 0) {
        *ret = o.p;
        *ret_len = o.len;
    }
    return rc;
}

int cq_mqmgr_encode_to(const cq_mqmgr_msg_t *m, size_t max, struct cq_sbuf *out)
{
    mq_out_t o;
    return cq__mq_out_append(encode_out(m, &o, false), &o, max, out);
}

/* ---- error answers ----------------------------------------------------------------------- */

/* A valid u32 at body[key], if the body is a JSON object that has one. */
static bool peek_u32(json_t *root, const char *key, uint32_t *out)
{
    json_t *v = json_object_get(root, key);
    bool ok = json_is_integer(v) && json_integer_value(v) >= 0 &&
              json_integer_value(v) <= (json_int_t)UINT32_MAX;
    if (ok)
        *out = (uint32_t)json_integer_value(v);
    return ok;
}

static bool typed_answer(const cq_mq_frame_t *f, int err)
{
    /* a body that is not a message (bad JSON, unknown type, a broken frame) gets frame 20 */
    bool body_ok = err != CQ_EJSON && err != CQ_ENOTYPE && err != CQ_EBADLEN && err != CQ_EHEADER &&
                   err != -ENOMEM;
    return f && body_ok && (f->type == CQ_MQMGR_REQ || f->type == CQ_MQMGR_REQ_COMMAND);
}

static cq_mqmgr_kind_t error_kind(const cq_mq_frame_t *f, int err, json_t *root)
{
    if (!typed_answer(f, err))
        return CQ_MQMGR_ERROR_FRAME;
    if (f->type == CQ_MQMGR_REQ_COMMAND)
        return CQ_MQMGR_COMMAND_RESP;
    return json_object_get(root, "serverinfo") ? CQ_MQMGR_SYNC_RESP : CQ_MQMGR_SVRCONFIG_RESP;
}

/* json_loadb returns NULL on bad JSON, and json_object_get(NULL) is NULL: peeks then fail. */
int cq_mqmgr_encode_error_buf(const cq_mq_frame_t *f, int err, const char *err_msg,
                              int64_t config_version, cq_buf_t **ret)
{
    json_t *root = NULL;
    /* A body nested too deep is not loaded (its peeks find nothing): jerr is read only after a
     * load (reading it otherwise took a deep body for an out-of-memory, and the connection was
     * closed unanswered: issue 25). */
    if (f && cq__mq_depth_ok(f->body, f->body_len, CQ_MQ_DEFAULT_MAX_DEPTH)) {
        json_error_t jerr;
        root = cq__mq_load_json((const char *)f->body, f->body_len, &jerr);
        if (!root && cq__mq_jansson_oom(&jerr))
            return -ENOMEM;
    }
    cq_mqmgr_msg_t *m = cq_mqmgr_msg_new(error_kind(f, err, root), f ? f->msg_id : 0);
    int rc = m ? 0 : -ENOMEM;
    if (m) {
        m->has_askid = peek_u32(root, "askid", &m->askid);
        if (m->kind != CQ_MQMGR_ERROR_FRAME)
            m->has_askid = true; /* askid 0 when the request had none */
        peek_u32(root, "module_id", &m->module_id);
        peek_u32(root, "cmdid", &m->cmdid);
        m->config_version = config_version;
        m->err_code = (uint32_t)cq_mq_errcode(err);
        if (!err_msg && err)
            err_msg = cq_strerror(err);
        if (err_msg) {
            size_t len = strlen(err_msg);
            while (len > CQ_MQ_ERR_MSG_MAX)
                len--;
            while (len > 0 && len < strlen(err_msg) && ((unsigned char)err_msg[len] & 0xC0) == 0x80)
                len--;
            m->err_msg = cq_strndup(err_msg, len);
            if (!m->err_msg)
                rc = -ENOMEM;
            else if (!cq__mq_utf8_valid(m->err_msg, len))
                m->err_msg = (cq_free(m->err_msg), NULL);
        }
    }
    json_decref(root);
    if (rc == 0)
        rc = cq_mqmgr_encode_buf(m, ret);
    cq_mqmgr_msg_free(m);
    return rc;
}

/* f's content for "message": text when UTF-8 (up to cap bytes, cut at a character), else hex. */
static void found_content(json_t *o, const cq_mqmgr_found_t *f, int *rc)
{
    const unsigned char *c = f->content;
    size_t cut = f->len > f->cap ? f->cap : f->len;
    while (cut < f->len && cut > 0 && (c[cut] & 0xC0) == 0x80)
        cut--; /* not inside a UTF-8 sequence */
    if (cq__mq_utf8_valid((const char *)c, cut)) {
        put(o, "truncated", json_boolean(cut < f->len), rc);
        put(o, "content", json_stringn_nocheck((const char *)c, cut), rc);
        return;
    }
    size_t n = f->len > f->cap / 2 ? f->cap / 2 : f->len;
    char *hex = cq_malloc(2 * n + 1);
    for (size_t i = 0; hex && i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", c[i]);
    if (hex)
        hex[2 * n] = '\0';
    put(o, "truncated", json_boolean(n < f->len), rc);
    put(o, "content_hex", hex ? json_string(hex) : NULL, rc);
    cq_free(hex);
}

int cq_mqmgr_msg_set_found(cq_mqmgr_msg_t *m, const cq_mqmgr_found_t *f)
{
    json_t *o = json_object();
    int rc = o ? 0 : -ENOMEM;
    put(o, "offset", json_integer((json_int_t)f->offset), &rc);
    put(o, "state", json_integer(f->state), &rc);
    put(o, "create_time", json_integer((json_int_t)f->create_ms), &rc);
    put(o, "producer_id", json_integer((json_int_t)f->producer_id), &rc);
    put(o, "seq", json_integer((json_int_t)f->seq), &rc);
    put(o, "size", json_integer((json_int_t)f->len), &rc);
    found_content(o, f, &rc);
    char *s = rc == 0 ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (rc < 0 || !s)
        return -ENOMEM;
    char *copy = cq_strdup(s);
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(s);
    if (!copy)
        return -ENOMEM;
    cq_free(m->message);
    m->message = copy;
    m->message_len = strlen(copy);
    return 0;
}
