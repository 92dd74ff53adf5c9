/* mq_io.c - the durable-topic port's edge: the engine (src/mqsrv) on the engine-loop host
 * (io_engine.c), with its two connection classes (seed protocol, HTTP API), the retention timer
 * and the connection to a manager (mq_mgr.c). See cq_mqio.h. This file only adapts. */
#include "cq_mqio.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_mqhttp.h"
#include "cq_mqsrv.h"
#include "io_engine.h"
#include "mq_follow.h"
#include "mq_mgr.h"

#include <errno.h>
#include <stdio.h>

#define MQ_TICK_MS 100 /* send queue housekeeping (soft limits) */

struct cq_mqio {
    io_engine_t *host; /* the loop thread */
    cq_mqsrv_t *srv;   /* borrowed: the composition root's */
    uint64_t grace_ms;
    bool http_on;
    char http_bound[80]; /* "" when the HTTP API is off */
    mq_mgr_t *mgr;       /* the connection to a manager, or NULL (unmanaged) */
    mq_follow_t *follow; /* the connections to followed shards, or NULL */
};

static uint64_t unix_ms(void)
{
    return (uint64_t)(cq_clock_unix_ns() / 1000000);
}

/* ---- connections: the engine's connection ops --------------------------------------------- */

/* Engine op: a slow consumer, closed at once with what it did not read. */
static void conn_abort(void *tctx, int reason, const char *why)
{
    io_sqconn_t *c = tctx;
    CQ_WARN("mq", "closing a connection with %zu unsent bytes: %s (%s)", cq_sendq_bytes(c->q), why,
            cq_strerror(reason));
    cq__io_sqconn_drop(c);
}

static const cq_mqsrv_conn_ops_t conn_ops = {IO_ENGINE_TCP_OPS, conn_abort};

/* ---- the seed protocol's class ------------------------------------------------------------ */

static cq_sendq_t *seed_open(void *ud, io_econn_t *c)
{
    cq_mqsrv_conn_t *sc = cq_mqsrv_conn_new(((cq_mqio_t *)ud)->srv, &conn_ops, &c->sc);
    c->conn = sc;
    return sc ? cq_mqsrv_conn_sendq(sc) : NULL;
}

static void seed_input(void *ud, io_econn_t *c, const uint8_t *p, size_t n)
{
    cq_mqsrv_set_now(((cq_mqio_t *)ud)->srv, (int64_t)unix_ms());
    cq_mqsrv_conn_input(c->conn, p, n);
}

static void seed_closed(void *ud, io_econn_t *c)
{
    cq_mqsrv_conn_close(c->conn);
}

/* A seed connection made progress when the engine took a whole frame since the last look:
 * bytes alone (a frame dribbled one byte at a time) are not. */
static uint64_t seed_frames(void *ud, const io_econn_t *c)
{
    uint64_t frames;
    bool authed;
    cq_mqsrv_conn_progress(c->conn, &frames, &authed);
    return frames;
}

static bool seed_authed(void *ud, const io_econn_t *c)
{
    uint64_t frames;
    bool authed;
    cq_mqsrv_conn_progress(c->conn, &frames, &authed);
    return authed;
}

/* ---- the HTTP API's class ----------------------------------------------------------------- */

static cq_sendq_t *http_open(void *ud, io_econn_t *c)
{
    cq_mqhttp_conn_t *h = cq_mqhttp_conn_new(((cq_mqio_t *)ud)->srv, &conn_ops, &c->sc);
    c->conn = h;
    return h ? cq_mqhttp_conn_sendq(h) : NULL;
}

static void http_input(void *ud, io_econn_t *c, const uint8_t *p, size_t n)
{
    cq_mqsrv_set_now(((cq_mqio_t *)ud)->srv, (int64_t)unix_ms());
    cq_mqhttp_conn_input(c->conn, p, n);
}

static void http_closed(void *ud, io_econn_t *c)
{
    cq_mqhttp_conn_close(c->conn);
}

/* ---- the engine on the host (loop thread) ------------------------------------------------- */

/* Engine op (any thread, under the engine's inbox lock): completions are waiting. */
static void engine_wake(void *ud)
{
    cq__io_engine_wake(((cq_mqio_t *)ud)->host);
}

static const cq_mqsrv_ops_t engine_ops = {engine_wake};

static void on_wake(void *ud)
{
    cq_mqio_t *io = ud;
    cq_mqsrv_set_now(io->srv, (int64_t)unix_ms());
    cq_mqsrv_drain(io->srv);
}

static void on_flush(void *ud)
{
    cq_mqsrv_flush(((cq_mqio_t *)ud)->srv);
    cq__mq_follow_flush(((cq_mqio_t *)ud)->follow); /* reads the bridge asked for */
}

static void on_tick(void *ud, uint64_t now_ms)
{
    cq_mqsrv_tick(((cq_mqio_t *)ud)->srv, now_ms);
}

/* SIGTERM must not lose acks: a produce read before it is committed by the store thread and
 * answered. The drain waits for the store requests in flight (answered as usual); when the
 * grace timer fires, the requests still in the store thread complete without an answer. */
static bool on_idle(void *ud)
{
    return cq_mqsrv_idle(((cq_mqio_t *)ud)->srv);
}

/* The manager sees the server go; nothing more is reported. */
static void on_draining(void *ud)
{
    cq__mq_mgr_close(((cq_mqio_t *)ud)->mgr);
    cq__mq_follow_close(((cq_mqio_t *)ud)->follow);
}

static void on_unwake(void *ud)
{
    cq_mqsrv_set_ops(((cq_mqio_t *)ud)->srv, NULL, NULL); /* completions only queue from now on */
}

static void on_grace_over(void *ud, size_t nlive)
{
    cq_mqio_t *io = ud;
    CQ_WARN("mq", "shutdown: --shutdown-grace-ms (%llu) is over: closing %zu connections%s",
            (unsigned long long)io->grace_ms, nlive,
            cq_mqsrv_idle(io->srv) ? "" : " with store requests still unanswered");
}

/* The engine's and the writer's metrics, and the edge's counters the host does not keep: the
 * engine's pre-connect and input budget refusals, the manager link. */
static int on_metrics(void *ud, cq_sbuf_t *b)
{
    cq_mqio_t *io = ud;
    cq_mqsrv_stats_t st;
    if (cq_mqsrv_metrics(io->srv, b) < 0)
        return -ENOMEM;
    cq_mqsrv_stats(io->srv, &st);
    return cq_sbuf_printf(b,
                          "# HELP chanq_mq_input_bytes Bytes of partial frames the seed "
                          "connections hold now (bounded by the input budget).\n"
                          "# TYPE chanq_mq_input_bytes gauge\nchanq_mq_input_bytes %llu\n"
                          "# HELP chanq_mq_input_refused_total Seed connections answered busy "
                          "and closed for going over the input budget.\n"
                          "# TYPE chanq_mq_input_refused_total counter\n"
                          "chanq_mq_input_refused_total %llu\n"
                          "# HELP chanq_mq_mgr_connected 1 while connected to a manager "
                          "(--mgr-servers).\n"
                          "# TYPE chanq_mq_mgr_connected gauge\nchanq_mq_mgr_connected %d\n",
                          (unsigned long long)st.input_bytes, (unsigned long long)st.input_refused,
                          cq__mq_mgr_connected(io->mgr) ? 1 : 0);
}

static const io_engine_ops_t host_ops = {.wake = on_wake,
                                         .flush = on_flush,
                                         .tick = on_tick,
                                         .idle = on_idle,
                                         .metrics = on_metrics,
                                         .draining = on_draining,
                                         .unwake = on_unwake,
                                         .grace_over = on_grace_over};

/* Jobs (until the shutdown starts). */
static void on_retention(void *ud)
{
    cq_mqsrv_retention(((cq_mqio_t *)ud)->srv, (int64_t)unix_ms());
}

static void on_mgr_tick(void *ud)
{
    cq_mqio_t *io = ud;
    uint32_t n;
    uint64_t queued;
    cq__io_engine_conns(io->host, &n, &queued);
    cq__mq_mgr_tick(io->mgr, cq__io_engine_now(io->host), n, queued);
}

static void on_follow_tick(void *ud)
{
    cq_mqio_t *io = ud;
    cq__mq_follow_tick(io->follow, cq__io_engine_now(io->host));
}

int cq_mqio_metrics_append(void *ud, cq_sbuf_t *out)
{
    return cq__io_engine_metrics_append(((cq_mqio_t *)ud)->host, out);
}

/* ---- start / stop ------------------------------------------------------------------------- */

cq_mqio_t *cq_mqio_new(void)
{
    return cq_calloc(1, sizeof(cq_mqio_t));
}

/* The two classes of connection with their limits (the host checks the timeouts). */
static int listen_both(cq_mqio_t *io, const cq_mqio_opts_t *o, char *bound, size_t blen, char *err,
                       size_t errlen)
{
    const cq_mqio_limits_t *lim = &o->lim;
    const io_eclass_t seed = {.name = "mq",
                              .cap_text = "mq-max-connections reached",
                              .open = seed_open,
                              .input = seed_input,
                              .closed = seed_closed,
                              .frames = seed_frames,
                              .authed = seed_authed,
                              /* a watcher that only receives pushes sends no frames */
                              .delivered_active = true,
                              .auth_timeout_ms = lim->auth_timeout_ms,
                              .idle_timeout_ms = lim->idle_timeout_ms,
                              .max_conns = lim->max_conns};
    const io_eclass_t http = {.name = "mqhttp",
                              .cap_text = "mq-http-max-connections reached",
                              .open = http_open,
                              .input = http_input,
                              .closed = http_closed,
                              .http = true,
                              .timeout_ms = lim->http_timeout_ms,
                              .max_conns = lim->http_max_conns};
    int r = cq__io_engine_listen(io->host, &seed, o->addr, bound, blen, err, errlen);
    if (r >= 0)
        r = cq__io_engine_listen(io->host, &http, o->http_addr, io->http_bound,
                                 sizeof(io->http_bound), err, errlen);
    io->http_on = r >= 0 && o->http_addr && *o->http_addr;
    return r < 0 ? r : 0;
}

/* The report to the managers, when configured (the loop does not run yet). */
static int start_mgr(cq_mqio_t *io, const cq_mqio_opts_t *o, const char *bound, char *err,
                     size_t errlen)
{
    if (!o->mgr_servers || !*o->mgr_servers || !o->mgr_link)
        return 0;
    cq_mgrlink_bound(o->mgr_link, bound);
    int r = cq__mq_mgr_start(cq__io_engine_loop(io->host), o->mgr_servers, o->mgr_link,
                             o->mgr_figures, o->mgr_figures_ud, &io->mgr, err, errlen);
    return r < 0 ? r : cq__io_engine_every(io->host, MQ_TICK_MS, on_mgr_tick);
}

/* The followed shards, when the bridge follows some (the loop does not run yet). */
static int start_follow(cq_mqio_t *io, const cq_mqio_opts_t *o, char *err, size_t errlen)
{
    if (!o->follow || !cq_mqfollow_nlinks(o->follow))
        return 0;
    int r = cq__mq_follow_start(cq__io_engine_loop(io->host), o->follow, &io->follow, err, errlen);
    return r < 0 ? r : cq__io_engine_every(io->host, MQ_TICK_MS, on_follow_tick);
}

int cq_mqio_start(cq_mqio_t *io, cq_mqsrv_t *srv, const cq_mqio_opts_t *opts, char *bound,
                  size_t blen, char *err, size_t errlen)
{
    io->srv = srv;
    io->grace_ms = (uint64_t)(opts->shutdown_grace_ms > 0 ? opts->shutdown_grace_ms : 0);
    uint64_t retention_ms =
        (uint64_t)(opts->retention_check_s > 0 ? opts->retention_check_s : 60) * 1000;
    const io_engine_opts_t ho = {.name = "mq",
                                 .tick_ms = MQ_TICK_MS,
                                 .metrics_ms = CQ_MQIO_METRICS_MS,
                                 .grace_ms = io->grace_ms,
                                 .keepalive_s = opts->tcp_keepalive_s,
                                 .conns_family = "chanq_mq_connections",
                                 .errors_family = "chanq_mq_accept_errors_total",
                                 .closes_family = "chanq_mq_closes_total"};
    if (!(io->host = cq__io_engine_new(&ho, &host_ops, io, err, errlen)))
        return -ENOMEM;
    cq_mqsrv_set_ops(srv, &engine_ops, io);
    int r = listen_both(io, opts, bound, blen, err, errlen);
    if (r == 0)
        r = cq__io_engine_every(io->host, retention_ms, on_retention);
    if (r == 0)
        r = start_mgr(io, opts, bound, err, errlen);
    if (r == 0)
        r = start_follow(io, opts, err, errlen);
    if (r == 0)
        r = cq__io_engine_run(io->host, err, errlen);
    if (r < 0)
        return r;
    CQ_INFO("io", "durable topics (seed protocol) on %s", bound);
    if (io->http_on)
        CQ_INFO("io", "durable topics (HTTP API) on %s", io->http_bound);
    return 0;
}

void cq_mqio_stop(cq_mqio_t *io)
{
    if (io)
        cq__io_engine_stop(io->host);
}

const char *cq_mqio_http_bound(const cq_mqio_t *io)
{
    return io && io->http_on ? io->http_bound : "";
}

cq_mqio_t *cq_mqio_free(cq_mqio_t *io)
{
    if (!io)
        return NULL;
    io->host = cq__io_engine_free(io->host); /* stops: the manager link's handles are closed */
    cq__mq_mgr_free(io->mgr);
    cq__mq_follow_free(io->follow);
    cq_free(io);
    return NULL;
}
