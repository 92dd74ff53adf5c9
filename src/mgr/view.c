/* view.c - what the console and the CLI see: GET /api/state's body (common.md contract 3),
 * built from the state document and the registry at now_ms. */
#include "engine.h"

#include "cq_alloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Builders that record the first failure in *ok and ignore everything after it. */
static void set(json_t *o, const char *k, json_t *v, bool *ok)
{
    if (!v || !o || json_object_set_new(o, k, v) < 0)
        *ok = false;
}

static void append(json_t *a, json_t *v, bool *ok)
{
    if (!v || !a || json_array_append_new(a, v) < 0)
        *ok = false;
}

static json_t *info_json(const cq_mqmgr_info_t *i)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I}", "threads", (json_int_t)i->threads, "packages",
                     (json_int_t)i->packages, "cpu", (json_int_t)i->cpu, "mem", (json_int_t)i->mem,
                     "sockets", (json_int_t)i->sockets);
}

static json_t *repl_json(const cq_mqmgr_repl_t *r)
{
    return json_pack("{s:b, s:b, s:b, s:I, s:I, s:I}", "replica", r->replica, "io_running",
                     r->io_running, "sql_running", r->sql_running, "lag_seconds",
                     (json_int_t)r->lag_seconds, "lag_transactions",
                     (json_int_t)r->lag_transactions, "behind_ms", (json_int_t)r->behind_ms);
}

static json_t *counts_json(const char *const *names, const int64_t *v, size_t n)
{
    json_t *o = json_object();
    bool ok = true;
    for (size_t i = 0; i < n; i++)
        set(o, names[i], json_integer(v[i]), &ok);
    if (!ok)
        o = (json_decref(o), NULL);
    return o;
}

static json_t *relay_json(const cq_mqmgr_relay_t *r)
{
    json_t *o = json_object();
    bool ok = true;
    set(o, "connections",
        counts_json(cq_mqmgr_transport_names, r->connections, CQ_MQMGR_NTRANSPORTS), &ok);
    set(o, "channels", counts_json(cq_mqmgr_chantype_names, r->channels, CQ_MQMGR_NCHANTYPES), &ok);
    set(o, "subscribers", json_integer(r->subscribers), &ok);
    set(o, "fanouts_total", json_integer(r->fanouts_total), &ok);
    set(o, "slow_consumer_closes_total", json_integer(r->slow_consumer_closes_total), &ok);
    if (!ok)
        o = (json_decref(o), NULL);
    return o;
}

/* Rate of a running total of the last two reports (field picked by get). */
static double server_rate(const mgr_server_t *s, int64_t (*get)(const cq_mqmgr_msg_t *))
{
    if (!s->prev || !s->last)
        return 0;
    return cq__mgr_rate(get(s->last), get(s->prev), s->last_ms, s->prev_ms);
}

static int64_t produced(const cq_mqmgr_msg_t *r)
{
    return r->ext.produced_total;
}
static int64_t consumed(const cq_mqmgr_msg_t *r)
{
    return r->ext.consumed_total;
}
static int64_t fanouts(const cq_mqmgr_msg_t *r)
{
    return r->ext.relay.fanouts_total;
}

static json_t *server_json(const cq_mgr_t *m, const mgr_server_t *s, uint64_t now)
{
    const cq_mqmgr_ext_t *x = &s->last->ext;
    json_t *o = json_object();
    bool ok = true;
    set(o, "appid", json_integer(s->appid), &ok);
    set(o, "group_id", json_integer(s->group_id), &ok);
    set(o, "addr", x->has & CQ_MQMGR_X_ADDR ? json_string(x->addr) : json_null(), &ok);
    set(o, "shard", json_integer(cq__mgr_server_shard(s)), &ok);
    set(o, "master", json_boolean(cq__mgr_server_master(s)), &ok);
    set(o, "offline", json_boolean(cq__mgr_server_offline(m, s)), &ok);
    set(o, "reported_offline", json_boolean(x->offline), &ok);
    set(o, "draining", json_boolean(x->draining), &ok);
    set(o, "connected", json_boolean(s->conn != NULL), &ok);
    set(o, "stale", json_boolean(cq__mgr_server_stale(m, s, now)), &ok);
    set(o, "age_ms", json_integer(now > s->last_ms ? (json_int_t)(now - s->last_ms) : 0), &ok);
    set(o, "config_version",
        x->has & CQ_MQMGR_X_CONFIG_VERSION ? json_integer(x->config_version) : json_null(), &ok);
    /* behind: the manager has a configuration this server has not applied (it reported an
     * older version, or none) */
    int64_t want = cq__mgr_state_version(m->doc);
    bool behind = want > 0 && (!(x->has & CQ_MQMGR_X_CONFIG_VERSION) || x->config_version < want);
    set(o, "config_behind", json_boolean(behind), &ok);
    set(o, "serverinfo", info_json(&s->last->info), &ok);
    set(o, "produce_rate", json_real(server_rate(s, produced)), &ok);
    set(o, "consume_rate", json_real(server_rate(s, consumed)), &ok);
    set(o, "repl", x->has & CQ_MQMGR_X_REPL ? repl_json(&x->repl) : json_null(), &ok);
    set(o, "relay", x->has & CQ_MQMGR_X_RELAY ? relay_json(&x->relay) : json_null(), &ok);
    if (!ok)
        o = (json_decref(o), NULL);
    return o;
}

/* The shards seen in reports, ascending, in shards[0..*n) (at most cap). */
static size_t shard_list(const cq_mgr_t *m, uint32_t *shards, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nservers; i++) {
        if (!m->servers[i]->last || cq__mgr_server_relay_only(m->servers[i]))
            continue;
        uint32_t sh = cq__mgr_server_shard(m->servers[i]);
        size_t j = 0;
        while (j < n && shards[j] < sh)
            j++;
        if ((j < n && shards[j] == sh) || n == cap)
            continue;
        memmove(&shards[j + 1], &shards[j], (n - j) * sizeof(*shards));
        shards[j] = sh;
        n++;
    }
    return n;
}

static json_t *shard_json(const cq_mgr_t *m, uint32_t shard, uint64_t now, json_t *alerts, bool *ok)
{
    json_t *o = json_object(), *standbys = json_array(), *master = NULL, *repl = NULL;
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (!s->last || cq__mgr_server_shard(s) != shard || cq__mgr_server_relay_only(s))
            continue;
        bool live = !cq__mgr_server_stale(m, s, now);
        if (cq__mgr_server_master(s)) {
            if (!master || live) {
                json_decref(master);
                master = json_integer(s->appid);
            }
            continue;
        }
        append(standbys, json_integer(s->appid), ok);
        const cq_mqmgr_repl_t *r = &s->last->ext.repl;
        if (!repl && live && (s->last->ext.has & CQ_MQMGR_X_REPL))
            repl = json_pack("{s:b, s:b, s:I, s:I}", "io_running", r->io_running, "sql_running",
                             r->sql_running, "lag_seconds", (json_int_t)r->lag_seconds, "behind_ms",
                             (json_int_t)r->behind_ms);
    }
    int64_t behind = 0;
    bool alert = cq__mgr_shard_alert(m, shard, now, &behind);
    set(o, "shard", json_integer(shard), ok);
    set(o, "master", master ? master : json_null(), ok);
    set(o, "standbys", standbys, ok);
    set(o, "repl", repl ? repl : json_null(), ok);
    set(o, "alert", json_boolean(alert), ok);
    if (alert)
        append(alerts,
               json_pack("{s:s, s:I, s:I}", "kind", "repl_lag", "shard", (json_int_t)shard,
                         "behind_ms", (json_int_t)behind),
               ok);
    return o;
}

/* A reported topic entry of r named name, or NULL. */
static const cq_mqmgr_topic_t *find_topic(const cq_mqmgr_msg_t *r, const char *name)
{
    for (size_t i = 0; r && i < r->ext.ntopics; i++)
        if (strcmp(r->ext.topics[i].name, name) == 0)
            return &r->ext.topics[i];
    return NULL;
}

static json_t *topic_json(const cq_mgr_t *m, const char *name, uint64_t now)
{
    json_t *st = json_object_get(json_object_get(m->doc, "topics"), name);
    json_t *o = json_object(), *shards = json_array(), *consumers = json_array();
    bool ok = true, online = st ? json_is_true(json_object_get(st, "online")) : true;
    double rate = 0;
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        const cq_mqmgr_topic_t *t = s->last ? find_topic(s->last, name) : NULL;
        if (!t || cq__mgr_server_stale(m, s, now) || !cq__mgr_server_master(s))
            continue;
        if (!st)
            online = t->online;
        const cq_mqmgr_topic_t *p = find_topic(s->prev, name);
        if (p)
            rate += cq__mgr_rate(t->produced_total, p->produced_total, s->last_ms, s->prev_ms);
        uint32_t sh = cq__mgr_server_shard(s);
        append(shards,
               json_pack("{s:I, s:I, s:I}", "shard", (json_int_t)sh, "last_offset",
                         (json_int_t)t->last_offset, "produced_total",
                         (json_int_t)t->produced_total),
               &ok);
        for (size_t k = 0; k < t->nconsumers; k++)
            append(consumers,
                   json_pack("{s:s, s:I, s:I, s:I}", "id", t->consumers[k].id, "shard",
                             (json_int_t)sh, "offset", (json_int_t)t->consumers[k].offset, "lag",
                             (json_int_t)t->consumers[k].lag),
                   &ok);
    }
    set(o, "name", json_string(name), &ok);
    set(o, "online", json_boolean(online), &ok);
    /* null: the manager never set one, and each server keeps its own */
    json_t *ret = st ? json_object_get(st, "retention") : NULL;
    set(o, "retention", ret ? json_integer(json_integer_value(ret)) : json_null(), &ok);
    set(o, "produce_rate", json_real(rate), &ok);
    set(o, "shards", shards, &ok);
    set(o, "consumers", consumers, &ok);
    if (!ok)
        o = (json_decref(o), NULL);
    return o;
}

/* Topic names: the state's and the reported ones, each once (the object keeps them). */
static json_t *topic_names(const cq_mgr_t *m, uint64_t now)
{
    json_t *names = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(m->doc, "topics"), k, v)
    {
        json_object_set_new(names, k, json_true());
    }
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (!s->last || cq__mgr_server_stale(m, s, now))
            continue;
        for (size_t t = 0; t < s->last->ext.ntopics; t++)
            json_object_set_new(names, s->last->ext.topics[t].name, json_true());
    }
    return names;
}

static json_t *modules_json(const cq_mgr_t *m)
{
    json_t *out = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(m->doc, "modules"), k, v)
    {
        json_t *copy = json_deep_copy(v);
        if (copy)
            json_object_del(copy, "token"); /* tokens are never returned */
        if (!copy || json_object_set_new(out, k, copy) < 0)
            return json_decref(out), NULL;
    }
    return out;
}

/* The bindings list as saved, or null while the manager never saved bindings (the servers
 * keep their own --bridge-file). */
static json_t *bindings_json(const cq_mgr_t *m)
{
    json_t *b = json_object_get(m->doc, "bindings");
    return b ? json_deep_copy(json_object_get(b, "bindings")) : json_null();
}

static json_t *relay_sum(const cq_mgr_t *m, uint64_t now)
{
    cq_mqmgr_relay_t sum;
    memset(&sum, 0, sizeof(sum));
    double fan = 0;
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (!s->last || cq__mgr_server_stale(m, s, now) || !(s->last->ext.has & CQ_MQMGR_X_RELAY))
            continue;
        const cq_mqmgr_relay_t *r = &s->last->ext.relay;
        for (int k = 0; k < CQ_MQMGR_NTRANSPORTS; k++)
            sum.connections[k] += r->connections[k];
        for (int k = 0; k < CQ_MQMGR_NCHANTYPES; k++)
            sum.channels[k] += r->channels[k];
        sum.subscribers += r->subscribers;
        sum.slow_consumer_closes_total += r->slow_consumer_closes_total;
        fan += server_rate(s, fanouts);
    }
    json_t *o = json_object();
    bool ok = true;
    set(o, "connections",
        counts_json(cq_mqmgr_transport_names, sum.connections, CQ_MQMGR_NTRANSPORTS), &ok);
    set(o, "channels", counts_json(cq_mqmgr_chantype_names, sum.channels, CQ_MQMGR_NCHANTYPES),
        &ok);
    set(o, "subscribers", json_integer(sum.subscribers), &ok);
    set(o, "fanouts_per_s", json_real(fan), &ok);
    set(o, "slow_consumer_closes", json_integer(sum.slow_consumer_closes_total), &ok);
    if (!ok)
        o = (json_decref(o), NULL);
    return o;
}

/* ---- relay nodes ---------------------------------------------------------------------------- */

static const cq_mqmgr_link_t *find_link(const cq_mqmgr_msg_t *r, uint32_t peer)
{
    const cq_mqmgr_relay_t *x = r && (r->ext.has & CQ_MQMGR_X_RELAY) ? &r->ext.relay : NULL;
    for (size_t i = 0; x && i < x->nlinks; i++)
        if (x->links[i].peer == peer)
            return &x->links[i];
    return NULL;
}

/* A link with its rates between the server's last two reports (0 without the previous one). */
static json_t *link_json(const mgr_server_t *s, const cq_mqmgr_link_t *l)
{
    const cq_mqmgr_link_t *p = find_link(s->prev, l->peer);
    double in = p ? cq__mgr_rate(l->packets_in, p->packets_in, s->last_ms, s->prev_ms) : 0;
    double out = p ? cq__mgr_rate(l->packets_out, p->packets_out, s->last_ms, s->prev_ms) : 0;
    double bytes = p ? cq__mgr_rate(l->bytes_out, p->bytes_out, s->last_ms, s->prev_ms) : 0;
    return json_pack("{s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "peer",
                     (json_int_t)l->peer, "up", l->up, "packets_in", (json_int_t)l->packets_in,
                     "packets_out", (json_int_t)l->packets_out, "bytes_out",
                     (json_int_t)l->bytes_out, "gaps", (json_int_t)l->gaps, "resets",
                     (json_int_t)l->resets, "lost", (json_int_t)l->lost, "packets_in_per_s", in,
                     "packets_out_per_s", out, "bytes_out_per_s", bytes);
}

static json_t *addrs_json(const cq_mqmgr_relay_t *x)
{
    json_t *o = json_object();
    bool ok = true;
    for (int t = 0; t < CQ_MQMGR_NTRANSPORTS; t++)
        if (x->addrs[t][0])
            set(o, cq_mqmgr_transport_names[t], json_string(x->addrs[t]), &ok);
    if (!ok)
        o = (json_decref(o), NULL);
    return o;
}

static json_t *relay_node_json(const cq_mgr_t *m, const mgr_server_t *s, uint64_t now)
{
    const cq_mqmgr_relay_t *x = &s->last->ext.relay;
    json_t *o = json_object(), *links = json_array();
    bool ok = true;
    for (size_t i = 0; i < x->nlinks; i++)
        append(links, link_json(s, &x->links[i]), &ok);
    bool offline = cq__mgr_server_offline(m, s) ||
                   ((s->last->ext.has & CQ_MQMGR_X_OFFLINE) && s->last->ext.offline);
    set(o, "appid", json_integer(s->appid), &ok);
    set(o, "node", json_integer(x->node), &ok);
    set(o, "cluster", json_string(x->cluster), &ok);
    set(o, "stale", json_boolean(cq__mgr_server_stale(m, s, now)), &ok);
    set(o, "age_ms", json_integer(now > s->last_ms ? (json_int_t)(now - s->last_ms) : 0), &ok);
    set(o, "offline", json_boolean(offline), &ok);
    set(o, "global_home", json_integer(x->global_home), &ok);
    set(o, "home", json_boolean(x->global_home == x->node), &ok);
    set(o, "members", json_integer(x->members), &ok);
    set(o, "addrs", addrs_json(x), &ok);
    set(o, "connections",
        counts_json(cq_mqmgr_transport_names, x->connections, CQ_MQMGR_NTRANSPORTS), &ok);
    set(o, "channels", counts_json(cq_mqmgr_chantype_names, x->channels, CQ_MQMGR_NCHANTYPES), &ok);
    set(o, "subscribers", json_integer(x->subscribers), &ok);
    set(o, "links", links, &ok);
    if (!ok)
        o = (json_decref(o), NULL);
    return o;
}

static int relay_cmp(const void *a, const void *b)
{
    const cq_mqmgr_relay_t *x = &(*(const mgr_server_t *const *)a)->last->ext.relay;
    const cq_mqmgr_relay_t *y = &(*(const mgr_server_t *const *)b)->last->ext.relay;
    int c = strcmp(x->cluster, y->cluster);
    return c ? c : x->node < y->node ? -1 : x->node > y->node;
}

/* Every server that reported as a relay node, stale ones included, by relay then node. */
static json_t *relay_nodes_json(const cq_mgr_t *m, uint64_t now)
{
    const mgr_server_t **v = cq_malloc((m->nservers ? m->nservers : 1) * sizeof(*v));
    json_t *arr = v ? json_array() : NULL;
    size_t n = 0;
    bool ok = arr != NULL;
    for (size_t i = 0; v && i < m->nservers; i++)
        if (cq__mgr_server_relay_node(m->servers[i]))
            v[n++] = m->servers[i];
    if (v)
        qsort(v, n, sizeof(*v), relay_cmp);
    for (size_t i = 0; ok && i < n; i++)
        append(arr, relay_node_json(m, v[i], now), &ok);
    cq_free(v);
    if (!ok)
        arr = (json_decref(arr), NULL);
    return arr;
}

static json_t *state_view(const cq_mgr_t *m, uint64_t now)
{
    json_t *o = json_object(), *servers = json_array(), *shards = json_array(),
           *topics = json_array(), *alerts = json_array();
    bool ok = true;
    set(o, "version", json_integer(cq__mgr_state_version(m->doc)), &ok);
    set(o, "now_ms", json_integer((json_int_t)now), &ok);
    set(o, "lag_alert_ms", json_integer(m->o.lag_alert_ms), &ok);
    for (size_t i = 0; i < m->nservers; i++)
        if (m->servers[i]->last)
            append(servers, server_json(m, m->servers[i], now), &ok);
    uint32_t ids[256];
    size_t n = shard_list(m, ids, sizeof(ids) / sizeof(ids[0]));
    for (size_t i = 0; i < n; i++)
        append(shards, shard_json(m, ids[i], now, alerts, &ok), &ok);
    json_t *names = topic_names(m, now);
    const char *k;
    json_t *v;
    json_object_foreach(names, k, v)
    {
        append(topics, topic_json(m, k, now), &ok);
    }
    json_decref(names);
    set(o, "servers", servers, &ok);
    set(o, "shards", shards, &ok);
    set(o, "topics", topics, &ok);
    set(o, "modules", modules_json(m), &ok);
    set(o, "bindings", bindings_json(m), &ok);
    set(o, "relay", relay_sum(m, now), &ok);
    set(o, "relay_nodes", relay_nodes_json(m, now), &ok);
    set(o, "alerts", alerts, &ok);
    if (!ok)
        o = (json_decref(o), NULL);
    return o;
}

/* ---- the charts' samples (hist.h) ---------------------------------------------------------- */

static void put(cq_mgr_t *m, double v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(cq_mgr_t *m, double v, const char *fmt, ...)
{
    char key[CQ_MGR_HIST_KEY_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(key, sizeof(key), fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof(key))
        (void)cq__mgr_hist_put(m->hist, key, v); /* past the series' bound: counted, left out */
}

/* A topic's produce rate over its live masters, and each of their consumers' lag. */
static void sample_topic(cq_mgr_t *m, const char *name, uint64_t now)
{
    double rate = 0;
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        const cq_mqmgr_topic_t *t = s->last ? find_topic(s->last, name) : NULL;
        if (!t || cq__mgr_server_stale(m, s, now) || !cq__mgr_server_master(s))
            continue;
        const cq_mqmgr_topic_t *p = find_topic(s->prev, name);
        if (p)
            rate += cq__mgr_rate(t->produced_total, p->produced_total, s->last_ms, s->prev_ms);
        for (size_t k = 0; k < t->nconsumers; k++)
            put(m, (double)t->consumers[k].lag, "topic/%s/lag/%s@%u", name, t->consumers[k].id,
                cq__mgr_server_shard(s));
    }
    put(m, rate, "topic/%s/produce", name);
}

void cq__mgr_sample(cq_mgr_t *m, uint64_t now)
{
    cq__mgr_hist_begin(m->hist, now);
    json_t *names = topic_names(m, now);
    const char *name;
    json_t *v;
    json_object_foreach(names, name, v)
    {
        sample_topic(m, name, now);
    }
    json_decref(names);
    uint32_t shards[256];
    size_t ns = shard_list(m, shards, 256);
    for (size_t i = 0; i < ns; i++) {
        int64_t behind = 0;
        (void)cq__mgr_shard_alert(m, shards[i], now, &behind);
        put(m, (double)behind, "shard/%u/behind_ms", shards[i]);
    }
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (!s->last || cq__mgr_server_stale(m, s, now))
            continue;
        put(m, (double)s->last->info.sockets, "server/%u/sockets", s->appid);
        put(m, server_rate(s, produced), "server/%u/produce", s->appid);
        put(m, server_rate(s, consumed), "server/%u/consume", s->appid);
    }
}

int cq__mgr_state_json(const cq_mgr_t *m, uint64_t now_ms, cq_sbuf_t *out)
{
    json_t *o = state_view(m, now_ms);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    if (!text)
        return -ENOMEM;
    int rc = cq_sbuf_append(out, text, strlen(text));
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(text);
    return rc;
}
