/* mq_io.c - the durable-topic port's loop thread: listeners, TCP connections and the engine's
 * loop hooks. See cq_mqio.h. The protocol is in src/mqsrv; this file only moves bytes. */
#include "cq_mqio.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_mqhttp.h"
#include "cq_mqsrv.h"
#include "cq_util.h"
#include "io_int.h"
#include "io_drain.h"
#include "io_snapshot.h"
#include "io_sqconn.h"
#include "mq_mgr.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MQ_READ_BUF (64u * 1024u)
#define MQ_TICK_MS  100 /* send queue housekeeping (soft limits) */

struct cq_mqio {
    uv_loop_t loop;
    uv_async_t wake;
    io_lsn_t listener;      /* the seed protocol (accept.c: EMFILE-safe accepts) */
    io_lsn_t http_listener; /* the HTTP API, when http_on */
    uv_prepare_t prepare;   /* writes the connections with queued output, once per iteration */
    uv_timer_t tick;
    uv_timer_t retention;
    uv_timer_t metrics;
    uv_thread_t thread;
    pthread_mutex_t lock;
    bool alive; /* under lock: cq_mqio_stop() may signal wake */
    _Atomic int stopping;
    cq_mqsrv_t *srv; /* borrowed: the composition root's */
    uint8_t *rbuf;
    uint64_t retention_ms;
    io_sqclass_t cls[2]; /* seed [0] and HTTP [1] connections: hooks, limits, counts */
    cq_list_t conns;     /* every mq_conn_t, for the timeout sweep */
    io_drain_t drain;    /* the shutdown (loop thread) */
    bool loop_ok, started, http_on;
    char http_bound[80]; /* "" when the HTTP API is off */
    /* The metrics the admin listener (worker 0, another thread) serves: the MQ loop renders its
     * engine's and writer's metrics every CQ_MQIO_METRICS_MS (io_snapshot.c). */
    io_snapshot_t snap;
    mq_mgr_t *mgr; /* the connection to a manager, or NULL (unmanaged) */
};

/* One TCP connection (io_sqconn.c): the engine queues frames in its send queue; sc writes them. */
typedef struct mq_conn {
    io_sqconn_t sc; /* first: the handle's data */
    cq_mqio_t *io;
    cq_mqsrv_conn_t *conn;  /* seed protocol, or */
    cq_mqhttp_conn_t *http; /* the HTTP API */
} mq_conn_t;

static uint64_t unix_ms(void)
{
    return (uint64_t)(cq_clock_unix_ns() / 1000000);
}

/* ---- connections: the transport ops ------------------------------------------------------ */

static void conn_closed(io_sqconn_t *c)
{
    mq_conn_t *mc = (mq_conn_t *)c;
    cq_mqio_t *io = mc->io;
    cq_mqsrv_conn_close(mc->conn);
    cq_mqhttp_conn_close(mc->http);
    cq_free(mc);
    cq__io_drain_closed(&io->drain);
}

/* An authenticated seed connection whose output reached the socket is not idle: a watcher that
 * only receives pushes sends no frames, and the socket draining shows its peer is there. (Before
 * connect, output doesn't count: the pre-auth timeout bounds those connections anyway.) */
static void seed_delivered(io_sqconn_t *c)
{
    mq_conn_t *mc = (mq_conn_t *)c;
    uint64_t frames;
    bool authed;
    cq_mqsrv_conn_progress(mc->conn, &frames, &authed);
    if (authed)
        c->active_ms = uv_now(&mc->io->loop);
}

static bool seed_authed(const io_sqconn_t *c)
{
    uint64_t frames;
    bool authed;
    cq_mqsrv_conn_progress(((const mq_conn_t *)c)->conn, &frames, &authed);
    return authed;
}

/* Engine op: a slow consumer, closed at once with what it did not read. */
static void conn_abort(void *tctx, int reason, const char *why)
{
    io_sqconn_t *c = tctx;
    CQ_WARN("mq", "closing a connection with %zu unsent bytes: %s (%s)", cq_sendq_bytes(c->q), why,
            cq_strerror(reason));
    cq__io_sqconn_drop(c);
}

static const cq_mqsrv_conn_ops_t conn_ops = {
    {"tcp", cq__io_sqconn_flush, cq__io_sqconn_close, cq__io_sqconn_peer}, conn_abort};

/* A seed connection made progress when the engine took a whole frame since the last look:
 * bytes alone (a frame dribbled one byte at a time) are not. */
static void seed_input(io_sqconn_t *c, const uint8_t *p, size_t n)
{
    mq_conn_t *mc = (mq_conn_t *)c;
    uint64_t frames;
    bool authed;
    cq_mqsrv_set_now(mc->io->srv, (int64_t)unix_ms());
    cq_mqsrv_conn_input(mc->conn, p, n);
    if (c->dropped)
        return;
    cq_mqsrv_conn_progress(mc->conn, &frames, &authed);
    if (frames != c->frames) {
        c->frames = frames;
        c->active_ms = uv_now(&mc->io->loop);
    }
}

static void http_input(io_sqconn_t *c, const uint8_t *p, size_t n)
{
    mq_conn_t *mc = (mq_conn_t *)c;
    cq_mqsrv_set_now(mc->io->srv, (int64_t)unix_ms());
    cq_mqhttp_conn_input(mc->http, p, n);
}

static void accept_conn(io_lsn_t *l, int fd, bool http)
{
    cq_mqio_t *io = l->data;
    if (cq__io_sqclass_full(&io->cls[http], fd))
        return;
    mq_conn_t *mc = cq_calloc(1, sizeof(*mc));
    if (!mc) {
        close(fd);
        return;
    }
    mc->io = io;
    cq__io_drain_opened(&io->drain);
    bool ok = cq__io_sqconn_open(&mc->sc, &io->cls[http], &io->loop, fd) == 0;
    if (ok && http && (mc->http = cq_mqhttp_conn_new(io->srv, &conn_ops, &mc->sc)))
        mc->sc.q = cq_mqhttp_conn_sendq(mc->http);
    else if (ok && !http && (mc->conn = cq_mqsrv_conn_new(io->srv, &conn_ops, &mc->sc)))
        mc->sc.q = cq_mqsrv_conn_sendq(mc->conn);
    if (!mc->sc.q) {
        cq__io_sqconn_drop(&mc->sc);
        return;
    }
    cq__io_sqconn_start(&mc->sc, &io->conns);
}

static void on_accept(io_lsn_t *l, int fd)
{
    accept_conn(l, fd, false);
}

static void on_accept_http(io_lsn_t *l, int fd)
{
    accept_conn(l, fd, true);
}

/* The two classes of connection, with the limits (timeouts: io_sqconn.c, on the tick). */
static void init_classes(cq_mqio_t *io, const cq_mqio_opts_t *opts)
{
    const cq_mqio_limits_t *lim = &opts->lim;
    io_sqclass_t *s = &io->cls[0], *h = &io->cls[1];
    *s = (io_sqclass_t){.input = seed_input,
                        .closed = conn_closed,
                        .delivered = seed_delivered,
                        .authed = seed_authed,
                        .auth_timeout_ms = lim->auth_timeout_ms,
                        .idle_timeout_ms = lim->idle_timeout_ms,
                        .lsn = &io->listener,
                        .max_conns = lim->max_conns,
                        .cap_text = "mq-max-connections reached"};
    *h = (io_sqclass_t){.input = http_input,
                        .closed = conn_closed,
                        .http = true,
                        .timeout_ms = lim->http_timeout_ms,
                        .lsn = &io->http_listener,
                        .max_conns = lim->http_max_conns,
                        .cap_text = "mq-http-max-connections reached"};
    for (int i = 0; i < 2; i++) {
        io->cls[i].keepalive_s = opts->tcp_keepalive_s;
        io->cls[i].rbuf = io->rbuf;
        io->cls[i].rlen = MQ_READ_BUF;
    }
}

/* ---- completions and housekeeping -------------------------------------------------------- */

/* Engine op (any thread, under the engine's inbox lock): completions are waiting. */
static void engine_wake(void *ud)
{
    cq_mqio_t *io = ud;
    uv_async_send(&io->wake);
}

static const cq_mqsrv_ops_t engine_ops = {engine_wake};

static void drain_done(cq_mqio_t *io)
{
    cq_mqsrv_set_now(io->srv, (int64_t)unix_ms());
    cq_mqsrv_drain(io->srv);
}

/* ---- shutdown (io_drain.c) -----------------------------------------------------------------
 * SIGTERM must not lose acks: a produce read before it is committed by the store thread and
 * answered. DRAIN waits for the store requests in flight (answered as usual); when the grace
 * timer fires, the requests still in the store thread complete without an answer. */

/* The listeners are poll and timer handles (accept.c), so every other TCP handle is a
 * connection. */
static bool is_conn(void *ud, const uv_handle_t *h)
{
    cq_mqio_t *io = ud;
    return h->type == UV_TCP && !cq__mq_mgr_owns(io->mgr, h);
}

static bool is_listener(const cq_mqio_t *io, const uv_handle_t *h)
{
    return cq__io_lsn_owns(&io->listener, h) || cq__io_lsn_owns(&io->http_listener, h);
}

static void close_listeners(cq_mqio_t *io)
{
    cq__io_lsn_close(&io->listener);
    cq__io_lsn_close(&io->http_listener);
}

static bool eng_idle(void *ud)
{
    return cq_mqsrv_idle(((cq_mqio_t *)ud)->srv);
}

static void eng_flush(void *ud)
{
    cq_mqsrv_flush(((cq_mqio_t *)ud)->srv);
}

static void drain_handle(void *ud, uv_handle_t *h)
{
    cq_mqio_t *io = ud;
    if (is_listener(io, h))
        close_listeners(io);
    else if (h == (uv_handle_t *)&io->retention)
        uv_close(h, NULL); /* retention would submit new store work */
}

/* Closes a loop handle that is not a connection. */
static void close_handle(void *ud, uv_handle_t *h)
{
    cq_mqio_t *io = ud;
    if (is_listener(io, h)) {
        close_listeners(io);
        return;
    }
    if (cq__mq_mgr_owns(io->mgr, h)) {
        cq__mq_mgr_close(io->mgr);
        return;
    }
    if (h == (uv_handle_t *)&io->wake) {
        cq_mqsrv_set_ops(io->srv, NULL, NULL); /* completions only queue from now on */
        pthread_mutex_lock(&io->lock);
        io->alive = false;
        pthread_mutex_unlock(&io->lock);
    }
    uv_close(h, NULL);
}

static void grace_over(void *ud)
{
    cq_mqio_t *io = ud;
    CQ_WARN("mq", "shutdown: --shutdown-grace-ms (%llu) is over: closing %zu connections%s",
            (unsigned long long)io->drain.grace_ms, io->drain.nlive,
            cq_mqsrv_idle(io->srv) ? "" : " with store requests still unanswered");
}

static const io_drain_ops_t drain_ops = {is_conn,      eng_idle, eng_flush, drain_handle,
                                         close_handle, NULL,     grace_over};

/* One step of the shutdown: called when it starts and after every drain of completions. */
static void stop_step(cq_mqio_t *io)
{
    if (io->drain.phase == IO_RUN)
        cq__mq_mgr_close(io->mgr); /* the manager sees the server go; nothing more is reported */
    cq__io_drain_step(&io->drain);
}

static void on_wake(uv_async_t *a)
{
    cq_mqio_t *io = a->data;
    drain_done(io);
    if (atomic_load(&io->stopping))
        stop_step(io);
}

static void on_prepare(uv_prepare_t *p)
{
    cq_mqio_t *io = p->data;
    cq_mqsrv_flush(io->srv);
}

/* The MQ port's queued output, for the manager's packages figure. */
static uint64_t queued_bytes(cq_mqio_t *io)
{
    uint64_t n = 0;
    cq_list_t *p;
    cq_list_foreach(p, &io->conns)
    {
        mq_conn_t *mc = (mq_conn_t *)cq_container_of(p, io_sqconn_t, node);
        n += mc->sc.q ? cq_sendq_bytes(mc->sc.q) : 0;
    }
    return n;
}

static void on_tick(uv_timer_t *t)
{
    cq_mqio_t *io = t->data;
    cq_mqsrv_tick(io->srv, uv_now(&io->loop));
    if (io->drain.phase == IO_RUN) /* a shutdown has its own bound, the grace period */
        cq__io_sqconn_sweep(&io->conns, uv_now(&io->loop));
    if (io->mgr && io->drain.phase == IO_RUN)
        cq__mq_mgr_tick(io->mgr, uv_now(&io->loop), io->cls[0].nopen + io->cls[1].nopen,
                        queued_bytes(io));
}

static void on_retention(uv_timer_t *t)
{
    cq_mqio_t *io = t->data;
    cq_mqsrv_retention(io->srv, (int64_t)unix_ms());
}

/* The edge's own counters: its listeners' and the engine's pre-connect and input budget refusals
 * (MQ loop thread). */
static int edge_metrics(cq_mqio_t *io, cq_sbuf_t *b)
{
    io_lsn_t *v[2] = {&io->listener, &io->http_listener};
    cq_mqsrv_stats_t st;
    char t[768];
    cq_mqsrv_stats(io->srv, &st);
    int n =
        snprintf(t, sizeof(t),
                 "# TYPE chanq_mq_connections gauge\n"
                 "chanq_mq_connections{port=\"mq\"} %u\n"
                 "chanq_mq_connections{port=\"mqhttp\"} %u\n"
                 "# TYPE chanq_mq_input_bytes gauge\nchanq_mq_input_bytes %llu\n"
                 "# TYPE chanq_mq_input_refused_total counter\n"
                 "chanq_mq_input_refused_total %llu\n"
                 "# HELP chanq_mq_mgr_connected 1 while connected to a manager (--mgr-servers).\n"
                 "# TYPE chanq_mq_mgr_connected gauge\nchanq_mq_mgr_connected %d\n",
                 io->cls[0].nopen, io->cls[1].nopen, (unsigned long long)st.input_bytes,
                 (unsigned long long)st.input_refused, cq__mq_mgr_connected(io->mgr) ? 1 : 0);
    int r = cq_sbuf_append(b, t, (size_t)n);
    return r < 0 ? r
                 : cq__io_lsn_metrics_all(v, io->http_on ? 2 : 1, "chanq_mq_accept_errors_total",
                                          "chanq_mq_closes_total", b);
}

/* Renders the metrics and publishes them (MQ loop thread). */
static void metrics_refresh(cq_mqio_t *io)
{
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    if (cq_mqsrv_metrics(io->srv, &b) < 0 || edge_metrics(io, &b) < 0) {
        cq_sbuf_done(&b);
        return; /* out of memory: keep the previous snapshot */
    }
    cq__io_snapshot_publish(&io->snap, &b);
}

static void on_metrics(uv_timer_t *t)
{
    metrics_refresh(t->data);
}

int cq_mqio_metrics_append(void *ud, cq_sbuf_t *out)
{
    return cq__io_snapshot_append(&((cq_mqio_t *)ud)->snap, out);
}

static void loop_main(void *arg)
{
    cq_mqio_t *io = arg;
    uv_run(&io->loop, UV_RUN_DEFAULT);
}

/* ---- start / stop ------------------------------------------------------------------------ */

cq_mqio_t *cq_mqio_new(void)
{
    cq_mqio_t *io = cq_calloc(1, sizeof(*io));
    if (!io)
        return NULL;
    pthread_mutex_init(&io->lock, NULL);
    cq__io_snapshot_init(&io->snap);
    return io;
}

int cq_mqio_start(cq_mqio_t *io, cq_mqsrv_t *srv, const cq_mqio_opts_t *opts, char *bound,
                  size_t blen, char *err, size_t errlen)
{
    io->srv = srv;
    cq_list_init(&io->conns);
    cq__io_drain_init(&io->drain, &io->loop,
                      (uint64_t)(opts->shutdown_grace_ms > 0 ? opts->shutdown_grace_ms : 0),
                      &drain_ops, io);
    io->retention_ms =
        (uint64_t)(opts->retention_check_s > 0 ? opts->retention_check_s : 60) * 1000;
    io->rbuf = cq_malloc(MQ_READ_BUF);
    if (!io->rbuf || uv_loop_init(&io->loop) < 0) {
        snprintf(err, errlen, "mq: out of memory");
        return -ENOMEM;
    }
    init_classes(io, opts);
    io->loop_ok = true;
    uv_async_init(&io->loop, &io->wake, on_wake);
    io->wake.data = io;
    io->alive = true;
    cq_mqsrv_set_ops(srv, &engine_ops, io);
    uv_prepare_init(&io->loop, &io->prepare);
    io->prepare.data = io;
    uv_prepare_start(&io->prepare, on_prepare);
    uv_timer_init(&io->loop, &io->tick);
    io->tick.data = io;
    uv_timer_start(&io->tick, on_tick, MQ_TICK_MS, MQ_TICK_MS);
    uv_timer_init(&io->loop, &io->retention);
    io->retention.data = io;
    uv_timer_start(&io->retention, on_retention, io->retention_ms, io->retention_ms);
    uv_timer_init(&io->loop, &io->metrics);
    io->metrics.data = io;
    uv_timer_start(&io->metrics, on_metrics, CQ_MQIO_METRICS_MS, CQ_MQIO_METRICS_MS);
    io->listener.reasons = 1u << IO_CLOSE_CAP | 1u << IO_CLOSE_PREAUTH | 1u << IO_CLOSE_IDLE;
    io->http_listener.reasons = 1u << IO_CLOSE_CAP | 1u << IO_CLOSE_TIMEOUT;
    int r = cq__io_lsn_start(&io->listener, &io->loop, opts->addr, "mq", on_accept, io, bound, blen,
                             err, errlen);
    if (r == 0 && opts->http_addr && *opts->http_addr) {
        r = cq__io_lsn_start(&io->http_listener, &io->loop, opts->http_addr, "mqhttp",
                             on_accept_http, io, io->http_bound, sizeof(io->http_bound), err,
                             errlen);
        io->http_on = r == 0;
    }
    if (r == 0 && opts->mgr_servers && *opts->mgr_servers && opts->mgr_link)
        cq_mgrlink_bound(opts->mgr_link, bound); /* the loop does not run yet */
    if (r == 0 && opts->mgr_servers && *opts->mgr_servers && opts->mgr_link)
        r = cq__mq_mgr_start(&io->loop, opts->mgr_servers, opts->mgr_link, opts->mgr_figures,
                             opts->mgr_figures_ud, &io->mgr, err, errlen);
    if (r == 0)
        metrics_refresh(io); /* before the thread starts: /metrics has the MQ part at once */
    if (r == 0 && uv_thread_create(&io->thread, loop_main, io) < 0) {
        snprintf(err, errlen, "mq: cannot create the loop thread");
        r = -EAGAIN;
    }
    if (r < 0)
        return r;
    io->started = true;
    CQ_INFO("io", "durable topics (seed protocol) on %s", bound);
    if (io->http_on)
        CQ_INFO("io", "durable topics (HTTP API) on %s", io->http_bound);
    return 0;
}

void cq_mqio_stop(cq_mqio_t *io)
{
    if (!io || !io->loop_ok)
        return;
    cq__io_snapshot_unpublish(&io->snap);
    atomic_store(&io->stopping, 1);
    if (io->started) {
        pthread_mutex_lock(&io->lock);
        if (io->alive)
            uv_async_send(&io->wake);
        pthread_mutex_unlock(&io->lock);
        uv_thread_join(&io->thread);
        io->started = false;
    } else {
        cq__io_drain_drop(&io->drain); /* never started: no grace timer */
    }
    uv_run(&io->loop, UV_RUN_DEFAULT); /* close callbacks not yet run */
}

const char *cq_mqio_http_bound(const cq_mqio_t *io)
{
    return io && io->http_on ? io->http_bound : "";
}

cq_mqio_t *cq_mqio_free(cq_mqio_t *io)
{
    if (!io)
        return NULL;
    cq_mqio_stop(io);
    if (io->loop_ok)
        uv_loop_close(&io->loop);
    cq__mq_mgr_free(io->mgr); /* its handles closed with the loop's */
    pthread_mutex_destroy(&io->lock);
    cq__io_snapshot_done(&io->snap);
    cq_free(io->rbuf);
    cq_free(io);
    return NULL;
}
