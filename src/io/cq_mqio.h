/* cq_mqio.h - the durable-topic port's edge: ONE dedicated libuv loop thread (not a channel
 * worker) with its own listeners (seed protocol, HTTP API) and TCP connections, driving a
 * sans-I/O engine (src/mqsrv) that the composition root built and owns. The edge moves bytes
 * and drives the engine's loop hooks (input, completions, timers); it knows nothing of the
 * store: store completions reach the engine's own inbox, and the engine asks this loop to drain
 * it through cq_mqsrv_ops_t.wake (uv_async_send).
 *
 * Lifecycle (main thread; see cq_mqport.h for the engine's and the store's side):
 *   cq_mqio_new()        allocates
 *   cq_mqio_start()      binds the listeners, sets the engine's wake, starts the thread
 *   cq_mqio_stop()       closes the listeners and every connection, joins the thread and unsets
 *                        the engine's wake: later completions only queue in the engine's inbox
 *   cq_mqio_free()       frees; the engine is the caller's (free it after the store shut down)
 */
#ifndef CQ_MQIO_H
#define CQ_MQIO_H

#include "cq_mgrlink.h"
#include "cq_mqfollow.h"
#include "cq_mqsrv.h"
#include "cq_sbuf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cq_mqio cq_mqio_t;

#define CQ_MQIO_METRICS_MS 250 /* how often the loop publishes its metrics snapshot */

/* Connection limits of the two listeners: a connection over a cap is accepted and closed at
 * once; the timeouts close a connection (0 disables each):
 *   auth_timeout_ms  seed connections that have not completed connect, from accept
 *   idle_timeout_ms  seed connections that sent no whole frame for this long
 *   http_timeout_ms  HTTP connections with no answer for this long from accept or from the
 *                    previous answer: a request that is not whole (or not answered) in time,
 *                    and a keep-alive connection left idle */
typedef struct cq_mqio_limits {
    uint32_t max_conns, http_max_conns;
    uint32_t auth_timeout_ms, idle_timeout_ms, http_timeout_ms;
} cq_mqio_limits_t;

typedef struct cq_mqio_opts {
    const char *addr;      /* "HOST:PORT" */
    const char *http_addr; /* "HOST:PORT" of the HTTP API; NULL or "" = none */
    int retention_check_s; /* seconds between retention purges */
    int tcp_keepalive_s;   /* 0 = off */
    cq_mqio_limits_t lim;
    int shutdown_grace_ms; /* cq_mqio_stop(): longest wait for the last answers; 0 = none */
    /* The managers to report to (--mgr-servers, "H:P,..."; NULL or "" = unmanaged): the loop
     * keeps one connection to the first reachable one (mq_mgr.c) and drives mgr_link (borrowed,
     * the composition root's, running on this loop like the engine). mgr_figures fills the
     * host's figures when a report is due (MQ loop thread; must not block). */
    const char *mgr_servers;
    cq_mgrlink_t *mgr_link;
    void (*mgr_figures)(void *ud, cq_mgrlink_host_t *h);
    void *mgr_figures_ud;
    /* The shards the bridge follows (borrowed, the composition root's, running on this loop
     * like the engine; NULL or no link: none): one connection per link (mq_follow.c). */
    cq_mqfollow_t *follow;
} cq_mqio_opts_t;

/* Returns an owned, not yet started object, or NULL on OOM. */
cq_mqio_t *cq_mqio_new(void);
/* Binds opts->addr (and opts->http_addr), sets srv's wake to this loop and starts the loop
 * thread, which owns srv until cq_mqio_stop(). srv is borrowed and must outlive cq_mqio_free().
 * The bound address is written to bound[0..blen). Errors in err. */
int cq_mqio_start(cq_mqio_t *io, cq_mqsrv_t *srv, const cq_mqio_opts_t *opts, char *bound,
                  size_t blen, char *err, size_t errlen);
/* The address the HTTP API is bound to (borrowed, valid until cq_mqio_free), or "" when it is
 * off. Main thread, after a successful cq_mqio_start(). */
const char *cq_mqio_http_bound(const cq_mqio_t *io);
/* A metrics source for the admin registry (ud is the cq_mqio_t): appends the port's latest
 * metrics snapshot (Prometheus text, see cq_mqsrv_metrics(); at most CQ_MQIO_METRICS_MS old) to
 * out; nothing when the port does not run. Any thread. Returns 0 or -ENOMEM. */
int cq_mqio_metrics_append(void *ud, cq_sbuf_t *out);
/* Stops the loop thread (idempotent) without losing an answer: the listeners close and no
 * connection is read any more; the store requests in flight complete and are answered (a
 * produce committed now is acknowledged); then every connection writes what is queued and
 * closes. opts.shutdown_grace_ms bounds the whole wait: after it connections are dropped as
 * they are. The engine's wake is unset; the engine is the calling thread's afterwards. Main
 * thread; blocks for at most the grace period (plus a store request that does not return). */
void cq_mqio_stop(cq_mqio_t *io);
/* Stops if needed and frees. The engine is not freed. Accepts NULL; returns NULL. */
cq_mqio_t *cq_mqio_free(cq_mqio_t *io);

#endif
