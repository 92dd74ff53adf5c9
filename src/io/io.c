/* io.c - worker threads, loops, acceptors and the TCP transport. */
#include "cq_io.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_kcp_listener.h"
#include "cq_log.h"
#include "cq_mpsc.h"
#include "cq_pool.h"
#include "cq_sendq.h"
#include "cq_util.h"
#include "io_int.h"
#include "io_ring.h"
#include "io_stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define READ_BUF (128u * 1024u)
#define TICK_MS  100

_Static_assert(sizeof(uv_buf_t) == sizeof(struct iovec), "uv_buf_t must match struct iovec");

/* ---- the TCP transport ------------------------------------------------------------------ */

static void tcp_flush(void *tctx);

static void on_write(uv_write_t *req, int status)
{
    io_conn_t *ic = cq_container_of(req, io_conn_t, wreq);
    ic->writing = 0;
    if (ic->closing)
        return;
    if (status < 0) {
        cq_core_conn_lost(ic->w->core, ic->conn, status, "write failed");
        return;
    }
    cq_sendq_written(cq_conn_sendq(ic->conn), ic->inflight);
    ic->inflight = 0;
    tcp_flush(ic);
}

/* Writes batches with uv_try_write; the rest goes to one uv_write (io_stream.c). */
static int write_some(io_conn_t *ic, bool may_queue)
{
    size_t left = 0;
    int r = cq__io_stream_write((uv_stream_t *)&ic->tcp, cq_conn_sendq(ic->conn), &ic->wreq,
                                on_write, may_queue, &left);
    if (r == 0 && left) {
        ic->writing = 1;
        ic->inflight = left;
    }
    return r;
}

static void tcp_flush(void *tctx)
{
    io_conn_t *ic = tctx;
    if (ic->writing || ic->closing)
        return;
    if (cq__io_ring_queue(ic->w, ic))
        return; /* sent with the iteration's other writes (io_ring.c) */
    int r = write_some(ic, true);
    if (r < 0)
        cq_core_conn_lost(ic->w->core, ic->conn, r, "write failed");
}

void cq__io_tcp_sent(io_conn_t *ic, int res)
{
    ic->writing = 0;
    cq_sendq_t *q = cq_conn_sendq(ic->conn);
    if (res > 0)
        cq_sendq_written(q, (size_t)res);
    if (ic->closing)
        return;
    if (res < 0 && res != -EAGAIN && res != -EINTR) {
        cq_core_conn_lost(ic->w->core, ic->conn, res, "write failed");
        return;
    }
    if (!cq_sendq_idle(q))
        tcp_flush(ic); /* the rest: the ring's window is closed, so the plain path */
}

static void on_closed(uv_handle_t *h)
{
    io_conn_t *ic = cq_container_of((uv_tcp_t *)h, io_conn_t, tcp);
    if (ic->conn)
        cq_core_conn_release(ic->w->core, ic->conn);
    cq__io_ws_free(ic);
    cq_free(ic);
}

static void tcp_close(void *tctx)
{
    io_conn_t *ic = tctx;
    if (ic->closing)
        return;
    if (!ic->writing)
        write_some(ic, false); /* best effort: the last replies before the close */
    cq__io_conn_shut(ic);
}

void cq__io_conn_shut(io_conn_t *ic)
{
    if (ic->ring_queued) /* its send must reach the kernel before the socket is closed */
        cq__io_ring_submit(ic->w);
    ic->closing = 1;
    cq_list_remove(&ic->paused_node);
    uv_read_stop((uv_stream_t *)&ic->tcp);
    if (!uv_is_closing((uv_handle_t *)&ic->tcp))
        uv_close((uv_handle_t *)&ic->tcp, on_closed);
}

int cq__io_tcp_peer(void *tctx, char *buf, size_t len)
{
    io_conn_t *ic = tctx;
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    int r = uv_tcp_getpeername(&ic->tcp, (struct sockaddr *)&ss, &sl);
    if (r < 0)
        return r;
    return cq__io_addr_str((struct sockaddr *)&ss, buf, len);
}

static const cq_transport_ops_t tcp_ops = {"tcp", tcp_flush, tcp_close, cq__io_tcp_peer};

void cq__io_conn_lost(io_conn_t *ic, int r, const char *why)
{
    if (!ic->closing && ic->conn)
        cq_core_conn_lost(ic->w->core, ic->conn, r, why);
}

void cq__io_on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    io_conn_t *ic = cq_container_of((uv_tcp_t *)h, io_conn_t, tcp);
    *buf = uv_buf_init((char *)ic->w->rbuf, READ_BUF);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    io_conn_t *ic = cq_container_of((uv_tcp_t *)s, io_conn_t, tcp);
    if (ic->closing || nread == 0)
        return;
    if (nread < 0) {
        cq_core_conn_lost(ic->w->core, ic->conn, nread == UV_EOF ? 0 : (int)nread,
                          nread == UV_EOF ? "peer closed" : "read failed");
        return;
    }
    if (ic->ws)
        cq__io_ws_input(ic, (const uint8_t *)buf->base, (size_t)nread);
    else
        cq_core_conn_input(ic->w->core, ic->conn, (const uint8_t *)buf->base, (size_t)nread,
                           uv_now(&ic->w->loop));
    if (!ic->closing && cq_conn_paused(ic->conn) && cq_list_empty(&ic->paused_node)) {
        uv_read_stop(s); /* a target worker is behind: let TCP push back on the sender */
        cq_list_insert_tail(&ic->w->paused, &ic->paused_node);
    }
}

static void resume_paused(io_worker_t *w)
{
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &w->paused)
    {
        io_conn_t *ic = cq_container_of(n, io_conn_t, paused_node);
        if (!cq_core_conn_resume(w->core, ic->conn))
            return; /* inboxes are shared: nobody resumes yet */
        cq_list_remove(&ic->paused_node);
        uv_read_start((uv_stream_t *)&ic->tcp, cq__io_on_alloc, on_read);
    }
}

/* Takes over an accepted socket on this worker. */
void cq__io_adopt(io_worker_t *w, int fd, uint32_t id, int type, int kind, cq_framing_mode_t mode)
{
    io_conn_t *ic = cq_calloc(1, sizeof(*ic));
    if (!ic || uv_tcp_init(&w->loop, &ic->tcp) < 0) {
        cq_free(ic);
        close(fd);
        return;
    }
    ic->w = w;
    cq_list_init(&ic->paused_node);
    if (uv_tcp_open(&ic->tcp, fd) < 0) {
        close(fd);
        uv_close((uv_handle_t *)&ic->tcp, on_closed);
        return;
    }
    uv_tcp_nodelay(&ic->tcp, 1);
    if (w->io->opts.tcp_keepalive_s > 0)
        uv_tcp_keepalive(&ic->tcp, 1, (unsigned)w->io->opts.tcp_keepalive_s);
    uv_update_time(&w->loop);
    ic->kind = (uint8_t)kind;
    if (kind != IO_TCP && cq__io_ws_start(ic) < 0) {
        uv_close((uv_handle_t *)&ic->tcp, on_closed);
        return;
    }
    ic->conn = cq_core_conn_new(w->core, id, type, mode, ic->ws ? &cq__io_ws_ops : &tcp_ops, ic,
                                uv_now(&w->loop));
    if (!ic->conn) {
        uv_close((uv_handle_t *)&ic->tcp, on_closed);
        return;
    }
    cq_sendq_set_pool(cq_conn_sendq(ic->conn), w->pool);
    cq_core_conn_set_transport(w->core, ic->conn,
                               kind == IO_WSS  ? CQ_CONN_WSS
                               : kind == IO_WS ? CQ_CONN_WS
                                               : CQ_CONN_TCP);
    uv_read_start((uv_stream_t *)&ic->tcp, cq__io_on_alloc, on_read);
}

/* ---- worker loop ------------------------------------------------------------------------ */

static void on_wake(uv_async_t *a)
{
    io_worker_t *w = a->data;
    cq__io_drain_accepts(w);
    uv_update_time(&w->loop);
    cq_core_drain(w->core, uv_now(&w->loop));
    if (atomic_load(&w->io->stopping))
        cq__io_worker_shutdown(w);
}

static void on_due(uv_timer_t *t)
{
    io_worker_t *w = t->data;
    cq_core_run_due(w->core, uv_now(&w->loop));
}

/* Keeps the fan-out timer on the earliest channel due on this worker. */
static void arm_due(io_worker_t *w)
{
    uint64_t due = cq_core_next_due(w->core);
    if (due == UINT64_MAX) {
        uv_timer_stop(&w->due);
        return;
    }
    uint64_t now = uv_now(&w->loop);
    uv_timer_start(&w->due, on_due, due > now ? due - now : 0, 0);
}

static void on_prepare(uv_prepare_t *p)
{
    io_worker_t *w = p->data;
    cq__io_ring_open(w);
    cq_core_flush(w->core);
    cq__io_ring_submit(w);
    cq_core_wake(w->core); /* completions may have closed connections and posted */
    arm_due(w);
    if (!cq_list_empty(&w->paused))
        resume_paused(w);
}

static void on_tick(uv_timer_t *t)
{
    io_worker_t *w = t->data;
    uint64_t t0 = cq_clock_mono_ns();
    cq_core_tick(w->core, uv_now(&w->loop));
    cq_core_note_tick(w->core, cq_clock_mono_ns() - t0);
    if (w->index == 0)
        cq__io_admin_sweep(w, uv_now(&w->loop));
    if (!cq_list_empty(&w->paused))
        resume_paused(w);
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (uv_is_closing(h))
        return;
    if (h->type == UV_TCP && h->data == NULL) {
        io_conn_t *ic = cq_container_of((uv_tcp_t *)h, io_conn_t, tcp);
        if (ic->conn && !ic->closing) {
            cq_core_conn_close(ic->w->core, ic->conn, 0, "shutting down");
            return;
        }
    }
    uv_close(h, NULL);
}

void cq__io_worker_shutdown(io_worker_t *w)
{
    cq__io_acceptors_close(w);
    cq__io_kcp_close(w);
    cq__io_admin_close(w);
    uv_walk(&w->loop, close_walk, NULL);
}

static void worker_main(void *arg)
{
    io_worker_t *w = arg;
    if (w->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(w->cpu, &set);
        int r = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
        if (r != 0)
            CQ_WARN("io", "worker %d: cannot pin to CPU %d: %s", w->index, w->cpu, strerror(r));
    }
    uv_run(&w->loop, UV_RUN_DEFAULT);
}

/* --pin-workers: worker i gets the i-th CPU of the process's affinity mask. Why "auto" needs a
 * spare CPU: pinned workers cannot move away from the main, MQ and storage threads (or a
 * client on the same machine), so with no CPU left over pinning makes them wait for each
 * other. */
static void plan_pinning(cq_io_t *io)
{
    cpu_set_t set;
    int cpus[CPU_SETSIZE], ncpu = 0;
    for (int i = 0; i < io->nworkers; i++)
        io->workers[i].cpu = -1;
    if (io->opts.pin_workers == CQ_IO_PIN_OFF || sched_getaffinity(0, sizeof(set), &set) < 0)
        return;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            cpus[ncpu++] = c;
    bool pin = io->opts.pin_workers == CQ_IO_PIN_ON ? ncpu >= io->nworkers : ncpu > io->nworkers;
    if (!pin) {
        if (io->opts.pin_workers == CQ_IO_PIN_ON)
            CQ_WARN("io", "--pin-workers on: %d workers but %d CPUs; not pinned", io->nworkers,
                    ncpu);
        return;
    }
    for (int i = 0; i < io->nworkers; i++)
        io->workers[i].cpu = cpus[i];
    CQ_INFO("io", "%d workers pinned to CPUs %d..%d", io->nworkers, cpus[0],
            cpus[io->nworkers - 1]);
}

static int worker_init(cq_io_t *io, int i)
{
    io_worker_t *w = &io->workers[i];
    w->io = io;
    w->index = i;
    w->rbuf = cq_malloc(READ_BUF);
    w->pool = cq_pool_new(IO_POOL_BYTES);
    cq_mpsc_init(&w->accepts);
    cq_list_init(&w->paused);
    if (!w->rbuf || !w->pool || uv_loop_init(&w->loop) < 0)
        return -ENOMEM;
    w->loop_ok = 1;
    w->core = cq_core_new(io->sh, i);
    if (!w->core)
        return -ENOMEM;
    uv_async_init(&w->loop, &w->wake, on_wake);
    uv_prepare_init(&w->loop, &w->prepare);
    uv_timer_init(&w->loop, &w->tick);
    uv_timer_init(&w->loop, &w->due);
    w->wake.data = w->prepare.data = w->tick.data = w->due.data = w;
    uv_prepare_start(&w->prepare, on_prepare);
    uv_timer_start(&w->tick, on_tick, TICK_MS, TICK_MS);
    return 0;
}

/* ---- wake ops for the core -------------------------------------------------------------- */

static void io_wake(void *ud, int worker)
{
    cq_io_t *io = ud;
    if (atomic_load(&io->stopping))
        return; /* the inbox is drained when the core is freed */
    uv_async_send(&io->workers[worker].wake);
}

static const cq_core_ops_t core_ops = {io_wake};

/* ---- start / stop ----------------------------------------------------------------------- */

int cq_io_write_ready(cq_io_t *io, const char *mq_bound, const char *mqhttp_bound)
{
    const char *path = io->opts.ready_file;
    if (!path || !*path)
        return 0;
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -errno;
    fprintf(f, "client=%s server=%s admin=%s mq=%s mqhttp=%s ws=%s wss=%s kcp=%s\n",
            io->bound[IO_B_CLIENT], io->bound[IO_B_SERVER], io->bound[IO_B_ADMIN],
            mq_bound && *mq_bound ? mq_bound : "-",
            mqhttp_bound && *mqhttp_bound ? mqhttp_bound : "-", io->bound[IO_B_WS],
            io->bound[IO_B_WSS], io->bound[IO_B_KCP]);
    fclose(f);
    return rename(tmp, path) < 0 ? -errno : 0;
}

const char *cq_io_client_bound(const cq_io_t *io, int t)
{
    static const int which[CQ_CONN_TRANSPORTS] = {IO_B_CLIENT, IO_B_WS, IO_B_WSS, IO_B_KCP};
    const char *b = t >= 0 && t < CQ_CONN_TRANSPORTS ? io->bound[which[t]] : "-";
    return strcmp(b, "-") == 0 ? "" : b;
}

int cq_io_start(cq_shared_t *sh, const cq_io_opts_t *opts, cq_io_t **ret, char *err, size_t errlen)
{
    int n = cq_shared_workers(sh);
    cq_io_t *io = cq_calloc(1, sizeof(*io) + (size_t)n * sizeof(io_worker_t));
    if (!io)
        return -ENOMEM;
    io->sh = sh;
    io->opts = *opts;
    io->nworkers = n;
    for (int i = 0; i < IO_B__COUNT; i++)
        strcpy(io->bound[i], "-");
    cq_shared_set_ops(sh, &core_ops, io);
    io->kcp_ips = cq_kcp_ipcount_new((uint32_t)opts->kcp_max_per_addr);
    int r = io->kcp_ips ? cq__io_tls_init(io, err, errlen)
                        : cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    if (r < 0)
        goto fail_early;
    for (int i = 0; i < n && r == 0; i++)
        r = worker_init(io, i);
    if (r < 0) {
        snprintf(err, errlen, "cannot start workers: %s", cq_strerror(r));
        goto fail;
    }
    for (int i = 0; i < n && r == 0; i++)
        r = cq__io_ring_init(&io->workers[i], opts->io_uring, err, errlen);
    if (r < 0)
        goto fail;
    r = cq__io_acceptors_start(&io->workers[0], err, errlen);
    if (r == 0)
        r = cq__io_admin_start(&io->workers[0], err, errlen);
    for (int i = 0; i < n && r == 0; i++)
        r = cq__io_kcp_start(&io->workers[i], err, errlen);
    if (r < 0)
        goto fail;
    plan_pinning(io);
    for (int i = 0; i < n; i++) {
        if (uv_thread_create(&io->workers[i].thread, worker_main, &io->workers[i]) < 0) {
            snprintf(err, errlen, "cannot create worker thread %d", i);
            r = -EAGAIN;
            goto fail;
        }
        io->workers[i].started = 1;
    }
    r = opts->defer_ready ? 0 : cq_io_write_ready(io, NULL, NULL);
    if (r < 0) {
        snprintf(err, errlen, "cannot write ready file %s: %s", opts->ready_file, cq_strerror(r));
        goto fail;
    }
    *ret = io;
    return 0;
fail:
    cq_io_free(io);
    return r;
fail_early:
    cq__io_tls_done(io);
    cq_kcp_ipcount_free(io->kcp_ips);
    cq_free(io);
    return r;
}

int cq_io_metrics_append(void *ud, cq_sbuf_t *out)
{
    cq_io_t *io = ud;
    io_worker_t *w0 = &io->workers[0];
    io_lsn_t *v[IO_MAX_ACCEPTORS + 1];
    size_t n = 0;
    for (int i = 0; i < IO_MAX_ACCEPTORS; i++)
        v[n++] = &w0->acceptors[i].lsn;
    v[n++] = &w0->admin;
    return cq__io_lsn_metrics_all(v, n, "chanq_accept_errors_total", "chanq_listener_closes_total",
                                  out);
}

/* SIGHUP reloads coalesce: a signal only marks a reload as requested and arms a 0 ms timer;
 * the timer runs one reload for every request that arrived before it fired. A SIGHUP that
 * arrives while a reload runs is dispatched by libuv afterwards and arms the timer again, so
 * no request is ever lost, and a burst of them costs one reload. */
typedef struct hup_ctx {
    void (*fn)(void *ud);
    void *ud;
    uv_timer_t timer;
    uint32_t requests; /* SIGHUPs since the last reload started */
} hup_ctx_t;

static void on_reload(uv_timer_t *t)
{
    hup_ctx_t *h = t->data;
    uint32_t n = h->requests;
    h->requests = 0;
    CQ_INFO("main", "SIGHUP: reloading (%u request%s merged into this reload)", n,
            n == 1 ? "" : "s");
    if (h->fn)
        h->fn(h->ud);
}

static void on_signal(uv_signal_t *s, int signum)
{
    if (signum == SIGHUP) {
        hup_ctx_t *h = s->data;
        if (h->requests++ == 0)
            uv_timer_start(&h->timer, on_reload, 0, 0);
        return;
    }
    CQ_INFO("main", "signal %d: shutting down", signum);
    uv_stop(s->loop);
}

int cq_io_run_until_signal(cq_io_t *io, void (*on_hup)(void *ud), void *ud)
{
    uv_loop_t loop;
    uv_signal_t si, st, sh;
    hup_ctx_t hup = {.fn = on_hup, .ud = ud};
    uv_loop_init(&loop);
    uv_signal_init(&loop, &si);
    uv_signal_init(&loop, &st);
    uv_signal_init(&loop, &sh);
    uv_timer_init(&loop, &hup.timer);
    sh.data = &hup;
    hup.timer.data = &hup;
    uv_signal_start(&si, on_signal, SIGINT);
    uv_signal_start(&st, on_signal, SIGTERM);
    uv_signal_start(&sh, on_signal, SIGHUP);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&si, NULL);
    uv_close((uv_handle_t *)&st, NULL);
    uv_close((uv_handle_t *)&sh, NULL);
    uv_close((uv_handle_t *)&hup.timer, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    (void)io;
    return 0;
}

static void drain_loop(io_worker_t *w)
{
    /* Not started (failed start): close what was opened and let callbacks run. */
    cq__io_worker_shutdown(w);
    uv_run(&w->loop, UV_RUN_DEFAULT);
}

cq_io_t *cq_io_free(cq_io_t *io)
{
    if (!io)
        return NULL;
    atomic_store(&io->stopping, 1);
    for (int i = 0; i < io->nworkers; i++)
        if (io->workers[i].started)
            uv_async_send(&io->workers[i].wake);
    for (int i = 0; i < io->nworkers; i++) {
        io_worker_t *w = &io->workers[i];
        if (w->started)
            uv_thread_join(&w->thread);
        else if (w->loop_ok)
            drain_loop(w);
    }
    for (int i = 0; i < io->nworkers; i++) {
        io_worker_t *w = &io->workers[i];
        cq__io_drain_accepts(w);
        cq_core_free(w->core); /* releases the last connections: their batches go back */
        cq__io_ring_free(w);
        if (w->loop_ok)
            uv_loop_close(&w->loop);
        cq_free(w->rbuf);
        cq_pool_free(w->pool);
    }
    cq__io_tls_done(io);
    cq_kcp_ipcount_free(io->kcp_ips);
    cq_free(io);
    return NULL;
}
