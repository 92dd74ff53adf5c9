/* cq_mgrio.h - the management service's edge (`chanqd --role mgr`, doc/mgr.md): ONE libuv loop
 * thread with three listeners (the management protocol, the console + JSON API, the admin
 * /metrics + /healthz) driving the sans-I/O engine (src/mgr, cq_mgr.h), which this object builds
 * and owns; plus a store thread that runs the state store's blocking load and save
 * (cq_mgrstore.h: a file or ZooKeeper) and hands the results back through a locked inbox and
 * uv_async_send; and the audit log (one JSON line per change, O_APPEND, mode 0600).
 *
 * Lifecycle (main thread):
 *   cq_mgrio_new()    allocates
 *   cq_mgrio_start()  builds the engine, binds the listeners, starts both threads; the first
 *                     load of the state is asked at once (retried every second while it fails)
 *   cq_mgrio_stop()   closes the listeners, stops reading, waits (within shutdown_grace_ms) for
 *                     the changes to be saved, writes what is queued, closes every connection,
 *                     joins both threads
 *   cq_mgrio_free()   stops if needed; frees the engine and the store
 */
#ifndef CQ_MGRIO_H
#define CQ_MGRIO_H

#include "cq_admin.h"
#include "cq_mgr.h"
#include "cq_mgrstore.h"
#include "cq_sbuf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cq_mgrio cq_mgrio_t;

#define CQ_MGRIO_TICK_MS       250  /* engine housekeeping, timeouts, the metrics snapshot */
#define CQ_MGRIO_LOAD_RETRY_MS 1000 /* a failed load of the state is asked again after this */

typedef struct cq_mgrio_opts {
    const char *addr;       /* management protocol "HOST:PORT" (required) */
    const char *http_addr;  /* console + JSON API; NULL or "" = none */
    const char *admin_addr; /* /metrics + /healthz; NULL or "" = none (needs admin) */
    cq_admin_t *admin;      /* the metrics registry the admin listener serves (borrowed) */
    const char *audit_path; /* NULL or "" = no audit file (the console keeps the last lines) */
    /* caps: a connection over one is accepted and closed at once */
    uint32_t max_conns, http_max_conns, admin_max_conns;
    /* timeouts (0 disables each; checked every CQ_MGRIO_TICK_MS):
     *   auth_timeout_ms   management connections without an authenticated request, from accept
     *   idle_timeout_ms   management connections that sent no whole frame for this long
     *   http_timeout_ms   console connections with no answer for this long (from accept or the
     *                     previous answer)
     *   admin_timeout_ms  admin connections, from accept to close */
    uint32_t auth_timeout_ms, idle_timeout_ms, http_timeout_ms, admin_timeout_ms;
    int tcp_keepalive_s;   /* 0 = off */
    int shutdown_grace_ms; /* cq_mgrio_stop(): longest wait for the last save and answers */
} cq_mgrio_opts_t;

/* Returns an owned, not yet started object, or NULL on OOM. */
cq_mgrio_t *cq_mgrio_new(void);
/* Builds the engine with mopts, takes the store (store_ud is freed with store->free by
 * cq_mgrio_free, also when this fails), opens the audit file, binds the listeners and starts the
 * threads. Errors in err (the bind's, the engine's). */
int cq_mgrio_start(cq_mgrio_t *io, const cq_mgr_opts_t *mopts, const cq_mgrstore_ops_t *store,
                   void *store_ud, const cq_mgrio_opts_t *opts, char *err, size_t errlen);
/* The bound addresses (borrowed, valid until cq_mgrio_free): "HOST:PORT", or "-" when off.
 * Main thread, after a successful start. */
const char *cq_mgrio_bound(const cq_mgrio_t *io);
const char *cq_mgrio_http_bound(const cq_mgrio_t *io);
const char *cq_mgrio_admin_bound(const cq_mgrio_t *io);
/* SIGHUP: hands new tokens (borrowed, copied) to the engine on its loop (cq_mgr_set_tokens).
 * Main thread. 0 or -ENOMEM. */
int cq_mgrio_set_tokens(cq_mgrio_t *io, const char *admin_token, const char *server_token);
/* A metrics source for the admin registry (ud is the cq_mgrio_t): the engine's chanq_mgr_* and
 * the edge's connection counters, a snapshot at most CQ_MGRIO_TICK_MS old. Any thread. */
int cq_mgrio_metrics_append(void *ud, cq_sbuf_t *out);
/* Stops both threads (idempotent). Main thread; blocks for at most the grace period (plus a
 * store call that does not return). */
void cq_mgrio_stop(cq_mgrio_t *io);
/* Stops if needed, frees the engine, the store and io. Accepts NULL; returns NULL. */
cq_mgrio_t *cq_mgrio_free(cq_mgrio_t *io);

#endif
