/* metrics.c - the durable-topic metrics: counted on the engine's thread, rendered as
 * Prometheus text by cq_mqsrv_metrics(). See cq_mqsrv.h. */
#include "cq_alloc.h"
#include "cq_err.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- counting ----------------------------------------------------------------------------- */

void cq__mqsrv_metrics_submitted(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    mq_topic_t *t = req->op == CQ_WRITER_PRODUCE ? cq__mqsrv_topic(s, req->topic) : NULL;
    if (t)
        t->pending += req->n_msgs;
}

/* Records consumer's offset in t (the first CQ_MQSRV_METRIC_CONSUMERS consumers only). */
static void consumer_offset(mq_topic_t *t, const char *consumer, uint64_t offset)
{
    for (size_t i = 0; i < t->nconsumers; i++) {
        if (strcmp(t->consumers[i].id, consumer) == 0) {
            t->consumers[i].offset = offset;
            return;
        }
    }
    if (t->nconsumers >= CQ_MQSRV_METRIC_CONSUMERS)
        return;
    if (t->nconsumers == t->consumers_cap) {
        size_t cap = t->consumers_cap ? t->consumers_cap * 2 : 4;
        mq_consumer_t *v = cq_realloc(t->consumers, cap * sizeof(*v));
        if (!v)
            return; /* metrics only */
        t->consumers = v;
        t->consumers_cap = cap;
    }
    mq_consumer_t *c = &t->consumers[t->nconsumers++];
    snprintf(c->id, sizeof(c->id), "%s", consumer);
    c->offset = offset;
}

void cq__mqsrv_metrics_completed(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    mq_topic_t *t = req->op == CQ_WRITER_TOPIC_LIST ? NULL : cq__mqsrv_topic(s, req->topic);
    if (!t)
        return;
    switch (req->op) {
    case CQ_WRITER_PRODUCE:
        t->pending -= t->pending < req->n_msgs ? t->pending : req->n_msgs;
        if (req->err == 0)
            t->produced += req->n_msgs;
        break;
    case CQ_WRITER_PURGE:
        if (req->err == 0)
            t->purged += req->purged;
        break;
    case CQ_WRITER_COMMIT_OFFSET:
    case CQ_WRITER_GET_OFFSET:
        if (req->err == 0)
            consumer_offset(t, req->consumer, req->offset);
        break;
    default:
        break;
    }
}

/* ---- rendering ---------------------------------------------------------------------------- */

typedef struct out {
    cq_sbuf_t *sb;
    int err;
} out_t;

__attribute__((format(printf, 2, 3))) static void put(out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (o->err == 0)
        o->err = cq_sbuf_vprintf(o->sb, fmt, ap);
    va_end(ap);
}

/* A label value with \, " and newline escaped (Prometheus text format). */
static void label(const char *v, char *buf, size_t cap)
{
    size_t k = 0;
    for (; *v && k + 3 < cap; v++) {
        if (*v == '\\' || *v == '"' || *v == '\n')
            buf[k++] = '\\';
        buf[k++] = *v == '\n' ? 'n' : *v;
    }
    buf[k] = '\0';
}

static void head(out_t *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void engine_metrics(out_t *o, const cq_mqsrv_t *s)
{
    static const struct {
        const char *name, *help;
        size_t off;
    } c[] = {
        {"chanq_mq_connections_total", "Seed-protocol connections accepted.",
         offsetof(cq_mqsrv_stats_t, conns)},
        {"chanq_mq_frames_total", "Seed-protocol frames received.",
         offsetof(cq_mqsrv_stats_t, frames)},
        {"chanq_mq_bad_frames_total", "Frames answered with an error (not decodable).",
         offsetof(cq_mqsrv_stats_t, bad_frames)},
        {"chanq_mq_produced_total", "Messages acknowledged after commit (every topic).",
         offsetof(cq_mqsrv_stats_t, produced)},
        {"chanq_mq_consumed_total", "Messages returned by consume requests.",
         offsetof(cq_mqsrv_stats_t, consumed)},
        {"chanq_mq_pushes_total", "Push frames sent to watchers.",
         offsetof(cq_mqsrv_stats_t, pushes)},
        {"chanq_mq_busy_total", "Requests refused as busy (pending writes over the limit).",
         offsetof(cq_mqsrv_stats_t, busy)},
        {"chanq_mq_slow_consumers_total",
         "Connections closed as slow consumers (queued bytes over mq-sendq-hard-limit, or over "
         "mq-sendq-soft-limit for too long).",
         offsetof(cq_mqsrv_stats_t, slow)},
        {"chanq_mq_not_master_total",
         "Writes answered not_master (err 18): refused on a slave or a fenced master, or "
         "produces committed after the fence closed (not acknowledged).",
         offsetof(cq_mqsrv_stats_t, not_master)},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        head(o, c[i].name, "counter", c[i].help);
        put(o, "%s %" PRIu64 "\n", c[i].name,
            *(const uint64_t *)(const void *)((const char *)&s->st + c[i].off));
    }
    head(o, "chanq_mq_offline_refused_total", "counter",
         "Produces and topic creations answered server_offline (err 19) while offline.");
    put(o, "chanq_mq_offline_refused_total %" PRIu64 "\n", s->st.offline_refused);
    head(o, "chanq_mq_offline", "gauge",
         "1 while the manager holds this server offline (produces go to other servers).");
    put(o, "chanq_mq_offline %d\n", s->offline ? 1 : 0);
    head(o, "chanq_mq_topics", "gauge", "Durable topics.");
    put(o, "chanq_mq_topics %zu\n", s->ntopics);
    head(o, "chanq_mq_role", "gauge",
         "1 while this server is its shard's master (writes may be acknowledged), else 0.");
    put(o, "chanq_mq_role{shard=\"%" PRIu32 "\"} %d\n", s->shard, cq__mqsrv_writable(s) ? 1 : 0);
}

/* One line per topic of the value at off in mq_topic_t. */
static void topic_series(out_t *o, const cq_mqsrv_t *s, const char *name, const char *type,
                         const char *help, size_t off)
{
    head(o, name, type, help);
    for (size_t i = 0; i < s->ntopics; i++) {
        const mq_topic_t *t = s->topics[i];
        put(o, "%s{topic=\"%s\",shard=\"%" PRIu32 "\"} %" PRIu64 "\n", name, t->name, s->shard,
            *(const uint64_t *)(const void *)((const char *)t + off));
    }
}

static void topic_metrics(out_t *o, const cq_mqsrv_t *s)
{
    topic_series(o, s, "chanq_mq_topic_produced_total", "counter",
                 "Messages acknowledged after commit, per topic.", offsetof(mq_topic_t, produced));
    topic_series(o, s, "chanq_mq_topic_last_offset", "gauge",
                 "Highest offset committed in the topic.", offsetof(mq_topic_t, last_offset));
    topic_series(o, s, "chanq_mq_topic_pending_messages", "gauge",
                 "Messages of produces waiting for their commit.", offsetof(mq_topic_t, pending));
    topic_series(o, s, "chanq_mq_topic_purged_total", "counter",
                 "Rows removed by retention since start.", offsetof(mq_topic_t, purged));
    head(o, "chanq_mq_topic_online", "gauge", "1 when the topic is online, 0 when offline.");
    for (size_t i = 0; i < s->ntopics; i++)
        put(o, "chanq_mq_topic_online{topic=\"%s\",shard=\"%" PRIu32 "\"} %d\n", s->topics[i]->name,
            s->shard, s->topics[i]->online ? 1 : 0);
}

static void consumer_metrics(out_t *o, const cq_mqsrv_t *s)
{
    char id[2 * CQ_STORE_CONSUMER_MAX + 1];
    head(o, "chanq_mq_consumer_offset", "gauge",
         "Last committed offset of a consumer (committed or read since start).");
    for (size_t i = 0; i < s->ntopics; i++) {
        const mq_topic_t *t = s->topics[i];
        for (size_t j = 0; j < t->nconsumers; j++) {
            label(t->consumers[j].id, id, sizeof(id));
            put(o,
                "chanq_mq_consumer_offset{topic=\"%s\",consumer=\"%s\",shard=\"%" PRIu32
                "\"} %" PRIu64 "\n",
                t->name, id, s->shard, t->consumers[j].offset);
        }
    }
    head(o, "chanq_mq_consumer_lag", "gauge",
         "Topic last offset minus the consumer's committed offset (an upper bound of the "
         "messages behind: offsets are not dense).");
    for (size_t i = 0; i < s->ntopics; i++) {
        const mq_topic_t *t = s->topics[i];
        for (size_t j = 0; j < t->nconsumers; j++) {
            uint64_t off = t->consumers[j].offset;
            label(t->consumers[j].id, id, sizeof(id));
            put(o,
                "chanq_mq_consumer_lag{topic=\"%s\",consumer=\"%s\",shard=\"%" PRIu32 "\"} %" PRIu64
                "\n",
                t->name, id, s->shard, t->last_offset > off ? t->last_offset - off : 0);
        }
    }
}

/* A histogram from non-cumulative buckets; bounds scaled by 1/div (seconds from us). */
static void histogram(out_t *o, const char *name, const char *help, const uint64_t *b,
                      const uint64_t *bounds, uint64_t sum, double div)
{
    uint64_t cum = 0;
    head(o, name, "histogram", help);
    for (size_t i = 0; i < CQ_WRITER_HIST_N; i++) {
        cum += b[i];
        if (i + 1 < CQ_WRITER_HIST_N)
            put(o, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, (double)bounds[i] / div, cum);
        else
            put(o, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
    }
    put(o, "%s_sum %.6f\n%s_count %" PRIu64 "\n", name, (double)sum / div, name, cum);
}

static void writer_metrics(out_t *o, const cq_writer_stats_t *w)
{
    head(o, "chanq_mq_writer_transactions_total", "counter", "Append transactions attempted.");
    put(o, "chanq_mq_writer_transactions_total %" PRIu64 "\n", w->transactions);
    head(o, "chanq_mq_writer_failed_transactions_total", "counter",
         "Append transactions that failed (none of their messages acknowledged).");
    put(o, "chanq_mq_writer_failed_transactions_total %" PRIu64 "\n", w->failed_txns);
    head(o, "chanq_mq_writer_messages_total", "counter", "Messages committed by the writer.");
    put(o, "chanq_mq_writer_messages_total %" PRIu64 "\n", w->messages);
    head(o, "chanq_mq_writer_pending", "gauge",
         "Units waiting for the store thread (produce messages + other requests).");
    put(o, "chanq_mq_writer_pending %" PRIu64 "\n", w->pending);
    head(o, "chanq_mq_writer_other_ops_total", "counter", "Non-produce store requests run.");
    put(o, "chanq_mq_writer_other_ops_total %" PRIu64 "\n", w->other_ops);
    histogram(o, "chanq_mq_writer_batch_messages",
              "Messages per append transaction (group commit).", w->batch, cq_writer_batch_bounds,
              w->batch_sum, 1.0);
    histogram(o, "chanq_mq_writer_commit_seconds",
              "Duration of an append transaction (statements and COMMIT).", w->commit_us,
              cq_writer_commit_bounds, w->commit_us_sum, 1e6);
}

int cq_mqsrv_metrics(const cq_mqsrv_t *s, cq_sbuf_t *out)
{
    out_t o = {out, 0};
    cq_writer_stats_t ws;
    const cq_mqport_ops_t *ops = s->port.ops;
    engine_metrics(&o, s);
    topic_metrics(&o, s);
    consumer_metrics(&o, s);
    if (ops->control && ops->control(s->port.ud, CQ_MQPORT_WRITER_STATS, &ws) == 0)
        writer_metrics(&o, &ws);
    return o.err;
}
