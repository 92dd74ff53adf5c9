/* mgr_io.c - the management service's loop thread, store thread and audit file. See cq_mgrio.h.
 * The protocols are in src/mgr; this file only moves bytes (and runs the store's calls). The
 * connections are mq_io.c's (io_sqconn.c) and admin_http.c's (io_adminconn.c); a tick checks
 * their timeouts. */
#include "cq_mgrio.h"

#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_util.h"
#include "io_int.h"
#include "io_drain.h"
#include "io_snapshot.h"
#include "io_sqconn.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define MGR_READ_BUF (64u * 1024u)

enum { K_MGR = 0, K_HTTP = 1, K_ADMIN = 2 };

/* A store call's result, queued by the store thread for the loop (FIFO). */
typedef struct st_result {
    struct st_result *next;
    bool save; /* a save's answer, else a load's */
    int rc;
    char *json; /* load: owned (cq_free) */
    size_t len;
    int64_t ver;
} st_result_t;

struct cq_mgrio {
    uv_loop_t loop;
    uv_async_t wake;
    io_lsn_t lsn[3]; /* K_MGR, K_HTTP, K_ADMIN (accept.c) */
    bool lsn_on[3];
    char bound[3][80]; /* "-" when off */
    uv_prepare_t prepare;
    uv_timer_t tick;
    uv_thread_t thread;
    bool loop_ok, started;
    _Atomic int stopping;
    io_drain_t drain; /* the shutdown (loop thread) */
    cq_mgr_t *m;      /* owned; the loop thread's while it runs */
    cq_mgrio_opts_t o;
    cq_admin_t *admin;
    uint8_t *rbuf;
    io_sqclass_t cls[2];  /* K_MGR, K_HTTP connections: hooks, limits, counts */
    cq_list_t conns;      /* their connections (timeouts) */
    io_adminset_t admins; /* K_ADMIN connections */
    int audit_fd;         /* -1 when off */
    uint64_t audit_errors;
    uint64_t load_retry_at; /* uv_now when a failed load is asked again; 0 = not waiting */
    uint64_t load_log_ms;   /* the last log line of a failed load */
    /* the store thread: jobs and results under st_mu */
    const cq_mgrstore_ops_t *store;
    void *store_ud;
    pthread_t st_thread;
    bool st_started;
    pthread_mutex_t st_mu;
    pthread_cond_t st_cv;
    bool st_quit, want_load, want_save, alive;
    char *save_json; /* the next save's document (owned) */
    size_t save_len;
    int64_t save_expect;
    st_result_t *res_head, *res_tail;
    char *tok_admin, *tok_server; /* SIGHUP: new tokens for the loop (owned) */
    bool tok_new;
    io_snapshot_t snap; /* the metrics the admin listener serves (io_snapshot.c) */
};

/* One management or console connection (io_sqconn.c). */
typedef struct mgr_conn {
    io_sqconn_t sc; /* first: the handle's data */
    cq_mgrio_t *io;
    cq_mgr_conn_t *conn;  /* the management protocol, or */
    cq_mgr_hconn_t *http; /* the console and JSON API */
} mgr_conn_t;

static uint64_t unix_ms(void)
{
    return (uint64_t)(cq_clock_unix_ns() / 1000000);
}

static void wake_loop(cq_mgrio_t *io) /* under st_mu */
{
    if (io->alive)
        uv_async_send(&io->wake);
}

/* ---- the store thread ------------------------------------------------------------------- */

static void st_push(cq_mgrio_t *io, st_result_t *r) /* under st_mu */
{
    if (io->res_tail)
        io->res_tail->next = r;
    else
        io->res_head = r;
    io->res_tail = r;
    wake_loop(io);
}

/* Runs one job (st_mu held on entry and exit, released during the store's call). */
static void st_run(cq_mgrio_t *io, st_result_t *r)
{
    if (io->want_save) {
        char *json = io->save_json;
        size_t len = io->save_len;
        int64_t expect = io->save_expect;
        io->save_json = NULL;
        io->want_save = false;
        pthread_mutex_unlock(&io->st_mu);
        r->save = true;
        r->rc = io->store->save(io->store_ud, json, len, expect, &r->ver);
        cq_free(json);
    } else {
        io->want_load = false;
        pthread_mutex_unlock(&io->st_mu);
        r->ver = -1;
        r->rc = io->store->load(io->store_ud, &r->json, &r->len, &r->ver);
    }
    pthread_mutex_lock(&io->st_mu);
    st_push(io, r);
}

static void *st_main(void *arg)
{
    cq_mgrio_t *io = arg;
    pthread_mutex_lock(&io->st_mu);
    while (!io->st_quit) {
        if (!io->want_save && !io->want_load) {
            pthread_cond_wait(&io->st_cv, &io->st_mu);
            continue;
        }
        st_result_t *r = cq_calloc(1, sizeof(*r));
        if (!r) { /* out of memory: try again later */
            pthread_mutex_unlock(&io->st_mu);
            usleep(100000);
            pthread_mutex_lock(&io->st_mu);
            continue;
        }
        st_run(io, r);
    }
    pthread_mutex_unlock(&io->st_mu);
    return NULL;
}

/* The store's watch (any thread): the document may have changed under us. */
static void st_changed(void *arg)
{
    cq_mgrio_t *io = arg;
    pthread_mutex_lock(&io->st_mu);
    io->want_load = true;
    pthread_cond_signal(&io->st_cv);
    pthread_mutex_unlock(&io->st_mu);
}

/* ---- the engine's ops (loop thread) ------------------------------------------------------ */

static void eng_save(void *ud, const char *json, size_t len, int64_t expect_ver)
{
    cq_mgrio_t *io = ud;
    char *copy = cq_malloc(len + 1);
    if (copy) {
        memcpy(copy, json, len);
        copy[len] = '\0';
    }
    pthread_mutex_lock(&io->st_mu);
    if (copy) {
        cq_free(io->save_json);
        io->save_json = copy;
        io->save_len = len;
        io->save_expect = expect_ver;
        io->want_save = true;
        pthread_cond_signal(&io->st_cv);
    } else { /* answered as a failed save: the engine tries again at its tick */
        st_result_t *r = cq_calloc(1, sizeof(*r));
        if (r) {
            r->save = true;
            r->rc = -ENOMEM;
            st_push(io, r);
        }
    }
    pthread_mutex_unlock(&io->st_mu);
}

static void eng_reload(void *ud)
{
    st_changed(ud);
}

/* One line per change; a plain write (no fsync: the state store is the record, this is the
 * trail). A failed write is counted and logged, never fatal. */
static void eng_audit(void *ud, const char *line, size_t len)
{
    cq_mgrio_t *io = ud;
    if (io->audit_fd < 0)
        return;
    struct iovec v[2] = {{(void *)line, len}, {(void *)"\n", 1}};
    ssize_t w = writev(io->audit_fd, v, 2);
    if (w == (ssize_t)(len + 1))
        return;
    if (io->audit_errors++ == 0 || io->audit_errors % 1000 == 0)
        CQ_ERROR("mgr", "--mgr-audit-log: write failed (%llu so far): %s",
                 (unsigned long long)io->audit_errors, w < 0 ? strerror(errno) : "short write");
}

static const cq_mgr_ops_t engine_ops = {eng_save, eng_reload, eng_audit};

/* The store's answers and the SIGHUP tokens, on the loop. */
static void deliver_load(cq_mgrio_t *io, st_result_t *r)
{
    uint64_t now = uv_now(&io->loop);
    char err[512] = "";
    int rc = r->rc;
    if (rc == 0)
        rc = cq_mgr_store_loaded(io->m, r->json, r->len, r->json ? r->ver : -1, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "%s", cq_strerror(rc));
    if (rc == 0) {
        io->load_retry_at = 0;
        return;
    }
    io->load_retry_at = now + CQ_MGRIO_LOAD_RETRY_MS;
    if (!io->load_log_ms || now - io->load_log_ms >= 10000) {
        io->load_log_ms = now;
        CQ_ERROR("mgr", "loading the state failed (asked again every %d ms): %s",
                 CQ_MGRIO_LOAD_RETRY_MS, err);
    }
}

static void take_tokens(cq_mgrio_t *io)
{
    pthread_mutex_lock(&io->st_mu);
    char *a = io->tok_admin, *s = io->tok_server;
    bool fresh = io->tok_new;
    io->tok_admin = io->tok_server = NULL;
    io->tok_new = false;
    pthread_mutex_unlock(&io->st_mu);
    if (fresh && cq_mgr_set_tokens(io->m, a, s) < 0)
        CQ_ERROR("mgr", "SIGHUP: out of memory: keeping the current tokens");
    cq_free(a);
    cq_free(s);
}

static void drain_results(cq_mgrio_t *io)
{
    take_tokens(io);
    pthread_mutex_lock(&io->st_mu);
    st_result_t *r = io->res_head;
    io->res_head = io->res_tail = NULL;
    pthread_mutex_unlock(&io->st_mu);
    while (r) {
        st_result_t *next = r->next;
        if (r->save)
            cq_mgr_store_done(io->m, r->rc, r->ver);
        else
            deliver_load(io, r);
        cq_free(r->json);
        cq_free(r);
        r = next;
    }
}

/* ---- connections (io_sqconn.c) ----------------------------------------------------------- */

static void conn_closed(io_sqconn_t *c)
{
    mgr_conn_t *mc = (mgr_conn_t *)c;
    cq_mgrio_t *io = mc->io;
    cq_mgr_conn_close(mc->conn);
    cq_mgr_hconn_close(mc->http);
    cq_free(mc);
    cq__io_drain_closed(&io->drain);
}

static const cq_mgr_conn_ops_t conn_ops = {
    {"tcp", cq__io_sqconn_flush, cq__io_sqconn_close, cq__io_sqconn_peer}};

static void mgr_input(io_sqconn_t *c, const uint8_t *p, size_t n)
{
    mgr_conn_t *mc = (mgr_conn_t *)c;
    cq_mgr_conn_input(mc->conn, p, n, unix_ms());
    if (!c->dropped && cq_mgr_conn_frames(mc->conn) != c->frames) {
        c->frames = cq_mgr_conn_frames(mc->conn);
        c->active_ms = uv_now(&mc->io->loop);
    }
}

static void http_input(io_sqconn_t *c, const uint8_t *p, size_t n)
{
    cq_mgr_hconn_input(((mgr_conn_t *)c)->http, p, n, unix_ms());
}

static bool mgr_authed(const io_sqconn_t *c)
{
    return cq_mgr_conn_authed(((const mgr_conn_t *)c)->conn);
}

/* The peer's address without the port (the engine's per-address budgets). */
static void peer_host(mgr_conn_t *mc, char *out, size_t cap)
{
    char p[80];
    if (cq__io_sqconn_peer(&mc->sc, p, sizeof(p)) < 0)
        snprintf(p, sizeof(p), "?");
    cq_peer_host(p, out, cap);
}

static void accept_conn(io_lsn_t *l, int fd, int kind)
{
    cq_mgrio_t *io = l->data;
    if (cq__io_sqclass_full(&io->cls[kind], fd))
        return;
    mgr_conn_t *mc = cq_calloc(1, sizeof(*mc));
    if (!mc) {
        close(fd);
        return;
    }
    mc->io = io;
    cq__io_drain_opened(&io->drain);
    bool ok = cq__io_sqconn_open(&mc->sc, &io->cls[kind], &io->loop, fd) == 0;
    char host[80] = "?";
    if (ok)
        peer_host(mc, host, sizeof(host));
    if (ok && kind == K_HTTP && (mc->http = cq_mgr_hconn_new(io->m, &conn_ops, &mc->sc, host)))
        mc->sc.q = cq_mgr_hconn_sendq(mc->http);
    else if (ok && kind == K_MGR && (mc->conn = cq_mgr_conn_new(io->m, &conn_ops, &mc->sc, host)))
        mc->sc.q = cq_mgr_conn_sendq(mc->conn);
    if (!mc->sc.q) {
        cq__io_sqconn_drop(&mc->sc);
        return;
    }
    cq__io_sqconn_start(&mc->sc, &io->conns);
}

static void on_accept_mgr(io_lsn_t *l, int fd)
{
    accept_conn(l, fd, K_MGR);
}

static void on_accept_http(io_lsn_t *l, int fd)
{
    accept_conn(l, fd, K_HTTP);
}

/* The two classes of connection with their limits (timeouts: io_sqconn.c, on the tick). */
static void init_classes(cq_mgrio_t *io)
{
    const cq_mgrio_opts_t *o = &io->o;
    io_sqclass_t *m = &io->cls[K_MGR], *h = &io->cls[K_HTTP];
    *m = (io_sqclass_t){.input = mgr_input,
                        .closed = conn_closed,
                        .authed = mgr_authed,
                        .auth_timeout_ms = o->auth_timeout_ms,
                        .idle_timeout_ms = o->idle_timeout_ms,
                        .lsn = &io->lsn[K_MGR],
                        .max_conns = o->max_conns,
                        .cap_text = "mgr-max-connections reached"};
    *h = (io_sqclass_t){.input = http_input,
                        .closed = conn_closed,
                        .http = true,
                        .timeout_ms = o->http_timeout_ms,
                        .lsn = &io->lsn[K_HTTP],
                        .max_conns = o->http_max_conns,
                        .cap_text = "mgr-http-max-connections reached"};
    for (int i = 0; i < 2; i++) {
        io->cls[i].keepalive_s = o->tcp_keepalive_s;
        io->cls[i].rbuf = io->rbuf;
        io->cls[i].rlen = MGR_READ_BUF;
    }
}

/* ---- the admin listener (/metrics, /healthz): io_adminconn.c ----------------------------- */

static void admin_closed(void *ud)
{
    cq__io_drain_closed(&((cq_mgrio_t *)ud)->drain);
}

static void on_accept_admin(io_lsn_t *l, int fd)
{
    cq_mgrio_t *io = l->data;
    if (cq__io_adminset_accept(&io->admins, fd))
        cq__io_drain_opened(&io->drain);
}

static void sweep_conns(cq_mgrio_t *io)
{
    uint64_t now = uv_now(&io->loop);
    cq__io_sqconn_sweep(&io->conns, now);
    cq__io_adminset_sweep(&io->admins, now);
}

/* ---- metrics ----------------------------------------------------------------------------- */

static int edge_metrics(cq_mgrio_t *io, cq_sbuf_t *b)
{
    io_lsn_t *v[3];
    size_t n = 0;
    char t[512];
    int k =
        snprintf(t, sizeof(t),
                 "# TYPE chanq_mgr_connections gauge\n"
                 "chanq_mgr_connections{port=\"mgr\"} %u\n"
                 "chanq_mgr_connections{port=\"mgrhttp\"} %u\n"
                 "# TYPE chanq_mgr_audit_write_errors_total counter\n"
                 "chanq_mgr_audit_write_errors_total %llu\n",
                 io->cls[K_MGR].nopen, io->cls[K_HTTP].nopen, (unsigned long long)io->audit_errors);
    int r = cq_sbuf_append(b, t, (size_t)k);
    for (int i = 0; i < 3; i++)
        if (io->lsn_on[i])
            v[n++] = &io->lsn[i];
    return r < 0 ? r
                 : cq__io_lsn_metrics_all(v, n, "chanq_mgr_accept_errors_total",
                                          "chanq_mgr_closes_total", b);
}

static void metrics_refresh(cq_mgrio_t *io)
{
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    if (cq_mgr_metrics(io->m, unix_ms(), &b) < 0 || edge_metrics(io, &b) < 0) {
        cq_sbuf_done(&b);
        return; /* out of memory: keep the previous snapshot */
    }
    cq__io_snapshot_publish(&io->snap, &b);
}

int cq_mgrio_metrics_append(void *ud, cq_sbuf_t *out)
{
    return cq__io_snapshot_append(&((cq_mgrio_t *)ud)->snap, out);
}

/* ---- shutdown (io_drain.c) -----------------------------------------------------------------
 * DRAIN: no new change can start; the changes made so far are saved (the tick retries a failed
 * save). CLOSE, once the engine's store is idle: every connection writes what is queued and
 * closes. */

/* The listeners are poll and timer handles (accept.c), so every TCP handle is a connection: an
 * io_sqconn_t, or an admin connection, which closing() has closed before a walk gets to it. */
static bool is_conn(void *ud, const uv_handle_t *h)
{
    return h->type == UV_TCP;
}

static bool is_listener(const cq_mgrio_t *io, const uv_handle_t *h)
{
    for (int i = 0; i < 3; i++)
        if (io->lsn_on[i] && cq__io_lsn_owns(&io->lsn[i], h))
            return true;
    return false;
}

static void close_listeners(cq_mgrio_t *io)
{
    for (int i = 0; i < 3; i++)
        if (io->lsn_on[i])
            cq__io_lsn_close(&io->lsn[i]);
}

static bool store_idle(void *ud)
{
    return cq_mgr_store_idle(((cq_mgrio_t *)ud)->m);
}

static void eng_flush(void *ud)
{
    cq_mgr_flush(((cq_mgrio_t *)ud)->m);
}

static void drain_handle(void *ud, uv_handle_t *h)
{
    cq_mgrio_t *io = ud;
    if (is_listener(io, h))
        close_listeners(io);
}

static void close_handle(void *ud, uv_handle_t *h)
{
    cq_mgrio_t *io = ud;
    if (is_listener(io, h)) {
        close_listeners(io);
        return;
    }
    if (h == (uv_handle_t *)&io->wake) {
        pthread_mutex_lock(&io->st_mu);
        io->alive = false; /* store results only queue from now on */
        pthread_mutex_unlock(&io->st_mu);
    }
    uv_close(h, NULL);
}

static void close_admins(void *ud)
{
    cq__io_adminset_close_all(&((cq_mgrio_t *)ud)->admins);
}

static void grace_over(void *ud)
{
    cq_mgrio_t *io = ud;
    if (!cq_mgr_store_idle(io->m))
        CQ_WARN("mgr", "shutdown: --shutdown-grace-ms is over with changes not saved");
}

static const io_drain_ops_t drain_ops = {is_conn,      store_idle,   eng_flush, drain_handle,
                                         close_handle, close_admins, grace_over};

/* ---- loop callbacks ---------------------------------------------------------------------- */

static void on_wake(uv_async_t *a)
{
    cq_mgrio_t *io = a->data;
    if (io->drain.phase == IO_CLOSE)
        return;
    drain_results(io);
    if (atomic_load(&io->stopping))
        cq__io_drain_step(&io->drain);
}

static void on_prepare(uv_prepare_t *p)
{
    cq_mgrio_t *io = p->data;
    cq_mgr_flush(io->m);
}

static void on_tick(uv_timer_t *t)
{
    cq_mgrio_t *io = t->data;
    uint64_t now = uv_now(&io->loop);
    if (io->load_retry_at && now >= io->load_retry_at) {
        io->load_retry_at = 0;
        st_changed(io);
    }
    cq_mgr_tick(io->m, unix_ms());
    if (io->drain.phase == IO_RUN)
        sweep_conns(io);
    else if (io->drain.phase == IO_DRAIN)
        cq__io_drain_step(&io->drain); /* CLOSE once the store is idle */
    if (io->drain.phase != IO_CLOSE)
        metrics_refresh(io);
}

static void loop_main(void *arg)
{
    cq_mgrio_t *io = arg;
    uv_run(&io->loop, UV_RUN_DEFAULT);
}

/* ---- start / stop ------------------------------------------------------------------------ */

cq_mgrio_t *cq_mgrio_new(void)
{
    cq_mgrio_t *io = cq_calloc(1, sizeof(*io));
    if (!io)
        return NULL;
    io->audit_fd = -1;
    pthread_mutex_init(&io->st_mu, NULL);
    pthread_cond_init(&io->st_cv, NULL);
    cq__io_snapshot_init(&io->snap);
    for (int i = 0; i < 3; i++)
        strcpy(io->bound[i], "-");
    return io;
}

static int open_audit(cq_mgrio_t *io, char *err, size_t errlen)
{
    const char *p = io->o.audit_path;
    if (!p || !*p)
        return 0;
    io->audit_fd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (io->audit_fd < 0)
        return cq_err_fmt(err, errlen, -errno, "--mgr-audit-log %s: %s", p, strerror(errno));
    return 0;
}

static int start_listener(cq_mgrio_t *io, int k, const char *addr, const char *name, io_lsn_cb cb,
                          unsigned reasons, char *err, size_t errlen)
{
    if (!addr || !*addr)
        return 0;
    io->lsn[k].reasons = reasons;
    int r = cq__io_lsn_start(&io->lsn[k], &io->loop, addr, name, cb, io, io->bound[k],
                             sizeof(io->bound[k]), err, errlen);
    io->lsn_on[k] = r == 0;
    return r;
}

static int start_listeners(cq_mgrio_t *io, char *err, size_t errlen)
{
    const cq_mgrio_opts_t *o = &io->o;
    unsigned capto = 1u << IO_CLOSE_CAP | 1u << IO_CLOSE_TIMEOUT;
    if (!o->addr || !*o->addr)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "--mgr-addr is required");
    if (o->admin_addr && *o->admin_addr && !o->admin)
        return cq_err_fmt(err, errlen, -EINVAL, "admin address without a metrics registry");
    int r = start_listener(io, K_MGR, o->addr, "mgr", on_accept_mgr,
                           1u << IO_CLOSE_CAP | 1u << IO_CLOSE_PREAUTH | 1u << IO_CLOSE_IDLE, err,
                           errlen);
    if (r == 0)
        r = start_listener(io, K_HTTP, o->http_addr, "mgrhttp", on_accept_http, capto, err, errlen);
    if (r == 0)
        r = start_listener(io, K_ADMIN, o->admin_addr, "admin", on_accept_admin, capto, err,
                           errlen);
    return r;
}

static void start_loop_handles(cq_mgrio_t *io)
{
    uv_async_init(&io->loop, &io->wake, on_wake);
    io->wake.data = io;
    io->alive = true;
    uv_prepare_init(&io->loop, &io->prepare);
    io->prepare.data = io;
    uv_prepare_start(&io->prepare, on_prepare);
    uv_timer_init(&io->loop, &io->tick);
    io->tick.data = io;
    uv_timer_start(&io->tick, on_tick, CQ_MGRIO_TICK_MS, CQ_MGRIO_TICK_MS);
}

int cq_mgrio_start(cq_mgrio_t *io, const cq_mgr_opts_t *mopts, const cq_mgrstore_ops_t *store,
                   void *store_ud, const cq_mgrio_opts_t *opts, char *err, size_t errlen)
{
    io->store = store;
    io->store_ud = store_ud;
    io->o = *opts;
    io->admin = opts->admin;
    cq_list_init(&io->conns);
    if (io->o.shutdown_grace_ms < 0)
        io->o.shutdown_grace_ms = 0;
    cq__io_drain_init(&io->drain, &io->loop, (uint64_t)io->o.shutdown_grace_ms, &drain_ops, io);
    io->rbuf = cq_malloc(MGR_READ_BUF);
    if (!io->rbuf || uv_loop_init(&io->loop) < 0)
        return cq_err_fmt(err, errlen, -ENOMEM, "mgr: out of memory");
    init_classes(io);
    cq__io_adminset_init(&io->admins, &io->loop, io->admin, &io->lsn[K_ADMIN],
                         io->o.admin_max_conns, io->o.admin_timeout_ms, admin_closed, io);
    io->loop_ok = true;
    if (!(io->m = cq_mgr_new(mopts, &engine_ops, io, err, errlen)))
        return CQ_ECONFIG;
    int r = open_audit(io, err, errlen);
    start_loop_handles(io);
    if (r == 0)
        r = start_listeners(io, err, errlen);
    if (r < 0)
        return r;
    if (store->watch)
        store->watch(store_ud, st_changed, io);
    io->want_load = true; /* the first load */
    if (pthread_create(&io->st_thread, NULL, st_main, io) != 0)
        return cq_err_fmt(err, errlen, -EAGAIN, "mgr: cannot create the store thread");
    io->st_started = true;
    metrics_refresh(io); /* before the loop starts: /metrics has the manager's part at once */
    if (uv_thread_create(&io->thread, loop_main, io) < 0)
        return cq_err_fmt(err, errlen, -EAGAIN, "mgr: cannot create the loop thread");
    io->started = true;
    CQ_INFO("io", "management protocol on %s", io->bound[K_MGR]);
    if (io->lsn_on[K_HTTP])
        CQ_INFO("io", "management console and JSON API on http://%s/", io->bound[K_HTTP]);
    if (io->lsn_on[K_ADMIN])
        CQ_INFO("io", "admin HTTP (/metrics, /healthz) on %s", io->bound[K_ADMIN]);
    return 0;
}

const char *cq_mgrio_bound(const cq_mgrio_t *io)
{
    return io->bound[K_MGR];
}

const char *cq_mgrio_http_bound(const cq_mgrio_t *io)
{
    return io->bound[K_HTTP];
}

const char *cq_mgrio_admin_bound(const cq_mgrio_t *io)
{
    return io->bound[K_ADMIN];
}

int cq_mgrio_set_tokens(cq_mgrio_t *io, const char *admin_token, const char *server_token)
{
    char *a = cq_strdup(admin_token ? admin_token : "");
    char *s = cq_strdup(server_token ? server_token : "");
    if (!a || !s) {
        cq_free(a);
        cq_free(s);
        return -ENOMEM;
    }
    pthread_mutex_lock(&io->st_mu);
    cq_free(io->tok_admin);
    cq_free(io->tok_server);
    io->tok_admin = a;
    io->tok_server = s;
    io->tok_new = true;
    wake_loop(io);
    pthread_mutex_unlock(&io->st_mu);
    return 0;
}

static void stop_store_thread(cq_mgrio_t *io)
{
    if (!io->st_started)
        return;
    pthread_mutex_lock(&io->st_mu);
    io->st_quit = true;
    pthread_cond_signal(&io->st_cv);
    pthread_mutex_unlock(&io->st_mu);
    pthread_join(io->st_thread, NULL);
    io->st_started = false;
}

void cq_mgrio_stop(cq_mgrio_t *io)
{
    if (!io || !io->loop_ok)
        return;
    cq__io_snapshot_unpublish(&io->snap);
    atomic_store(&io->stopping, 1);
    if (io->started) {
        pthread_mutex_lock(&io->st_mu);
        wake_loop(io);
        pthread_mutex_unlock(&io->st_mu);
        uv_thread_join(&io->thread);
        io->started = false;
    } else {
        cq__io_drain_drop(&io->drain); /* never started: no grace timer */
    }
    uv_run(&io->loop, UV_RUN_DEFAULT); /* close callbacks not yet run */
    stop_store_thread(io);
}

cq_mgrio_t *cq_mgrio_free(cq_mgrio_t *io)
{
    if (!io)
        return NULL;
    cq_mgrio_stop(io);
    if (io->loop_ok)
        uv_loop_close(&io->loop);
    if (io->store && io->store->free) /* after it returns no watch callback runs */
        io->store->free(io->store_ud);
    io->m = cq_mgr_free(io->m);
    for (st_result_t *r = io->res_head, *n; r; r = n) {
        n = r->next;
        cq_free(r->json);
        cq_free(r);
    }
    if (io->audit_fd >= 0)
        close(io->audit_fd);
    cq_free(io->save_json);
    cq_free(io->tok_admin);
    cq_free(io->tok_server);
    pthread_mutex_destroy(&io->st_mu);
    pthread_cond_destroy(&io->st_cv);
    cq__io_snapshot_done(&io->snap);
    cq_free(io->rbuf);
    cq_free(io);
    return NULL;
}
