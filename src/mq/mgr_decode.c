/* mgr_decode.c - the management port's bodies -> cq_mqmgr_msg_t through jansson, validated
 * field by field with the MQ codec's error texts (cq_mqmgr.h, doc/protocol-mq.md "Management
 * port"). */
#include "cq_mqmgr.h"
#include "mq_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- sync: serverinfo and ext ------------------------------------------------------------ */

static int get_info(const mq_fctx_t *c, json_t *v, cq_mqmgr_info_t *info)
{
    static const char *const keys[5] = {"threads", "packages", "cpu", "mem", "sockets"};
    uint32_t *dst[5] = {&info->threads, &info->packages, &info->cpu, &info->mem, &info->sockets};
    int rc = cq__mq_need_object(c, "serverinfo", v);
    for (int i = 0; rc == 0 && i < 5; i++) {
        char name[40];
        snprintf(name, sizeof(name), "serverinfo.%s", keys[i]);
        json_t *x = cq__mq_required(c, v, keys[i], name, &rc);
        if (x)
            rc = cq__mq_get_u32(c, name, x, dst[i]);
    }
    return rc;
}

/* An optional integer at obj[key], named prefix.key. */
static int opt_int(const mq_fctx_t *c, json_t *obj, const char *prefix, const char *key,
                   int64_t min, int64_t *out, bool *present)
{
    json_t *v = json_object_get(obj, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return 0;
    char name[192];
    snprintf(name, sizeof(name), "%s.%s", prefix, key);
    return cq__mq_get_int(c, name, v, min, U53_MAX_, out);
}

static int opt_bool(const mq_fctx_t *c, json_t *obj, const char *prefix, const char *key, bool *out,
                    bool *present)
{
    json_t *v = json_object_get(obj, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return 0;
    char name[192];
    snprintf(name, sizeof(name), "%s.%s", prefix, key);
    return cq__mq_get_bool(c, name, v, out);
}

static int get_repl(const mq_fctx_t *c, json_t *v, cq_mqmgr_repl_t *r)
{
    const char *p = "ext.repl";
    int rc = cq__mq_need_object(c, p, v);
    if (rc == 0)
        rc = opt_bool(c, v, p, "replica", &r->replica, NULL);
    if (rc == 0)
        rc = opt_bool(c, v, p, "io_running", &r->io_running, NULL);
    if (rc == 0)
        rc = opt_bool(c, v, p, "sql_running", &r->sql_running, NULL);
    if (rc == 0)
        rc = opt_int(c, v, p, "lag_seconds", -1, &r->lag_seconds, NULL);
    if (rc == 0)
        rc = opt_int(c, v, p, "lag_transactions", 0, &r->lag_transactions, NULL);
    if (rc == 0)
        rc = opt_int(c, v, p, "behind_ms", 0, &r->behind_ms, NULL);
    return rc;
}

static int get_consumer(const mq_fctx_t *c, json_t *v, size_t ti, size_t ci, cq_mqmgr_topic_t *t)
{
    char p[96], name[112];
    snprintf(p, sizeof(p), "ext.topics[%zu].consumers[%zu]", ti, ci);
    int rc = cq__mq_need_object(c, p, v);
    if (rc < 0)
        return rc;
    cq_mqmgr_consumer_t *k = &t->consumers[t->nconsumers];
    memset(k, 0, sizeof(*k));
    snprintf(name, sizeof(name), "%s.id", p);
    json_t *id = cq__mq_required(c, v, "id", name, &rc);
    if (id)
        rc = cq__mq_get_strbuf(c, name, id, CQ_MQMGR_ID_MAX, k->id);
    if (rc == 0)
        rc = opt_int(c, v, p, "offset", 0, &k->offset, NULL);
    if (rc == 0)
        rc = opt_int(c, v, p, "lag", 0, &k->lag, NULL);
    if (rc == 0)
        t->nconsumers++;
    return rc;
}

static int get_consumers(const mq_fctx_t *c, json_t *v, size_t ti, cq_mqmgr_topic_t *t)
{
    char name[64];
    snprintf(name, sizeof(name), "ext.topics[%zu].consumers", ti);
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || n > CQ_MQMGR_CONSUMERS_MAX)
        return cq__mq_field_err(c, CQ_EFIELD, name, "must be an array of at most %d consumers",
                                CQ_MQMGR_CONSUMERS_MAX);
    if (n && !(t->consumers = cq_calloc(n, sizeof(*t->consumers))))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = get_consumer(c, json_array_get(v, i), ti, i, t);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int get_topic(const mq_fctx_t *c, json_t *v, size_t i, cq_mqmgr_ext_t *x)
{
    char p[48], name[64];
    snprintf(p, sizeof(p), "ext.topics[%zu]", i);
    int rc = cq__mq_need_object(c, p, v);
    if (rc < 0)
        return rc;
    cq_mqmgr_topic_t *t = &x->topics[x->ntopics++];
    memset(t, 0, sizeof(*t));
    t->online = true;
    snprintf(name, sizeof(name), "%s.name", p);
    json_t *nv = cq__mq_required(c, v, "name", name, &rc);
    if (nv)
        rc = cq__mq_get_topic(c, name, nv, t->name);
    if (rc == 0)
        rc = opt_bool(c, v, p, "online", &t->online, NULL);
    if (rc == 0)
        rc = opt_int(c, v, p, "last_offset", 0, &t->last_offset, NULL);
    if (rc == 0)
        rc = opt_int(c, v, p, "produced_total", 0, &t->produced_total, NULL);
    json_t *cv = json_object_get(v, "consumers");
    if (rc == 0 && cv)
        rc = get_consumers(c, cv, i, t);
    return rc;
}

static int get_topics(const mq_fctx_t *c, json_t *v, cq_mqmgr_ext_t *x)
{
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || n > CQ_MQMGR_TOPICS_MAX)
        return cq__mq_field_err(c, CQ_EFIELD, "ext.topics", "must be an array of at most %d topics",
                                CQ_MQMGR_TOPICS_MAX);
    if (n && !(x->topics = cq_calloc(n, sizeof(*x->topics))))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = get_topic(c, json_array_get(v, i), i, x);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* obj[names[i]] (optional integers) into out[i], named prefix.name. */
static int get_counts(const mq_fctx_t *c, json_t *obj, const char *prefix, const char *const *names,
                      size_t n, int64_t *out)
{
    int rc = cq__mq_need_object(c, prefix, obj);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = opt_int(c, obj, prefix, names[i], 0, &out[i], NULL);
    return rc;
}

/* obj's transport keys (optional "host:port" strings) into addrs, named prefix.tcp... */
static int get_addrs(const mq_fctx_t *c, json_t *obj, const char *prefix,
                     char (*addrs)[CQ_MQMGR_HOST_MAX + 1])
{
    for (int t = 0; t < CQ_MQMGR_NTRANSPORTS; t++) {
        json_t *v = json_object_get(obj, cq_mqmgr_transport_names[t]);
        char name[96];
        snprintf(name, sizeof(name), "%s.%s", prefix, cq_mqmgr_transport_names[t]);
        int rc = v ? cq__mq_get_strbuf(c, name, v, CQ_MQMGR_HOST_MAX, addrs[t]) : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* A relay node's id (required, 1..CQ_MQMGR_NODE_MAX) and relay name (required, 1..32 bytes). */
static int get_node_id(const mq_fctx_t *c, json_t *obj, const char *prefix, uint32_t *node,
                       char *cluster)
{
    char name[96];
    int64_t id = 0;
    int rc = 0;
    snprintf(name, sizeof(name), "%s.node", prefix);
    json_t *v = cq__mq_required(c, obj, "node", name, &rc);
    if (v)
        rc = cq__mq_get_int(c, name, v, 1, CQ_MQMGR_NODE_MAX, &id);
    *node = (uint32_t)id;
    snprintf(name, sizeof(name), "%s.cluster", prefix);
    v = rc == 0 ? cq__mq_required(c, obj, "cluster", name, &rc) : NULL;
    if (v)
        rc = cq__mq_get_strbuf(c, name, v, CQ_MQMGR_CLUSTER_MAX, cluster);
    if (rc == 0 && !cluster[0])
        rc = cq__mq_field_err(c, CQ_EFIELD, name, "must not be empty");
    return rc;
}

static int get_link(const mq_fctx_t *c, json_t *v, size_t i, cq_mqmgr_relay_t *r)
{
    char p[48], name[64];
    snprintf(p, sizeof(p), "ext.relay.links[%zu]", i);
    int rc = cq__mq_need_object(c, p, v);
    if (rc < 0)
        return rc;
    cq_mqmgr_link_t *l = &r->links[r->nlinks];
    memset(l, 0, sizeof(*l));
    int64_t peer = 0;
    snprintf(name, sizeof(name), "%s.peer", p);
    json_t *pv = cq__mq_required(c, v, "peer", name, &rc);
    if (pv)
        rc = cq__mq_get_int(c, name, pv, 1, CQ_MQMGR_NODE_MAX, &peer);
    l->peer = (uint32_t)peer;
    if (rc == 0)
        rc = opt_bool(c, v, p, "up", &l->up, NULL);
    static const char *const keys[6] = {"packets_in", "packets_out", "bytes_out",
                                        "gaps",       "resets",      "lost"};
    int64_t *dst[6] = {&l->packets_in, &l->packets_out, &l->bytes_out,
                       &l->gaps,       &l->resets,      &l->lost};
    for (int k = 0; rc == 0 && k < 6; k++)
        rc = opt_int(c, v, p, keys[k], 0, dst[k], NULL);
    if (rc == 0)
        r->nlinks++;
    return rc;
}

static int get_links(const mq_fctx_t *c, json_t *v, cq_mqmgr_relay_t *r)
{
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || n > CQ_MQMGR_LINKS_MAX)
        return cq__mq_field_err(c, CQ_EFIELD, "ext.relay.links",
                                "must be an array of at most %d links", CQ_MQMGR_LINKS_MAX);
    if (n && !(r->links = cq_calloc(n, sizeof(*r->links))))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = get_link(c, json_array_get(v, i), i, r);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* A relay node's part of ext.relay (when it has "node"). */
static int get_relay_node(const mq_fctx_t *c, json_t *v, cq_mqmgr_relay_t *r)
{
    const char *p = "ext.relay";
    int64_t home = 0, members = 0;
    int rc = get_node_id(c, v, p, &r->node, r->cluster);
    json_t *h = rc == 0 ? json_object_get(v, "global_home") : NULL;
    if (h)
        rc = cq__mq_get_int(c, "ext.relay.global_home", h, 0, CQ_MQMGR_NODE_MAX, &home);
    r->global_home = (uint32_t)home;
    if (rc == 0)
        rc = opt_int(c, v, p, "members", 0, &members, NULL);
    r->members = members > UINT32_MAX ? UINT32_MAX : (uint32_t)members;
    json_t *a = rc == 0 ? json_object_get(v, "addrs") : NULL;
    if (a && (rc = cq__mq_need_object(c, "ext.relay.addrs", a)) == 0)
        rc = get_addrs(c, a, "ext.relay.addrs", r->addrs);
    json_t *l = rc == 0 ? json_object_get(v, "links") : NULL;
    if (l)
        rc = get_links(c, l, r);
    return rc;
}

static int get_relay(const mq_fctx_t *c, json_t *v, cq_mqmgr_relay_t *r)
{
    int rc = cq__mq_need_object(c, "ext.relay", v);
    json_t *cv = rc == 0 ? json_object_get(v, "connections") : NULL;
    if (cv)
        rc = get_counts(c, cv, "ext.relay.connections", cq_mqmgr_transport_names,
                        CQ_MQMGR_NTRANSPORTS, r->connections);
    json_t *hv = rc == 0 ? json_object_get(v, "channels") : NULL;
    if (hv)
        rc = get_counts(c, hv, "ext.relay.channels", cq_mqmgr_chantype_names, CQ_MQMGR_NCHANTYPES,
                        r->channels);
    if (rc == 0)
        rc = opt_int(c, v, "ext.relay", "subscribers", 0, &r->subscribers, NULL);
    if (rc == 0)
        rc = opt_int(c, v, "ext.relay", "fanouts_total", 0, &r->fanouts_total, NULL);
    if (rc == 0)
        rc = opt_int(c, v, "ext.relay", "slow_consumer_closes_total", 0,
                     &r->slow_consumer_closes_total, NULL);
    if (rc == 0 && json_object_get(v, "node"))
        rc = get_relay_node(c, v, r);
    return rc;
}

static void mark(cq_mqmgr_ext_t *x, bool present, uint32_t bit)
{
    if (present)
        x->has |= bit;
}

static int get_ext_flags(const mq_fctx_t *c, json_t *v, cq_mqmgr_ext_t *x)
{
    bool p = false;
    int rc = opt_bool(c, v, "ext", "master", &x->master, &p);
    mark(x, p, CQ_MQMGR_X_MASTER);
    if (rc == 0)
        rc = opt_bool(c, v, "ext", "offline", &x->offline, &p);
    mark(x, rc == 0 && p, CQ_MQMGR_X_OFFLINE);
    if (rc == 0)
        rc = opt_bool(c, v, "ext", "draining", &x->draining, &p);
    mark(x, rc == 0 && p, CQ_MQMGR_X_DRAINING);
    if (rc == 0)
        rc = opt_int(c, v, "ext", "config_version", 0, &x->config_version, &p);
    mark(x, rc == 0 && p, CQ_MQMGR_X_CONFIG_VERSION);
    if (rc == 0)
        rc = opt_int(c, v, "ext", "produced_total", 0, &x->produced_total, &p);
    mark(x, rc == 0 && p, CQ_MQMGR_X_PRODUCED);
    if (rc == 0)
        rc = opt_int(c, v, "ext", "consumed_total", 0, &x->consumed_total, &p);
    mark(x, rc == 0 && p, CQ_MQMGR_X_CONSUMED);
    return rc;
}

static int get_ext(const mq_fctx_t *c, json_t *v, cq_mqmgr_ext_t *x)
{
    int rc = cq__mq_need_object(c, "ext", v);
    if (rc < 0)
        return rc;
    x->has |= CQ_MQMGR_X_EXT;
    json_t *a = json_object_get(v, "addr");
    if (a && (rc = cq__mq_get_strbuf(c, "ext.addr", a, CQ_MQMGR_HOST_MAX, x->addr)) < 0)
        return rc;
    mark(x, a != NULL, CQ_MQMGR_X_ADDR);
    json_t *s = json_object_get(v, "shard");
    if (s && (rc = cq__mq_get_u32(c, "ext.shard", s, &x->shard)) < 0)
        return rc;
    mark(x, s != NULL, CQ_MQMGR_X_SHARD);
    if ((rc = get_ext_flags(c, v, x)) < 0)
        return rc;
    json_t *r = json_object_get(v, "repl");
    if (r && (rc = get_repl(c, r, &x->repl)) < 0)
        return rc;
    mark(x, r != NULL, CQ_MQMGR_X_REPL);
    json_t *t = json_object_get(v, "topics");
    if (t && (rc = get_topics(c, t, x)) < 0)
        return rc;
    mark(x, t != NULL, CQ_MQMGR_X_TOPICS);
    json_t *l = json_object_get(v, "relay");
    if (l && (rc = get_relay(c, l, &x->relay)) < 0)
        return rc;
    mark(x, l != NULL, CQ_MQMGR_X_RELAY);
    return 0;
}

/* ---- messages -------------------------------------------------------------------------- */

static int get_askid(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int rc = 0;
    json_t *v = cq__mq_required(c, root, "askid", "askid", &rc);
    if (v && (rc = cq__mq_get_u32(c, "askid", v, &m->askid)) == 0)
        m->has_askid = true;
    return rc;
}

static int get_token(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int rc = 0;
    json_t *v = cq__mq_required(c, root, "token", "token", &rc);
    return v ? cq__mq_get_strdup(c, "token", v, CQ_MQ_TOKEN_MAX, true, &m->token) : rc;
}

static int get_req_u32(const mq_fctx_t *c, json_t *root, const char *key, uint32_t *out)
{
    int rc = 0;
    json_t *v = cq__mq_required(c, root, key, key, &rc);
    return v ? cq__mq_get_u32(c, key, v, out) : rc;
}

static int dec_svrconfig(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int rc = get_askid(c, root, m);
    if (rc == 0)
        rc = get_req_u32(c, root, "module_id", &m->module_id);
    if (rc == 0)
        rc = get_token(c, root, m);
    return rc;
}

static int dec_sync(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int rc = get_askid(c, root, m);
    if (rc == 0)
        rc = get_req_u32(c, root, "group_id", &m->group_id);
    if (rc == 0)
        rc = get_req_u32(c, root, "appid", &m->appid);
    if (rc == 0)
        rc = get_token(c, root, m);
    if (rc == 0)
        rc = get_info(c, json_object_get(root, "serverinfo"), &m->info);
    json_t *x = json_object_get(root, "ext");
    if (rc == 0 && x)
        rc = get_ext(c, x, &m->ext);
    return rc;
}

/* err_code (required) and err_msg (optional) of a response or the error frame. */
static int get_err(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int64_t code = 0;
    int rc = 0;
    json_t *v = cq__mq_required(c, root, "err_code", "err_code", &rc);
    if (v && (rc = cq__mq_get_int(c, "err_code", v, 0, 65535, &code)) == 0)
        m->err_code = (uint32_t)code;
    json_t *e = json_object_get(root, "err_msg");
    if (rc == 0 && e)
        rc = cq__mq_get_strdup(c, "err_msg", e, CQ_MQ_ERR_MSG_MAX, true, &m->err_msg);
    return rc;
}

static int get_server(const mq_fctx_t *c, json_t *v, size_t i, cq_mqmgr_msg_t *m)
{
    char p[40], name[56];
    snprintf(p, sizeof(p), "servers[%zu]", i);
    int rc = cq__mq_need_object(c, p, v);
    if (rc < 0)
        return rc;
    cq_mqmgr_server_t *s = &m->servers[m->nservers];
    int64_t port = 0;
    snprintf(name, sizeof(name), "%s.ip", p);
    json_t *ip = cq__mq_required(c, v, "ip", name, &rc);
    if (ip)
        rc = cq__mq_get_strbuf(c, name, ip, CQ_MQMGR_HOST_MAX, s->ip);
    snprintf(name, sizeof(name), "%s.port", p);
    json_t *pv = rc == 0 ? cq__mq_required(c, v, "port", name, &rc) : NULL;
    if (pv)
        rc = cq__mq_get_int(c, name, pv, 1, 65535, &port);
    s->port = (uint16_t)port;
    snprintf(name, sizeof(name), "%s.shard", p);
    json_t *sv = rc == 0 ? json_object_get(v, "shard") : NULL;
    if (sv)
        rc = cq__mq_get_u32(c, name, sv, &s->shard);
    if (rc == 0)
        m->nservers++;
    return rc;
}

static int get_relay_entry(const mq_fctx_t *c, json_t *v, size_t i, cq_mqmgr_msg_t *m)
{
    char p[48];
    snprintf(p, sizeof(p), "relay_nodes[%zu]", i);
    int rc = cq__mq_need_object(c, p, v);
    cq_mqmgr_relay_node_t *n = &m->relay_nodes[m->nrelay_nodes];
    if (rc == 0)
        rc = get_node_id(c, v, p, &n->node, n->cluster);
    if (rc == 0)
        rc = get_addrs(c, v, p, n->addrs);
    if (rc == 0)
        m->nrelay_nodes++;
    return rc;
}

/* relay_nodes (optional: absent when no relay node is live, and unknown to older SDKs). */
static int get_relay_nodes(const mq_fctx_t *c, json_t *v, cq_mqmgr_msg_t *m)
{
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || n > CQ_MQMGR_RELAY_NODES_MAX)
        return cq__mq_field_err(c, CQ_EFIELD, "relay_nodes",
                                "must be an array of at most %d relay nodes",
                                CQ_MQMGR_RELAY_NODES_MAX);
    if (n && !(m->relay_nodes = cq_calloc(n, sizeof(*m->relay_nodes))))
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = get_relay_entry(c, json_array_get(v, i), i, m);
    return rc;
}

static int dec_svrconfig_resp(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int rc = get_askid(c, root, m);
    if (rc == 0)
        rc = get_req_u32(c, root, "module_id", &m->module_id);
    if (rc == 0)
        rc = get_err(c, root, m);
    json_t *v = json_object_get(root, "servers");
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (rc == 0 && (!json_is_array(v) || n > CQ_MQMGR_SERVERS_MAX))
        return cq__mq_field_err(c, CQ_EFIELD, "servers", "must be an array of at most %d servers",
                                CQ_MQMGR_SERVERS_MAX);
    if (rc == 0 && n && !(m->servers = cq_calloc(n, sizeof(*m->servers))))
        return -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = get_server(c, json_array_get(v, i), i, m);
    json_t *rn = rc == 0 ? json_object_get(root, "relay_nodes") : NULL;
    if (rn)
        rc = get_relay_nodes(c, rn, m);
    return rc;
}

static int dec_sync_resp(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int rc = get_askid(c, root, m);
    if (rc == 0)
        rc = get_err(c, root, m);
    json_t *v = rc == 0 ? cq__mq_required(c, root, "config_version", "config_version", &rc) : NULL;
    if (v)
        rc = cq__mq_get_int(c, "config_version", v, 0, U53_MAX_, &m->config_version);
    return rc;
}

/* ---- commands ---------------------------------------------------------------------------- */

static int get_cfg_topic(const mq_fctx_t *c, const char *key, json_t *v, cq_mqmgr_config_t *cfg)
{
    char p[96], name[112];
    snprintf(p, sizeof(p), "content.topics.%s", key);
    if (!cq_mq_topic_valid(key, strlen(key)))
        return cq__mq_field_err(c, CQ_EBADTOPIC, p,
                                "must be a topic name matching [A-Za-z0-9_]{1,64}");
    int rc = cq__mq_need_object(c, p, v);
    if (rc < 0)
        return rc;
    cq_mqmgr_cfg_topic_t *t = &cfg->topics[cfg->ntopics];
    memcpy(t->name, key, strlen(key) + 1);
    snprintf(name, sizeof(name), "%s.online", p);
    json_t *o = cq__mq_required(c, v, "online", name, &rc);
    if (o)
        rc = cq__mq_get_bool(c, name, o, &t->online);
    snprintf(name, sizeof(name), "%s.retention", p);
    json_t *r = rc == 0 ? json_object_get(v, "retention") : NULL;
    t->retention = CQ_MQMGR_RETENTION_UNSET; /* absent: the server keeps its own */
    if (r)
        rc = cq__mq_get_int(c, name, r, 0, U53_MAX_, &t->retention);
    if (rc == 0)
        cfg->ntopics++;
    return rc;
}

static int get_cfg_topics(const mq_fctx_t *c, json_t *v, cq_mqmgr_config_t *cfg)
{
    size_t n = json_is_object(v) ? json_object_size(v) : 0;
    if (!json_is_object(v) || n > CQ_MQMGR_CFG_TOPICS_MAX)
        return cq__mq_field_err(c, CQ_EFIELD, "content.topics",
                                "must be an object of at most %d topics", CQ_MQMGR_CFG_TOPICS_MAX);
    if (n && !(cfg->topics = cq_calloc(n, sizeof(*cfg->topics))))
        return -ENOMEM;
    const char *key;
    json_t *tv;
    json_object_foreach(v, key, tv)
    {
        int rc = get_cfg_topic(c, key, tv, cfg);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* *dst (owned, *dst_len) := the compact text of v, which must be an object (field names it). */
static int get_cfg_object(const mq_fctx_t *c, const char *field, json_t *v, char **dst,
                          size_t *dst_len)
{
    if (!json_is_object(v))
        return cq__mq_field_err(c, CQ_EFIELD, field, "must be an object");
    char *text = json_dumps(v, JSON_COMPACT);
    if (!text)
        return -ENOMEM;
    /* json_dumps allocates through jansson's allocator: copy into ours */
    *dst = cq_strdup(text);
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(text);
    if (!*dst)
        return -ENOMEM;
    *dst_len = strlen(*dst);
    return 0;
}

static int get_config(const mq_fctx_t *c, json_t *content, cq_mqmgr_config_t *cfg)
{
    int rc = 0;
    json_t *v = cq__mq_required(c, content, "version", "content.version", &rc);
    if (v)
        rc = cq__mq_get_int(c, "content.version", v, 0, U53_MAX_, &cfg->version);
    /* modules is optional: a manager with no module does not manage permissions (doc/mgr.md). */
    json_t *mv = rc == 0 ? json_object_get(content, "modules") : NULL;
    if (mv)
        rc = get_cfg_object(c, "content.modules", mv, &cfg->modules, &cfg->modules_len);
    json_t *tv = rc == 0 ? cq__mq_required(c, content, "topics", "content.topics", &rc) : NULL;
    if (tv)
        rc = get_cfg_topics(c, tv, cfg);
    /* bindings too: a manager that never saved bindings leaves the servers' files in force; what
     * is inside is the server's to check (cq_bindings_parse, with its exact messages). */
    json_t *bv = rc == 0 ? json_object_get(content, "bindings") : NULL;
    if (bv)
        rc = get_cfg_object(c, "content.bindings", bv, &cfg->bindings, &cfg->bindings_len);
    return rc;
}

static int get_cmdid(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int rc = get_req_u32(c, root, "cmdid", &m->cmdid);
    if (rc == 0 && m->cmdid != CQ_MQMGR_CMD_PUBLISH_CONFIG && m->cmdid != CQ_MQMGR_CMD_OFFLINE &&
        m->cmdid != CQ_MQMGR_CMD_INVALIDATE && m->cmdid != CQ_MQMGR_CMD_MESSAGE)
        return cq__mq_field_err(c, CQ_EFIELD, "cmdid",
                                "must be 1 (publish_config), 2 (offline), 3 (invalidate) or 4 "
                                "(message)");
    return rc;
}

/* command 4's producer key: {"producer_id": P >= 1, "seq": S}. */
static int get_key(const mq_fctx_t *c, json_t *content, json_t *pv, cq_mqmgr_msg_t *m)
{
    int64_t p = 0, s = 0;
    int rc = cq__mq_get_int(c, "content.producer_id", pv, 1, U53_MAX_, &p);
    json_t *sv = rc == 0 ? cq__mq_required(c, content, "seq", "content.seq", &rc) : NULL;
    if (sv)
        rc = cq__mq_get_int(c, "content.seq", sv, 0, U53_MAX_, &s);
    m->key_producer = rc == 0 ? (uint64_t)p : 0;
    m->key_seq = rc == 0 ? (uint64_t)s : 0;
    return rc;
}

/* command 3's content: {"topic": T, "offset": N}; command 4's, or {"topic", "producer_id",
 * "seq"}. */
static int get_invalidate(const mq_fctx_t *c, json_t *content, cq_mqmgr_msg_t *m)
{
    int rc = 0;
    int64_t off = 0;
    json_t *t = cq__mq_required(c, content, "topic", "content.topic", &rc);
    if (t)
        rc = cq__mq_get_topic(c, "content.topic", t, m->topic);
    json_t *pv = json_object_get(content, "producer_id");
    if (rc == 0 && pv && m->cmdid == CQ_MQMGR_CMD_MESSAGE && !json_object_get(content, "offset"))
        return get_key(c, content, pv, m);
    json_t *o = rc == 0 ? cq__mq_required(c, content, "offset", "content.offset", &rc) : NULL;
    if (o)
        rc = cq__mq_get_int(c, "content.offset", o, 1, U53_MAX_, &off);
    m->offset = rc == 0 ? (uint64_t)off : 0;
    return rc;
}

static int dec_command(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int rc = get_askid(c, root, m);
    if (rc == 0)
        rc = get_cmdid(c, root, m);
    json_t *content = rc == 0 ? cq__mq_required(c, root, "content", "content", &rc) : NULL;
    if (content && (rc = cq__mq_need_object(c, "content", content)) == 0) {
        if (m->cmdid == CQ_MQMGR_CMD_PUBLISH_CONFIG)
            return get_config(c, content, &m->config);
        if (m->cmdid == CQ_MQMGR_CMD_INVALIDATE || m->cmdid == CQ_MQMGR_CMD_MESSAGE)
            return get_invalidate(c, content, m);
        json_t *o = cq__mq_required(c, content, "offline", "content.offline", &rc);
        if (o)
            rc = cq__mq_get_bool(c, "content.offline", o, &m->offline);
    }
    return rc;
}

static int dec_command_resp(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    int rc = get_askid(c, root, m);
    if (rc == 0)
        rc = get_req_u32(c, root, "cmdid", &m->cmdid);
    if (rc == 0)
        rc = get_err(c, root, m);
    json_t *msg = rc == 0 ? json_object_get(root, "message") : NULL;
    if (msg)
        rc = get_cfg_object(c, "message", msg, &m->message, &m->message_len);
    return rc;
}

static int dec_error(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    json_t *a = json_object_get(root, "askid");
    int rc = a ? cq__mq_get_u32(c, "askid", a, &m->askid) : 0;
    m->has_askid = a && rc == 0;
    return rc == 0 ? get_err(c, root, m) : rc;
}

/* ---- entry ----------------------------------------------------------------------------- */

static cq_mqmgr_kind_t kind_of(uint8_t type, json_t *root)
{
    switch (type) {
    case CQ_MQMGR_REQ:
        return json_object_get(root, "serverinfo") ? CQ_MQMGR_SYNC : CQ_MQMGR_SVRCONFIG;
    case CQ_MQMGR_RESP:
        return json_object_get(root, "servers") ? CQ_MQMGR_SVRCONFIG_RESP : CQ_MQMGR_SYNC_RESP;
    case CQ_MQMGR_REQ_COMMAND:
        return CQ_MQMGR_COMMAND;
    case CQ_MQMGR_RESP_COMMAND:
        return CQ_MQMGR_COMMAND_RESP;
    default:
        return CQ_MQMGR_ERROR_FRAME;
    }
}

static int dec_kind(const mq_fctx_t *c, json_t *root, cq_mqmgr_msg_t *m)
{
    switch (m->kind) {
    case CQ_MQMGR_SVRCONFIG:
        return dec_svrconfig(c, root, m);
    case CQ_MQMGR_SYNC:
        return dec_sync(c, root, m);
    case CQ_MQMGR_SVRCONFIG_RESP:
        return dec_svrconfig_resp(c, root, m);
    case CQ_MQMGR_SYNC_RESP:
        return dec_sync_resp(c, root, m);
    case CQ_MQMGR_COMMAND:
        return dec_command(c, root, m);
    case CQ_MQMGR_COMMAND_RESP:
        return dec_command_resp(c, root, m);
    default:
        return dec_error(c, root, m);
    }
}

/* The name of a frame type in the errors about its body (before its kind is known). */
static const char *frame_name(uint8_t type)
{
    return type == CQ_MQMGR_REQ_COMMAND    ? "command"
           : type == CQ_MQMGR_RESP_COMMAND ? "command_resp"
           : type == CQ_MQMGR_ERROR        ? "error"
           : type == CQ_MQMGR_REQ          ? "request"
                                           : "response";
}

int cq_mqmgr_decode(const cq_mq_frame_t *f, uint32_t max_depth, cq_mqmgr_msg_t **ret, char *err,
                    size_t errlen)
{
    if (f->type < CQ_MQMGR_REQ || (f->type > CQ_MQMGR_RESP_COMMAND && f->type != CQ_MQMGR_ERROR))
        return cq_err_fmt(err, errlen, CQ_ENOTYPE, "unknown message type %u", f->type);
    mq_fctx_t c = {frame_name(f->type), err, errlen}; /* the kind's name once it is known */
    json_t *root = NULL;
    int rc = cq__mq_load_object(&c, f, max_depth ? max_depth : CQ_MQ_DEFAULT_MAX_DEPTH, &root);
    if (rc < 0)
        return rc;
    cq_mqmgr_kind_t kind = kind_of(f->type, root);
    cq_mqmgr_msg_t *m = cq_mqmgr_msg_new(kind, f->msg_id);
    c.tname = cq_mqmgr_kind_name(kind);
    rc = m ? dec_kind(&c, root, m) : -ENOMEM;
    json_decref(root);
    if (rc < 0) {
        cq_mqmgr_msg_free(m);
        if (rc == -ENOMEM)
            cq_err_fmt(err, errlen, rc, "%s: out of memory", c.tname);
        return rc;
    }
    *ret = m;
    return 0;
}
