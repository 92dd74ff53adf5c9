/* io_engine.c - the engine-loop host: one loop thread driving a sans-I/O engine through its ops
 * table. See io_engine.h; the engines' adapters are mq_io.c and mgr_io.c. */
#include "io_engine.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"
#include "io_snapshot.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#define READ_BUF (64u * 1024u) /* one per loop: input is consumed at once */

enum { P_RUN, P_DRAIN, P_CLOSE }; /* the shutdown's progress */

/* A connection class at run time: io_sqconn.c's view (sq, first: a connection's cls points here),
 * the adapter's hooks and limits, and the listener. */
typedef struct io_ekind {
    io_sqclass_t sq;
    io_eclass_t k;
    io_lsn_t lsn;
    io_engine_t *e;
} io_ekind_t;

typedef struct io_ejob {
    uv_timer_t t;
    void (*fn)(void *ud);
    io_engine_t *e;
} io_ejob_t;

struct io_engine {
    uv_loop_t loop;
    uv_async_t wake;
    uv_prepare_t prepare; /* ops.flush, once per iteration */
    uv_timer_t tick, metrics, grace;
    uv_thread_t thread;
    pthread_mutex_t mu;
    bool alive; /* under mu: the wake may be sent */
    _Atomic int stopping;
    io_engine_opts_t o;
    const io_engine_ops_t *ops;
    void *ud;
    uint8_t *rbuf;
    io_ekind_t kinds[IO_ENGINE_CLASSES];
    int nkinds;
    io_ejob_t jobs[IO_ENGINE_JOBS];
    int njobs;
    io_lsn_t admin_lsn;
    io_adminset_t admins;
    cq_list_t conns; /* every open io_econn_t (io_sqconn_t.node): timeouts and the shutdown */
    size_t nlive;    /* connections (and admin connections) whose close callback has not run */
    int phase;       /* P_* (loop thread) */
    bool started, grace_on;
    io_snapshot_t snap;
};

/* ---- connections (io_sqconn.c) ------------------------------------------------------------ */

static io_ekind_t *kind_of(const io_sqconn_t *s)
{
    return (io_ekind_t *)s->cls;
}

static void close_grace(io_engine_t *e)
{
    if (e->grace_on && !uv_is_closing((uv_handle_t *)&e->grace))
        uv_close((uv_handle_t *)&e->grace, NULL);
}

/* A connection (or an admin connection) is gone: the last one ends a CLOSE. */
static void conn_gone(io_engine_t *e)
{
    if (--e->nlive == 0 && e->phase == P_CLOSE)
        close_grace(e);
}

static void k_closed(io_sqconn_t *s)
{
    io_ekind_t *k = kind_of(s);
    k->k.closed(k->e->ud, (io_econn_t *)s);
    cq_free(s);
    conn_gone(k->e);
}

static void k_input(io_sqconn_t *s, const uint8_t *p, size_t n)
{
    io_ekind_t *k = kind_of(s);
    io_econn_t *c = (io_econn_t *)s;
    k->k.input(k->e->ud, c, p, n);
    if (s->dropped || !k->k.frames)
        return;
    uint64_t f = k->k.frames(k->e->ud, c);
    if (f != s->frames) {
        s->frames = f;
        s->active_ms = uv_now(&k->e->loop);
    }
}

static bool k_authed(const io_sqconn_t *s)
{
    io_ekind_t *k = kind_of(s);
    return k->k.authed(k->e->ud, (const io_econn_t *)s);
}

static void k_delivered(io_sqconn_t *s)
{
    if (k_authed(s))
        s->active_ms = uv_now(&kind_of(s)->e->loop);
}

static void on_accept(io_lsn_t *l, int fd)
{
    io_ekind_t *k = cq_container_of(l, io_ekind_t, lsn);
    io_engine_t *e = k->e;
    if (cq__io_sqclass_full(&k->sq, fd))
        return;
    io_econn_t *c = cq_calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    e->nlive++;
    if (cq__io_sqconn_open(&c->sc, &k->sq, &e->loop, fd) == 0)
        c->sc.q = k->k.open(e->ud, c);
    if (!c->sc.q) {
        cq__io_sqconn_drop(&c->sc);
        return;
    }
    cq__io_sqconn_start(&c->sc, &e->conns);
}

/* io_sqconn.c's class: the hooks above over the adapter's, the limits as given. */
static void kind_init(io_engine_t *e, io_ekind_t *k, const io_eclass_t *ec)
{
    *k = (io_ekind_t){.k = *ec, .e = e};
    k->sq = (io_sqclass_t){.input = k_input,
                           .closed = k_closed,
                           .delivered = ec->delivered_active && ec->authed ? k_delivered : NULL,
                           .authed = ec->authed ? k_authed : NULL,
                           .http = ec->http,
                           .timeout_ms = ec->timeout_ms,
                           .auth_timeout_ms = ec->auth_timeout_ms,
                           .idle_timeout_ms = ec->idle_timeout_ms,
                           .lsn = &k->lsn,
                           .max_conns = ec->max_conns,
                           .cap_text = ec->cap_text,
                           .keepalive_s = e->o.keepalive_s,
                           .rbuf = e->rbuf,
                           .rlen = READ_BUF};
    /* the close reasons the class can have, for the listener's metrics */
    k->lsn.reasons = 1u << IO_CLOSE_CAP;
    if (ec->http)
        k->lsn.reasons |= 1u << IO_CLOSE_TIMEOUT;
    else
        k->lsn.reasons |= (ec->authed ? 1u << IO_CLOSE_PREAUTH : 0) | 1u << IO_CLOSE_IDLE;
}

int cq__io_engine_listen(io_engine_t *e, const io_eclass_t *k, const char *addr, char *bound,
                         size_t blen, char *err, size_t errlen)
{
    if (e->nkinds == IO_ENGINE_CLASSES)
        return cq_err_fmt(err, errlen, -ENOSPC, "%s: too many connection classes", e->o.name);
    io_ekind_t *ek = &e->kinds[e->nkinds];
    kind_init(e, ek, k);
    if (addr && *addr) {
        int r = cq__io_lsn_start(&ek->lsn, &e->loop, addr, k->name, on_accept, e, bound, blen, err,
                                 errlen);
        if (r < 0)
            return r;
    }
    return e->nkinds++;
}

/* ---- the admin listener (io_adminconn.c) --------------------------------------------------- */

static void admin_closed(void *ud)
{
    conn_gone(ud);
}

static void on_accept_admin(io_lsn_t *l, int fd)
{
    io_engine_t *e = l->data;
    if (cq__io_adminset_accept(&e->admins, fd))
        e->nlive++;
}

int cq__io_engine_admin(io_engine_t *e, const char *addr, cq_admin_t *admin, uint32_t max,
                        uint64_t timeout_ms, char *bound, size_t blen, char *err, size_t errlen)
{
    cq__io_adminset_init(&e->admins, &e->loop, admin, &e->admin_lsn, max, timeout_ms, admin_closed,
                         e);
    e->admin_lsn.reasons = 1u << IO_CLOSE_CAP | 1u << IO_CLOSE_TIMEOUT;
    return cq__io_lsn_start(&e->admin_lsn, &e->loop, addr, "admin", on_accept_admin, e, bound, blen,
                            err, errlen);
}

/* ---- metrics (io_snapshot.c) -------------------------------------------------------------- */

static int conns_gauge(io_engine_t *e, cq_sbuf_t *b)
{
    char t[256];
    int n = snprintf(t, sizeof(t), "# HELP %s Open connections, by port.\n# TYPE %s gauge\n",
                     e->o.conns_family, e->o.conns_family);
    int r = cq_sbuf_append(b, t, (size_t)n);
    for (int i = 0; i < e->nkinds && r == 0; i++) {
        n = snprintf(t, sizeof(t), "%s{port=\"%s\"} %u\n", e->o.conns_family, e->kinds[i].k.name,
                     e->kinds[i].sq.nopen);
        r = cq_sbuf_append(b, t, (size_t)n);
    }
    return r;
}

/* The host's part: the connections gauge, then the listeners' families (the started ones). */
static int edge_metrics(io_engine_t *e, cq_sbuf_t *b)
{
    io_lsn_t *v[IO_ENGINE_CLASSES + 1];
    size_t n = 0;
    for (int i = 0; i < e->nkinds; i++)
        v[n++] = &e->kinds[i].lsn;
    v[n++] = &e->admin_lsn;
    int r = conns_gauge(e, b);
    return r < 0 ? r : cq__io_lsn_metrics_all(v, n, e->o.errors_family, e->o.closes_family, b);
}

static void metrics_refresh(io_engine_t *e)
{
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    if ((e->ops->metrics && e->ops->metrics(e->ud, &b) < 0) || edge_metrics(e, &b) < 0) {
        cq_sbuf_done(&b);
        return; /* out of memory: keep the previous snapshot */
    }
    cq__io_snapshot_publish(&e->snap, &b);
}

int cq__io_engine_metrics_append(io_engine_t *e, cq_sbuf_t *out)
{
    return e ? cq__io_snapshot_append(&e->snap, out) : 0;
}

/* ---- shutdown ------------------------------------------------------------------------------
 * The host knows every handle it made; the adapter closes its own in ops.draining. */

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void close_listeners(io_engine_t *e)
{
    for (int i = 0; i < e->nkinds; i++)
        cq__io_lsn_close(&e->kinds[i].lsn);
    cq__io_lsn_close(&e->admin_lsn);
}

static void close_jobs(io_engine_t *e)
{
    for (int i = 0; i < e->njobs; i++)
        close_handle((uv_handle_t *)&e->jobs[i].t);
}

static void close_wake(io_engine_t *e)
{
    if (uv_is_closing((uv_handle_t *)&e->wake))
        return;
    if (e->ops->unwake)
        e->ops->unwake(e->ud);
    pthread_mutex_lock(&e->mu);
    e->alive = false;
    pthread_mutex_unlock(&e->mu);
    uv_close((uv_handle_t *)&e->wake, NULL);
}

/* Every handle but the connections and the grace timer (idempotent). */
static void close_others(io_engine_t *e)
{
    cq__io_adminset_close_all(&e->admins);
    close_listeners(e);
    close_jobs(e);
    close_wake(e);
    close_handle((uv_handle_t *)&e->prepare);
    close_handle((uv_handle_t *)&e->tick);
    close_handle((uv_handle_t *)&e->metrics);
}

/* Closes every handle at once, the connections with what they queued (the grace period is over,
 * or the loop never ran). */
static void drop_all(io_engine_t *e)
{
    if (e->phase == P_RUN && e->ops->draining)
        e->ops->draining(e->ud);
    e->phase = P_CLOSE;
    close_others(e);
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &e->conns)
    {
        cq__io_sqconn_drop(cq_container_of(n, io_sqconn_t, node));
    }
    close_grace(e);
}

static void on_grace(uv_timer_t *t)
{
    io_engine_t *e = t->data;
    if (e->ops->grace_over)
        e->ops->grace_over(e->ud, e->nlive);
    drop_all(e);
}

/* DRAIN: nothing new starts; what is in flight goes on. */
static void drain_start(io_engine_t *e)
{
    e->phase = P_DRAIN;
    if (e->ops->draining)
        e->ops->draining(e->ud);
    close_listeners(e);
    close_jobs(e);
    cq_list_t *n;
    cq_list_foreach(n, &e->conns)
    {
        io_sqconn_t *c = cq_container_of(n, io_sqconn_t, node);
        uv_read_stop((uv_stream_t *)&c->tcp); /* what was read is handled; nothing more is */
    }
    uv_timer_init(&e->loop, &e->grace);
    e->grace_on = true;
    e->grace.data = e;
    uv_timer_start(&e->grace, on_grace, e->o.grace_ms, 0);
}

/* CLOSE: the last answers are queued and written, then every connection closes. */
static void close_all(io_engine_t *e)
{
    e->phase = P_CLOSE;
    e->ops->flush(e->ud);
    close_others(e);
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &e->conns)
    {
        cq__io_sqconn_close(cq_container_of(n, io_sqconn_t, node));
    }
    if (e->nlive == 0)
        close_grace(e);
}

/* One step of the shutdown: when it starts, and after every wake and tick of the drain. */
static void stop_step(io_engine_t *e)
{
    if (e->phase == P_RUN)
        drain_start(e);
    if (e->phase == P_DRAIN && (!e->ops->idle || e->ops->idle(e->ud)))
        close_all(e);
}

/* ---- loop callbacks ----------------------------------------------------------------------- */

static void on_wake(uv_async_t *a)
{
    io_engine_t *e = a->data;
    if (e->phase == P_CLOSE)
        return;
    e->ops->wake(e->ud);
    if (atomic_load(&e->stopping))
        stop_step(e);
}

static void on_prepare(uv_prepare_t *p)
{
    io_engine_t *e = p->data;
    e->ops->flush(e->ud);
}

static void on_tick(uv_timer_t *t)
{
    io_engine_t *e = t->data;
    uint64_t now = uv_now(&e->loop);
    if (e->ops->tick)
        e->ops->tick(e->ud, now);
    if (e->phase == P_RUN) { /* a shutdown has its own bound, the grace period */
        cq__io_sqconn_sweep(&e->conns, now);
        cq__io_adminset_sweep(&e->admins, now);
    } else if (e->phase == P_DRAIN) {
        stop_step(e);
    }
}

static void on_metrics(uv_timer_t *t)
{
    metrics_refresh(t->data);
}

static void on_job(uv_timer_t *t)
{
    io_ejob_t *j = t->data;
    j->fn(j->e->ud);
}

int cq__io_engine_every(io_engine_t *e, uint64_t period_ms, void (*fn)(void *ud))
{
    if (e->njobs == IO_ENGINE_JOBS)
        return -ENOSPC;
    io_ejob_t *j = &e->jobs[e->njobs++];
    j->fn = fn;
    j->e = e;
    uv_timer_init(&e->loop, &j->t);
    j->t.data = j;
    uv_timer_start(&j->t, on_job, period_ms, period_ms);
    return 0;
}

static void loop_main(void *arg)
{
    io_engine_t *e = arg;
    uv_run(&e->loop, UV_RUN_DEFAULT);
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static void start_handles(io_engine_t *e)
{
    uv_async_init(&e->loop, &e->wake, on_wake);
    e->wake.data = e;
    e->alive = true;
    uv_prepare_init(&e->loop, &e->prepare);
    e->prepare.data = e;
    uv_prepare_start(&e->prepare, on_prepare);
    uv_timer_init(&e->loop, &e->tick);
    e->tick.data = e;
    uv_timer_start(&e->tick, on_tick, e->o.tick_ms, e->o.tick_ms);
    uv_timer_init(&e->loop, &e->metrics);
    e->metrics.data = e;
    uv_timer_start(&e->metrics, on_metrics, e->o.metrics_ms, e->o.metrics_ms);
}

io_engine_t *cq__io_engine_new(const io_engine_opts_t *o, const io_engine_ops_t *ops, void *ud,
                               char *err, size_t errlen)
{
    io_engine_t *e = cq_calloc(1, sizeof(*e));
    uint8_t *rbuf = cq_malloc(READ_BUF);
    if (!e || !rbuf || uv_loop_init(&e->loop) < 0) {
        cq_err_fmt(err, errlen, -ENOMEM, "%s: out of memory", o->name);
        cq_free(rbuf);
        cq_free(e);
        return NULL;
    }
    e->o = *o;
    e->ops = ops;
    e->ud = ud;
    e->rbuf = rbuf;
    pthread_mutex_init(&e->mu, NULL);
    cq__io_snapshot_init(&e->snap);
    cq_list_init(&e->conns);
    cq__io_adminset_init(&e->admins, &e->loop, NULL, &e->admin_lsn, 0, 0, admin_closed, e);
    start_handles(e);
    return e;
}

int cq__io_engine_run(io_engine_t *e, char *err, size_t errlen)
{
    metrics_refresh(e);
    if (uv_thread_create(&e->thread, loop_main, e) < 0)
        return cq_err_fmt(err, errlen, -EAGAIN, "%s: cannot create the loop thread", e->o.name);
    e->started = true;
    return 0;
}

void cq__io_engine_wake(io_engine_t *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    if (e->alive)
        uv_async_send(&e->wake);
    pthread_mutex_unlock(&e->mu);
}

uv_loop_t *cq__io_engine_loop(io_engine_t *e)
{
    return &e->loop;
}

uint64_t cq__io_engine_now(const io_engine_t *e)
{
    return uv_now(&e->loop);
}

void cq__io_engine_conns(const io_engine_t *e, uint32_t *ret_open, uint64_t *ret_queued)
{
    uint32_t n = 0;
    uint64_t q = 0;
    cq_list_t *p;
    for (int i = 0; i < e->nkinds; i++)
        n += e->kinds[i].sq.nopen;
    cq_list_foreach(p, &e->conns)
    {
        io_sqconn_t *c = cq_container_of(p, io_sqconn_t, node);
        q += c->q ? cq_sendq_bytes(c->q) : 0;
    }
    *ret_open = n;
    *ret_queued = q;
}

void cq__io_engine_stop(io_engine_t *e)
{
    if (!e)
        return;
    cq__io_snapshot_unpublish(&e->snap);
    atomic_store(&e->stopping, 1);
    if (e->started) {
        cq__io_engine_wake(e);
        uv_thread_join(&e->thread);
        e->started = false;
    } else if (e->phase != P_CLOSE) {
        drop_all(e); /* never ran: no grace timer */
    }
    uv_run(&e->loop, UV_RUN_DEFAULT); /* close callbacks not yet run */
}

io_engine_t *cq__io_engine_free(io_engine_t *e)
{
    if (!e)
        return NULL;
    cq__io_engine_stop(e);
    uv_loop_close(&e->loop);
    pthread_mutex_destroy(&e->mu);
    cq__io_snapshot_done(&e->snap);
    cq_free(e->rbuf);
    cq_free(e);
    return NULL;
}
