/* mgr_io.c - the management service's loop thread, store thread and audit file. See cq_mgrio.h.
 * The protocols are in src/mgr; this file only moves bytes (and runs the store's calls). Modeled
 * on mq_io.c: the same transport ops over cq_sendq, the accept helper, a tick for the timeouts. */
#include "cq_mgrio.h"

#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_util.h"
#include "io_int.h"
#include "io_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
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
    uv_timer_t grace;
    bool grace_on; /* grace was initialised (the shutdown started) */
    uv_thread_t thread;
    bool loop_ok, started;
    _Atomic int stopping;
    enum { RUN, DRAIN, CLOSE } phase;
    cq_mgr_t *m; /* owned; the loop thread's while it runs */
    cq_mgrio_opts_t o;
    cq_admin_t *admin;
    uint8_t *rbuf;
    cq_list_t conns;    /* mgr and HTTP connections (timeouts) */
    cq_list_t admins;   /* admin connections, oldest first */
    uint32_t nconns[3]; /* open connections per K_* */
    size_t nlive;       /* handles of connections not yet closed (callback run) */
    int audit_fd;       /* -1 when off */
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
    /* the metrics snapshot the admin listener serves (mq_io.c's pattern) */
    pthread_mutex_t metrics_mu;
    cq_sbuf_t snapshot;
    bool metrics_on;
};

/* One management or console connection. */
typedef struct mgr_conn {
    uv_tcp_t tcp;
    int kind; /* K_MGR or K_HTTP */
    uv_write_t wreq;
    uv_shutdown_t sreq;
    cq_mgrio_t *io;
    cq_mgr_conn_t *conn;
    cq_mgr_hconn_t *http;
    cq_sendq_t *q;
    size_t inflight;
    bool writing, closing, shut, dropped;
    cq_list_t node; /* io->conns until closed */
    uint64_t accepted_ms, active_ms, frames;
} mgr_conn_t;

/* One admin connection: one request, one answer (admin_http.c's way). */
typedef struct admin_conn {
    uv_tcp_t tcp;
    int kind; /* K_ADMIN */
    uv_write_t wreq;
    cq_mgrio_t *io;
    cq_list_t node;
    uint64_t accepted_ms;
    cq_sbuf_t in, out;
    bool done;
} admin_conn_t;

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

/* ---- connections: the transport ops ------------------------------------------------------ */

static void grace_closed(cq_mgrio_t *io);

static void conn_closed(uv_handle_t *h)
{
    mgr_conn_t *mc = h->data;
    cq_mgrio_t *io = mc->io;
    cq_mgr_conn_close(mc->conn); /* after every write callback: the queue may go */
    cq_mgr_hconn_close(mc->http);
    cq_free(mc);
    if (--io->nlive == 0 && io->phase == CLOSE)
        grace_closed(io);
}

static void conn_unlist(mgr_conn_t *mc)
{
    if (cq_list_empty(&mc->node))
        return;
    cq_list_remove(&mc->node);
    cq_list_init(&mc->node);
    mc->io->nconns[mc->kind]--;
}

static void conn_drop(mgr_conn_t *mc)
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
static void conn_finish(mgr_conn_t *mc)
{
    if (mc->dropped || mc->writing || mc->shut || !cq_sendq_idle(mc->q))
        return;
    mc->shut = true;
    mc->sreq.data = mc;
    if (uv_shutdown(&mc->sreq, (uv_stream_t *)&mc->tcp, on_shutdown) < 0)
        conn_drop(mc);
}

static void on_written(uv_write_t *req, int status);

static void conn_flush(void *tctx)
{
    mgr_conn_t *mc = tctx;
    size_t left = 0;
    if (mc->kind == K_HTTP && !cq_sendq_idle(mc->q))
        mc->active_ms = uv_now(&mc->io->loop); /* an answer: the request was whole */
    if (mc->dropped || mc->writing)
        return;
    int r = cq__io_stream_write((uv_stream_t *)&mc->tcp, mc->q, &mc->wreq, on_written, true, &left);
    if (r < 0) {
        conn_drop(mc);
        return;
    }
    mc->writing = left > 0;
    mc->inflight = left;
    if (mc->closing)
        conn_finish(mc);
}

static void on_written(uv_write_t *req, int status)
{
    mgr_conn_t *mc = cq_container_of(req, mgr_conn_t, wreq);
    mc->writing = false;
    if (mc->dropped)
        return;
    if (status < 0) {
        conn_drop(mc);
        return;
    }
    cq_sendq_written(mc->q, mc->inflight);
    mc->inflight = 0;
    conn_flush(mc);
}

/* Transport op: stop reading, write what is queued, then close. */
static void conn_close(void *tctx)
{
    mgr_conn_t *mc = tctx;
    if (mc->closing)
        return;
    mc->closing = true;
    uv_read_stop((uv_stream_t *)&mc->tcp);
    conn_flush(mc);
}

static int conn_peer(void *tctx, char *buf, size_t len)
{
    mgr_conn_t *mc = tctx;
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    int r = uv_tcp_getpeername(&mc->tcp, (struct sockaddr *)&ss, &sl);
    return r < 0 ? r : cq__io_addr_str((struct sockaddr *)&ss, buf, len);
}

static const cq_mgr_conn_ops_t conn_ops = {{"tcp", conn_flush, conn_close, conn_peer}};

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    mgr_conn_t *mc = h->data;
    *buf = uv_buf_init((char *)mc->io->rbuf, MGR_READ_BUF);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    mgr_conn_t *mc = s->data;
    if (nread == 0 || mc->closing)
        return;
    if (nread < 0) {
        conn_drop(mc);
        return;
    }
    uint64_t now = unix_ms();
    if (mc->http) {
        cq_mgr_hconn_input(mc->http, (const uint8_t *)buf->base, (size_t)nread, now);
        return;
    }
    cq_mgr_conn_input(mc->conn, (const uint8_t *)buf->base, (size_t)nread, now);
    if (!mc->dropped && cq_mgr_conn_frames(mc->conn) != mc->frames) {
        mc->frames = cq_mgr_conn_frames(mc->conn);
        mc->active_ms = uv_now(&mc->io->loop);
    }
}

/* The peer's address without the port (the engine's per-address budgets). */
static void peer_host(mgr_conn_t *mc, char *out, size_t cap)
{
    char p[80];
    if (conn_peer(mc, p, sizeof(p)) < 0)
        snprintf(p, sizeof(p), "?");
    cq_peer_host(p, out, cap);
}

static void accept_conn(io_lsn_t *l, int fd, int kind)
{
    cq_mgrio_t *io = l->data;
    uint32_t cap = kind == K_HTTP ? io->o.http_max_conns : io->o.max_conns;
    if (io->nconns[kind] >= cap) {
        cq__io_lsn_refused(l, fd,
                           kind == K_HTTP ? "mgr-http-max-connections reached"
                                          : "mgr-max-connections reached");
        return;
    }
    mgr_conn_t *mc = cq_calloc(1, sizeof(*mc));
    if (!mc) {
        close(fd);
        return;
    }
    mc->io = io;
    mc->kind = kind;
    uv_tcp_init(&io->loop, &mc->tcp);
    mc->tcp.data = mc;
    io->nlive++;
    cq_list_init(&mc->node);
    bool ok = uv_tcp_open(&mc->tcp, fd) == 0;
    if (!ok)
        close(fd);
    char host[80] = "?";
    if (ok)
        peer_host(mc, host, sizeof(host));
    if (ok && kind == K_HTTP && (mc->http = cq_mgr_hconn_new(io->m, &conn_ops, mc, host)))
        mc->q = cq_mgr_hconn_sendq(mc->http);
    else if (ok && kind == K_MGR && (mc->conn = cq_mgr_conn_new(io->m, &conn_ops, mc, host)))
        mc->q = cq_mgr_conn_sendq(mc->conn);
    if (!mc->q) {
        conn_drop(mc);
        return;
    }
    cq_list_insert_tail(&io->conns, &mc->node);
    io->nconns[kind]++;
    mc->accepted_ms = mc->active_ms = uv_now(&io->loop);
    uv_tcp_nodelay(&mc->tcp, 1);
    if (io->o.tcp_keepalive_s > 0)
        uv_tcp_keepalive(&mc->tcp, 1, (unsigned)io->o.tcp_keepalive_s);
    uv_read_start((uv_stream_t *)&mc->tcp, on_alloc, on_read);
}

static void on_accept_mgr(io_lsn_t *l, int fd)
{
    accept_conn(l, fd, K_MGR);
}

static void on_accept_http(io_lsn_t *l, int fd)
{
    accept_conn(l, fd, K_HTTP);
}

/* ---- the admin listener (/metrics, /healthz): one request per connection --------------- */

static void admin_closed(uv_handle_t *h)
{
    admin_conn_t *a = h->data;
    cq_mgrio_t *io = a->io;
    cq_sbuf_done(&a->in);
    cq_sbuf_done(&a->out);
    cq_free(a);
    if (--io->nlive == 0 && io->phase == CLOSE)
        grace_closed(io);
}

static void admin_close(admin_conn_t *a)
{
    if (!cq_list_empty(&a->node)) {
        cq_list_remove(&a->node);
        cq_list_init(&a->node);
        a->io->nconns[K_ADMIN]--;
    }
    if (!uv_is_closing((uv_handle_t *)&a->tcp))
        uv_close((uv_handle_t *)&a->tcp, admin_closed);
}

static void admin_written(uv_write_t *req, int status)
{
    admin_close(cq_container_of(req, admin_conn_t, wreq));
}

static void admin_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    admin_conn_t *a = h->data;
    if (cq_sbuf_reserve(&a->in, 1024) < 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)a->in.data + a->in.len, 1024);
}

static void admin_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    admin_conn_t *a = s->data;
    if (nread < 0) {
        admin_close(a);
        return;
    }
    if (a->done || nread == 0)
        return;
    a->in.len += (size_t)nread;
    char method[16], path[256];
    ssize_t h = cq_admin_parse_head((const char *)a->in.data, a->in.len, method, sizeof(method),
                                    path, sizeof(path));
    if (h == 0)
        return;
    a->done = true;
    uv_read_stop(s);
    if (cq_admin_respond(a->io->admin, method, path, h < 0, &a->out) < 0) {
        admin_close(a);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)a->out.data, (unsigned)a->out.len);
    if (uv_write(&a->wreq, s, &b, 1, admin_written) < 0)
        admin_close(a);
}

static void on_accept_admin(io_lsn_t *l, int fd)
{
    cq_mgrio_t *io = l->data;
    if (io->nconns[K_ADMIN] >= io->o.admin_max_conns) {
        cq__io_lsn_refused(l, fd, "admin-max-connections reached");
        return;
    }
    admin_conn_t *a = cq_calloc(1, sizeof(*a));
    if (!a) {
        close(fd);
        return;
    }
    a->io = io;
    a->kind = K_ADMIN;
    uv_tcp_init(&io->loop, &a->tcp);
    a->tcp.data = a;
    io->nlive++;
    cq_list_insert_tail(&io->admins, &a->node);
    io->nconns[K_ADMIN]++;
    a->accepted_ms = uv_now(&io->loop);
    if (uv_tcp_open(&a->tcp, fd) < 0) {
        close(fd);
        admin_close(a);
        return;
    }
    uv_read_start((uv_stream_t *)&a->tcp, admin_alloc, admin_read);
}

static void admin_sweep(cq_mgrio_t *io, uint64_t now)
{
    cq_list_t *n, *t;
    if (!io->o.admin_timeout_ms)
        return;
    cq_list_foreach_safe(n, t, &io->admins)
    {
        admin_conn_t *a = cq_container_of(n, admin_conn_t, node);
        if (now - a->accepted_ms < io->o.admin_timeout_ms)
            return; /* oldest first */
        cq__io_lsn_count(&io->lsn[K_ADMIN], IO_CLOSE_TIMEOUT);
        admin_close(a);
    }
}

/* ---- timeouts ---------------------------------------------------------------------------- */

/* The reason mc is over a limit at now (IO_CLOSE_*), or -1. */
static int conn_expired(const mgr_conn_t *mc, uint64_t now)
{
    const cq_mgrio_opts_t *o = &mc->io->o;
    if (mc->kind == K_HTTP)
        return o->http_timeout_ms && now - mc->active_ms >= o->http_timeout_ms ? IO_CLOSE_TIMEOUT
                                                                               : -1;
    if (!cq_mgr_conn_authed(mc->conn) && o->auth_timeout_ms &&
        now - mc->accepted_ms >= o->auth_timeout_ms)
        return IO_CLOSE_PREAUTH;
    if (o->idle_timeout_ms && now - mc->active_ms >= o->idle_timeout_ms)
        return IO_CLOSE_IDLE;
    return -1;
}

static void sweep_conns(cq_mgrio_t *io)
{
    uint64_t now = uv_now(&io->loop);
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &io->conns)
    {
        mgr_conn_t *mc = cq_container_of(n, mgr_conn_t, node);
        int why = conn_expired(mc, now);
        if (why < 0)
            continue;
        cq__io_lsn_count(&io->lsn[mc->kind], why);
        conn_drop(mc);
    }
    admin_sweep(io, now);
}

/* ---- metrics ----------------------------------------------------------------------------- */

static int edge_metrics(cq_mgrio_t *io, cq_sbuf_t *b)
{
    io_lsn_t *v[3];
    size_t n = 0;
    char t[512];
    int k = snprintf(t, sizeof(t),
                     "# TYPE chanq_mgr_connections gauge\n"
                     "chanq_mgr_connections{port=\"mgr\"} %u\n"
                     "chanq_mgr_connections{port=\"mgrhttp\"} %u\n"
                     "# TYPE chanq_mgr_audit_write_errors_total counter\n"
                     "chanq_mgr_audit_write_errors_total %llu\n",
                     io->nconns[K_MGR], io->nconns[K_HTTP], (unsigned long long)io->audit_errors);
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
    pthread_mutex_lock(&io->metrics_mu);
    cq_sbuf_t old = io->snapshot;
    io->snapshot = b;
    io->metrics_on = true;
    pthread_mutex_unlock(&io->metrics_mu);
    cq_sbuf_done(&old);
}

int cq_mgrio_metrics_append(void *ud, cq_sbuf_t *out)
{
    cq_mgrio_t *io = ud;
    int r = 0;
    pthread_mutex_lock(&io->metrics_mu);
    if (io->metrics_on && io->snapshot.len)
        r = cq_sbuf_append(out, io->snapshot.data, io->snapshot.len);
    pthread_mutex_unlock(&io->metrics_mu);
    return r;
}

static void metrics_unpublish(cq_mgrio_t *io)
{
    pthread_mutex_lock(&io->metrics_mu);
    cq_sbuf_t old = io->snapshot;
    cq_sbuf_init(&io->snapshot);
    io->metrics_on = false;
    pthread_mutex_unlock(&io->metrics_mu);
    cq_sbuf_done(&old);
}

/* ---- shutdown -----------------------------------------------------------------------------
 * DRAIN: the listeners close and no connection is read any more, so no new change can start;
 * the changes made so far are saved (the tick retries a failed save). CLOSE, once the engine's
 * store is idle: every connection writes what is queued and closes. The grace timer bounds both
 * steps: when it fires every connection is dropped as it is. */

static bool is_conn(const uv_handle_t *h)
{
    return h->type == UV_TCP; /* the listeners are poll and timer handles (accept.c) */
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

static void grace_closed(cq_mgrio_t *io)
{
    if (io->grace_on && !uv_is_closing((uv_handle_t *)&io->grace))
        uv_close((uv_handle_t *)&io->grace, NULL);
}

static void close_handle(cq_mgrio_t *io, uv_handle_t *h)
{
    if (uv_is_closing(h) || h == (uv_handle_t *)&io->grace)
        return;
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

/* Closes a connection: gracefully (what is queued is written) or at once. */
static void conn_end(uv_handle_t *h, bool graceful)
{
    /* both connection structs start with (tcp, kind) */
    _Static_assert(offsetof(mgr_conn_t, kind) == offsetof(admin_conn_t, kind), "layout");
    int kind = *(const int *)((const char *)h->data + offsetof(mgr_conn_t, kind));
    if (kind == K_ADMIN)
        admin_close(h->data);
    else if (graceful)
        conn_close(h->data);
    else
        conn_drop(h->data);
}

static void drain_walk(uv_handle_t *h, void *arg)
{
    cq_mgrio_t *io = arg;
    if (uv_is_closing(h))
        return;
    if (is_conn(h))
        uv_read_stop((uv_stream_t *)h);
    else if (is_listener(io, h))
        close_listeners(io);
}

static void close_walk(uv_handle_t *h, void *arg)
{
    cq_mgrio_t *io = arg;
    if (uv_is_closing(h))
        return;
    if (is_conn(h))
        conn_end(h, true);
    else
        close_handle(io, h);
}

static void drop_walk(uv_handle_t *h, void *arg)
{
    cq_mgrio_t *io = arg;
    if (uv_is_closing(h))
        return;
    if (is_conn(h))
        conn_end(h, false);
    else
        close_handle(io, h);
}

static void stop_close(cq_mgrio_t *io)
{
    io->phase = CLOSE;
    cq_mgr_flush(io->m);
    uv_walk(&io->loop, close_walk, io);
    if (io->nlive == 0)
        grace_closed(io);
}

static void on_grace(uv_timer_t *t)
{
    cq_mgrio_t *io = t->data;
    if (!cq_mgr_store_idle(io->m))
        CQ_WARN("mgr", "shutdown: --shutdown-grace-ms is over with changes not saved");
    io->phase = CLOSE;
    uv_walk(&io->loop, drop_walk, io);
    grace_closed(io);
}

static void stop_step(cq_mgrio_t *io)
{
    if (io->phase == RUN) {
        io->phase = DRAIN;
        uv_walk(&io->loop, drain_walk, io);
        uv_timer_init(&io->loop, &io->grace);
        io->grace_on = true;
        io->grace.data = io;
        uv_timer_start(&io->grace, on_grace, (uint64_t)io->o.shutdown_grace_ms, 0);
    }
    if (io->phase == DRAIN && cq_mgr_store_idle(io->m))
        stop_close(io);
}

/* ---- loop callbacks ---------------------------------------------------------------------- */

static void on_wake(uv_async_t *a)
{
    cq_mgrio_t *io = a->data;
    if (io->phase == CLOSE)
        return;
    drain_results(io);
    if (atomic_load(&io->stopping))
        stop_step(io);
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
    if (io->phase == RUN)
        sweep_conns(io);
    else if (io->phase == DRAIN && cq_mgr_store_idle(io->m))
        stop_close(io);
    if (io->phase != CLOSE)
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
    pthread_mutex_init(&io->metrics_mu, NULL);
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
    cq_list_init(&io->admins);
    if (io->o.shutdown_grace_ms < 0)
        io->o.shutdown_grace_ms = 0;
    io->rbuf = cq_malloc(MGR_READ_BUF);
    if (!io->rbuf || uv_loop_init(&io->loop) < 0)
        return cq_err_fmt(err, errlen, -ENOMEM, "mgr: out of memory");
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
    metrics_unpublish(io);
    atomic_store(&io->stopping, 1);
    if (io->started) {
        pthread_mutex_lock(&io->st_mu);
        wake_loop(io);
        pthread_mutex_unlock(&io->st_mu);
        uv_thread_join(&io->thread);
        io->started = false;
    } else {
        io->phase = CLOSE;
        uv_walk(&io->loop, drop_walk, io); /* never started: no grace timer */
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
    metrics_unpublish(io);
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
    pthread_mutex_destroy(&io->metrics_mu);
    cq_free(io->rbuf);
    cq_free(io);
    return NULL;
}
