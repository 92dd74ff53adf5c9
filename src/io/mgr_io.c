/* mgr_io.c - the management service's edge: the engine (src/mgr) on the engine-loop host
 * (io_engine.c), with its two connection classes (the management protocol, the console and JSON
 * API), the admin listener, the store thread (mgr_store.c) and the audit file. See cq_mgrio.h.
 * The protocols are in src/mgr; this file only adapts. */
#include "cq_mgrio.h"

#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_log.h"
#include "io_engine.h"
#include "mgr_store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

enum { K_MGR = 0, K_HTTP = 1, K_ADMIN = 2 };

struct cq_mgrio {
    io_engine_t *host; /* the loop thread */
    mgr_store_t *st;   /* the store thread */
    cq_mgr_t *m;       /* owned; the loop thread's while it runs */
    cq_mgrio_opts_t o;
    char bound[3][80]; /* K_*: "-" when off */
    int audit_fd;      /* -1 when off */
    uint64_t audit_errors;
    uint64_t load_retry_at; /* loop clock when a failed load is asked again; 0 = not waiting */
    uint64_t load_log_ms;   /* the last log line of a failed load */
    pthread_mutex_t tok_mu;
    char *tok_admin, *tok_server; /* under tok_mu: SIGHUP's new tokens for the loop (owned) */
    bool tok_new;
};

static uint64_t unix_ms(void)
{
    return (uint64_t)(cq_clock_unix_ns() / 1000000);
}

/* ---- the engine's ops (loop thread) ------------------------------------------------------- */

static void eng_save(void *ud, const char *json, size_t len, int64_t expect_ver)
{
    cq__mgr_store_save(((cq_mgrio_t *)ud)->st, json, len, expect_ver);
}

static void eng_reload(void *ud)
{
    cq__mgr_store_load(((cq_mgrio_t *)ud)->st);
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

/* ---- the store's answers and the SIGHUP tokens, on the loop -------------------------------- */

static void deliver_load(cq_mgrio_t *io, mgr_store_res_t *r)
{
    uint64_t now = cq__io_engine_now(io->host);
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
    pthread_mutex_lock(&io->tok_mu);
    char *a = io->tok_admin, *s = io->tok_server;
    bool fresh = io->tok_new;
    io->tok_admin = io->tok_server = NULL;
    io->tok_new = false;
    pthread_mutex_unlock(&io->tok_mu);
    if (fresh && cq_mgr_set_tokens(io->m, a, s) < 0)
        CQ_ERROR("mgr", "SIGHUP: out of memory: keeping the current tokens");
    cq_free(a);
    cq_free(s);
}

static void on_wake(void *ud)
{
    cq_mgrio_t *io = ud;
    take_tokens(io);
    mgr_store_res_t *r = cq__mgr_store_take(io->st);
    while (r) {
        mgr_store_res_t *next = r->next;
        if (r->save)
            cq_mgr_store_done(io->m, r->rc, r->ver);
        else
            deliver_load(io, r);
        cq__mgr_store_res_free(r);
        r = next;
    }
}

/* ---- the engine on the host (loop thread) ------------------------------------------------- */

static void on_flush(void *ud)
{
    cq_mgr_flush(((cq_mgrio_t *)ud)->m);
}

static void on_tick(void *ud, uint64_t now_ms)
{
    cq_mgrio_t *io = ud;
    if (io->load_retry_at && now_ms >= io->load_retry_at) {
        io->load_retry_at = 0;
        cq__mgr_store_load(io->st);
    }
    cq_mgr_tick(io->m, unix_ms());
}

/* The shutdown: no new change can start; the changes made so far are saved (the tick retries a
 * failed save); the connections close once the store is idle. */
static bool on_idle(void *ud)
{
    return cq_mgr_store_idle(((cq_mgrio_t *)ud)->m);
}

static void on_grace_over(void *ud, size_t nlive)
{
    if (!cq_mgr_store_idle(((cq_mgrio_t *)ud)->m))
        CQ_WARN("mgr", "shutdown: --shutdown-grace-ms is over with changes not saved");
}

static int on_metrics(void *ud, cq_sbuf_t *b)
{
    cq_mgrio_t *io = ud;
    int r = cq_mgr_metrics(io->m, unix_ms(), b);
    return r < 0 ? r
                 : cq_sbuf_printf(b,
                                  "# HELP chanq_mgr_audit_write_errors_total Audit log lines "
                                  "that could not be written.\n"
                                  "# TYPE chanq_mgr_audit_write_errors_total counter\n"
                                  "chanq_mgr_audit_write_errors_total %llu\n",
                                  (unsigned long long)io->audit_errors);
}

static const io_engine_ops_t host_ops = {.wake = on_wake,
                                         .flush = on_flush,
                                         .tick = on_tick,
                                         .idle = on_idle,
                                         .metrics = on_metrics,
                                         .grace_over = on_grace_over};

int cq_mgrio_metrics_append(void *ud, cq_sbuf_t *out)
{
    return cq__io_engine_metrics_append(((cq_mgrio_t *)ud)->host, out);
}

/* The store thread's results wait (store thread). */
static void store_wake(void *ud)
{
    cq__io_engine_wake(((cq_mgrio_t *)ud)->host);
}

/* ---- connections -------------------------------------------------------------------------- */

static const cq_mgr_conn_ops_t conn_ops = {IO_ENGINE_TCP_OPS};

/* The peer's address without the port (the engine's per-address budgets). */
static void peer_host(io_econn_t *c, char *out, size_t cap)
{
    char p[80];
    if (cq__io_sqconn_peer(&c->sc, p, sizeof(p)) < 0)
        snprintf(p, sizeof(p), "?");
    cq_peer_host(p, out, cap);
}

static cq_sendq_t *mgr_open(void *ud, io_econn_t *c)
{
    char host[80];
    peer_host(c, host, sizeof(host));
    cq_mgr_conn_t *mc = cq_mgr_conn_new(((cq_mgrio_t *)ud)->m, &conn_ops, &c->sc, host);
    c->conn = mc;
    return mc ? cq_mgr_conn_sendq(mc) : NULL;
}

static void mgr_input(void *ud, io_econn_t *c, const uint8_t *p, size_t n)
{
    cq_mgr_conn_input(c->conn, p, n, unix_ms());
}

static void mgr_closed(void *ud, io_econn_t *c)
{
    cq_mgr_conn_close(c->conn);
}

static uint64_t mgr_frames(void *ud, const io_econn_t *c)
{
    return cq_mgr_conn_frames(c->conn);
}

static bool mgr_authed(void *ud, const io_econn_t *c)
{
    return cq_mgr_conn_authed(c->conn);
}

static cq_sendq_t *http_open(void *ud, io_econn_t *c)
{
    char host[80];
    peer_host(c, host, sizeof(host));
    cq_mgr_hconn_t *h = cq_mgr_hconn_new(((cq_mgrio_t *)ud)->m, &conn_ops, &c->sc, host);
    c->conn = h;
    return h ? cq_mgr_hconn_sendq(h) : NULL;
}

static void http_input(void *ud, io_econn_t *c, const uint8_t *p, size_t n)
{
    cq_mgr_hconn_input(c->conn, p, n, unix_ms());
}

static void http_closed(void *ud, io_econn_t *c)
{
    cq_mgr_hconn_close(c->conn);
}

/* The two classes of connection with their limits (the host checks the timeouts), and the admin
 * listener. */
static int start_listeners(cq_mgrio_t *io, char *err, size_t errlen)
{
    const cq_mgrio_opts_t *o = &io->o;
    const io_eclass_t mgr = {.name = "mgr",
                             .cap_text = "mgr-max-connections reached",
                             .open = mgr_open,
                             .input = mgr_input,
                             .closed = mgr_closed,
                             .frames = mgr_frames,
                             .authed = mgr_authed,
                             .auth_timeout_ms = o->auth_timeout_ms,
                             .idle_timeout_ms = o->idle_timeout_ms,
                             .max_conns = o->max_conns};
    const io_eclass_t http = {.name = "mgrhttp",
                              .cap_text = "mgr-http-max-connections reached",
                              .open = http_open,
                              .input = http_input,
                              .closed = http_closed,
                              .http = true,
                              .timeout_ms = o->http_timeout_ms,
                              .max_conns = o->http_max_conns};
    if (!o->addr || !*o->addr)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "--mgr-addr is required");
    if (o->admin_addr && *o->admin_addr && !o->admin)
        return cq_err_fmt(err, errlen, -EINVAL, "admin address without a metrics registry");
    int r = cq__io_engine_listen(io->host, &mgr, o->addr, io->bound[K_MGR], sizeof(io->bound[0]),
                                 err, errlen);
    if (r >= 0)
        r = cq__io_engine_listen(io->host, &http, o->http_addr, io->bound[K_HTTP],
                                 sizeof(io->bound[0]), err, errlen);
    if (r >= 0 && o->admin_addr && *o->admin_addr)
        r = cq__io_engine_admin(io->host, o->admin_addr, o->admin, o->admin_max_conns,
                                o->admin_timeout_ms, io->bound[K_ADMIN], sizeof(io->bound[0]), err,
                                errlen);
    return r < 0 ? r : 0;
}

/* ---- start / stop ------------------------------------------------------------------------- */

cq_mgrio_t *cq_mgrio_new(void)
{
    cq_mgrio_t *io = cq_calloc(1, sizeof(*io));
    if (!io)
        return NULL;
    io->audit_fd = -1;
    pthread_mutex_init(&io->tok_mu, NULL);
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

static int start_host(cq_mgrio_t *io, char *err, size_t errlen)
{
    const io_engine_opts_t ho = {.name = "mgr",
                                 .tick_ms = CQ_MGRIO_TICK_MS,
                                 .metrics_ms = CQ_MGRIO_TICK_MS,
                                 .grace_ms = (uint64_t)io->o.shutdown_grace_ms,
                                 .keepalive_s = io->o.tcp_keepalive_s,
                                 .conns_family = "chanq_mgr_connections",
                                 .errors_family = "chanq_mgr_accept_errors_total",
                                 .closes_family = "chanq_mgr_closes_total"};
    io->host = cq__io_engine_new(&ho, &host_ops, io, err, errlen);
    return io->host ? 0 : -ENOMEM;
}

int cq_mgrio_start(cq_mgrio_t *io, const cq_mgr_opts_t *mopts, const cq_mgrstore_ops_t *store,
                   void *store_ud, const cq_mgrio_opts_t *opts, char *err, size_t errlen)
{
    io->o = *opts;
    if (io->o.shutdown_grace_ms < 0)
        io->o.shutdown_grace_ms = 0;
    if (!(io->st = cq__mgr_store_new(store, store_ud, store_wake, io)))
        return cq_err_fmt(err, errlen, -ENOMEM, "mgr: out of memory");
    int r = start_host(io, err, errlen);
    if (r < 0)
        return r;
    if (!(io->m = cq_mgr_new(mopts, &engine_ops, io, err, errlen)))
        return CQ_ECONFIG;
    r = open_audit(io, err, errlen);
    if (r == 0)
        r = start_listeners(io, err, errlen);
    if (r == 0 && cq__mgr_store_start(io->st) < 0)
        r = cq_err_fmt(err, errlen, -EAGAIN, "mgr: cannot create the store thread");
    if (r == 0) /* the first snapshot before the loop starts: /metrics has this part at once */
        r = cq__io_engine_run(io->host, err, errlen);
    if (r < 0)
        return r;
    CQ_INFO("io", "management protocol on %s", io->bound[K_MGR]);
    if (strcmp(io->bound[K_HTTP], "-") != 0)
        CQ_INFO("io", "management console and JSON API on http://%s/", io->bound[K_HTTP]);
    if (strcmp(io->bound[K_ADMIN], "-") != 0)
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
    pthread_mutex_lock(&io->tok_mu);
    cq_free(io->tok_admin);
    cq_free(io->tok_server);
    io->tok_admin = a;
    io->tok_server = s;
    io->tok_new = true;
    pthread_mutex_unlock(&io->tok_mu);
    cq__io_engine_wake(io->host);
    return 0;
}

void cq_mgrio_stop(cq_mgrio_t *io)
{
    if (!io)
        return;
    cq__io_engine_stop(io->host);
    cq__mgr_store_stop(io->st);
}

cq_mgrio_t *cq_mgrio_free(cq_mgrio_t *io)
{
    if (!io)
        return NULL;
    cq_mgrio_stop(io);
    io->host = cq__io_engine_free(io->host);
    io->st = cq__mgr_store_free(io->st); /* frees the store */
    io->m = cq_mgr_free(io->m);
    if (io->audit_fd >= 0)
        close(io->audit_fd);
    cq_free(io->tok_admin);
    cq_free(io->tok_server);
    pthread_mutex_destroy(&io->tok_mu);
    cq_free(io);
    return NULL;
}
