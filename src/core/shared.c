/* shared.c - process-wide state: options, connection directory, metrics.
 *
 * Created by the main thread before any worker runs and freed after they have all stopped, so
 * only its locked and atomic parts are ever touched concurrently (place.h lists them).
 *
 * This is the only state every worker can reach, so it is kept small and every part of it has
 * one discipline (place.h lists the exceptions handlers may use): options are immutable after
 * start, metrics are relaxed atomics written per worker and only summed here, and the
 * connection directory is under one leaf mutex, taken on accept, close and subscription
 * changes, never per message. Connection ids are sequential, never 0 and kept within
 * conn-id-bits, as channeld's -dev mode does: 0 means "none" in several messages, and game
 * servers may pack ids into fewer bits (UE keeps them to 13, -mcb 13). */
#include "core.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cq_shared_new(const cq_core_opts_t *opts, const cq_core_ops_t *ops, void *ops_ud,
                  cq_shared_t **ret, char *err, size_t errlen)
{
    if (opts->workers < 1 || opts->workers > CQ_MAX_WORKERS) {
        snprintf(err, errlen, "workers must be 1..%d", CQ_MAX_WORKERS);
        return CQ_ECONFIG;
    }
    cq_idl_t ids; /* node bits only in a relay of several nodes */
    int r = cq__idl_init(opts->conn_id_bits, opts->relay_node ? opts->relay_node_bits : 0, &ids);
    if (r == 0 && opts->relay_node >= (1u << ids.node_bits))
        r = CQ_ECONFIG;
    if (r < 0) {
        snprintf(err, errlen, "bad connection id layout");
        return r;
    }
    cq_shared_t *sh = cq_calloc(1, sizeof(*sh));
    if (!sh)
        return -ENOMEM;
    sh->o = *opts;
    sh->ids = ids;
    sh->node = opts->relay_node;
    sh->ops = ops;
    sh->ops_ud = ops_ud;
    pthread_mutex_init(&sh->dir_lock, NULL);
    pthread_mutex_init(&sh->tokens_mu, NULL);
    cq_map_init(&sh->dir);
    sh->next_conn = 1;
    /* The workers' clock is monotonic; RECOVERY_CHANNEL_DATA.subTime is unix time (channeld's). */
    sh->unix_offset_ns = cq_clock_unix_ns() - (int64_t)cq_clock_mono_ns();
    pthread_mutex_init(&sh->groups_mu, NULL);
    pthread_mutex_init(&sh->wk_mu, NULL);
    /* The entity groups table exists even without a spatial controller (entity channels do not
     * need one); slot_owner has one atomic holder per server slot of the grid. */
    sh->spatial = opts->spatial;
    if (!(sh->groups = cq_entgroups_new()) ||
        (sh->spatial &&
         !(sh->slot_owner = cq_calloc(cq_spatial_servers(sh->spatial), sizeof(*sh->slot_owner))))) {
        cq_shared_free(sh);
        return -ENOMEM;
    }
    /* Read now, before any worker runs: a token file that does not load stops the start. */
    if (opts->auth_provider == CQ_AUTH_FILE) {
        r = cq__tokens_load(sh, opts->auth_token_file, err, errlen);
        if (r < 0) {
            cq_shared_free(sh);
            return r;
        }
    }
    *ret = sh;
    return 0;
}

void cq_shared_set_ops(cq_shared_t *sh, const cq_core_ops_t *ops, void *ops_ud)
{
    sh->ops = ops;
    sh->ops_ud = ops_ud;
}

cq_shared_t *cq_shared_free(cq_shared_t *sh)
{
    if (!sh)
        return NULL;
    uint32_t it = 0;
    void *v;
    while (cq_map_next(&sh->dir, &it, NULL, &v)) {
        cq_free(((cq_dir_ent_t *)v)->pit);
        cq_free(v);
    }
    cq_map_done(&sh->dir);
    for (uint32_t i = 0; i < sh->n_rec_wait; i++)
        cq__xmsg_free(sh->rec_wait[i]);
    pthread_mutex_destroy(&sh->dir_lock);
    cq__tokens_free(sh);
    pthread_mutex_destroy(&sh->tokens_mu);
    cq__recov_handles_free(sh);
    cq_entgroups_free(sh->groups);
    pthread_mutex_destroy(&sh->groups_mu);
    cq_free(sh->slot_owner);
    cq_free(sh->wk_ids);
    pthread_mutex_destroy(&sh->wk_mu);
    cq_free(sh);
    return NULL;
}

static uint32_t id_limit(const cq_shared_t *sh)
{
    return cq__id_conn_limit(&sh->ids);
}

uint32_t cq_shared_conn_id_alloc(cq_shared_t *sh, int type)
{
    return cq_shared_conn_id_alloc_on(sh, type, -1);
}

/* Under dir_lock: the acceptors (worker 0) and every KCP worker allocate concurrently.
 * max-connections counts directory entries, so a closing connection stops counting at its close
 * (conn.c). With worker >= 0 the id must hash to that worker, where the KCP session's datagrams
 * arrive: ids of other workers are skipped (and left for their own allocations). */
uint32_t cq_shared_conn_id_alloc_on(cq_shared_t *sh, int type, int worker)
{
    uint32_t id = 0;
    pthread_mutex_lock(&sh->dir_lock);
    if (cq_map_count(&sh->dir) - sh->dir_remote >= sh->o.max_connections)
        goto out;
    cq_dir_ent_t *e = cq_calloc(1, sizeof(*e));
    if (!e)
        goto out;
    /* Sequential from 1, wrapping within conn-id-bits, never 0, skipping ids in use. */
    for (uint32_t tries = 0; tries < id_limit(sh); tries++) {
        uint32_t cand = cq__id_conn(&sh->ids, sh->node, sh->next_conn);
        sh->next_conn = sh->next_conn >= id_limit(sh) - 1 ? 1 : sh->next_conn + 1;
        if (worker >= 0 && cq_shared_conn_worker(sh, cand) != worker)
            continue;
        if (!cq_map_get(&sh->dir, cand)) {
            id = cand;
            break;
        }
    }
    if (!id || cq_map_put(&sh->dir, id, e) < 0) {
        cq_free(e);
        id = 0;
        goto out;
    }
    e->type = (uint8_t)type;
out:
    pthread_mutex_unlock(&sh->dir_lock);
    return id;
}

/* From the main thread (SIGHUP): each worker resolves its own channels against the new schema
 * when its XM_SCHEMA arrives, so no channel is touched off its worker. */
void cq_shared_set_schema(cq_shared_t *sh, const struct cq_schema *schema)
{
    for (int w = 0; w < sh->o.workers; w++) {
        cq_xmsg_t *m = cq__xmsg_new(XM_SCHEMA, 0);
        if (!m)
            continue;
        m->ptr = schema;
        cq__xmsg_post_any(sh, w, m);
    }
}

int cq_shared_workers(const cq_shared_t *sh)
{
    return sh->o.workers;
}

/* ---- metrics ---------------------------------------------------------------------------- */

/* channeld's metric names and labels (§5.2) are kept, so that its dashboards work unchanged;
 * chanq's own counters sit beside them (doc/metrics.md). The order follows the M_* enum in
 * core.h. */
static const char *const counter_names[M__COUNT] = {"messages_in",
                                                    "messages_out",
                                                    "packets_in",
                                                    "packets_out",
                                                    "bytes_in",
                                                    "bytes_out",
                                                    "connection_closed",
                                                    "slow_consumer_closed",
                                                    "fsm_disallowed",
                                                    "auth_failed",
                                                    "auth_timeout_closed",
                                                    "idle_timeout_closed",
                                                    "messages_dropped",
                                                    "chanq_limit_closed",
                                                    "packets_drop",
                                                    "packets_frag",
                                                    "packets_comb",
                                                    "chanq_fanouts_total",
                                                    "chanq_data_windows_stretched_total",
                                                    "chanq_data_windows_merged_total",
                                                    "chanq_data_resyncs_total",
                                                    "chanq_data_coarsen_rises_total",
                                                    "chanq_data_coarsen_falls_total",
                                                    "chanq_relay_messages_dropped_total",
                                                    "chanq_bridge_undeliverable_total"};
/* Label values are channeld's enum names (§5.2), as its dashboards select on them. */
static const char *const conn_types[3] = {"NO_CONNECTION", "SERVER", "CLIENT"};
static const char *const transports[CQ_CONN_TRANSPORTS] = {"tcp", "ws", "wss", "kcp"};
static const char *const chan_types[8] = {"OTHER",   "GLOBAL", "PRIVATE", "SUBWORLD",
                                          "SPATIAL", "ENTITY", "TEST",    ""};

/* Sum of counter m for connection type t over every worker. Any thread. Summed when read, so
 * the per-message path writes only its own worker's counters (core.h). */
static uint64_t counter_sum(cq_shared_t *sh, int m, int t)
{
    uint64_t s = 0;
    for (int w = 0; w < sh->o.workers; w++)
        if (sh->cores[w])
            s += atomic_load_explicit(&sh->cores[w]->counters.c[m][t], memory_order_relaxed);
    return s;
}

/* One counter by its metric name, summed over workers and connection types, for the manager's
 * report (src/main/mgrfig.c); 0 for an unknown name. */
uint64_t cq_shared_counter(cq_shared_t *sh, const char *name)
{
    for (int m = 0; m < M__COUNT; m++)
        if (strcmp(name, counter_names[m]) == 0)
            return counter_sum(sh, m, 0) + counter_sum(sh, m, 1) + counter_sum(sh, m, 2);
    return 0;
}

/* Each series is read on its own, with no lock: the report is a snapshot that need not be
 * consistent across series (a connection may be counted before its subscriptions). */
void cq_shared_gauges(cq_shared_t *sh, int64_t ret_connections[CQ_CONN_TRANSPORTS],
                      int64_t ret_channels[6], int64_t *ret_subscribers)
{
    for (int tr = 0; tr < CQ_CONN_TRANSPORTS; tr++)
        ret_connections[tr] = atomic_load(&sh->metrics.by_transport[tr][1]) +
                              atomic_load(&sh->metrics.by_transport[tr][2]);
    for (int t = 0; t < 6; t++)
        ret_channels[t] = atomic_load(&sh->metrics.channels[t]);
    *ret_subscribers = atomic_load(&sh->metrics.subscriptions);
}

static size_t put(char *buf, size_t cap, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Appends to buf at off. Past cap the text is cut and every later line dropped: the result is
 * truncated, never overrun (cq_shared_metrics clamps the length it returns). */
static size_t put(char *buf, size_t cap, size_t off, const char *fmt, ...)
{
    if (off >= cap)
        return off;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + off, cap - off, fmt, ap);
    va_end(ap);
    return n < 0 ? off : off + (size_t)n;
}

/* The longest housekeeping tick of the last round, over every worker, in ms. */
static double tick_ms(cq_shared_t *sh)
{
    uint64_t ns = 0;
    for (int w = 0; w < sh->o.workers; w++)
        if (sh->cores[w]) {
            uint64_t v =
                atomic_load_explicit(&sh->cores[w]->counters.tick_ns, memory_order_relaxed);
            ns = v > ns ? v : ns;
        }
    return (double)ns / 1e6;
}

/* Graceful overload (doc/spatial.md "Overload"): the highest level over the workers, and what
 * the levels and the data limit did. */
static size_t metrics_coarsen(cq_shared_t *sh, char *buf, size_t cap, size_t o)
{
    static const struct {
        int m;
        const char *help;
    } rows[] = {
        {M_DATA_STRETCHED, "Channel-data windows that started stretched by the overload level."},
        {M_DATA_MERGED, "Missed channel-data windows merged into a later fan-out (overload)."},
        {M_DATA_RESYNCS, "Channel-data fan-outs not queued to a connection over "
                         "--sendq-data-limit; it gets the full state next."},
        {M_COARSEN_RISES, "Rises of a worker's overload level."},
        {M_COARSEN_FALLS, "Falls of a worker's overload level."},
        {M_NODE_DROPPED, "Messages for another relay node dropped: a kind that cannot cross "
                         "nodes yet, or the relay's queue full (doc/relay-cluster.md)."},
    };
    uint32_t level = 0;
    for (int w = 0; w < sh->o.workers; w++)
        if (sh->cores[w]) {
            uint32_t l =
                atomic_load_explicit(&sh->cores[w]->counters.coarsen_level, memory_order_relaxed);
            level = l > level ? l : level;
        }
    o = put(buf, cap, o,
            "# HELP chanq_data_coarsen_level Highest overload level over the workers (0 normal, "
            "%u most coarsened).\n# TYPE chanq_data_coarsen_level gauge\n"
            "chanq_data_coarsen_level %u\n",
            CQ_COARSEN_MAX, level);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *name = counter_names[rows[i].m];
        o = put(buf, cap, o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, rows[i].help, name,
                name, (unsigned long long)counter_sum(sh, rows[i].m, 0));
    }
    return o;
}

/* chanq's own relay metrics (doc/metrics.md): by transport, subscribers, fan-outs. The logs
 * counter is channeld's (warnings and errors logged), kept under its name. */
static size_t metrics_chanq(cq_shared_t *sh, char *buf, size_t cap, size_t o)
{
    o = put(buf, cap, o,
            "# HELP chanq_connections Open connections, by transport and type.\n"
            "# TYPE chanq_connections gauge\n");
    for (int tr = 0; tr < CQ_CONN_TRANSPORTS; tr++)
        for (int t = 1; t < 3; t++)
            o = put(buf, cap, o, "chanq_connections{transport=\"%s\",type=\"%s\"} %lld\n",
                    transports[tr], conn_types[t],
                    (long long)atomic_load(&sh->metrics.by_transport[tr][t]));
    o = put(buf, cap, o,
            "# HELP chanq_subscribers Subscriptions (connection, channel) now.\n"
            "# TYPE chanq_subscribers gauge\nchanq_subscribers %lld\n",
            (long long)atomic_load(&sh->metrics.subscriptions));
    o = put(buf, cap, o,
            "# HELP chanq_fanouts_total Records queued to subscribers by channel fan-outs.\n"
            "# TYPE chanq_fanouts_total counter\nchanq_fanouts_total %llu\n",
            (unsigned long long)counter_sum(sh, M_FANOUTS, 0));
    o = metrics_coarsen(sh, buf, cap, o);
    o = put(buf, cap, o,
            "# HELP chanq_bridge_undeliverable_total Bridge events for a channel that did not "
            "exist when they arrived, dropped.\n# TYPE chanq_bridge_undeliverable_total counter\n"
            "chanq_bridge_undeliverable_total %llu\n",
            (unsigned long long)counter_sum(sh, M_BRIDGE_UNDELIVERABLE, 0));
    o = put(buf, cap, o,
            "# HELP logs Log lines written at WARN and above, by level.\n# TYPE logs counter\n"
            "logs{level=\"warn\"} %llu\n",
            (unsigned long long)cq_log_count(CQ_LOG_WARN));
    o = put(buf, cap, o, "logs{level=\"error\"} %llu\n",
            (unsigned long long)cq_log_count(CQ_LOG_ERROR));
    return o;
}

/* The HELP text of the counters that carry connType (channeld's names, doc/metrics.md). */
_Static_assert(M_PACKETS_COMB + 1 == M__LABELED, "one HELP text per counter with connType");
static const char *const labeled_help[M__LABELED] = {
    "channeld messages received, by connection type.",
    "channeld messages queued to a connection, by connection type.",
    "Packets received, by connection type.",
    "Packets sent, by connection type.",
    "Bytes received, by connection type.",
    "Bytes sent, by connection type.",
    "Connections closed, by connection type.",
    "Connections closed for a send queue over its limit (slow consumer), by connection type.",
    "Messages refused by the connection's FSM, by connection type.",
    "Authentications that failed, by connection type.",
    "Connections closed for not authenticating in time, by connection type.",
    "Connections closed for being idle, by connection type.",
    "Messages dropped (no channel, no owner, not allowed...), by connection type.",
    "Connections closed for a limit (doc/protocol.md), by connection type.",
    "Packets dropped (kept as channeld registers it; nothing adds to it), by connection type.",
    "Reads that ended mid-header or mid-packet, by connection type.",
    "Packets parsed, by connection type.",
};

/* Any thread (the admin listener runs on worker 0): only atomics are read, no worker is asked,
 * so a scrape never waits for a busy worker. */
size_t cq_shared_metrics(cq_shared_t *sh, char *buf, size_t cap)
{
    size_t o = 0;
    for (int m = 0; m < M__LABELED; m++) {
        o = put(buf, cap, o, "# HELP %s %s\n# TYPE %s counter\n", counter_names[m], labeled_help[m],
                counter_names[m]);
        for (int t = 1; t < 3; t++)
            o = put(buf, cap, o, "%s{connType=\"%s\"} %llu\n", counter_names[m], conn_types[t],
                    (unsigned long long)counter_sum(sh, m, t));
    }
    o = put(buf, cap, o,
            "# HELP connection_num Open connections, by type (every transport).\n"
            "# TYPE connection_num gauge\n");
    for (int t = 1; t < 3; t++)
        o = put(buf, cap, o, "connection_num{type=\"%s\"} %lld\n", conn_types[t],
                (long long)atomic_load(&sh->metrics.connections[t]));
    o = put(buf, cap, o, "# HELP channel_num Channels, by type.\n# TYPE channel_num gauge\n");
    for (int t = 0; t < 7; t++)
        o = put(buf, cap, o, "channel_num{type=\"%s\"} %lld\n", chan_types[t],
                (long long)atomic_load(&sh->metrics.channels[t]));
    /* chanq ticks no channel: every type reports the last worker housekeeping tick. */
    o = put(buf, cap, o,
            "# HELP channel_tick_duration ms of the longest worker housekeeping tick of the last "
            "round (chanq ticks no channel: every type reports it).\n"
            "# TYPE channel_tick_duration gauge\n");
    double tk = tick_ms(sh);
    for (int t = 0; t < 7; t++)
        o = put(buf, cap, o, "channel_tick_duration{type=\"%s\"} %.3f\n", chan_types[t], tk);
    o = metrics_chanq(sh, buf, cap, o);
    o = put(buf, cap, o,
            "# HELP buffers_live Send buffers allocated now.\n# TYPE buffers_live gauge\n"
            "buffers_live %ld\n",
            cq_buf_live());
    return o < cap ? o : cap;
}

/* The text is a fixed set of series (no label per channel or connection), a few KiB: this
 * leaves room to spare. */
#define METRICS_CAP (64u * 1024u)

int cq_shared_metrics_append(void *ud, cq_sbuf_t *out)
{
    if (cq_sbuf_reserve(out, METRICS_CAP) < 0)
        return -ENOMEM;
    out->len += cq_shared_metrics(ud, (char *)out->data + out->len, METRICS_CAP);
    return 0;
}
