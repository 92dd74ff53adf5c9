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
#include "io_stream.h"
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
    uv_timer_t grace; /* shutdown: bounds the wait for the last answers */
    uv_thread_t thread;
    pthread_mutex_t lock;
    bool alive; /* under lock: cq_mqio_stop() may signal wake */
    _Atomic int stopping;
    cq_mqsrv_t *srv; /* borrowed: the composition root's */
    uint8_t *rbuf;
    int keepalive_s;
    uint64_t retention_ms;
    cq_mqio_limits_t lim; /* connection caps and timeouts */
    cq_list_t conns;      /* every mq_conn_t, for the timeout sweep */
    uint32_t nconns[2];   /* open seed [0] and HTTP [1] connections */
    uint64_t grace_ms;
    size_t nlive;                     /* connections not yet closed (callback run) */
    enum { RUN, DRAIN, CLOSE } phase; /* loop thread: the shutdown's progress */
    bool loop_ok, started, http_on;
    char http_bound[80]; /* "" when the HTTP API is off */
    /* The metrics snapshot that the admin listener (worker 0, another thread) serves: the MQ
     * loop renders its engine's and writer's metrics into a private buffer every
     * CQ_MQIO_METRICS_MS and swaps it in under metrics_mu; readers copy it under the same mutex.
     * Neither side is a channel hot path. */
    pthread_mutex_t metrics_mu;
    cq_sbuf_t snapshot; /* under metrics_mu; empty while the port does not run */
    bool metrics_on;    /* under metrics_mu */
    mq_mgr_t *mgr;      /* the connection to a manager, or NULL (unmanaged) */
};

/* One TCP connection: the engine queues frames in its send queue; this side writes them. */
typedef struct mq_conn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    cq_mqio_t *io;
    cq_mqsrv_conn_t *conn;  /* seed protocol, or */
    cq_mqhttp_conn_t *http; /* the HTTP API */
    cq_sendq_t *q;          /* the engine connection's send queue */
    size_t inflight;        /* bytes of the uv_write in flight */
    bool writing;           /* a uv_write is in flight */
    bool closing;           /* close asked: stop reading, write what is queued, shut down */
    bool shut;              /* uv_shutdown was called */
    bool dropped;           /* uv_close was called: nothing is written any more */
    cq_list_t node;         /* in io->conns until closed */
    uint64_t accepted_ms;   /* uv_now at accept */
    uint64_t active_ms;     /* last progress: a whole frame (seed), an answer (HTTP) */
    uint64_t frames;        /* whole frames the engine had taken at active_ms (seed) */
} mq_conn_t;

static uint64_t unix_ms(void)
{
    return (uint64_t)(cq_clock_unix_ns() / 1000000);
}

/* ---- connections: the transport ops ------------------------------------------------------ */

static void grace_closed(cq_mqio_t *io);

static void conn_closed(uv_handle_t *h)
{
    mq_conn_t *mc = h->data;
    cq_mqio_t *io = mc->io;
    cq_mqsrv_conn_close(mc->conn); /* after every write callback: the queue may go */
    cq_mqhttp_conn_close(mc->http);
    cq_free(mc);
    if (--io->nlive == 0 && io->phase == CLOSE)
        grace_closed(io);
}

static void conn_unlist(mq_conn_t *mc)
{
    if (cq_list_empty(&mc->node))
        return;
    cq_list_remove(&mc->node);
    cq_list_init(&mc->node);
    mc->io->nconns[mc->http != NULL]--;
}

static void conn_drop(mq_conn_t *mc)
{
    mc->closing = mc->dropped = true;
    conn_unlist(mc);
    if (!uv_is_closing((uv_handle_t *)&mc->tcp))
        uv_close((uv_handle_t *)&mc->tcp, conn_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    conn_drop(req->data);
}

/* A closing connection that wrote everything: shut the write side down, then close. */
static void conn_finish(mq_conn_t *mc)
{
    if (mc->dropped || mc->writing || mc->shut || !cq_sendq_idle(mc->q))
        return;
    mc->shut = true;
    mc->sreq.data = mc;
    if (uv_shutdown(&mc->sreq, (uv_stream_t *)&mc->tcp, on_shutdown) < 0)
        conn_drop(mc);
}

static void on_written(uv_write_t *req, int status);

/* An authenticated seed connection whose output reached the socket is not idle: a watcher that
 * only receives pushes sends no frames, and the socket draining shows its peer is there. (Before
 * connect, output doesn't count: the pre-auth timeout bounds those connections anyway.) */
static void seed_delivered(mq_conn_t *mc)
{
    uint64_t frames;
    bool authed;
    if (mc->http || mc->dropped)
        return;
    cq_mqsrv_conn_progress(mc->conn, &frames, &authed);
    if (authed)
        mc->active_ms = uv_now(&mc->io->loop);
}

/* Transport op: writes the send queue (io_stream.c); a write left in flight continues from
 * on_written. */
static void conn_flush(void *tctx)
{
    mq_conn_t *mc = tctx;
    size_t left = 0;
    if (mc->http && !cq_sendq_idle(mc->q))
        mc->active_ms = uv_now(&mc->io->loop); /* an answer: the request was whole */
    if (mc->dropped || mc->writing)
        return;
    bool had = !cq_sendq_idle(mc->q);
    int r = cq__io_stream_write((uv_stream_t *)&mc->tcp, mc->q, &mc->wreq, on_written, true, &left);
    if (r < 0) {
        conn_drop(mc);
        return;
    }
    if (had && left == 0)
        seed_delivered(mc);
    mc->writing = left > 0;
    mc->inflight = left;
    if (mc->closing)
        conn_finish(mc);
}

static void on_written(uv_write_t *req, int status)
{
    mq_conn_t *mc = cq_container_of(req, mq_conn_t, wreq);
    mc->writing = false;
    if (mc->dropped)
        return; /* canceled by the close */
    if (status < 0) {
        conn_drop(mc);
        return;
    }
    cq_sendq_written(mc->q, mc->inflight);
    mc->inflight = 0;
    seed_delivered(mc);
    conn_flush(mc);
}

/* Transport op: stop reading, write what is queued, then close. */
static void conn_close(void *tctx)
{
    mq_conn_t *mc = tctx;
    if (mc->closing)
        return;
    mc->closing = true;
    uv_read_stop((uv_stream_t *)&mc->tcp);
    conn_flush(mc);
}

/* Engine op: a slow consumer, closed at once with what it did not read. */
static void conn_abort(void *tctx, int reason, const char *why)
{
    mq_conn_t *mc = tctx;
    CQ_WARN("mq", "closing a connection with %zu unsent bytes: %s (%s)", cq_sendq_bytes(mc->q), why,
            cq_strerror(reason));
    conn_drop(mc);
}

static int conn_peer(void *tctx, char *buf, size_t len)
{
    mq_conn_t *mc = tctx;
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    int r = uv_tcp_getpeername(&mc->tcp, (struct sockaddr *)&ss, &sl);
    return r < 0 ? r : cq__io_addr_str((struct sockaddr *)&ss, buf, len);
}

static const cq_mqsrv_conn_ops_t conn_ops = {{"tcp", conn_flush, conn_close, conn_peer},
                                             conn_abort};

/* A seed connection made progress when the engine took a whole frame since the last look:
 * bytes alone (a frame dribbled one byte at a time) are not. */
static void seed_progress(mq_conn_t *mc)
{
    uint64_t frames;
    bool authed;
    if (mc->dropped)
        return;
    cq_mqsrv_conn_progress(mc->conn, &frames, &authed);
    if (frames != mc->frames) {
        mc->frames = frames;
        mc->active_ms = uv_now(&mc->io->loop);
    }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    mq_conn_t *mc = h->data;
    *buf = uv_buf_init((char *)mc->io->rbuf, MQ_READ_BUF);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    mq_conn_t *mc = s->data;
    if (nread == 0 || mc->closing)
        return;
    if (nread < 0) {
        conn_drop(mc);
        return;
    }
    cq_mqsrv_set_now(mc->io->srv, (int64_t)unix_ms());
    if (mc->http) {
        cq_mqhttp_conn_input(mc->http, (const uint8_t *)buf->base, (size_t)nread);
        return;
    }
    cq_mqsrv_conn_input(mc->conn, (const uint8_t *)buf->base, (size_t)nread);
    seed_progress(mc);
}

static void accept_conn(io_lsn_t *l, int fd, bool http)
{
    cq_mqio_t *io = l->data;
    uint32_t cap = http ? io->lim.http_max_conns : io->lim.max_conns;
    if (io->nconns[http] >= cap) {
        cq__io_lsn_refused(l, fd,
                           http ? "mq-http-max-connections reached" : "mq-max-connections reached");
        return;
    }
    mq_conn_t *mc = cq_calloc(1, sizeof(*mc));
    if (!mc) {
        close(fd);
        return;
    }
    mc->io = io;
    uv_tcp_init(&io->loop, &mc->tcp);
    mc->tcp.data = mc;
    io->nlive++;
    cq_list_init(&mc->node);
    bool ok = uv_tcp_open(&mc->tcp, fd) == 0;
    if (!ok)
        close(fd);
    if (ok && http && (mc->http = cq_mqhttp_conn_new(io->srv, &conn_ops, mc)))
        mc->q = cq_mqhttp_conn_sendq(mc->http);
    else if (ok && !http && (mc->conn = cq_mqsrv_conn_new(io->srv, &conn_ops, mc)))
        mc->q = cq_mqsrv_conn_sendq(mc->conn);
    ok = mc->q != NULL;
    if (!ok) {
        conn_drop(mc);
        return;
    }
    cq_list_insert_tail(&io->conns, &mc->node);
    io->nconns[http]++;
    mc->accepted_ms = mc->active_ms = uv_now(&io->loop);
    uv_tcp_nodelay(&mc->tcp, 1);
    if (io->keepalive_s > 0)
        uv_tcp_keepalive(&mc->tcp, 1, (unsigned)io->keepalive_s);
    uv_read_start((uv_stream_t *)&mc->tcp, on_alloc, on_read);
}

static void on_accept(io_lsn_t *l, int fd)
{
    accept_conn(l, fd, false);
}

static void on_accept_http(io_lsn_t *l, int fd)
{
    accept_conn(l, fd, true);
}

/* ---- timeouts ------------------------------------------------------------------------------
 * Checked on the tick (every MQ_TICK_MS), so a limit holds to within that. A connection over a
 * limit is dropped at once, with what it has queued: a peer that dribbles bytes or never reads
 * gets no more of the server's memory or time. */

/* The reason mc is over a limit at now (IO_CLOSE_*), or -1. */
static int conn_expired(const mq_conn_t *mc, uint64_t now)
{
    const cq_mqio_limits_t *lim = &mc->io->lim;
    if (mc->http)
        return lim->http_timeout_ms && now - mc->active_ms >= lim->http_timeout_ms
                   ? IO_CLOSE_TIMEOUT
                   : -1;
    uint64_t frames;
    bool authed;
    cq_mqsrv_conn_progress(mc->conn, &frames, &authed);
    if (!authed && lim->auth_timeout_ms && now - mc->accepted_ms >= lim->auth_timeout_ms)
        return IO_CLOSE_PREAUTH;
    if (lim->idle_timeout_ms && now - mc->active_ms >= lim->idle_timeout_ms)
        return IO_CLOSE_IDLE;
    return -1;
}

static void sweep_conns(cq_mqio_t *io)
{
    uint64_t now = uv_now(&io->loop);
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &io->conns)
    {
        mq_conn_t *mc = cq_container_of(n, mq_conn_t, node);
        int why = conn_expired(mc, now);
        if (why < 0)
            continue;
        cq__io_lsn_count(mc->http ? &io->http_listener : &io->listener, why);
        conn_drop(mc);
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

/* ---- shutdown ------------------------------------------------------------------------------
 * SIGTERM must not lose acks: a produce read before it is committed by the store thread and
 * answered. So the loop stops in three steps: DRAIN (listeners closed, no connection read any
 * more, so no new request can start; the store requests in flight complete and are answered as
 * usual), then CLOSE once the engine is idle (every connection writes what it has queued, shuts
 * its write side down and closes), and the loop ends when the last connection closed. The grace
 * timer, started at DRAIN, bounds both steps: when it fires every connection is dropped as it is
 * and the requests still in the store thread complete without an answer. */

/* The listeners are poll and timer handles (accept.c), so every TCP handle is a connection. */
static bool is_conn(const cq_mqio_t *io, const uv_handle_t *h)
{
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

/* Closes a loop handle that is not a connection (the grace timer last). */
static void close_handle(cq_mqio_t *io, uv_handle_t *h)
{
    if (uv_is_closing(h) || h == (uv_handle_t *)&io->grace)
        return;
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

static void grace_closed(cq_mqio_t *io)
{
    if (!uv_is_closing((uv_handle_t *)&io->grace))
        uv_close((uv_handle_t *)&io->grace, NULL);
}

static void drain_walk(uv_handle_t *h, void *arg)
{
    cq_mqio_t *io = arg;
    if (uv_is_closing(h))
        return;
    if (is_conn(io, h))
        uv_read_stop((uv_stream_t *)h); /* what was read is handled; nothing more is read */
    else if (is_listener(io, h))
        close_listeners(io);
    else if (h == (uv_handle_t *)&io->retention)
        uv_close(h, NULL); /* retention would submit new store work */
}

/* CLOSE: each connection writes what is queued, then shuts down and closes (conn_close); with
 * drop, each is closed at once. The other handles close now, the grace timer with the last
 * connection. */
static void close_walk_graceful(uv_handle_t *h, void *arg)
{
    cq_mqio_t *io = arg;
    if (uv_is_closing(h))
        return;
    if (is_conn(io, h))
        conn_close(h->data);
    else
        close_handle(io, h);
}

static void drop_walk(uv_handle_t *h, void *arg)
{
    cq_mqio_t *io = arg;
    if (!uv_is_closing(h) && is_conn(io, h))
        conn_drop(h->data);
    else if (!uv_is_closing(h))
        close_handle(io, h);
}

static void stop_close(cq_mqio_t *io)
{
    io->phase = CLOSE;
    cq_mqsrv_flush(io->srv); /* the answers the last drain queued */
    uv_walk(&io->loop, close_walk_graceful, io);
    if (io->nlive == 0)
        grace_closed(io);
}

static void on_grace(uv_timer_t *t)
{
    cq_mqio_t *io = t->data;
    CQ_WARN("mq", "shutdown: --shutdown-grace-ms (%llu) is over: closing %zu connections%s",
            (unsigned long long)io->grace_ms, io->nlive,
            cq_mqsrv_idle(io->srv) ? "" : " with store requests still unanswered");
    io->phase = CLOSE;
    uv_walk(&io->loop, drop_walk, io);
    grace_closed(io);
}

/* One step of the shutdown: called when it starts and after every drain of completions. */
static void stop_step(cq_mqio_t *io)
{
    if (io->phase == RUN) {
        io->phase = DRAIN;
        cq__mq_mgr_close(io->mgr); /* the manager sees the server go; nothing more is reported */
        uv_walk(&io->loop, drain_walk, io);
        uv_timer_init(&io->loop, &io->grace);
        io->grace.data = io;
        uv_timer_start(&io->grace, on_grace, io->grace_ms, 0);
    }
    if (io->phase == DRAIN && cq_mqsrv_idle(io->srv))
        stop_close(io);
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
        mq_conn_t *mc = cq_container_of(p, mq_conn_t, node);
        n += mc->q ? cq_sendq_bytes(mc->q) : 0;
    }
    return n;
}

static void on_tick(uv_timer_t *t)
{
    cq_mqio_t *io = t->data;
    cq_mqsrv_tick(io->srv, uv_now(&io->loop));
    if (io->phase == RUN) /* a shutdown has its own bound, the grace period */
        sweep_conns(io);
    if (io->mgr && io->phase == RUN)
        cq__mq_mgr_tick(io->mgr, uv_now(&io->loop), io->nconns[0] + io->nconns[1],
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
                 io->nconns[0], io->nconns[1], (unsigned long long)st.input_bytes,
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
    pthread_mutex_lock(&io->metrics_mu);
    cq_sbuf_t old = io->snapshot;
    io->snapshot = b;
    io->metrics_on = true;
    pthread_mutex_unlock(&io->metrics_mu);
    cq_sbuf_done(&old);
}

static void on_metrics(uv_timer_t *t)
{
    metrics_refresh(t->data);
}

int cq_mqio_metrics_append(void *ud, cq_sbuf_t *out)
{
    cq_mqio_t *io = ud;
    int r = 0;
    pthread_mutex_lock(&io->metrics_mu);
    if (io->metrics_on && io->snapshot.len)
        r = cq_sbuf_append(out, io->snapshot.data, io->snapshot.len);
    pthread_mutex_unlock(&io->metrics_mu);
    return r;
}

static void metrics_unpublish(cq_mqio_t *io)
{
    pthread_mutex_lock(&io->metrics_mu);
    cq_sbuf_t old = io->snapshot;
    cq_sbuf_init(&io->snapshot);
    io->metrics_on = false;
    pthread_mutex_unlock(&io->metrics_mu);
    cq_sbuf_done(&old);
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
    pthread_mutex_init(&io->metrics_mu, NULL);
    return io;
}

int cq_mqio_start(cq_mqio_t *io, cq_mqsrv_t *srv, const cq_mqio_opts_t *opts, char *bound,
                  size_t blen, char *err, size_t errlen)
{
    io->srv = srv;
    io->keepalive_s = opts->tcp_keepalive_s;
    io->lim = opts->lim;
    cq_list_init(&io->conns);
    io->grace_ms = (uint64_t)(opts->shutdown_grace_ms > 0 ? opts->shutdown_grace_ms : 0);
    io->retention_ms =
        (uint64_t)(opts->retention_check_s > 0 ? opts->retention_check_s : 60) * 1000;
    io->rbuf = cq_malloc(MQ_READ_BUF);
    if (!io->rbuf || uv_loop_init(&io->loop) < 0) {
        snprintf(err, errlen, "mq: out of memory");
        return -ENOMEM;
    }
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
    metrics_unpublish(io);
    atomic_store(&io->stopping, 1);
    if (io->started) {
        pthread_mutex_lock(&io->lock);
        if (io->alive)
            uv_async_send(&io->wake);
        pthread_mutex_unlock(&io->lock);
        uv_thread_join(&io->thread);
        io->started = false;
    } else {
        uv_walk(&io->loop, drop_walk, io); /* never started: no grace timer */
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
    metrics_unpublish(io);
    pthread_mutex_destroy(&io->lock);
    pthread_mutex_destroy(&io->metrics_mu);
    cq_free(io->rbuf);
    cq_free(io);
    return NULL;
}
