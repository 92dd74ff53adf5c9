/* io_engine.h - the engine-loop host: ONE libuv loop thread that drives a sans-I/O engine for a
 * front end of its own (the durable-topic port, mq_io.c over src/mqsrv; the manager, mgr_io.c
 * over src/mgr; the next ones the same way: doc/architecture.md, "The engine-loop host"). An
 * adapter fills the ops table from its engine's API and describes its connection classes; the
 * host owns everything else:
 *   - the loop and its thread, start and stop;
 *   - the wake (a uv_async any thread may send, cq__io_engine_wake), which runs ops.wake;
 *   - the listeners of up to IO_ENGINE_CLASSES connection classes (accept.c: caps, EMFILE, the
 *     close counters) and of an optional admin listener (/metrics, /healthz: io_adminconn.c),
 *     accepting into io_sqconn_t connections (io_sqconn.c: send-queue writes, graceful close);
 *   - the prepare (ops.flush once per loop iteration), the tick (ops.tick, then the classes'
 *     timeouts), and the adapter's extra periodic jobs (cq__io_engine_every);
 *   - the shutdown, in three steps, so SIGTERM loses nothing the engine acknowledges:
 *       DRAIN  ops.draining runs, the listeners close, the jobs stop, no connection is read any
 *              more: no new request can start; the engine's work in flight completes (ops.wake)
 *              and is answered as usual;
 *       CLOSE  once ops.idle (checked after each wake and each tick): ops.flush, then every
 *              connection writes what it queued, shuts its write side down and closes; every
 *              other handle closes and the loop ends;
 *     a grace timer, started at DRAIN, bounds both: when it fires ops.grace_over says what is
 *     given up and every connection is dropped as it is;
 *   - the metrics snapshot (io_snapshot.c): every metrics_ms the loop renders ops.metrics, then
 *     the host's families (open connections per class, the listeners' accept errors and closes),
 *     and publishes the text, which any thread may copy (cq__io_engine_metrics_append).
 *
 * Threads: cq__io_engine_wake and cq__io_engine_metrics_append from any thread; the lifecycle
 * from one thread (the main thread); the hooks run on the loop thread (after run) or on the
 * caller of stop (a loop that never ran), and may call the other functions marked "loop".
 *
 * Lifecycle:
 *   cq__io_engine_new()     the loop and the host's handles; nothing runs yet
 *   cq__io_engine_listen()  a connection class, listening when given an address } before run
 *   cq__io_engine_admin()   the admin listener                                  }
 *   cq__io_engine_every()   an extra periodic job                               }
 *   cq__io_engine_run()     renders the first snapshot, starts the loop thread
 *   cq__io_engine_stop()    the shutdown above; joins the thread (a loop that never ran closes
 *                           at once)
 *   cq__io_engine_free()    stops if needed, frees */
#ifndef CQ_IO_ENGINE_H
#define CQ_IO_ENGINE_H

#include "cq_admin.h"
#include "cq_sbuf.h"
#include "cq_sendq.h"
#include "cq_transport.h"
#include "io_sqconn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define IO_ENGINE_CLASSES 4 /* connection classes per host */
#define IO_ENGINE_JOBS    4 /* extra periodic jobs per host */

typedef struct io_engine io_engine_t;

/* One accepted connection. The host allocates and frees it; conn is the engine's. */
typedef struct io_econn {
    io_sqconn_t sc; /* first; &sc is the tctx of the transport ops below */
    void *conn;     /* the engine's connection (the class's open hook sets it) */
} io_econn_t;

/* The transport ops (cq_transport_ops_t) of an io_econn_t, for the engine's connection ops
 * (tctx: &c->sc): write the send queue; stop reading, write what is queued, then close; the
 * peer's "HOST:PORT". */
#define IO_ENGINE_TCP_OPS                                                                          \
    {                                                                                              \
        "tcp", cq__io_sqconn_flush, cq__io_sqconn_close, cq__io_sqconn_peer                        \
    }

/* What the engine does on the loop (ud: the adapter's, given to cq__io_engine_new). */
typedef struct io_engine_ops {
    /* The wake ran: take what other threads handed over (completions, results). Required. */
    void (*wake)(void *ud);
    /* Once per loop iteration, before the loop sleeps, and at CLOSE: write what the engine
     * queued (its pending connections' transport flush). Required. */
    void (*flush)(void *ud);
    /* Every tick_ms until CLOSE: housekeeping; now_ms is the loop's clock (uv_now). The host
     * checks the classes' timeouts after it (not during the shutdown). NULL: none. */
    void (*tick)(void *ud, uint64_t now_ms);
    /* The engine has nothing in flight (DRAIN -> CLOSE). NULL: always idle. */
    bool (*idle)(void *ud);
    /* Appends the engine's part of the snapshot (Prometheus text). 0 or -ENOMEM (the previous
     * snapshot is kept). NULL: none. */
    int (*metrics)(void *ud, cq_sbuf_t *b);
    /* The shutdown starts (also when the loop never ran): stop what would start new work and
     * close the handles the adapter put on the loop itself (an outgoing link). NULL: none. */
    void (*draining)(void *ud);
    /* The wake closes: from now on cq__io_engine_wake does nothing. Unset what calls it from
     * other threads (an engine's wake op) if it may outlive the host. NULL: nothing. */
    void (*unwake)(void *ud);
    /* The grace period is over with nlive connections open: log what is given up. NULL:
     * nothing. */
    void (*grace_over)(void *ud, size_t nlive);
} io_engine_ops_t;

/* A class of connections: the connections of one listener, their hooks and limits. */
typedef struct io_eclass {
    const char *name;     /* the listener's name: logs, metrics port label ("mq") (static) */
    const char *cap_text; /* the log text of a refusal over max_conns (static) */
    /* Builds the engine's connection for c (sets c->conn) and returns its send queue (the
     * engine's), or NULL: c is dropped (closed is still called, with c->conn possibly NULL).
     * Required. */
    cq_sendq_t *(*open)(void *ud, io_econn_t *c);
    /* Bytes read (c is not closing; p is the host's buffer, valid during the call). Required. */
    void (*input)(void *ud, io_econn_t *c, const uint8_t *p, size_t n);
    /* c's close callback ran, after every write callback: release c->conn (NULL when open
     * failed) and with it its send queue. The host frees c after it. Required. */
    void (*closed)(void *ud, io_econn_t *c);
    /* The engine's count of whole requests c sent: a change after input is progress (for
     * idle_timeout_ms), bytes alone are not. NULL: input is never progress. */
    uint64_t (*frames)(void *ud, const io_econn_t *c);
    /* Whether c authenticated (auth_timeout_ms, delivered_active). NULL: not checked. */
    bool (*authed)(void *ud, const io_econn_t *c);
    /* Output of an authenticated connection that reached its socket is progress too: a peer
     * that only receives (a watcher) is not idle while it reads. */
    bool delivered_active;
    /* The timeouts (0 disables each), checked every tick_ms (io_sqconn.h): http: timeout_ms
     * bounds the time since accept or the last answer; else auth_timeout_ms the time from
     * accept to authentication and idle_timeout_ms the time without progress. */
    bool http;
    uint64_t timeout_ms, auth_timeout_ms, idle_timeout_ms;
    uint32_t max_conns; /* accepted over it: closed at once, counted, logged */
} io_eclass_t;

typedef struct io_engine_opts {
    const char *name;    /* error texts: "mq: out of memory" (static) */
    uint64_t tick_ms;    /* ops.tick and the timeouts */
    uint64_t metrics_ms; /* the snapshot */
    uint64_t grace_ms;   /* the shutdown's bound; 0: the connections are dropped at once */
    int keepalive_s;     /* TCP keepalive of the connections; 0 = off */
    /* The host's metric families (static): open connections per class ({port=class name}),
     * and the listeners' accept errors and closes (cq__io_lsn_metrics_all). */
    const char *conns_family, *errors_family, *closes_family;
} io_engine_opts_t;

/* Returns an owned host whose loop, wake, prepare, tick and metrics timer are set up (nothing
 * runs until cq__io_engine_run), or NULL with err filled ("<name>: out of memory"). ops and the
 * strings in o are borrowed and must outlive the host; ud is the adapter's. */
io_engine_t *cq__io_engine_new(const io_engine_opts_t *o, const io_engine_ops_t *ops, void *ud,
                               char *err, size_t errlen);
/* Adds a connection class (k is copied) and, when addr is a "HOST:PORT", its listener: the
 * bound address is written to bound[0..blen). With addr NULL or "" the class exists (its
 * connections gauge reads 0) and nothing listens. Before run. Returns the class's index, or a
 * negative code with err filled (the bind's; -ENOSPC over IO_ENGINE_CLASSES). */
int cq__io_engine_listen(io_engine_t *e, const io_eclass_t *k, const char *addr, char *bound,
                         size_t blen, char *err, size_t errlen);
/* Listens on addr for /metrics and /healthz answered from admin (borrowed, must outlive the
 * host): at most max connections, each closed timeout_ms after accept (0: never). Before run.
 * 0 or a negative code with err filled. */
int cq__io_engine_admin(io_engine_t *e, const char *addr, cq_admin_t *admin, uint32_t max,
                        uint64_t timeout_ms, char *bound, size_t blen, char *err, size_t errlen);
/* Calls fn(ud) on the loop every period_ms until the shutdown starts (a job would start new
 * work: it belongs to RUN; what must go on during the drain belongs in ops.tick). Jobs due at
 * the same time as the tick run after it. Before run. 0 or -ENOSPC. */
int cq__io_engine_every(io_engine_t *e, uint64_t period_ms, void (*fn)(void *ud));
/* Renders the first snapshot (so /metrics has this part at once) and starts the loop thread.
 * 0 or -EAGAIN with err filled. */
int cq__io_engine_run(io_engine_t *e, char *err, size_t errlen);
/* Runs ops.wake on the loop soon (one run for any number of calls before it). Any thread;
 * nothing once the wake closed (CLOSE) or with e NULL. */
void cq__io_engine_wake(io_engine_t *e);
/* The loop, for handles the adapter owns (closed by ops.draining). Before run, or loop. */
uv_loop_t *cq__io_engine_loop(io_engine_t *e);
/* The loop's clock (uv_now). Loop. */
uint64_t cq__io_engine_now(const io_engine_t *e);
/* The open connections of every class and the bytes they have queued. Loop. */
void cq__io_engine_conns(const io_engine_t *e, uint32_t *ret_open, uint64_t *ret_queued);
/* Appends the latest snapshot to out (nothing before run and after stop). Any thread; e may be
 * NULL. 0 or -ENOMEM. */
int cq__io_engine_metrics_append(io_engine_t *e, cq_sbuf_t *out);
/* Unpublishes the snapshot, runs the shutdown and joins the loop thread; a host that never ran
 * closes everything at once. Idempotent; e may be NULL. Blocks for at most grace_ms (plus what
 * the engine's wake waits for). */
void cq__io_engine_stop(io_engine_t *e);
/* Stops if needed and frees. Accepts NULL; returns NULL. */
io_engine_t *cq__io_engine_free(io_engine_t *e);

#endif
